//! `motet perf latency` and `motet perf throughput`: Motet between real processes over loopback,
//! each figure next to a raw-UDP baseline measured in the same run between the same processes
//! (same CPU placement), so the ratio is what Motet costs.
//!
//! Both ends drive [`EventLoop`] on their main thread (no thread hop), sleeping in `epoll` or, with
//! `--busy-poll`, spinning. The raw baseline does the same with a bare socket: blocking `recv`, or
//! spinning on a non-blocking one.
//!
//! Both commands interleave the two: blocks of raw round trips (or raw datagrams) and blocks of
//! Motet round trips (or casts) take turns (raw, Motet, Motet, raw, ...), and each ratio compares
//! all of one with all of the other. The machine's speed drifts (on these VMs the busy-polling raw round trip was 5.9 µs in
//! some runs and 7.4 µs in others of the same hour): measured one after the other, a drift between
//! the two phases showed up as Motet's cost (one busy-polling run gave 1.64 where the runs around
//! it gave 1.27-1.37). In each phase only one socket is served, by one thread, as before.

// This module measures real time and starts peer processes.
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

use bytes::Bytes;
use clap::{Args, Subcommand};

mod throughput;
use motet_core::StackConfig;
use motet_runtime::{EndpointId, Event, EventLoop, GroupConfig, RuntimeConfig};
use serde_json::json;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, UdpSocket};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use throughput::{
    drain_parked, offer, throughput, throughput_params, throughput_placement, turn, RAW_CHECK_EVERY, RAW_LOOP_EVERY,
};

#[derive(Subcommand)]
pub(crate) enum PerfCommand {
    /// Round-trip time of a cast echoed by a second member process, and of raw UDP.
    Latency(LatencyArgs),
    /// Aggregate cast throughput delivered at one member, all members casting, and raw UDP.
    Throughput(ThroughputArgs),
    /// (internal) The other process of a measurement.
    #[command(hide = true)]
    Peer(PeerArgs),
}

