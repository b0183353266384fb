//! What one empty busy-polling spin costs: a bare non-blocking read of each kind, and a whole
//! empty turn of a busy-polling `EventLoop` with receive offload on and off (docs/runtime.md,
//! "Receive offload"). A datagram that arrives during a spin is seen at the next one, so half a
//! spin is added, on average, to every receive of a busy-polling loop.
//!
//! ```text
//! taskset -c 0 cargo run --release -p motet-runtime --example busy_spin -- recv
//! taskset -c 0 cargo run --release -p motet-runtime --example busy_spin -- recvmsg
//! taskset -c 0 cargo run --release -p motet-runtime --example busy_spin -- loop
//! taskset -c 0 cargo run --release -p motet-runtime --example busy_spin -- loop-offload
//! ```
//!
//! - `recv`, `recvmsg`: 1,000,000 non-blocking reads of an empty socket (`recvmsg` with room for
//!   the receive-offload control message, as the runtime asks with offload on);
//! - `loop`, `loop-offload`: 1,000,000 turns of `EventLoop::poll` of a lone member that
//!   busy-polls, with receive offload off (the default with busy-polling) or on.
//!
//! The mean time per call or turn is printed.

#![allow(clippy::disallowed_types, clippy::disallowed_methods)] // a measurement of real time

use motet_runtime::{EventLoop, GroupConfig, RuntimeConfig};
use nix::sys::socket::{recv, recvmsg, MsgFlags};
use std::io::IoSliceMut;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

const CALLS: u32 = 1_000_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "loop".into());
    let socket = std::net::UdpSocket::bind("127.0.0.1:0")?;
    let fd = socket.as_raw_fd();
    let mut buf = vec![0u8; 2048];
    let mut control = nix::cmsg_space!(i32);
    let mut spin: Box<dyn FnMut()> = match mode.as_str() {
        "recv" => Box::new(move || {
            let _ = recv(fd, &mut buf, MsgFlags::MSG_DONTWAIT);
        }),
        "recvmsg" => Box::new(move || {
            let mut iov = [IoSliceMut::new(&mut buf)];
            let _ = recvmsg::<()>(fd, &mut iov, Some(&mut control), MsgFlags::MSG_DONTWAIT);
        }),
        "loop" | "loop-offload" => {
            let config = RuntimeConfig::bind("127.0.0.1:0".parse()?).busy_poll(true);
            let mut event_loop = EventLoop::new(config.receive_offload(mode == "loop-offload"))?;
            event_loop.join(&GroupConfig::new("busy-spin"))?;
            // Past the lone member's first view and its first timers.
            let warm = Instant::now();
            while warm.elapsed() < Duration::from_millis(300) {
                event_loop.poll(Some(Duration::ZERO))?;
                while event_loop.next_event().is_some() {}
            }
            Box::new(move || {
                event_loop.poll(Some(Duration::ZERO)).expect("poll");
                while event_loop.next_event().is_some() {}
            })
        }
        other => return Err(format!("{other}: expected recv, recvmsg, loop or loop-offload").into()),
    };
    let started = Instant::now();
    for _ in 0..CALLS {
        spin();
    }
    println!("{mode}: {:.0} ns per call", started.elapsed().as_nanos() as f64 / f64::from(CALLS));
    Ok(())
}
