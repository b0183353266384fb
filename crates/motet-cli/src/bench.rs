//! `motet bench stack`: what a message costs in the protocol core, in process and without I/O
//! (issue 6; Ensemble's SOSP'99 Table 2 and Fig 6). For one stack it measures the layered path,
//! the bypass, and a hand-written monolithic `fifo` (the yardstick, `bench/hand.rs`), each as
//! nanoseconds per message and, when valgrind is installed, instructions per message; the cost
//! of one more layer on each path; sweeps over message size, group size and layers on the
//! trace; and the bytes of head a common-path cast and send carry on the wire.
//!
//! A message is one cast from the last rank, encoded, carried to every other member as one
//! contiguous datagram, decoded and delivered there and at the sender (loop-back), with the
//! acknowledgements, credit and stability traffic it causes. Costs are per cast; the group-size
//! sweep also gives them per delivery (a cast at M members is M deliveries).

#![allow(clippy::disallowed_types)] // a benchmark: wall-clock nanoseconds

mod hand;
mod net;
mod svg;

use clap::{Args, Subcommand, ValueEnum};
use motet_core::testkit::Group;
use motet_core::{Action, Bypass, Duration, Instant, Payload, Stack, StackSpec};
use serde::Serialize;
use std::process::{Command, ExitCode};

#[derive(Subcommand)]
pub(crate) enum BenchCommand {
    /// Cost per message of a stack's layered path, its bypass and the hand-written yardstick.
    Stack(StackArgs),
    /// (internal) Runs COUNT messages of one configuration, for instruction counting.
    #[command(hide = true)]
    Worker { path: Path, stack: String, members: usize, size: usize, count: u64 },
}

#[derive(Args)]
pub(crate) struct StackArgs {
    /// A preset, a property set or a layer list.
    #[arg(long, default_value = "vsync")]
    stack: String,
    /// Casts per measurement (scaled down for larger groups).
    #[arg(long, default_value_t = 20_000)]
    count: u64,
    /// Skip instruction counts (they need valgrind and take a minute).
    #[arg(long)]
    no_instructions: bool,
    /// Only the headline figures, no sweeps.
    #[arg(long)]
    quick: bool,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Draw the sweeps into this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<std::path::PathBuf>,
}

/// Which implementation carries the messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Path {
    /// Every event through the layers' handlers and the event queue.
    Layered,
    /// The fused trace handlers composed from the layers' declarations.
    Bypass,
    /// The hand-written `fifo` (the stack is ignored).
    Hand,
}

/// Stacks that do the same work per cast (a sequence number and retransmission buffer, the
/// loop-back, multicast flow control, the same 8-byte head) with more and more layers: `frag` and
/// `pt2ptw` join the trace (a cast has nothing to do there), then `vsync`'s eleven membership
/// layers join above `appl`. The first three points give the cost of one more layer on the trace;
/// the ends, the growth from 8 to 21 layers.
const LAYER_SWEEP: &[&str] = &[
    "top:stable:appl:local:mflow:pt2pt:mnak:bottom",
    "top:stable:appl:local:frag:mflow:pt2pt:mnak:bottom",
    "top:stable:appl:local:frag:pt2ptw:mflow:pt2pt:mnak:bottom",
    "vsync",
];
/// The points of [`LAYER_SWEEP`] that differ only in layers on the trace.
const TRACE_SWEEP: usize = 3;
const SIZES: &[usize] = &[4, 24, 100, 1024];
const MEMBERS: &[usize] = &[2, 4, 8, 16, 32, 64];
/// Casts per stability round in a benchmark run: the driver's clock moves [`ROUND`] (`stable`'s
/// and the stacks' sweep interval) every so many casts, evenly: 10,240 casts a second.
const ROUND_CASTS: u64 = 1024;
const ROUND: Duration = Duration::from_millis(100);