#[derive(Args)]
pub(crate) struct LatencyArgs {
    /// The stack.
    #[arg(long, default_value = "vsync")]
    stack: String,
    /// Message size in bytes (at least 8).
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// Round trips measured (after 10% more as warm-up, and 5 more after each switch).
    #[arg(long, default_value_t = 5000)]
    samples: usize,
    /// Blocks each of raw and of Motet round trips, taking turns (`samples` in all, each).
    #[arg(long, default_value_t = 10)]
    blocks: usize,
    /// Spin instead of sleeping, in both processes.
    #[arg(long)]
    busy_poll: bool,
    /// Receive offload (`UDP_GRO`) in both processes: `on` or `off` (default: on, off with
    /// `--busy-poll`; docs/runtime.md, "Receive offload").
    #[arg(long, value_parser = on_off)]
    receive_offload: Option<bool>,
    /// CPU placement: `same` pins both processes to CPU 0, `split` this one to CPU 0 and the
    /// peer to CPU 1, `none` leaves it to the scheduler.
    #[arg(long, default_value = "none")]
    pin: String,
    /// Whether each process gets its own casts back (`GroupConfig::loopback`): `on` (the default,
    /// as every member does unless it says otherwise) or `off` (an echo needs only the other's).
    #[arg(long, value_parser = on_off, default_value = "on", action = clap::ArgAction::Set)]
    loopback: bool,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub(crate) struct ThroughputArgs {
    /// Member processes, all casting (this one included).
    #[arg(long, default_value_t = 3)]
    members: usize,
    /// Message size in bytes (at least 8).
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// The stack.
    #[arg(long, default_value = "vsync")]
    stack: String,
    /// Seconds measured of each path, raw and Motet (after a one-second warm-up of each).
    #[arg(long, default_value_t = 3)]
    seconds: u64,
    /// Blocks each of raw and of Motet throughput, taking turns (`seconds` in all, each; a
    /// quarter of a second at the start of each later block is not counted).
    #[arg(long, default_value_t = 3)]
    blocks: u32,
    /// Casts each member offers per second, open loop (0: as fast as flow control allows, just
    /// ahead of it). Beyond saturation this shows whether throughput levels off: what a member
    /// cannot take waits parked, and what its parked lot has no room for is refused and counted
    /// (`offered_msgs_per_s`, `refused_msgs_per_s`).
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// CPU placement: `none` (the scheduler's), or `split`: this process (the one measured, and
    /// the raw baseline's receiver) on CPU 0 and every other member on CPU 1, the same for the
    /// raw phase and Motet's (a receiver that shares a CPU with a sender halves the raw rate).
    #[arg(long, default_value = "none")]
    pin: String,
    /// Spin instead of sleeping.
    #[arg(long)]
    busy_poll: bool,
    /// Receive offload (`UDP_GRO`) in both processes: `on` or `off` (default: on, off with
    /// `--busy-poll`; docs/runtime.md, "Receive offload").
    #[arg(long, value_parser = on_off)]
    receive_offload: Option<bool>,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub(crate) struct PeerArgs {
    /// The measuring process's pid (`PeerProcess::spawn` gives it): a peer whose parent is no
    /// longer that process ends at once.
    #[arg(long)]
    parent: Option<u32>,
    #[arg(long)]
    role: String,
    #[arg(long)]
    group: String,
    #[arg(long)]
    stack: String,
    #[arg(long)]
    bind: SocketAddr,
    #[arg(long, value_delimiter = ',')]
    peers: Vec<String>,
    #[arg(long)]
    udp_bind: SocketAddr,
    #[arg(long)]
    udp_target: Option<SocketAddr>,
    #[arg(long, default_value_t = 64)]
    size: usize,
    #[arg(long, default_value_t = 0)]
    rate: u64,
    #[arg(long)]
    busy_poll: bool,
    #[arg(long, value_parser = on_off)]
    receive_offload: Option<bool>,
    /// Pin this process to this CPU.
    #[arg(long)]
    cpu: Option<usize>,
    /// Whether this process gets its own casts back.
    #[arg(long, value_parser = on_off, default_value = "on", action = clap::ArgAction::Set)]
    loopback: bool,
}

/// `on` or `off`.
fn on_off(value: &str) -> Result<bool, String> {
    match value {
        "on" => Ok(true),
        "off" => Ok(false),
        other => Err(format!("{other}: expected on or off")),
    }
}

/// The runtime configuration of a measuring or peer process.
fn runtime_config(bind: SocketAddr, busy_poll: bool, receive_offload: Option<bool>) -> RuntimeConfig {
    let config = RuntimeConfig::bind(bind).busy_poll(busy_poll);
    match receive_offload {
        Some(on) => config.receive_offload(on),
        None => config,
    }
}

/// The flags that pass `--busy-poll` and `--receive-offload` on to a peer process.
fn mode_args(busy_poll: bool, receive_offload: Option<bool>) -> Vec<String> {
    let mut args = Vec::new();
    if busy_poll {
        args.push("--busy-poll".to_string());
    }
    if let Some(on) = receive_offload {
        args.extend(["--receive-offload".to_string(), if on { "on" } else { "off" }.to_string()]);
    }
    args
}

/// Pins the calling thread to `cpu`.
fn pin(cpu: Option<usize>) -> Result<(), String> {
    match cpu {
        Some(id) if !core_affinity::set_for_current(core_affinity::CoreId { id }) => {
            Err(format!("cannot pin to CPU {id}"))
        }
        _ => Ok(()),
    }
}

pub(crate) fn run(command: PerfCommand) -> ExitCode {
    // The command line is checked whole before anything starts: a usage error is status 2 (as
    // in `member` and `sim`; it was 1), and no peer process is spawned to fail on it too (each
    // printed the error again).
    let result = match command {
        PerfCommand::Latency(args) => match latency_placement(&args) {
            Ok(placement) => latency(&args, placement),
            Err(message) => return crate::Failure::usage(message).exit("motet perf"),
        },
        PerfCommand::Throughput(args) => match throughput_placement(&args) {
            Ok(placement) => throughput(&args, placement),
            Err(message) => return crate::Failure::usage(message).exit("motet perf"),
        },
        PerfCommand::Peer(args) => peer(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => crate::Failure::from(message).exit("motet perf"),
    }
}

/// The CPUs a measurement pins this process and its peers to (`None`: not pinned).
type Placement = (Option<usize>, Option<usize>);

/// `n` loopback addresses on ports free now, outside the kernel's ephemeral range (`crate::ports`):
/// a port the kernel hands out for port 0 and that is released can be handed out again, before
/// the peer meant for it binds it, to any socket bound to port 0, such as the connected-send
/// sockets of the members already running ("Address already in use").
fn free_addresses(n: usize) -> Result<Vec<SocketAddr>, String> {
    let ports = crate::ports::free_ports(n).map_err(|e| e.to_string())?;
    Ok(ports.into_iter().map(|port| SocketAddr::from(([127, 0, 0, 1], port))).collect())
}

/// Each message carries its sequence number in its first 8 bytes: smaller ones were measured as
/// 8 bytes and reported as the size asked for. And the raw UDP baseline sends each message as one
/// datagram: above one datagram's worth, throughput's baseline read 0 (a ratio of `null`) with a
/// status of 0, and latency's failed with the OS's "Message too long".
fn check_size(size: usize) -> Result<(), String> {
    if size < 8 {
        return Err(format!("--size {size}: at least 8 bytes (each message carries its sequence number)"));
    }
    if size > motet_wire::DATAGRAM_SIZE_MAX {
        return Err(format!(
            "--size {size}: the raw UDP baseline sends each message as one datagram, at most {} bytes",
            motet_wire::DATAGRAM_SIZE_MAX
        ));
    }
    Ok(())
}

/// A child `motet perf peer` process, stopped when dropped.
struct PeerProcess(Child);

impl PeerProcess {
    fn spawn(args: &[String]) -> Result<PeerProcess, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut child = Command::new(exe)
            .arg("perf")
            .arg("peer")
            .args(["--parent", &std::process::id().to_string()])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("starting the peer process: {e}"))?;
        // Wait for "ready": its sockets are bound.
        let stdout = child.stdout.take().ok_or("no peer stdout")?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map_err(|e| e.to_string())?;
        if line.trim() != "ready" {
            return Err(format!("the peer process did not start: {line:?}"));
        }
        Ok(PeerProcess(child))
    }

    /// An error if the peer has exited: a run that went on counted what the others still sent
    /// (a dead member stays in the view until suspected, and flow control stalls on it), and
    /// printed those figures with status 0.
    fn alive(&mut self) -> Result<(), String> {
        match self.0.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(format!("a peer process ({}) ended during the measurement: {status}", self.0.id())),
            Err(error) => Err(format!("cannot tell whether peer process {} runs: {error}", self.0.id())),
        }
    }
}

