//! `motet sim`: run seeds through the deterministic simulator and report the oracles' verdict.
//!
//! Contract (scripts rely on it): with `--json`, one JSON object on stdout with at least `runs`,
//! `violations`, `failed_seeds`, `deliveries` (cast deliveries summed over nodes and runs) and,
//! for a single `--seed`, `trace_hash`. The exit status is 0 exactly when `violations` is 0.

use clap::Args;
use motet_core::StackSpec;
use motet_sim::{run as run_one, SimOptions, SimReport};
use serde::Serialize;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

#[derive(Args, Debug)]
pub(crate) struct SimArgs {
    /// Number of members, all in one static view.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=1000))]
    nodes: u16,
    /// Run one seed.
    #[arg(long, conflicts_with = "seeds")]
    seed: Option<u64>,
    /// Run a range of seeds, `A..B` (both included; at most 1,000,000 of them).
    #[arg(long, value_parser = parse_range)]
    seeds: Option<(u64, u64)>,
    /// Probability that a datagram is lost.
    #[arg(long, default_value_t = 0.0, value_parser = probability)]
    loss: f64,
    /// Probability that a datagram is duplicated.
    #[arg(long, default_value_t = 0.0, value_parser = probability)]
    dup: f64,
    /// Probability that a datagram is delayed so later ones overtake it.
    #[arg(long, default_value_t = 0.0, value_parser = probability)]
    reorder: f64,
    /// The stack: a preset, a property set or a layer list (see `motet stack explain`).
    #[arg(long, default_value = "fifo")]
    stack: String,
    /// Casts per member (at most 100,000: a run plans every submission up front).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(0..=PER_MEMBER_MAX))]
    casts: u32,
    /// Point-to-point sends per member, to random other members (at most 100,000).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(0..=PER_MEMBER_MAX))]
    sends: u32,
    /// Members that crash (fail-stop) at random times (fewer than `--nodes`).
    #[arg(long, default_value_t = 0)]
    crashes: usize,
    /// Restart crashed members (each comes back as a new endpoint that must merge in; needs a
    /// membership stack such as `vsync`).
    #[arg(long)]
    restart: bool,
    /// Largest payload in bytes, from 16 to 1 MiB (the stack's largest message with default
    /// parameters); larger than 1024 exercises fragmentation.
    #[arg(long, default_value_t = SimOptions::PAYLOAD_MAX, value_parser = payload_max)]
    payload_max: usize,
    /// Derive all fault parameters (loss, duplication, reordering, delays, crashes, partitions)
    /// and the largest payload from each seed instead of the flags above (which it then ignores).
    #[arg(long)]
    swarm: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Worker threads, 1 to 256 (runs are independent; the report does not depend on this).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=256))]
    jobs: Option<u16>,
    /// Draw the run as a space-time diagram (members, messages, views, faults) into this SVG
    /// file. One seed only; the JSON and text output are unchanged.
    #[arg(long, value_name = "FILE.svg")]
    diagram: Option<PathBuf>,
    /// Mean of the random extra one-way delay, in microseconds (on top of `--delay-us`).
    /// Datagrams sent close together overtake each other when it is not 0; 0 makes every link
    /// FIFO. At most 10 s.
    #[arg(long, default_value_t = 400, value_parser = clap::value_parser!(u64).range(0..=10_000_000))]
    jitter_us: u64,
    /// The least one-way delay of every datagram, in microseconds: 100 is a LAN, 20,000 a link
    /// across a continent (a 40 ms round trip). At most 10 s.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(0..=10_000_000))]
    delay_us: u64,
    /// The bypass: `on` (as the runtime runs), `off` (the layered path only), or `diff` (every
    /// input through both, any difference in outputs or layer states is a violation).
    #[arg(long, default_value = "on", value_parser = parse_bypass)]
    bypass: motet_core::Bypass,
    /// Nodes whose application does not take its own casts back (`--no-loopback 0,2`; swarm runs
    /// draw some).
    #[arg(long, value_delimiter = ',', value_name = "NODES", conflicts_with = "swarm")]
    no_loopback: Vec<usize>,
    /// Each node's datagrams of one turn to one destination travel as one bundle, read as one
    /// batch (as the runtime packs them; swarm runs draw it).
    #[arg(long, conflicts_with = "swarm")]
    bundles: bool,
}

