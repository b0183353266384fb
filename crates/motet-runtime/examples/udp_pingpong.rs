//! Raw UDP round trips on loopback with three ways of sending, to show what connected sends
//! (docs/runtime.md, "Connected sends") save in the kernel. No Motet code runs here.
//!
//! ```text
//! taskset -c 0 cargo run --release -p motet-runtime --example udp_pingpong -- unconnected
//! taskset -c 0 cargo run --release -p motet-runtime --example udp_pingpong -- split
//! taskset -c 0 cargo run --release -p motet-runtime --example udp_pingpong -- connected
//! ```
//!
//! - `unconnected`: each end sends with an address (`send_to`) and receives with `recv_from` on
//!   one unbound-peer socket, as the runtime did before connected sends;
//! - `split`: each end sends through a second socket connected to the peer and receives on the
//!   first, as the runtime does now;
//! - `connected`: each end has one socket connected to the peer (`send`/`recv`): what a program
//!   with a single peer can do, and the runtime, with many peers on one port, cannot.
//!
//! Two threads ping-pong 64-byte datagrams 20,000 times (after 2,000 to warm up) and the median
//! round trip is printed.

#![allow(clippy::disallowed_types, clippy::disallowed_methods)] // a measurement of real time, with a thread for the echo

use std::net::UdpSocket;
use std::time::Instant;

const ROUNDS: usize = 20_000;
const WARM_UP: usize = 2_000;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Unconnected,
    Split,
    Connected,
}

fn main() {
    let mode = match std::env::args().nth(1).as_deref() {
        Some("unconnected") => Mode::Unconnected,
        Some("split") => Mode::Split,
        Some("connected") => Mode::Connected,
        _ => {
            eprintln!("usage: udp_pingpong unconnected|split|connected");
            std::process::exit(2);
        }
    };
    let localhost = "127.0.0.1:0";
    let (a, b) = (UdpSocket::bind(localhost).unwrap(), UdpSocket::bind(localhost).unwrap());
    let (a_addr, b_addr) = (a.local_addr().unwrap(), b.local_addr().unwrap());
    let echo = std::thread::spawn(move || {
        let out = sender(mode, &b, a_addr);
        let mut buf = [0u8; 2048];
        loop {
            let n = match mode {
                Mode::Connected => b.recv(&mut buf).unwrap(),
                _ => b.recv_from(&mut buf).unwrap().0,
            };
            if n == 0 {
                break;
            }
            send(mode, &out, &buf[..n], a_addr);
        }
    });
    let out = sender(mode, &a, b_addr);
    let (msg, mut buf) = ([7u8; 64], [0u8; 2048]);
    let mut rtts = Vec::with_capacity(ROUNDS);
    for round in 0..WARM_UP + ROUNDS {
        let started = Instant::now();
        send(mode, &out, &msg, b_addr);
        match mode {
            Mode::Connected => a.recv(&mut buf).unwrap(),
            _ => a.recv_from(&mut buf).unwrap().0,
        };
        if round >= WARM_UP {
            rtts.push(started.elapsed().as_nanos() as f64 / 1000.0);
        }
    }
    send(mode, &out, &[], b_addr);
    echo.join().unwrap();
    rtts.sort_by(f64::total_cmp);
    let name = ["unconnected", "split", "connected"][mode as usize];
    println!("{name}: round trip p50 {:.2} us over {ROUNDS} rounds", rtts[ROUNDS / 2]);
}

/// The socket an end sends through: its own, connected to the peer or not, or a second one
/// connected to the peer.
fn sender(mode: Mode, own: &UdpSocket, peer: std::net::SocketAddr) -> UdpSocket {
    let socket = match mode {
        Mode::Split => UdpSocket::bind("127.0.0.1:0").unwrap(),
        _ => own.try_clone().unwrap(),
    };
    if mode != Mode::Unconnected {
        socket.connect(peer).unwrap();
    }
    socket
}

fn send(mode: Mode, socket: &UdpSocket, data: &[u8], peer: std::net::SocketAddr) {
    match mode {
        Mode::Unconnected => socket.send_to(data, peer).unwrap(),
        _ => socket.send(data).unwrap(),
    };
}