/// [`PeerProcess::alive`] for each peer, after each block of a measurement.
fn all_alive(peers: &mut [PeerProcess]) -> Result<(), String> {
    peers.iter_mut().try_for_each(PeerProcess::alive)
}

impl Drop for PeerProcess {
    /// SIGTERM first, so that a peer run under a profiler ends as a process does and the
    /// profiler writes what it counted (`valgrind --tool=callgrind --trace-children=yes motet perf
    /// latency ...` counts the echo's end of each round trip too; SIGKILL left nothing to read),
    /// then SIGKILL if it has not exited within a few seconds.
    fn drop(&mut self) {
        if crate::procs::terminate(&mut self.0, Duration::from_secs(5)).is_some() {
            return;
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn join(
    config: RuntimeConfig,
    group: &str,
    stack: &str,
    peers: &[SocketAddr],
    loopback: bool,
    params: Option<StackConfig>,
) -> Result<(EventLoop, EndpointId), String> {
    let mut event_loop = EventLoop::new(config).map_err(|e| e.to_string())?;
    let config = GroupConfig::new(group).stack(stack).peers(peers.iter().map(|p| p.to_string())).loopback(loopback);
    let config = match params {
        Some(params) => config.params(params),
        None => config,
    };
    let me = event_loop.join(&config).map_err(|e| e.to_string())?;
    Ok((event_loop, me))
}

/// Polls until the endpoint's view has `n` members.
fn wait_for_view(event_loop: &mut EventLoop, n: usize, limit: Duration) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    loop {
        event_loop.poll(Some(Duration::from_millis(20))).map_err(|e| e.to_string())?;
        let mut size = None;
        while let Some((_, event)) = event_loop.next_event() {
            if let Event::View(view) = event {
                size = Some(view.members.len());
            }
        }
        if size == Some(n) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("the group did not form a view of {n} within {limit:?}"));
        }
    }
}