fn parse_bypass(text: &str) -> Result<motet_core::Bypass, String> {
    match text {
        "on" => Ok(motet_core::Bypass::On),
        "off" => Ok(motet_core::Bypass::Off),
        "diff" => Ok(motet_core::Bypass::Diff),
        other => Err(format!("`{other}`: expected on, off or diff")),
    }
}

/// Casts or sends per member, at most: a run plans every submission when it starts.
const PER_MEMBER_MAX: i64 = 100_000;

/// Seeds one invocation runs, at most: each run's report is kept until the summary.
const SEEDS_MAX: u64 = 1_000_000;

fn parse_range(text: &str) -> Result<(u64, u64), String> {
    let (a, b) = text.split_once("..").ok_or("expected A..B")?;
    let b = b.trim_start_matches('=');
    let (a, b): (u64, u64) = (a.parse().map_err(|e| format!("{e}"))?, b.parse().map_err(|e| format!("{e}"))?);
    if a > b {
        return Err(format!("empty range {a}..{b}"));
    }
    if b - a >= SEEDS_MAX {
        return Err(format!("{} seeds; at most {SEEDS_MAX} per run: split the range", u128::from(b - a) + 1));
    }
    Ok((a, b))
}

/// The largest payload: the simulated members draw sizes in `16..=payload_max`, and the stacks
/// run with default parameters, whose largest message is `appl.message_size_max` (1 MiB).
fn payload_max(text: &str) -> Result<usize, String> {
    let max = motet_core::StackConfig::default().appl.message_size_max;
    let bytes: usize = text.parse().map_err(|e| format!("{e}"))?;
    if !(16..=max).contains(&bytes) {
        return Err(format!("{bytes} B: a payload of 16 B to {max} B (the stack's largest message)"));
    }
    Ok(bytes)
}

fn probability(text: &str) -> Result<f64, String> {
    let p: f64 = text.parse().map_err(|e| format!("{e}"))?;
    if !(0.0..=1.0).contains(&p) {
        return Err(format!("{p} is not a probability in [0, 1]"));
    }
    Ok(p)
}

#[derive(Serialize)]
struct Failure {
    seed: u64,
    replay: String,
    violations: Vec<motet_sim::Violation>,
}

#[derive(Serialize)]
struct Summary {
    stack: String,
    nodes: u16,
    runs: usize,
    violations: usize,
    failed_seeds: Vec<u64>,
    deliveries: u64,
    send_deliveries: u64,
    datagrams: u64,
    datagrams_lost: u64,
    /// Datagrams that arrived in a bundle of two or more (`--bundles`; swarm runs draw it).
    bundled: u64,
    retransmissions: u64,
    naks: u64,
    /// NAKs answered only in part because their requester had spent its budget
    /// (`retransmit_rate`): honest members in these runs should rarely, if ever, reach it.
    naks_over_budget: u64,
    liveness_failures: usize,
    views_installed: u64,
    /// Merge requests that went unanswered until `merge_timeout` from the start of their merge
    /// flush (the requester's partition was blocked that long, then went on alone).
    merges_unanswered: u64,
    /// Members suspected because they did not answer a flush round within `intra.flush_timeout`
    /// (audible but never answering: each one is a liveness bug the timeout papered over).
    flush_timeouts: u64,
    /// Members `safe` suspected because they did not acknowledge held casts within
    /// `safe.ack_timeout` (likewise a bug to find in the simulator, where members are honest).
    ack_overdue: u64,
    /// Receivers `mflow` or `pt2ptw` suspected because they held a blocked sender's window shut
    /// without reporting credit within `credit_timeout` (likewise a bug to find here).
    credit_overdue: u64,
    /// Members a state transfer suspected because it made no progress within
    /// `xfer.stall_timeout` (likewise a bug to find here).
    xfer_stalled: u64,
    /// Endpoint migrations the runs made (swarm runs draw some).
    migrations: u64,
    /// Inputs (application casts and sends, received casts and sends) that took the bypass, over
    /// all of them; absent with `--bypass off`.
    #[serde(skip_serializing_if = "Option::is_none")]
    bypass_hit_rate: Option<f64>,
    /// Of the inputs that took the bypass, those that ran a compiled trace (the rest were
    /// interpreted layer by layer).
    #[serde(skip_serializing_if = "Option::is_none")]
    bypass_compiled_rate: Option<f64>,
    /// Per layer, the application messages whose first failed bypass condition was its (empty
    /// when none failed); absent with `--bypass off`.
    #[serde(skip_serializing_if = "Option::is_none")]
    bypass_refused_by: Option<std::collections::BTreeMap<&'static str, u64>>,
    /// From acceptance at the sender to delivery, over every delivery of every run: repair
    /// (a lost cast waits for its NAK and retransmission) and flow control show here.
    #[serde(skip_serializing_if = "Option::is_none")]
    delivery_ms_p50: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    delivery_ms_p99: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    delivery_ms_max: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    converge_ms_p50: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    converge_ms_max: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    trace_hash: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    virtual_ms: Option<f64>,
    failures: Vec<Failure>,
}