/// One measurement.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Cost {
    pub(crate) path: Path,
    pub(crate) stack: String,
    pub(crate) layers: usize,
    pub(crate) trace_layers: usize,
    pub(crate) members: usize,
    pub(crate) size: usize,
    pub(crate) ns_per_msg: f64,
    pub(crate) instructions_per_msg: Option<f64>,
}

impl Cost {
    /// The figure the comparisons use: instructions when counted, else nanoseconds.
    pub(crate) fn figure(&self) -> f64 {
        self.instructions_per_msg.unwrap_or(self.ns_per_msg)
    }
}

#[derive(Serialize)]
struct Report {
    stack: String,
    layers: usize,
    trace_layers: usize,
    members: usize,
    size: usize,
    /// "instructions" (callgrind) or "ns" (valgrind missing or skipped).
    unit: &'static str,
    /// The build has the core's test hooks (`motet_core::FAULT_INJECTION`: a workspace-wide build
    /// with the simulator's tests), checked on the bypass's path: its figures are not a release's.
    fault_injection: bool,
    layered: Cost,
    bypass: Cost,
    hand: Cost,
    layered_over_bypass: f64,
    bypass_over_hand: f64,
    /// Of the bypass's instructions per message, those of delayed processing (`Stack::settle`:
    /// filing copies for retransmission), which run after the transmit and the delivery, off the
    /// path from a receive to the next send (thesis Table 3.1's "delayed ops").
    bypass_delayed: Option<f64>,
    /// Where the instructions of a message go, per path (SOSP'99 Table 1's rows); with
    /// instruction counts only.
    breakdown: Option<Breakdowns>,
    /// Per layer on the trace, from the layer sweep's ends (fewest to most).
    extra_layer: Option<ExtraLayer>,
    header_bytes: HeaderBytes,
    sweeps: Option<Sweeps>,
}

/// Instructions per message of each part of a path (2 members, 4 B), counted by callgrind inside
/// the functions that enter each part (`--toggle-collect`).
#[derive(Serialize)]
struct Breakdown {
    /// The stack, a cast going down (`Stack::handle_action`).
    down_stack: f64,
    /// The stack, a message coming up (`Stack::handle_recv`, `Stack::handle_recv_compressed`): the cast, and the credit reports
    /// and stability gossip it causes.
    up_stack: f64,
    /// The stack's timers (`Stack::handle_timeout`): stability rounds, early reports.
    timers: f64,
    /// Delayed processing run when the driver is idle (`Node::settle`: full batches).
    idle_settle: f64,
    /// The node around the stack (`Node::handle_action`, `Node::handle_datagram` and
    /// `Node::handle_timeout` less the stack's parts): decoding, routing by connection id,
    /// encoding heads, its queues. SOSP'99's "transport" rows.
    transport: f64,
    /// The benchmark's driver and network (the rest): carrying datagrams, reading deliveries.
    harness: f64,
}

/// The hand-written yardstick's parts: its protocol routines and the driver around them.
#[derive(Serialize)]
struct HandBreakdown {
    /// `Member::cast`, `Member::receive` and `Member::stable`: sequence numbers, buffers, heads,
    /// credit and stability, encoding and decoding included.
    protocol: f64,
    /// The rest: the same network as the stacks' (one contiguous datagram per receiver) and the
    /// delivery count.
    harness: f64,
}

#[derive(Serialize)]
struct Breakdowns {
    layered: Breakdown,
    bypass: Breakdown,
    hand: HandBreakdown,
    /// The report's two ratios without any path's driver and network (each path's `harness`
    /// taken out): the protocols alone. The stacks' driver is the testkit's general network,
    /// the yardstick's a loop of its own, so the totals' ratios mix in two different harnesses.
    protocol_only: Ratios,
}

#[derive(Serialize)]
struct Ratios {
    layered_over_bypass: f64,
    bypass_over_hand: f64,
}

