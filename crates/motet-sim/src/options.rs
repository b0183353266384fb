//! Simulation options: the workload, the network model and the faults. Everything a run does
//! follows from these and the seed; `SimOptions::swarm` derives all fault parameters from the
//! seed (TigerBeetle's swarm testing).

use motet_core::{Duration, StackConfig, StackSpec};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

/// The network model. Probabilities are per datagram per destination.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NetConfig {
    /// Probability a datagram is lost.
    pub loss: f64,
    /// Probability a datagram is delivered twice.
    pub dup: f64,
    /// Probability a datagram is held back by an extra delay (so later ones overtake it).
    pub reorder: f64,
    /// Minimum one-way delay, in microseconds.
    pub delay_min_us: u64,
    /// Mean of the exponential delay added to the minimum, in microseconds.
    pub delay_mean_us: u64,
    /// Largest extra delay of a reordered datagram, in microseconds.
    pub reorder_max_us: u64,
}

impl Default for NetConfig {
    fn default() -> NetConfig {
        NetConfig { loss: 0.0, dup: 0.0, reorder: 0.0, delay_min_us: 100, delay_mean_us: 400, reorder_max_us: 5_000 }
    }
}

/// A partition: during `[start, end)` no datagram crosses between `side` and the other nodes, in
/// the directions given.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Partition {
    /// When it forms (from the start of the run), in milliseconds.
    pub start_ms: u64,
    /// When it heals, in milliseconds.
    pub end_ms: u64,
    /// The nodes on one side.
    pub side: Vec<usize>,
    /// True when only datagrams *from* `side` are blocked (an asymmetric partition).
    pub one_way: bool,
}

/// A burst of loss: during `[start_ms, end_ms)` datagrams are lost with probability `loss`
/// (instead of the network's usual rate).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LossBurst {
    /// When it starts, in milliseconds.
    pub start_ms: u64,
    /// When it ends, in milliseconds.
    pub end_ms: u64,
    /// Loss probability during the burst.
    pub loss: f64,
}

/// A scripted fault or membership event (scenarios).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum ScriptAction {
    /// The node crashes.
    Crash(usize),
    /// The node's process starts, alone (a singleton partition that must merge in).
    Start(usize),
    /// The node asks to leave the group.
    Leave(usize),
    /// The node asks the group to switch to this stack.
    Switch(usize, #[serde(serialize_with = "display")] StackSpec),
    /// The node's process moves to a new address (endpoint migration).
    Migrate(usize),
    /// The node's application falls behind on its events (`true`) or catches up (`false`):
    /// `Action::Lagging`, as the runtime says it when a member's event queue is full.
    Lag(usize, bool),
    /// The node's process stops running for this many milliseconds (a `SIGSTOP`, a garbage
    /// collector's pause, a virtual machine descheduled, or an application that holds its event
    /// loop): what reaches it waits, its timers fire late, and then it goes on where it was.
    Stall(usize, u64),
}

fn display<S: serde::Serializer>(spec: &StackSpec, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(spec)
}