impl SimArgs {
    fn options(&self, stack: &StackSpec, seed: u64) -> SimOptions {
        let nodes = usize::from(self.nodes);
        let mut options = if self.swarm {
            SimOptions::swarm(seed, nodes, stack.clone())
        } else {
            SimOptions::new(seed, nodes, stack.clone())
        };
        if !self.swarm {
            options.net.loss = self.loss;
            options.net.dup = self.dup;
            options.net.reorder = self.reorder;
            options.net.delay_mean_us = self.jitter_us;
            options.net.delay_min_us = self.delay_us;
            options.crashes = self.crashes;
            options.restart = self.restart;
            options.payload_max = self.payload_max;
            options.no_loopback.clone_from(&self.no_loopback);
            options.bundles = self.bundles;
        }
        options.casts = self.casts;
        options.sends = self.sends;
        // Recording does not change the run, only what the report holds.
        options.record_datagrams = self.diagram.is_some();
        options.bypass = self.bypass;
        options
    }
}

pub(crate) fn run(args: SimArgs) -> ExitCode {
    let stack = match StackSpec::parse(&args.stack) {
        Ok(stack) => stack,
        Err(err) => {
            eprintln!("motet sim: cannot build stack `{}`: {err}", args.stack);
            return ExitCode::from(2);
        }
    };
    if let Some(node) = args.no_loopback.iter().find(|&&n| n >= usize::from(args.nodes)) {
        eprintln!("motet sim: --no-loopback {node}: there are only nodes 0 to {}", args.nodes - 1);
        return ExitCode::from(2);
    }
    if args.crashes >= usize::from(args.nodes) {
        eprintln!(
            "motet sim: --crashes {}: at most {} of {} nodes may crash",
            args.crashes,
            args.nodes - 1,
            args.nodes
        );
        return ExitCode::from(2);
    }
    if args.diagram.is_some() && args.seeds.is_some() {
        eprintln!("motet sim: --diagram draws one run: give a single --seed, not --seeds");
        return ExitCode::from(2);
    }
    // Before the run, not after it: a run may take minutes, and then failed for the path.
    if let Some(Err(message)) = args.diagram.as_deref().map(diagram_path) {
        eprintln!("motet sim: {message}");
        return ExitCode::from(2);
    }
    // The simulator restarts a crashed member only on a stack with membership (a new endpoint
    // must merge in): on another, `--restart` was accepted and did nothing. `--swarm` ignores it.
    if args.restart && !args.swarm && !stack.layers().contains(&motet_core::LayerKind::Intra) {
        eprintln!(
            "motet sim: --restart needs a stack with membership (the Gmp property, as `vsync` has): a restarted member is a new endpoint that must merge in, and `{}` has no membership",
            args.stack
        );
        return ExitCode::from(2);
    }
    let seeds: Vec<u64> = match (args.seed, args.seeds) {
        (Some(seed), _) => vec![seed],
        (None, Some((a, b))) => (a..=b).collect(),
        (None, None) => vec![1],
    };
    // A broken layer invariant panics inside the core; the simulator catches it and reports it as
    // a violation with its seed, so the default hook's backtrace would only be noise.
    // The hook put back after is the one before (`main`'s, which ends the command quietly when
    // the output is closed), not the default (a review's finding: `motet sim | true` panicked).
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let reports = run_all(&args, &stack, &seeds);
    std::panic::set_hook(previous);

    let mut summary = Summary {
        stack: stack.to_string(),
        nodes: args.nodes,
        runs: reports.len(),
        violations: 0,
        failed_seeds: Vec::new(),
        deliveries: 0,
        send_deliveries: 0,
        datagrams: 0,
        datagrams_lost: 0,
        bundled: 0,
        retransmissions: 0,
        naks: 0,
        naks_over_budget: 0,
        liveness_failures: 0,
        views_installed: 0,
        merges_unanswered: 0,
        flush_timeouts: 0,
        ack_overdue: 0,
        credit_overdue: 0,
        xfer_stalled: 0,
        migrations: 0,
        bypass_hit_rate: None,
        bypass_compiled_rate: None,
        bypass_refused_by: None,
        delivery_ms_p50: None,
        delivery_ms_p99: None,
        delivery_ms_max: None,
        converge_ms_p50: None,
        converge_ms_max: None,
        trace_hash: (reports.len() == 1).then(|| reports[0].trace_hash.clone()),
        virtual_ms: (reports.len() == 1).then(|| reports[0].end.0 as f64 / 1e6),
        failures: Vec::new(),
    };
    let mut converge: Vec<f64> = reports.iter().filter_map(|r| r.converge).map(|d| d.0 as f64 / 1e6).collect();
    converge.sort_by(f64::total_cmp);
    summary.converge_ms_p50 = converge.get(converge.len() / 2).copied();
    summary.converge_ms_max = converge.last().copied();
    let mut latency: Vec<u64> = reports.iter().flat_map(|r| r.trace.delivery_latencies()).collect();
    latency.sort_unstable();
    let ms = |at: usize| latency.get(at).map(|&ns| ns as f64 / 1e6);
    summary.delivery_ms_p50 = ms(latency.len() / 2);
    summary.delivery_ms_p99 = ms(latency.len() * 99 / 100);
    summary.delivery_ms_max = latency.last().map(|&ns| ns as f64 / 1e6);
    let mut bypass = motet_core::BypassStats::default();
    reports.iter().for_each(|r| bypass.merge(&r.bypass));
    summary.bypass_hit_rate = bypass.hit_rate();
    summary.bypass_compiled_rate = (bypass.hits > 0).then(|| bypass.compiled as f64 / bypass.hits as f64);
    summary.bypass_refused_by = summary.bypass_hit_rate.is_some().then_some(bypass.refused_by);
    for report in &reports {
        summary.violations += report.violations.len();
        summary.views_installed += report.views_installed;
        summary.merges_unanswered += report.stats.counter(motet_core::Counter::MergeUnanswered);
        summary.flush_timeouts += report.stats.counter(motet_core::Counter::FlushTimedOut);
        summary.ack_overdue += report.stats.counter(motet_core::Counter::AckOverdue);
        summary.credit_overdue += report.stats.counter(motet_core::Counter::CreditOverdue);
        summary.xfer_stalled += report.stats.counter(motet_core::Counter::XferStalled);
        summary.migrations += report.trace.migrations.len() as u64;
        if report.violations.iter().any(|v| matches!(v, motet_sim::Violation::Liveness { .. })) {
            summary.liveness_failures += 1;
        }
        summary.deliveries += report.cast_deliveries;
        summary.send_deliveries += report.send_deliveries;
        summary.datagrams += report.datagrams;
        summary.datagrams_lost += report.datagrams_lost;
        summary.bundled += report.bundled;
        summary.retransmissions += report.stats.counter(motet_core::Counter::Retransmit);
        summary.naks += report.stats.counter(motet_core::Counter::NakSent);
        summary.naks_over_budget += report.stats.drops(motet_core::DropReason::OverBudget);
        if !report.violations.is_empty() {
            summary.failed_seeds.push(report.seed);
            if summary.failures.len() < 10 {
                summary.failures.push(Failure {
                    seed: report.seed,
                    replay: args.options(&stack, report.seed).replay_command(args.swarm),
                    violations: report.violations.iter().take(5).cloned().collect(),
                });
            }
        }
    }

    if args.json {
        println!("{}", serde_json::to_string(&summary).expect("serializable"));
    } else {
        println!("stack     {} ({} nodes)", summary.stack, summary.nodes);
        println!("runs      {}", summary.runs);
        println!("delivered {} casts, {} sends", summary.deliveries, summary.send_deliveries);
        println!(
            "network   {} datagrams, {} lost; {} retransmissions, {} NAKs ({} answered in part for budget)",
            summary.datagrams, summary.datagrams_lost, summary.retransmissions, summary.naks, summary.naks_over_budget
        );
        if summary.views_installed > 0 {
            println!(
                "views     {} installed, {} migrations, {} merge requests unanswered, {} flush timeouts, {} overdue acknowledgements, {} overdue credit, {} stalled transfers",
                summary.views_installed,
                summary.migrations,
                summary.merges_unanswered,
                summary.flush_timeouts,
                summary.ack_overdue,
                summary.credit_overdue,
                summary.xfer_stalled
            );
        }
        if let (Some(p50), Some(p99), Some(max)) =
            (summary.delivery_ms_p50, summary.delivery_ms_p99, summary.delivery_ms_max)
        {
            println!("latency   p50 {p50:.1} ms, p99 {p99:.1} ms, max {max:.0} ms from acceptance to delivery");
        }
        if let (Some(p50), Some(max)) = (summary.converge_ms_p50, summary.converge_ms_max) {
            println!("converge  p50 {p50:.0} ms, max {max:.0} ms after the last fault");
        }
        if let Some(rate) = summary.bypass_hit_rate {
            println!("bypass    {:.1}% of casts and sends took the bypass", rate * 100.0);
        }
        if let Some(hash) = &summary.trace_hash {
            println!("trace     {hash}");
        }
        println!("liveness  {} runs failed to converge", summary.liveness_failures);
        println!("verdict   {} violations", summary.violations);
        for failure in &summary.failures {
            if let Some(violation) = failure.violations.first() {
                println!("  seed {} failed: {}", failure.seed, describe(violation));
            }
            println!("    replay: {}", failure.replay);
        }
    }
    if let Some(path) = &args.diagram {
        let svg = motet_sim::render_svg(&reports[0], &args.options(&stack, reports[0].seed));
        if let Err(err) = std::fs::write(path, svg) {
            eprintln!("motet sim: cannot write the diagram to {}: {err}", path.display());
            return ExitCode::from(2);
        }
        eprintln!("diagram: {}", path.display());
    }
    if summary.violations == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Checks up front that a diagram can be written at `path`: its directory exists (the run came
/// first, and a mistyped directory failed it only at the end).
pub(crate) fn diagram_path(path: &std::path::Path) -> Result<(), String> {
    let dir = path.parent().filter(|dir| !dir.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    if path.file_name().is_none() || path.is_dir() {
        return Err(format!("--diagram {}: give a file name (FILE.svg), not a directory", path.display()));
    }
    if !dir.is_dir() {
        return Err(format!(
            "--diagram {}: directory {} does not exist; give a path in an existing directory",
            path.display(),
            dir.display()
        ));
    }
    Ok(())
}

/// A message of the workload, as a sentence's part: `cast 3 of node 0`, `send 2 of node 0 to
/// node 1`.
fn message(id: &motet_sim::oracle::MsgId) -> String {
    match id.channel {
        motet_sim::oracle::Channel::Cast => format!("cast {} of node {}", id.index, id.origin),
        motet_sim::oracle::Channel::Send { dest } => {
            format!("send {} of node {} to node {dest}", id.index, id.origin)
        }
    }
}

/// A view of the trace, by its id as `motet member` prints one: logical time and coordinator.
fn view((ltime, coord): &motet_sim::oracle::ViewKey) -> String {
    format!("view {ltime}:{}", motet_core::EndpointId(*coord))
}

/// A broken guarantee as a sentence (the simulator's `Violation` has no `Display`; its debug
/// form, `Some(Lost { id: MsgId { .. }, node: 1 })`, was what the text output printed). The JSON
/// output keeps the structured form.
pub(crate) fn describe(violation: &motet_sim::Violation) -> String {
    use motet_sim::Violation as V;
    match violation {
        V::OwnCast { id, node } => format!("node {node} delivered its own {}, though it discards its own casts", message(id)),
        V::Lost { id, node } => format!("{} was never delivered at node {node}, which should have delivered it", message(id)),
        V::Duplicate { id, node } => format!("{} was delivered more than once at node {node}", message(id)),
        V::Fifo { id, node, expected: u32::MAX } => format!(
            "{} was delivered at node {node} after a gap, though its sender sent nothing more in that view",
            message(id)
        ),
        V::Fifo { id, node, expected } => format!(
            "{} was delivered at node {node} out of its sender's order (number {expected} was due next)",
            message(id)
        ),
        V::Created { node, detail } => format!("node {node} delivered a message never sent as delivered: {detail}"),
        V::Corrupt { id, node } => format!("{} arrived at node {node} with other bytes than were sent", message(id)),
        V::NotQuiescent { node, layer, held } => {
            format!("node {node} still held {held} messages in `{layer}` once the run was quiet")
        }
        V::Liveness { detail } => format!("the run did not go quiet within its time limit: {detail}"),
        V::Invariant { detail } => format!("a layer's invariant check failed: {detail}"),
        V::ViewAgreement { view: v } => format!("members installed {} with different members", view(v)),
        V::ViewOrder { node, detail } => format!("node {node} installed views out of order: {detail}"),
        V::VirtualSynchrony { view: v, nodes: (a, b) } => format!(
            "nodes {a} and {b} went from {} to the same next view having delivered different casts",
            view(v)
        ),
        V::Primary { views: (a, b) } => format!("concurrent views {} and {} were both primary", view(a), view(b)),
        V::PrimaryWithoutMajority { view: v } => {
            format!("{} is primary without a majority of the primary view it follows", view(v))
        }
        V::TotalOrder { view: v, nodes: (a, b), position } => format!(
            "nodes {a} and {b} delivered the casts of {} in different orders (from position {position})",
            view(v)
        ),
        V::Causal { id, node, missing } => format!(
            "{} was delivered at node {node} before {}, which its sender had delivered before casting it",
            message(id),
            message(missing)
        ),
        V::Safe { id, view: v, node } => format!(
            "{} was delivered in {} by some member but not by node {node}, which went on from it: delivery was not safe",
            message(id),
            view(v)
        ),
        V::StateTransfer { view: v, node } => {
            format!("node {node} installed another state than the provider of {} streamed", view(v))
        }
        V::TransferRule { view: v, node, broke } => {
            format!("state transfer in {}, at node {node}: {broke}", view(v))
        }
        V::Migration { node, address } => format!(
            "node {node} moved to address {address} but ended the run in a view that does not have it there"
        ),
        V::SendingView { id, node } => {
            format!("{} was delivered at node {node} in another view than it was sent in", message(id))
        }
    }
}

/// Runs the seeds on worker threads; results come back in seed order.
fn run_all(args: &SimArgs, stack: &StackSpec, seeds: &[u64]) -> Vec<SimReport> {
    let jobs = args.jobs.map_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()), usize::from);
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let failed = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<SimReport>>> = Mutex::new((0..seeds.len()).map(|_| None).collect());
    let progress = std::io::stderr().is_terminal() && seeds.len() > 1;
    std::thread::scope(|scope| {
        for _ in 0..jobs.min(seeds.len()) {
            scope.spawn(|| loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                let Some(&seed) = seeds.get(index) else { break };
                // The simulator catches layer panics itself; keep their default message quiet.
                let report = run_one(&args.options(stack, seed));
                if !report.violations.is_empty() {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
                results.lock().expect("no poisoning")[index] = Some(report);
                let finished = done.fetch_add(1, Ordering::Relaxed) + 1;
                if progress {
                    let mut err = std::io::stderr().lock();
                    let _ = write!(
                        err,
                        "\rsim: {finished}/{} seeds, {} failed",
                        seeds.len(),
                        failed.load(Ordering::Relaxed)
                    );
                    let _ = err.flush();
                }
            });
        }
    });
    if progress {
        eprintln!();
    }
    results.into_inner().expect("no poisoning").into_iter().map(|r| r.expect("every seed ran")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        sim: SimArgs,
    }

    /// A diagram's path must name a file in an existing directory: a directory (`out/`, or one
    /// that exists) is refused before the run, as a missing directory is.
    #[test]
    fn a_diagram_path_names_a_file_in_a_directory_that_exists() {
        let tmp = std::env::temp_dir();
        assert!(diagram_path(&tmp.join("x.svg")).is_ok());
        assert!(diagram_path(&tmp).unwrap_err().contains("not a directory"));
        assert!(diagram_path(std::path::Path::new("/")).is_err());
        assert!(diagram_path(&tmp.join("no-such-dir-motet").join("x.svg")).unwrap_err().contains("does not exist"));
    }

    fn parse(line: &str) -> SimArgs {
        Cli::try_parse_from(std::iter::once("sim").chain(line.split_whitespace())).expect("a valid command line").sim
    }

    /// A failing seed's replay line must rebuild the run's options exactly, or the failure does
    /// not reproduce (it once dropped `--payload-max`).
    #[test]
    fn a_replay_line_rebuilds_the_same_run() {
        for (line, swarm) in [
            ("--nodes 4 --loss 0.1 --dup 0.05 --reorder 0.2 --crashes 1 --restart --casts 7 --sends 3 --payload-max 70000 --jitter-us 900 --delay-us 3000 --no-loopback 0,2 --bundles --bypass diff --stack vsync", false),
            ("--nodes 3 --swarm --casts 9 --sends 0 --bypass off --stack total", true),
        ] {
            let args = parse(line);
            let stack = StackSpec::parse(&args.stack).expect("a stack");
            let options = args.options(&stack, 42);
            let replay = options.replay_command(swarm);
            let again = parse(replay.strip_prefix("motet sim").expect("a sim command line"));
            // Every field, by its debug form (the options hold no float NaN or map order).
            assert_eq!(format!("{:?}", again.options(&stack, 42)), format!("{options:?}"), "{replay}");
        }
    }

    #[test]
    fn flags_out_of_range_are_refused() {
        for line in [
            "--payload-max 10",
            "--payload-max 2000000",
            "--seeds 0..1000000",
            "--casts 100001",
            "--jobs 0",
            "--jitter-us 10000001",
            "--delay-us 10000001",
        ] {
            let args = std::iter::once("sim").chain(line.split_whitespace());
            assert!(Cli::try_parse_from(args).is_err(), "{line} was accepted");
        }
        parse("--seeds 0..999999 --casts 100000 --payload-max 1048576 --jobs 256");
    }

    /// A violation reads as a sentence, not as its debug form (`Some(Lost { id: MsgId { .. } })`).
    #[test]
    fn violations_read_as_sentences() {
        use motet_sim::oracle::{Channel, MsgId};
        let cast = MsgId { origin: 0, channel: Channel::Cast, index: 3 };
        let send = MsgId { origin: 2, channel: Channel::Send { dest: 1 }, index: 0 };
        for (violation, sentence) in [
            (motet_sim::Violation::Lost { id: cast, node: 1 }, "cast 3 of node 0 was never delivered at node 1"),
            (
                motet_sim::Violation::Fifo { id: send, node: 1, expected: u32::MAX },
                "send 0 of node 2 to node 1 was delivered at node 1 after a gap",
            ),
            (
                motet_sim::Violation::ViewAgreement { view: (4, 7) },
                "members installed view 4:e0000000000000007 with different members",
            ),
        ] {
            assert!(describe(&violation).starts_with(sentence), "{}", describe(&violation));
        }
    }
}