#[derive(Serialize)]
struct ExtraLayer {
    /// One more layer on the application's trace (first points of the layer sweep).
    layered: f64,
    bypass: f64,
    /// The layer sweep's ends: layers in the stack, and the bypass cost at the most over the
    /// fewest (the same work per cast at every point).
    layers_from: usize,
    layers_to: usize,
    bypass_growth: f64,
    layered_growth: f64,
}

#[derive(Serialize)]
struct HeaderBytes {
    /// On the wire, common path (compressed form).
    cast: usize,
    send: usize,
    /// The same headers in the full form.
    cast_full: usize,
    send_full: usize,
}

#[derive(Serialize)]
pub(crate) struct Sweeps {
    pub(crate) size: Vec<Cost>,
    pub(crate) members: Vec<Cost>,
    pub(crate) layers: Vec<Cost>,
}

pub(crate) fn run(command: BenchCommand) -> ExitCode {
    match command {
        BenchCommand::Worker { path, stack, members, size, count } => {
            let spec = StackSpec::parse(&stack).map(|s| s.to_string()).unwrap_or(stack);
            drive(path, &spec, members, size, count);
            ExitCode::SUCCESS
        }
        BenchCommand::Stack(args) => stack(args),
    }
}

fn stack(args: StackArgs) -> ExitCode {
    let spec = match StackSpec::parse(&args.stack) {
        Ok(spec) => spec,
        Err(err) => {
            eprintln!("motet: cannot build stack `{}`: {err}", args.stack);
            return ExitCode::from(2);
        }
    };
    if motet_core::FAULT_INJECTION {
        eprintln!(
            "motet: this build has the core's test hooks (feature fault-injection) on the bypass's path; for figures, build with `cargo build --release -p motet-cli`"
        );
    }
    let instructions = !args.no_instructions && valgrind_works();
    if !args.no_instructions && !instructions {
        eprintln!("motet: valgrind not found; reporting nanoseconds only (install valgrind for instruction counts)");
    }
    let m = Measure { count: args.count, instructions, quiet: args.json };
    let name = spec.to_string();
    let layered = m.cost(Path::Layered, &name, 2, 4);
    let bypass = m.cost(Path::Bypass, &name, 2, 4);
    let bypass_delayed = m.delayed(&name);
    let hand = m.cost(Path::Hand, &name, 2, 4);
    let breakdown = m.instructions.then(|| {
        let (l, b, h) = (
            m.breakdown(Path::Layered, &name, layered.figure()),
            m.breakdown(Path::Bypass, &name, bypass.figure()),
            m.hand_breakdown(hand.figure()),
        );
        let (l_only, b_only) = (layered.figure() - l.harness, bypass.figure() - b.harness);
        let protocol_only = Ratios { layered_over_bypass: l_only / b_only, bypass_over_hand: b_only / h.protocol };
        Breakdowns { layered: l, bypass: b, hand: h, protocol_only }
    });
    let sweeps = (!args.quick).then(|| Sweeps {
        size: SIZES.iter().flat_map(|&size| paths(&m, &name, 2, size)).collect(),
        members: MEMBERS.iter().flat_map(|&members| paths(&m, &name, members, 4)).collect(),
        layers: LAYER_SWEEP
            .iter()
            .flat_map(|s| [m.cost(Path::Layered, s, 2, 4), m.cost(Path::Bypass, s, 2, 4)])
            .collect(),
    });
    let extra_layer = sweeps.as_ref().map(|s| {
        let points = |path| s.layers.iter().filter(|c| c.path == path).collect::<Vec<&Cost>>();
        let per_trace_layer = |path| {
            let (first, last) = (points(path)[0], points(path)[TRACE_SWEEP - 1]);
            (last.figure() - first.figure()) / (last.trace_layers - first.trace_layers) as f64
        };
        let growth = |path| points(path)[points(path).len() - 1].figure() / points(path)[0].figure();
        let (from, to) = (points(Path::Bypass)[0], points(Path::Bypass)[points(Path::Bypass).len() - 1]);
        ExtraLayer {
            layered: per_trace_layer(Path::Layered),
            bypass: per_trace_layer(Path::Bypass),
            layers_from: from.layers,
            layers_to: to.layers,
            bypass_growth: growth(Path::Bypass),
            layered_growth: growth(Path::Layered),
        }
    });
    let report = Report {
        stack: name.clone(),
        layers: layered.layers,
        trace_layers: layered.trace_layers,
        members: 2,
        size: 4,
        unit: if instructions { "instructions" } else { "ns" },
        fault_injection: motet_core::FAULT_INJECTION,
        layered_over_bypass: layered.figure() / bypass.figure(),
        bypass_over_hand: bypass.figure() / hand.figure(),
        bypass_delayed,
        breakdown,
        layered,
        bypass,
        hand,
        extra_layer,
        header_bytes: header_bytes(&name),
        sweeps,
    };
    if let Some(path) = &args.plot {
        if let Some(sweeps) = &report.sweeps {
            if let Err(err) = std::fs::write(path, svg::plot(&report.stack, report.unit, sweeps)) {
                eprintln!("motet: cannot write {}: {err}", path.display());
                return ExitCode::from(1);
            }
        } else {
            eprintln!("motet: --plot needs the sweeps (drop --quick)");
        }
    }
    if args.json {
        println!("{}", serde_json::to_string(&report).expect("serializable"));
    } else {
        print_report(&report);
    }
    ExitCode::SUCCESS
}