/// Everything that defines a run.
#[derive(Clone, Debug)]
pub struct SimOptions {
    /// The seed of the run's only random number generator.
    pub seed: u64,
    /// Number of nodes (one endpoint each, all in one static view).
    pub nodes: usize,
    /// The protocol stack.
    pub stack: StackSpec,
    /// Its parameters.
    pub config: StackConfig,
    /// Casts each node makes.
    pub casts: u32,
    /// Point-to-point sends each node makes (to random other nodes).
    pub sends: u32,
    /// Largest payload, in bytes (sizes are uniform in `16..=payload_max`; above `frag_size`
    /// messages are fragmented).
    pub payload_max: usize,
    /// Casts and sends are spread uniformly over this period, in milliseconds.
    pub workload_ms: u64,
    /// The network.
    pub net: NetConfig,
    /// Nodes that crash (fail-stop), at uniformly random times within the workload period.
    pub crashes: usize,
    /// Nodes that certainly crash (at uniformly random times within the workload period), in
    /// addition to `crashes` chosen at random.
    pub crash_nodes: Vec<usize>,
    /// Whether a crashed node's process restarts (as a new endpoint, alone, which must merge
    /// back into the group), `restart_ms` after its crash.
    pub restart: bool,
    /// Delay from a crash to the restart, in milliseconds.
    pub restart_ms: u64,
    /// Bursts of heavy loss.
    pub loss_bursts: Vec<LossBurst>,
    /// The nodes in the initial common view (`None`: all). The others have not started; a
    /// scripted `Start` brings them up alone.
    pub initial: Option<Vec<usize>>,
    /// Scripted events, by time in milliseconds.
    pub script: Vec<(u64, ScriptAction)>,
    /// How long after a crash the survivors are told (the failure detector's delay), in ms.
    pub detect_ms: u64,
    /// Partitions that form and heal during the run.
    pub partitions: Vec<Partition>,
    /// Virtual time after which a run that has not quiesced is a liveness failure, in ms.
    pub time_max_ms: u64,
    /// Record every datagram's fate in [`SimReport::datagrams_log`](crate::SimReport) (for
    /// [`render_svg`](crate::render_svg)). Off by default to keep sweeps cheap; it does not change
    /// the run (no extra random draws), so the trace hash is the same either way.
    pub record_datagrams: bool,
    /// Whether the nodes run the bypass (`On`, as the runtime does), only the layered path
    /// (`Off`), or both, compared on every input (`Diff`: a difference is a violation).
    pub bypass: motet_core::Bypass,
    /// Nodes whose application does not take its own casts back (`Action::Loopback(false)`, the
    /// Message Bus `loop-back` off): their stacks deliver them nowhere at home, and the oracles
    /// hold them to everything but their own casts. A node restarted keeps its setting.
    pub no_loopback: Vec<usize>,
    /// A node's datagrams of one flush (what one input, or one application action, produced)
    /// to one destination travel as one bundle: one fate on the network, and one batch at the
    /// receiver (`Node::handle_datagrams`), as the runtime packs and reads a loop turn's
    /// (docs/runtime.md, "Packing"). The simulated application's casts are flushed one by one,
    /// so a bundle holds what one input caused (acknowledgements, retransmissions, a view
    /// change's messages), not several of its casts.
    pub bundles: bool,
    /// Nodes whose application never says it is done with a state transfer it received
    /// (`XferDone`): a fault the failure detector cannot see, which `xfer.stall_timeout` must
    /// resolve.
    pub never_done: Vec<usize>,
    /// Nodes whose application never streams a state it is asked to provide (`XferProvide`):
    /// likewise invisible to the failure detector; the provider leaves after
    /// `xfer.stall_timeout`, and another member provides.
    pub never_streams: Vec<usize>,
}

impl SimOptions {
    /// The default largest payload: above `frag_size`, so fragmentation is exercised.
    pub const PAYLOAD_MAX: usize = 3000;

    /// Fault-free defaults for `nodes` nodes running `stack`.
    pub fn new(seed: u64, nodes: usize, stack: StackSpec) -> SimOptions {
        SimOptions {
            seed,
            nodes,
            stack,
            config: StackConfig::default(),
            casts: 20,
            sends: 5,
            payload_max: SimOptions::PAYLOAD_MAX,
            workload_ms: 1_000,
            net: NetConfig::default(),
            crashes: 0,
            crash_nodes: Vec::new(),
            restart: false,
            restart_ms: 500,
            loss_bursts: Vec::new(),
            initial: None,
            script: Vec::new(),
            detect_ms: 300,
            partitions: Vec::new(),
            time_max_ms: 120_000,
            record_datagrams: false,
            bypass: motet_core::Bypass::On,
            no_loopback: Vec::new(),
            bundles: false,
            never_done: Vec::new(),
            never_streams: Vec::new(),
        }
    }