/// Polls until a cast of exactly `data` comes from another member.
fn wait_for_cast(event_loop: &mut EventLoop, me: EndpointId, data: &[u8], limit: Duration) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    loop {
        event_loop.poll(Some(Duration::from_millis(20))).map_err(|e| e.to_string())?;
        while let Some((_, event)) = event_loop.next_event() {
            if matches!(event, Event::Cast { from, data: ref d } if from != me && d[..] == *data) {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            return Err(format!("no cast {:?} from the peer within {limit:?}", String::from_utf8_lossy(data)));
        }
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn stamp(size: usize, seq: u64) -> Vec<u8> {
    let mut data = vec![0u8; size.max(8)];
    data[..8].copy_from_slice(&seq.to_le_bytes());
    data
}

fn seq_of(data: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(data.get(..8)?.try_into().ok()?))
}

/// Cast by the measuring process: the peers are to serve their raw sockets now (an echo peer
/// answers with an empty datagram on that socket; blasting peers blast). Shorter than any stamp
/// (8 bytes), so never echoed or counted.
const TO_RAW: &[u8] = b"raw";
/// Cast by the echo peer once an empty raw datagram has sent it back to its event loop; by the
/// measuring process of `perf throughput` to end a raw block.
const TO_MOTET: &[u8] = b"mot";
/// Cast by the measuring process of `perf throughput --rate` before a raw block: the peers stop
/// offering casts, and those they hold parked go while no member floods the loopback device with
/// raw datagrams. (A peer that emptied its parked casts while another already blasted lost them to
/// the device's backlog, in turn after turn of retransmissions, and the raw block measured nothing.)
const STOP: &[u8] = b"stp";
/// A peer's answer to `STOP`, cast once its parked casts are taken (delivered after them).
const STOPPED: &[u8] = b"std";

/// Round trips discarded at the start of each block: the first after a switch finds the caches
/// and branch predictors trained on the other path.
const BLOCK_WARMUP: usize = 5;

/// `count` round trips through `round_trip` (numbered from `*seq` on), after `warmup` more that are
/// not kept, appended to `rtts` in microseconds.
fn measure(
    rtts: &mut Vec<f64>,
    seq: &mut u64,
    warmup: usize,
    count: usize,
    mut round_trip: impl FnMut(u64) -> Result<(), String>,
) -> Result<(), String> {
    for k in 0..warmup + count {
        let start = Instant::now();
        round_trip(*seq)?;
        *seq += 1;
        if k >= warmup {
            rtts.push(start.elapsed().as_secs_f64() * 1e6);
        }
    }
    Ok(())
}

/// Checks `motet perf latency`'s command line, and where its processes run.
fn latency_placement(args: &LatencyArgs) -> Result<Placement, String> {
    let placement = match args.pin.as_str() {
        "none" => (None, None),
        "same" => (Some(0), Some(0)),
        "split" => (Some(0), Some(1)),
        other => return Err(format!("--pin {other}: expected none, same or split")),
    };
    if args.busy_poll && args.pin == "same" {
        return Err("--busy-poll with --pin same puts two spinning processes on one CPU (each waits a whole time slice); use --pin split".into());
    }
    if args.samples == 0 {
        return Err("--samples 0: measure at least one round trip".into());
    }
    check_size(args.size)?;
    crate::check_stack_flag(&args.stack)?;
    Ok(placement)
}

fn latency(args: &LatencyArgs, (my_cpu, their_cpu): Placement) -> Result<(), String> {
    let blocks = args.blocks.clamp(1, args.samples);
    pin(my_cpu)?;
    let addresses = free_addresses(3)?;
    let (mine, theirs, their_udp) = (addresses[0], addresses[1], addresses[2]);
    let socket = UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let my_udp = socket.local_addr().map_err(|e| e.to_string())?;
    let group = format!("perf-latency-{}", std::process::id());
    let mut peer_args = vec![
        "--role".to_string(),
        "echo".into(),
        "--group".into(),
        group.clone(),
        "--stack".into(),
        args.stack.clone(),
        "--bind".into(),
        theirs.to_string(),
        "--peers".into(),
        mine.to_string(),
        "--udp-bind".into(),
        their_udp.to_string(),
        "--udp-target".into(),
        my_udp.to_string(),
    ];
    peer_args.extend(mode_args(args.busy_poll, args.receive_offload));
    peer_args.extend(["--loopback".into(), if args.loopback { "on" } else { "off" }.into()]);
    if let Some(cpu) = their_cpu {
        peer_args.extend(["--cpu".into(), cpu.to_string()]);
    }
    let _peer = PeerProcess::spawn(&peer_args)?;

    socket.connect(their_udp).map_err(|e| e.to_string())?;
    socket.set_nonblocking(args.busy_poll).map_err(|e| e.to_string())?;
    socket.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 65536];
    let config = runtime_config(mine, args.busy_poll, args.receive_offload);
    let offload = config.receive_offload_on();
    let (mut event_loop, me) = join(config, &group, &args.stack, &[theirs], args.loopback, None)?;
    wait_for_view(&mut event_loop, 2, Duration::from_secs(30))?;

    // Blocks take turns, raw first in even rounds and Motet first in odd ones (raw, Motet, Motet,
    // raw, ...), so a steady drift weighs on both alike. Each path is warmed up once at its first
    // block, as a single run of it was.
    let (mut udp, mut rtts) = (Vec::with_capacity(args.samples), Vec::with_capacity(args.samples));
    let (mut udp_seq, mut seq) = (0u64, 0u64);
    let (mut turns, mut recv_waits) = (0u64, 0u64);
    let warmup = args.samples / 10 + 10;
    for block in 0..2 * blocks {
        let raw = (block % 4 == 0) || (block % 4 == 3);
        let count = args.samples / blocks + usize::from(block / 2 < args.samples % blocks);
        let first = block < 2;
        let warm = if first { warmup } else { BLOCK_WARMUP };
        if raw {
            // The peer serves its raw socket once it has had our switch (its answer says so).
            event_loop.cast(me, TO_RAW.into()).map_err(|e| e.to_string())?;
            event_loop.poll(Some(Duration::ZERO)).map_err(|e| e.to_string())?;
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                match socket.recv(&mut buf) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(format!("waiting for the peer to serve raw UDP: {e}")),
                }
                // Our own loop keeps running (the switch is a cast; it may need a retransmission).
                event_loop.poll(Some(Duration::ZERO)).map_err(|e| e.to_string())?;
                while event_loop.next_event().is_some() {}
                if Instant::now() > deadline {
                    return Err("the peer did not switch to raw UDP within 10 s".into());
                }
            }
            measure(&mut udp, &mut udp_seq, warm, count, |seq| {
                socket.send(&stamp(args.size, seq)).map_err(|e| e.to_string())?;
                // As the Motet round trip's guard: a lost echo or a stopped peer ends the run
                // (before, it waited for ever). A blocking read is empty only after its 5 s
                // timeout; a busy-polling one spins, and reads the clock once in 4,096 empty
                // reads, never in a round trip of the usual length, so the raw baseline pays no
                // clock read in it.
                let (mut empty, mut started) = (0u32, None);
                loop {
                    match socket.recv(&mut buf) {
                        Ok(n) if seq_of(&buf[..n]) == Some(seq) => return Ok(()),
                        Ok(_) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            empty = empty.wrapping_add(1);
                            if empty % 4096 == 0 || !args.busy_poll {
                                // A blocking read is empty 5 s after the send already.
                                let limit = Duration::from_secs(if args.busy_poll { 10 } else { 5 });
                                let since = *started.get_or_insert_with(Instant::now);
                                if since.elapsed() > limit {
                                    return Err(format!("no raw UDP echo of round trip {seq} within 10 s"));
                                }
                            }
                        }
                        Err(e) => return Err(format!("raw UDP echo: {e}")),
                    }
                }
            })?;
            // An empty datagram sends the peer back to its event loop; it says so with a cast.
            socket.send(&[]).map_err(|e| e.to_string())?;
            wait_for_cast(&mut event_loop, me, TO_MOTET, Duration::from_secs(10))?;
        } else {
            let before = event_loop.runtime_stats();
            measure(&mut rtts, &mut seq, warm, count, |seq| {
                // The guard's clock starts only if the first poll brings no echo: the raw round
                // trip reads no clock of its own either.
                let mut started = None;
                event_loop.cast(me, stamp(args.size, seq).into()).map_err(|e| e.to_string())?;
                loop {
                    event_loop.poll(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
                    while let Some((_, event)) = event_loop.next_event() {
                        if let Event::Cast { from, data } = event {
                            if from != me && seq_of(&data) == Some(seq) {
                                return Ok(());
                            }
                        }
                    }
                    if started.get_or_insert_with(Instant::now).elapsed() > Duration::from_secs(10) {
                        return Err(format!("no echo of message {seq} within 10 s"));
                    }
                }
            })?;
            let after = event_loop.runtime_stats();
            turns += after.turns - before.turns;
            recv_waits += after.recv_waits - before.recv_waits;
        }
    }
    udp.sort_by(f64::total_cmp);
    rtts.sort_by(f64::total_cmp);
    let (p50, p99, udp50) = (percentile(&rtts, 0.5), percentile(&rtts, 0.99), percentile(&udp, 0.5));
    // How this process's loop waited: in the receive call, or in `epoll` (near a timer, or with
    // busy-polling), per round trip measured (warm-ups included).
    let round_trips = seq as f64;
    let turns = turns as f64 / round_trips;
    let recv_waits = recv_waits as f64 / round_trips;
    let report = json!({
        "stack": args.stack,
        "size": args.size,
        "busy_poll": args.busy_poll,
        "receive_offload": offload,
        "receive_offload_on": event_loop.runtime_stats().receive_offload,
        "loopback": args.loopback,
        "pin": args.pin,
        "rtt_us_p50": round(p50),
        "rtt_us_p99": round(p99),
        "samples": rtts.len(),
        "udp_rtt_us_p50": round(udp50),
        "udp_rtt_us_p99": round(percentile(&udp, 0.99)),
        "ratio_p50": round(p50 / udp50),
        "blocks": blocks,
        "loop_turns_per_rtt": round(turns),
        "bypass_hit_rate": event_loop.bypass_stats().hit_rate().map(round),
        "recv_waits_per_rtt": round(recv_waits),
    });
    if args.json {
        println!("{report}");
    } else {
        println!(
            "round trip, {} B on `{}` ({}, pin {}): p50 {:.1} us, p99 {:.1} us over {} samples; raw UDP p50 {:.1} us; ratio {:.2}",
            args.size,
            args.stack,
            if args.busy_poll { "busy-poll" } else { "blocking" },
            args.pin,
            p50,
            p99,
            rtts.len(),
            udp50,
            p50 / udp50
        );
    }
    Ok(())
}