fn paths(m: &Measure, stack: &str, members: usize, size: usize) -> [Cost; 3] {
    [Path::Layered, Path::Bypass, Path::Hand].map(|path| m.cost(path, stack, members, size))
}

struct Measure {
    count: u64,
    instructions: bool,
    quiet: bool,
}

impl Measure {
    fn cost(&self, path: Path, stack: &str, members: usize, size: usize) -> Cost {
        // The same work per point whatever the group size: fewer casts in larger groups (but whole
        // stability rounds in the instruction counts' window: `window`).
        let count = (self.count / members as u64 * 2).max(200);
        let spec = StackSpec::parse(stack).expect("validated or built in");
        let trace_layers = spec.layers().iter().skip_while(|k| **k != motet_core::LayerKind::Appl).count();
        // Nanoseconds: the best of three runs, after the first run's warm-up.
        let ns_per_msg = (0..3)
            .map(|_| {
                let started = std::time::Instant::now();
                drive(path, stack, members, size, count);
                started.elapsed().as_nanos() as f64 / count as f64
            })
            .fold(f64::INFINITY, f64::min);
        let instructions_per_msg = self.instructions.then(|| per_msg(path, stack, members, size, count, None));
        let cost = Cost {
            path,
            stack: stack.to_string(),
            layers: spec.layers().len(),
            trace_layers,
            members,
            size,
            ns_per_msg,
            instructions_per_msg,
        };
        if !self.quiet {
            eprintln!(
                "  {:>7} {:>2} members {:>4} B {:>2}/{:>2} layers: {:>8.0} ns{}",
                format!("{path:?}").to_lowercase(),
                members,
                size,
                trace_layers,
                cost.layers,
                ns_per_msg,
                instructions_per_msg.map(|i| format!(" {i:>9.0} instructions")).unwrap_or_default()
            );
        }
        cost
    }

    /// Where the `total` instructions per message of `path` go (2 members, 4 B).
    fn breakdown(&self, path: Path, stack: &str, total: f64) -> Breakdown {
        let inside = |function: &str| per_msg(path, stack, 2, 4, self.count, Some(&both_spellings(function)));
        let (down_stack, up_stack, timers) = (
            inside("*Stack::handle_action"),
            inside("*Stack::handle_recv") + inside("*Stack::handle_recv_compressed"),
            inside("*Stack::handle_timeout"),
        );
        let idle_settle = inside("*Node::settle");
        let node = inside("*Node::handle_action") + inside("*Node::handle_datagram") + inside("*Node::handle_timeout");
        Breakdown {
            down_stack,
            up_stack,
            timers,
            idle_settle,
            transport: node - down_stack - up_stack - timers,
            harness: total - node - idle_settle,
        }
    }