    /// Derives every fault parameter from the seed: loss, duplication, reordering, delays, payload
    /// sizes, crashes and partitions (symmetric or asymmetric), and, where the stack has them,
    /// protocol switches, endpoint migrations and leaves.
    pub fn swarm(seed: u64, nodes: usize, stack: StackSpec) -> SimOptions {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5157_4152_4d00_0000);
        let mut options = SimOptions::new(seed, nodes, stack);
        options.net = NetConfig {
            loss: if rng.gen_bool(0.2) { 0.0 } else { rng.gen_range(0.0..0.3) },
            dup: if rng.gen_bool(0.5) { 0.0 } else { rng.gen_range(0.0..0.1) },
            reorder: if rng.gen_bool(0.3) { 0.0 } else { rng.gen_range(0.0..0.5) },
            delay_min_us: rng.gen_range(10..2_000),
            delay_mean_us: rng.gen_range(10..5_000),
            reorder_max_us: rng.gen_range(100..20_000),
        };
        options.payload_max = if rng.gen_bool(0.5) { 64 } else { rng.gen_range(64..5_000) };
        options.workload_ms = rng.gen_range(10..2_000);
        options.crashes = usize::from(nodes > 2 && rng.gen_bool(0.3)) + usize::from(nodes > 4 && rng.gen_bool(0.1));
        options.restart = rng.gen_bool(0.5);
        options.restart_ms = rng.gen_range(10..2_000);
        if rng.gen_bool(0.3) {
            let start_ms = rng.gen_range(0..options.workload_ms);
            let end_ms = start_ms + rng.gen_range(50..800);
            options.loss_bursts.push(LossBurst { start_ms, end_ms, loss: rng.gen_range(0.5..0.95) });
        }
        if nodes > 1 && rng.gen_bool(0.3) {
            let start_ms = rng.gen_range(0..options.workload_ms);
            let side_len = rng.gen_range(1..nodes);
            let mut side: Vec<usize> = (0..nodes).collect();
            for i in 0..side_len {
                let j = rng.gen_range(i..nodes);
                side.swap(i, j);
            }
            side.truncate(side_len);
            side.sort_unstable();
            options.partitions.push(Partition {
                start_ms,
                end_ms: start_ms + rng.gen_range(1..3_000),
                side,
                one_way: rng.gen_bool(0.3),
            });
        }
        // Protocol switching (drawn last, so the faults above are the same as before it existed):
        // a random member asks for a random delivery discipline, keeping state transfer and
        // primary views if the stack has them (a switch must keep `Primary` as it is).
        if options.stack.layers().contains(&motet_core::LayerKind::Switch) && rng.gen_bool(0.3) {
            let keep = |kind, property| if options.stack.layers().contains(&kind) { property } else { "" };
            let kept = [keep(motet_core::LayerKind::Xfer, "+Xfer"), keep(motet_core::LayerKind::Primary, "+Primary")];
            for _ in 0..rng.gen_range(1..=2) {
                let preset = ["vsync", "total", "causal", "safe"][rng.gen_range(0..4)];
                let spec = StackSpec::parse(&format!("{preset}{}", kept.concat())).expect("presets parse");
                let at = rng.gen_range(0..options.workload_ms + 2_000);
                options.script.push((at, ScriptAction::Switch(rng.gen_range(0..nodes), spec)));
            }
        }
        // Endpoint migration (drawn after switching, for the same reason): a node or two move to
        // new addresses during the run, their old ones closing once their view has the new.
        if options.stack.layers().contains(&motet_core::LayerKind::Migrate) && rng.gen_bool(0.3) {
            for _ in 0..rng.gen_range(1..=2) {
                let at = rng.gen_range(0..options.workload_ms + 2_000);
                options.script.push((at, ScriptAction::Migrate(rng.gen_range(0..nodes))));
            }
        }
        // Leaves (drawn last, likewise): a member or two ask to leave, sometimes several within a
        // few milliseconds (a group shutting down), and the rest must end in one view without
        // them, every leaver's stack ended.
        if options.stack.layers().contains(&motet_core::LayerKind::Leave) && nodes > 2 && rng.gen_bool(0.25) {
            let at = rng.gen_range(0..options.workload_ms + 2_000);
            for k in 0..rng.gen_range(1..nodes.min(4)) {
                let at =
                    if rng.gen_bool(0.5) { at + 3 * k as u64 } else { rng.gen_range(0..options.workload_ms + 2_000) };
                options.script.push((at, ScriptAction::Leave(rng.gen_range(0..nodes))));
            }
        }
        // Early stability reports (drawn last, likewise): a swarm's few casts never reach the
        // default `report_every`, so half the runs lower it enough to report many times a run,
        // racing the sweep's own requests, view changes and the bypass.
        if rng.gen_bool(0.5) {
            options.config.mnak.report_every = rng.gen_range(1..16);
        }
        // Slow applications (drawn last, likewise): in a third of the runs a node or two fall
        // behind on their events for up to 2 s, so their senders wait for credit, across view
        // changes (a flush lifts the lag) and faults; each catches up before the run ends.
        if rng.gen_bool(0.3) {
            for _ in 0..rng.gen_range(1..=2) {
                let (node, at) = (rng.gen_range(0..nodes), rng.gen_range(0..options.workload_ms + 1_000));
                options.script.push((at, ScriptAction::Lag(node, true)));
                options.script.push((at + rng.gen_range(10..2_000), ScriptAction::Lag(node, false)));
            }
        }
        // Applications that discard their own casts, and bundles (drawn last, likewise): the
        // loop-back's fast and layered branches skipped, and a turn's datagrams handled as one
        // batch, under every fault above.
        if rng.gen_bool(0.25) {
            for _ in 0..rng.gen_range(1..=2) {
                let node = rng.gen_range(0..nodes);
                if !options.no_loopback.contains(&node) {
                    options.no_loopback.push(node);
                }
            }
        }
        options.bundles = rng.gen_bool(0.5);
        // Stalls (drawn last, likewise): in a fifth of the runs one node, or every node at once
        // (a host paused), stops running for up to 2.5 s, past the failure detector's timeout in
        // about half of them: what reaches a stalled node waits and its timers fire late.
        if rng.gen_bool(0.2) {
            let (at, ms) = (rng.gen_range(0..options.workload_ms + 1_000), rng.gen_range(50..2_500));
            let stalled: Vec<usize> =
                if rng.gen_bool(0.5) { (0..nodes).collect() } else { vec![rng.gen_range(0..nodes)] };
            options.script.extend(stalled.into_iter().map(|node| (at, ScriptAction::Stall(node, ms))));
        }
        options
    }

    /// The `motet sim` command line that replays this run.
    pub fn replay_command(&self, swarm: bool) -> String {
        let mut cmd = format!("motet sim --nodes {} --seed {} --stack {}", self.nodes, self.seed, self.stack);
        if swarm {
            cmd.push_str(" --swarm");
        } else {
            cmd.push_str(&format!(
                " --loss {} --dup {} --reorder {} --crashes {}{}",
                self.net.loss,
                self.net.dup,
                self.net.reorder,
                self.crashes,
                if self.restart { " --restart" } else { "" }
            ));
            if self.net.delay_mean_us != NetConfig::default().delay_mean_us {
                cmd.push_str(&format!(" --jitter-us {}", self.net.delay_mean_us));
            }
            if self.net.delay_min_us != NetConfig::default().delay_min_us {
                cmd.push_str(&format!(" --delay-us {}", self.net.delay_min_us));
            }
            if self.payload_max != SimOptions::PAYLOAD_MAX {
                cmd.push_str(&format!(" --payload-max {}", self.payload_max));
            }
        }
        cmd.push_str(&format!(" --casts {} --sends {}", self.casts, self.sends));
        if !swarm && !self.no_loopback.is_empty() {
            let nodes: Vec<String> = self.no_loopback.iter().map(usize::to_string).collect();
            cmd.push_str(&format!(" --no-loopback {}", nodes.join(",")));
        }
        if !swarm && self.bundles {
            cmd.push_str(" --bundles");
        }
        if self.bypass != motet_core::Bypass::On {
            cmd.push_str(&format!(" --bypass {}", format!("{:?}", self.bypass).to_lowercase()));
        }
        cmd
    }

    /// The workload's duration.
    pub fn workload(&self) -> Duration {
        Duration::from_millis(self.workload_ms)
    }
}