fn round(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// The other process: `echo` answers each cast (and each raw datagram) with the same bytes;
/// `blast` casts as fast as flow control allows (or at `rate`), and in the raw blocks sends raw
/// datagrams to `udp_target` as fast as it can.
fn peer(args: &PeerArgs) -> Result<(), String> {
    // A peer must not outlive the measuring process: killed, or ended by a Ctrl-C's SIGINT
    // before its drop stopped the peers, it left them running for ever (blocked in a raw read,
    // or spinning or blasting at full speed). The kernel now kills a peer when its parent ends
    // (the thread that started it: `perf` starts its peers from its main thread); a parent
    // already gone before this took effect is seen here, by the pid it gave (`--parent`).
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL).map_err(|e| e.to_string())?;
    if args.parent.is_some_and(|parent| parent != std::os::unix::process::parent_id()) {
        return Err("the measuring process is gone".into());
    }
    let raw = UdpSocket::bind(args.udp_bind).map_err(|e| e.to_string())?;
    let config = runtime_config(args.bind, args.busy_poll, args.receive_offload);
    let mut event_loop = EventLoop::new(config).map_err(|e| e.to_string())?;
    let config =
        GroupConfig::new(&args.group).stack(&args.stack).peers(args.peers.iter().cloned()).loopback(args.loopback);
    // SIGTERM (the measuring process is done) ends the role's loop and the process exits as
    // processes do: a profiling runtime (`scripts/pgo`'s instrumented build) then writes this
    // end's profile too. Killed by the signal's default action, it wrote nothing, and the
    // profile-guided build was trained on the measuring end alone.
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(signal, Arc::clone(&stop)).map_err(|e| format!("signal {signal}: {e}"))?;
    }
    let stopped = || stop.load(Ordering::Relaxed);
    println!("ready");
    match args.role.as_str() {
        "echo" => {
            pin(args.cpu)?;
            // Raw UDP and Motet take turns, at the measuring process's word: `TO_RAW`, cast, makes
            // this process serve its raw socket alone (it answers with an empty datagram), and an
            // empty datagram makes it serve its event loop alone (it answers with `TO_MOTET`).
            let target = args.udp_target.ok_or("--udp-target is required for echo")?;
            raw.set_nonblocking(args.busy_poll).map_err(|e| e.to_string())?;
            // Blocking reads end every 100 ms so that a stop is seen: the signal's handler
            // restarts a read, and a read with no end kept the process until its SIGKILL 5 s later
            // (a profiler running it then wrote nothing).
            raw.set_read_timeout(Some(Duration::from_millis(100))).map_err(|e| e.to_string())?;
            let mut buf = vec![0u8; 65536];
            let me = event_loop.join(&config).map_err(|e| e.to_string())?;
            loop {
                let mut to_raw = false;
                while !to_raw {
                    // Every turn ends within a timer's period (`vsync`'s sweeps), so a stop is seen.
                    if stopped() {
                        return Ok(());
                    }
                    event_loop.poll(None).map_err(|e| e.to_string())?;
                    while let Some((_, event)) = event_loop.next_event() {
                        match event {
                            Event::Cast { from, data } if from != me && data[..] == *TO_RAW => to_raw = true,
                            Event::Cast { from, data } if from != me => {
                                event_loop.cast(me, data).map_err(|e| e.to_string())?;
                            }
                            _ => {}
                        }
                    }
                }
                raw.send_to(&[], target).map_err(|e| e.to_string())?;
                loop {
                    match raw.recv_from(&mut buf) {
                        Ok((0, _)) => break,
                        Ok((n, from)) => {
                            drop(raw.send_to(&buf[..n], from));
                            // Under a steady stream the timeout below never comes.
                            if stopped() {
                                return Ok(());
                            }
                        }
                        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                            if stopped() {
                                return Ok(());
                            }
                        }
                        Err(e) => return Err(e.to_string()),
                    }
                }
                event_loop.cast(me, TO_MOTET.into()).map_err(|e| e.to_string())?;
            }
        }
        "blast" => {
            pin(args.cpu)?;
            let config = config.params(throughput_params());
            // Casts, or raw datagrams to `udp_target`, at the measuring process's word (`TO_RAW`,
            // `TO_MOTET`): the two paths take turns in blocks. Raw, it sends as fast as it can
            // (`rate` is the casts' alone) and serves its event loop every few milliseconds.
            let target = args.udp_target.ok_or("--udp-target is required for blast")?;
            raw.connect(target).map_err(|e| e.to_string())?;
            let data = stamp(args.size, 0);
            let payload = Bytes::from(data.clone()); // the same bytes each time, as raw
            let me = event_loop.join(&config).map_err(|e| e.to_string())?;
            let interval = (args.rate > 0).then(|| Duration::from_secs_f64(1.0 / args.rate as f64));
            let mut next_cast = Instant::now();
            // `offering`: not asked to stop (`STOP`); `answered`: `STOPPED` cast since.
            let (mut formed, mut to_raw, mut offering, mut answered) = (false, false, true, false);
            loop {
                if to_raw {
                    if interval.is_some() {
                        // Empty already after `STOP`, unless the switch came without one.
                        to_raw = drain_parked(&mut event_loop, me)?.unwrap_or(true);
                    }
                    answered = false;
                    let mut last_turn = Instant::now();
                    while to_raw {
                        if stopped() {
                            return Ok(());
                        }
                        for _ in 0..RAW_CHECK_EVERY {
                            // A refusal (the measuring process gone) is reported on a later
                            // send; the process is killed then anyway.
                            let _ = raw.send(&data);
                        }
                        if last_turn.elapsed() >= RAW_LOOP_EVERY {
                            to_raw = turn(&mut event_loop, me)?.unwrap_or(true);
                            last_turn = Instant::now();
                        }
                    }
                    next_cast = Instant::now(); // offer the rate from now, not since the switch
                    offering = true;
                }
                if stopped() {
                    return Ok(());
                }
                if formed && offering {
                    offer(&mut event_loop, me, &payload, interval, &mut next_cast)?;
                }
                if !offering && !answered && event_loop.parked(me) == 0 {
                    answered = event_loop.cast(me, STOPPED.into()).is_ok();
                }
                event_loop.poll(Some(Duration::from_millis(1))).map_err(|e| e.to_string())?;
                while let Some((_, event)) = event_loop.next_event() {
                    match event {
                        Event::View(view) => {
                            if !formed && view.members.len() > 1 {
                                next_cast = Instant::now(); // offer the rate from now, not since start
                            }
                            formed = view.members.len() > 1;
                        }
                        Event::Cast { from, data } if from != me && data[..] == *TO_RAW => to_raw = true,
                        Event::Cast { from, data } if from != me && data[..] == *STOP => offering = false,
                        _ => {}
                    }
                }
            }
        }
        other => Err(format!("unknown role {other}")),
    }
}