    /// Where the yardstick's `total` instructions per message go (2 members, 4 B).
    fn hand_breakdown(&self, total: f64) -> HandBreakdown {
        let inside = |function: &str| per_msg(Path::Hand, "fifo", 2, 4, self.count, Some(&both_spellings(function)));
        let protocol = inside("*Member::cast") + inside("*Member::receive") + inside("*Member::stable");
        HandBreakdown { protocol, harness: total - protocol }
    }

    /// Instructions per message of the bypass's delayed processing, 2 members, 4 B (callgrind
    /// counting only inside `Stack::settle`).
    fn delayed(&self, stack: &str) -> Option<f64> {
        self.instructions
            .then(|| per_msg(Path::Bypass, stack, 2, 4, self.count, Some(&both_spellings("*Stack::settle"))))
    }
}

/// Both spellings of a method's symbol as callgrind patterns (`*Node::handle_datagram` and
/// `*Node>::handle_datagram`): a method in an `impl` block in another module than its type's
/// reads `<impl motet_core::node::Node>::handle_datagram`. Splitting `node.rs` into modules
/// (forty-first session) so made the breakdown count nothing inside `Node::handle_datagram`.
fn both_spellings(pattern: &str) -> String {
    match pattern.rsplit_once("::") {
        Some((ty, method)) => format!("{pattern},{ty}>::{method}"),
        None => pattern.to_string(),
    }
}

/// `count` casts of `size` bytes in a group of `members` over `path`.
fn drive(path: Path, stack: &str, members: usize, size: usize, count: u64) {
    let payload = Payload::from(vec![7u8; size]);
    let sender = members - 1;
    match path {
        Path::Hand => {
            let mut group = hand::Group::new(members);
            for sent in 1..=count {
                while !group.cast(sender, payload.clone()) {
                    group.stabilize();
                }
                if sent % ROUND_CASTS == 0 {
                    group.stabilize();
                }
            }
            assert_eq!(group.delivered, count * members as u64, "the yardstick delivers everything");
        }
        Path::Layered | Path::Bypass => {
            let bypass = if path == Path::Bypass { Bypass::On } else { Bypass::Off };
            let mut group = net::Net::new(members, stack, bypass);
            for sent in 1..=count {
                group.act(sender, Action::Cast(payload.clone())).expect("flow control releases within the pump");
                // ROUND_CASTS casts every 100 ms, exactly (the clock is in nanoseconds).
                group.advance_to(Instant::ZERO + Duration(sent * ROUND.0 / ROUND_CASTS));
            }
            group.tick(ROUND);
            // The sender delivers its own casts only with `local` (the loop-back).
            let local = StackSpec::parse(stack).is_ok_and(|s| s.layers().contains(&motet_core::LayerKind::Local));
            let mut expected = vec![count; members];
            expected[sender] = if local { count } else { 0 };
            assert_eq!(group.delivered, expected, "every cast delivered everywhere");
        }
    }
}

fn valgrind_works() -> bool {
    Command::new("valgrind").arg("--version").output().is_ok_and(|o| o.status.success())
}

/// Instructions per message over about `count` messages: the difference between two run lengths
/// ([`window`]), which cancels set-up and warm-up.
fn per_msg(path: Path, stack: &str, members: usize, size: usize, count: u64, only: Option<&str>) -> f64 {
    let (short, long) = window(count);
    let (short_runs, long_runs) =
        (instructions(path, stack, members, size, short, only), instructions(path, stack, members, size, long, only));
    if let (Some(only), 0) = (only, long_runs) {
        // Counted by name: a function that was renamed, moved or inlined counts nothing, and the
        // figure would read as free.
        eprintln!("motet: callgrind counted nothing inside {only}: was it renamed, moved or inlined?");
    }
    (long_runs - short_runs) as f64 / (long - short) as f64
}

/// The two run lengths whose difference `per_msg` counts: about `count / 2` casts apart, a
/// quarter of `count` after the start, and both ending on a stability round ([`ROUND_CASTS`]),
/// so that the window holds whole rounds, as many per cast at every point. Without this, the
/// member sweep's larger groups (fewer casts per point) had windows that held no round at all at
/// 32 and 64 members, and their figures left out the gossip that grows fastest with the group.
fn window(count: u64) -> (u64, u64) {
    let count = count.max(4 * ROUND_CASTS).next_multiple_of(4 * ROUND_CASTS);
    (count / 4, count / 4 + count / 2)
}

/// Instructions of one worker run, counted by callgrind: all of them, or only those inside the
/// functions `only` names (callgrind's `--toggle-collect` patterns, separated by commas: they
/// must not match functions that call one another, or the second toggles counting off).
fn instructions(path: Path, stack: &str, members: usize, size: usize, count: u64, only: Option<&str>) -> u64 {
    let exe = std::env::current_exe().expect("own path");
    let path = format!("{path:?}").to_lowercase();
    let output = Command::new("valgrind")
        .args(["--tool=callgrind", "--callgrind-out-file=/dev/null"])
        .args(only.into_iter().flat_map(|only| only.split(',')).map(|pattern| format!("--toggle-collect={pattern}")))
        .arg(exe)
        .args(["bench", "worker", &path, stack, &members.to_string(), &size.to_string(), &count.to_string()])
        .output()
        .expect("valgrind runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "worker failed: {stderr}");
    stderr
        .lines()
        .find_map(|line| line.split("Collected :").nth(1))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no instruction count in callgrind's output: {stderr}"))
}

/// Head bytes of a common-path cast and send on the wire, and of the same headers in full.
fn header_bytes(stack: &str) -> HeaderBytes {
    let mut group = Group::new(2, stack);
    let mut on_wire = [0; 2];
    for (k, action) in [Action::Cast(Payload::new()), Action::send(0, Payload::new())].into_iter().enumerate() {
        let (node, id) = &mut group.nodes[1];
        node.handle_action(Instant::ZERO, *id, action).expect("a fresh stack takes it");
        on_wire[k] = node.poll_transmit().map_or(0, |out| out.head.len());
        group.pump();
    }
    let view = group.nodes[1].0.stack(group.nodes[1].1).expect("joined").view().clone();
    let mut full = [0; 2];
    let mut stack = Stack::new(view, 1, Instant::ZERO).expect("builds");
    for (k, (action, mux)) in [
        (Action::Cast(Payload::new()), motet_wire::Mux::Cast),
        (Action::send(0, Payload::new()), motet_wire::Mux::Send { dest: 0 }),
    ]
    .into_iter()
    .enumerate()
    {
        stack.handle_action(Instant::ZERO, action).expect("a fresh stack takes it");
        if let Some(transmit) = std::iter::from_fn(|| stack.poll_transmit()).find(|t| t.mux == mux) {
            let mut buf = Vec::new();
            let head = motet_wire::Head { conn: motet_wire::ConnId(0), mux, origin: 1 };
            motet_wire::datagram::encode_head(&head, &transmit.msg.hdrs, &mut buf);
            full[k] = buf.len();
        }
    }
    HeaderBytes { cast: on_wire[0], send: on_wire[1], cast_full: full[0], send_full: full[1] }
}

fn print_report(r: &Report) {
    let unit = r.unit;
    println!(
        "stack {} ({} layers, {} on the application's trace), 2 members, 4 B casts",
        r.stack, r.layers, r.trace_layers
    );
    println!("  layered path  {:>10.0} {unit}/msg  ({:.0} ns)", r.layered.figure(), r.layered.ns_per_msg);
    println!("  bypass        {:>10.0} {unit}/msg  ({:.0} ns)", r.bypass.figure(), r.bypass.ns_per_msg);
    println!("  hand (fifo)   {:>10.0} {unit}/msg  ({:.0} ns)", r.hand.figure(), r.hand.ns_per_msg);
    if let Some(delayed) = r.bypass_delayed {
        let critical = r.bypass.figure() - delayed;
        println!("  bypass: {critical:.0} before the transmit and the delivery, {delayed:.0} delayed after them");
    }
    println!("  layered / bypass {:.2}x, bypass / hand {:.2}x", r.layered_over_bypass, r.bypass_over_hand);
    if let Some(b) = &r.breakdown {
        println!("  where they go:  down stack  transport   up stack     timers  idle settle    harness");
        for (name, p) in [("layered", &b.layered), ("bypass", &b.bypass)] {
            println!(
                "    {name:<9} {:>11.0} {:>10.0} {:>10.0} {:>10.0} {:>12.0} {:>10.0}",
                p.down_stack, p.transport, p.up_stack, p.timers, p.idle_settle, p.harness
            );
        }
        println!("    hand: protocol {:.0}, harness {:.0}", b.hand.protocol, b.hand.harness);
        let only = &b.protocol_only;
        println!(
            "  without the harnesses: layered / bypass {:.2}x, bypass / hand {:.2}x",
            only.layered_over_bypass, only.bypass_over_hand
        );
    }
    if let Some(e) = &r.extra_layer {
        println!("  one more layer on the trace: layered +{:.0}, bypass +{:.0} {unit}", e.layered, e.bypass);
        println!(
            "  same work, {} -> {} layers: bypass {:.2}x, layered {:.2}x",
            e.layers_from, e.layers_to, e.bypass_growth, e.layered_growth
        );
    }
    let h = &r.header_bytes;
    println!("  head bytes: cast {} (full form {}), send {} (full form {})", h.cast, h.cast_full, h.send, h.send_full);
    if let Some(s) = &r.sweeps {
        let per_delivery = |c: &Cost| c.figure() / c.members as f64;
        let at = |path, members| s.members.iter().find(|c| c.path == path && c.members == members).map(per_delivery);
        if let (Some(two), Some(many)) = (at(Path::Bypass, 2), at(Path::Bypass, 64)) {
            println!("  bypass per delivery: {two:.0} at 2 members, {many:.0} at 64 ({:.2}x)", many / two);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_path_delivers_and_the_layer_sweep_builds() {
        for path in [Path::Layered, Path::Bypass, Path::Hand] {
            drive(path, "fifo", 3, 24, 300);
        }
        for stack in LAYER_SWEEP {
            drive(Path::Bypass, stack, 2, 4, 100);
        }
    }

    #[test]
    fn a_method_pattern_matches_both_spellings_of_its_symbol() {
        assert_eq!(both_spellings("*Node::handle_datagram"), "*Node::handle_datagram,*Node>::handle_datagram");
        assert_eq!(both_spellings("settle"), "settle");
    }

    /// Every point's window holds whole stability rounds, at least two: the member sweep's 64
    /// members (625 casts a point) had none.
    #[test]
    fn instruction_windows_hold_whole_rounds() {
        for count in [1, 200, 625, 1250, 20_000, 20_480, 100_000] {
            let (short, long) = window(count);
            assert!(short.is_multiple_of(ROUND_CASTS) && long.is_multiple_of(ROUND_CASTS), "{count}: {short}..{long}");
            assert!(long - short >= 2 * ROUND_CASTS && long - short >= count / 2, "{count}: {short}..{long}");
        }
    }

    #[test]
    fn common_path_heads_are_compressed() {
        let h = header_bytes(&StackSpec::parse("vsync").unwrap().to_string());
        assert_eq!((h.cast, h.send), (8, 8));
        assert!(h.cast_full > h.cast && h.send_full > h.send, "{}/{}", h.cast_full, h.send_full);
    }
}
