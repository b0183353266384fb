//! The simulated world: N nodes in one thread, virtual time, one seeded PRNG, and a network that
//! loses, duplicates, reorders, delays and partitions datagrams. Every datagram goes through the
//! real wire codec. Fail-stop crashes are reported to the survivors after a detection delay, as
//! the membership layers of a later release will do.

use crate::diagram::{DatagramRecord, Lost};
use crate::options::SimOptions;
use crate::oracle::{self, Channel, MsgId, Trace, ViewKey, Violation};
use bytes::Bytes;
use motet_core::layer::{Service, Stats};
use motet_core::{
    Action, Address, Duration, EndpointId, GroupName, Instant, LayerKind, Node, RankSet, StackId, ViewState,
};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;

mod members;
mod network;

/// What a run produced.
#[derive(Debug, Clone)]
pub struct SimReport {
    /// The seed.
    pub seed: u64,
    /// BLAKE3 of every delivery (payload digest), every datagram's fate, every view installed
    /// (its id, members and primary flag), every crash and stall, in order: equal seeds give equal
    /// hashes. Not the datagrams' bytes, which the bypass's compressed headers change (the
    /// bypass's tests compare runs with it on and off by this hash).
    pub trace_hash: String,
    /// Broken guarantees (empty when the run passed).
    pub violations: Vec<Violation>,
    /// Casts delivered, summed over nodes.
    pub cast_deliveries: u64,
    /// Sends delivered, summed over nodes.
    pub send_deliveries: u64,
    /// Datagrams handed to the network (per destination).
    pub datagrams: u64,
    /// Datagrams the network lost (including partitions and crashed receivers).
    pub datagrams_lost: u64,
    /// Datagrams that arrived in a bundle of two or more (`SimOptions::bundles`), handed to
    /// their node as one batch.
    pub bundled: u64,
    /// Virtual time at the end of the run.
    pub end: Instant,
    /// Drops and protocol counters summed over nodes.
    pub stats: Stats,
    /// Notable events, for `motet demo` and failing-seed reports.
    pub story: Vec<(Instant, String)>,
    /// Views installed after the initial one, summed over nodes.
    pub views_installed: u64,
    /// For a run with faults that converged: virtual time from the last fault (a crash, or a
    /// partition healing) to the installation of the final common view.
    pub converge: Option<Duration>,
    /// How the nodes' inputs took the bypass.
    pub bypass: motet_core::BypassStats,
    /// The trace the oracles checked.
    pub trace: Trace,
    /// Every datagram's fate, in the order they were sent (one record per copy), when
    /// [`SimOptions::record_datagrams`] is set; empty otherwise.
    pub datagrams_log: Vec<DatagramRecord>,
}

/// A scheduled event. `Deliver::record`: the datagrams' indices in `datagrams_log`, when
/// datagrams are recorded.
#[derive(Debug)]
enum Event {
    /// One datagram, or a bundle of them (`SimOptions::bundles`) read as one batch.
    Deliver {
        from: usize,
        to: usize,
        datagrams: Vec<Bytes>,
        record: Option<std::ops::Range<usize>>,
    },
    Submit {
        node: usize,
        id: MsgId,
    },
    Crash {
        node: usize,
    },
    /// A node that has not started starts, alone.
    Start {
        node: usize,
    },
    /// A node asks to leave.
    Leave {
        node: usize,
    },
    /// A node's application falls behind on its events, or catches up.
    Lag {
        node: usize,
        lagging: bool,
    },
    /// A node asks the group to switch to another stack.
    Switch {
        node: usize,
        spec: motet_core::StackSpec,
    },
    /// A node's process moves to a new address (endpoint migration); `again` re-asks for the
    /// address it moved to, which a view formed by a merge did not carry.
    Migrate {
        node: usize,
        again: bool,
    },
    /// A node's process stops running until `until` (`ScriptAction::Stall`), or until a later
    /// stall it is already in ends.
    Stall {
        node: usize,
        until: Instant,
    },
    /// A stalled node runs again, if no later stall holds it: it handles what came meanwhile, and
    /// the fault phase stays open for `AFTER_STALL` more.
    Resume {
        node: usize,
    },
    /// Nothing: keeps a run from ending before what a stall set off has played out.
    AfterStall,
    /// The crashed process of `node` starts again as a new endpoint (a new node index).
    Restart {
        node: usize,
    },
    FailNotice {
        node: usize,
        failed: usize,
    },
    PartitionChange,
}

impl Event {
    /// The node whose process handles this event (deferred while it is stalled); `None` for what
    /// happens to a process or the network from outside (crashes, starts, stalls, partitions).
    fn runs_at(&self) -> Option<usize> {
        match *self {
            Event::Deliver { to, .. } => Some(to),
            Event::Submit { node, .. }
            | Event::Leave { node }
            | Event::Lag { node, .. }
            | Event::Switch { node, .. }
            | Event::Migrate { node, .. }
            | Event::FailNotice { node, .. } => Some(node),
            Event::Crash { .. }
            | Event::Start { .. }
            | Event::Stall { .. }
            | Event::Resume { .. }
            | Event::AfterStall
            | Event::Restart { .. }
            | Event::PartitionChange => None,
        }
    }
}

#[derive(Debug)]
struct Scheduled {
    at: Instant,
    seq: u64,
    event: Event,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

struct SimNode {
    node: Node,
    /// The endpoint's current stack (the latest view's).
    stack: StackId,
    /// The view of each of this node's stacks, learned from its `View` event.
    views: BTreeMap<StackId, Arc<ViewState>>,
    alive: bool,
    backlog: VecDeque<MsgId>,
    /// Per origin node: casts delivered here so far (index of the last + 1), the vector clock
    /// written into casts for the causal oracle.
    clock: Vec<u32>,
    /// Stacks whose application got `Block` (the view change has begun).
    blocked: std::collections::BTreeSet<StackId>,
    /// The simulated application's state: every cast it delivered (or installed by a transfer).
    state: std::collections::BTreeSet<MsgId>,
    /// State-transfer chunks (and the final done, `None`) waiting for flow control.
    xfer_out: VecDeque<Option<(Bytes, bool)>>,
    /// Chunks of a transfer being received.
    staging: Vec<u8>,
    /// The application lags its events (`Action::Lagging`): said again to each new stack.
    lagging: bool,
    /// The application takes its own casts back (`SimOptions::no_loopback`).
    loopback: bool,
    /// Its stack delivers its own casts: it takes them back, and the stack has `local` (one
    /// without delivers none, by design, and is not told to filter them: if it ever delivered
    /// one, the `OwnCast` oracle would see it).
    hears_own: bool,
    /// The process is stopped until this time (`Event::Stall`, ended by its `Resume`): what
    /// reaches it meanwhile waits in `held`, and its timers fire then at the earliest.
    stalled: Option<Instant>,
    /// Events that reached the process while it was stopped, in the order they came: handled at
    /// its `Resume`, before anything else.
    held: VecDeque<Event>,
}

impl SimNode {
    /// A node with no stack yet, its application as `loopback` says, its stacks with or without
    /// `local`.
    fn idle(node: Node, loopback: bool, local: bool) -> SimNode {
        SimNode {
            node,
            stack: StackId::NONE,
            views: BTreeMap::new(),
            alive: false,
            backlog: VecDeque::new(),
            clock: Vec::new(),
            blocked: Default::default(),
            state: Default::default(),
            xfer_out: Default::default(),
            staging: Default::default(),
            lagging: false,
            loopback,
            hears_own: loopback && local,
            stalled: None,
            held: VecDeque::new(),
        }
    }

    /// Joins the node's endpoint to `view` at `rank`; an application that discards its own casts
    /// says so to the stack at once (the node carries the setting on to each next view's).
    fn join(&mut self, now: Instant, view: &Arc<ViewState>, rank: u16) {
        self.stack = self.node.join(now, Arc::clone(view), rank).expect("the stack spec was validated");
        self.views.insert(self.stack, Arc::clone(view));
        self.alive = true;
        if !self.loopback {
            let set = self.node.handle_action(now, self.stack, Action::Loopback(false));
            assert!(set.is_ok(), "a new stack takes the loop-back setting: {set:?}");
        }
    }

    fn view(&self) -> &Arc<ViewState> {
        &self.views[&self.stack]
    }
}

/// What a stack guarantees beyond virtual synchrony, for the oracles.
fn guarantees(stack: &motet_core::StackSpec) -> oracle::Guarantees {
    let provides = |service| stack.layers().iter().any(|k| k.spec().provides.contains(&service));
    oracle::Guarantees {
        total: provides(Service::TotalOrder),
        causal: provides(Service::CausalOrder),
        safe: provides(Service::SafeDelivery),
    }
}

fn key(view: &ViewState) -> ViewKey {
    (view.view_id.ltime, view.view_id.coord.0)
}

struct World<'a> {
    options: &'a SimOptions,
    rng: ChaCha8Rng,
    now: Instant,
    seq: u64,
    queue: BinaryHeap<Reverse<Scheduled>>,
    nodes: Vec<SimNode>,
    in_flight: u64,
    submissions_left: u64,
    /// Scheduled faults and membership events not yet happened: the fault phase is not over.
    faults_left: u64,
    trace: Trace,
    hasher: blake3::Hasher,
    datagrams: u64,
    datagrams_lost: u64,
    bundled: u64,
    story: Vec<(Instant, String)>,
    /// Endpoint id → node index.
    endpoints: BTreeMap<EndpointId, usize>,
    /// Whether the stack has its own membership (else the simulator reports crashes as `Fail`).
    membership: bool,
    /// Datagram fates, when `options.record_datagrams` (for diagrams).
    datagrams_log: Vec<DatagramRecord>,
    /// Endpoint migration: per node, the address it is at (its first is `Sim(index)`).
    address: Vec<u32>,
    /// Addresses nodes moved to, and the node each reaches.
    routes: BTreeMap<u32, usize>,
    /// Addresses a node moved away from, and when they stop reaching it (the process closes its
    /// old socket a grace period after its view has the new address, as the runtime does).
    retired: BTreeMap<u32, Instant>,
    /// Per node, views installed without its new address since it last moved (each makes it
    /// ask again, up to `MIGRATE_TRIES`).
    migrate_tries: Vec<u32>,
}

/// How long a run goes on at least after a stalled node runs again: two failure-detector
/// timeouts, for the late sweeps to suspect (or not) and a view change to start.
const AFTER_STALL: Duration = Duration::from_millis(2_000);
/// Addresses nodes migrate to are numbered from here (node indices stay below).
const MIGRATED_BASE: u32 = 1 << 20;
/// How long a migrated node still receives at its old address once its view has the new one.
const RETIRE_GRACE: Duration = Duration::from_millis(500);
/// Views without its new address after which a node stops asking again (as an application gives
/// up): a protocol that keeps losing the request then fails the migration oracle instead of
/// changing views for ever.
const MIGRATE_TRIES: u32 = 8;

/// Runs one simulation to completion and checks it. A panic inside the core (a broken layer
/// invariant) is caught and reported as a violation, so one bad seed does not stop a sweep.
pub fn run(options: &SimOptions) -> SimReport {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| World::new(options).run()));
    match outcome {
        Ok(report) => report,
        Err(panic) => {
            let detail = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "non-string panic".into());
            SimReport {
                seed: options.seed,
                // The panic's message: two runs of one seed that panic differently (a core that
                // reads outside the seed) then hash apart, as runs that end do; empty, they hashed
                // alike and the determinism check passed without checking (a review's finding).
                trace_hash: format!("panic-{}", &blake3::hash(detail.as_bytes()).to_hex()[..10]),
                violations: vec![Violation::Invariant { detail }],
                cast_deliveries: 0,
                send_deliveries: 0,
                datagrams: 0,
                datagrams_lost: 0,
                bundled: 0,
                end: Instant::ZERO,
                stats: Stats::default(),
                story: Vec::new(),
                views_installed: 0,
                converge: None,
                bypass: motet_core::BypassStats::default(),
                trace: Trace::default(),
                datagrams_log: Vec::new(),
            }
        }
    }
}

impl<'a> World<'a> {
    fn new(options: &'a SimOptions) -> World<'a> {
        let mut rng = ChaCha8Rng::seed_from_u64(options.seed);
        let n = options.nodes;
        assert!(n >= 1, "a simulation needs at least one node");
        let members: Vec<EndpointId> = (0..n).map(|_| EndpointId(rng.next_u64())).collect();
        let endpoints = members.iter().enumerate().map(|(i, &e)| (e, i)).collect();
        let initial: Vec<usize> = options.initial.clone().unwrap_or_else(|| (0..n).collect());
        let all_addresses: Vec<Address> = (0..n as u32).map(Address::Sim).collect();
        let group = GroupName::new("sim");
        let view = (!initial.is_empty()).then(|| {
            Arc::new(ViewState::initial(
                group.clone(),
                options.stack.clone(),
                options.config.clone(),
                initial.iter().map(|&i| members[i]).collect(),
                initial.iter().map(|&i| Address::Sim(i as u32)).collect(),
            ))
        });
        let now = Instant::ZERO;
        // Without `local` no member delivers its own casts: its application is held to what one
        // that discards them is. (A stack without `local` cannot switch: `Switch` needs
        // membership, whose flush needs `local`.)
        let local = options.stack.layers().contains(&LayerKind::Local);
        let nodes = (0..n)
            .map(|index| {
                let mut node = Node::new();
                node.set_bypass(options.bypass);
                // Discovery: every node knows every address (a seed list), for partition healing.
                node.set_peers(group.clone(), all_addresses.clone());
                let mut sim = SimNode::idle(node, !options.no_loopback.contains(&index), local);
                // Not in the initial view: no stack until a scripted `Start`.
                if let (Some(rank), Some(view)) = (initial.iter().position(|&i| i == index), view.as_ref()) {
                    sim.join(now, view, rank as u16);
                }
                sim
            })
            .collect();
        let mut world = World {
            options,
            rng,
            now,
            seq: 0,
            queue: BinaryHeap::new(),
            nodes,
            in_flight: 0,
            submissions_left: 0,
            faults_left: 0,
            trace: Trace {
                nodes: n,
                crashed: vec![None; n],
                left: vec![false; n],
                exited: vec![false; n],
                no_loopback: (0..n).map(|i| !local || options.no_loopback.contains(&i)).collect(),
                membership: options.stack.layers().contains(&LayerKind::Intra),
                ..Trace::default()
            },
            hasher: blake3::Hasher::new(),
            datagrams: 0,
            datagrams_lost: 0,
            bundled: 0,
            story: Vec::new(),
            endpoints,
            membership: options.stack.layers().contains(&LayerKind::Intra),
            datagrams_log: Vec::new(),
            address: (0..n as u32).collect(),
            routes: BTreeMap::new(),
            retired: BTreeMap::new(),
            migrate_tries: vec![0; n],
        };
        world.plan();
        world
    }

    fn schedule(&mut self, at: Instant, event: Event) {
        if !matches!(event, Event::Deliver { .. } | Event::Submit { .. }) {
            self.faults_left += 1;
        }
        self.seq += 1;
        self.queue.push(Reverse(Scheduled { at, seq: self.seq, event }));
    }

    /// Plans the workload, the crashes and the partitions.
    fn plan(&mut self) {
        let n = self.options.nodes;
        let workload = self.options.workload().0.max(1);
        for origin in 0..n {
            let mut planned: Vec<(u64, Channel)> = Vec::new();
            for _ in 0..self.options.casts {
                planned.push((self.rng.gen_range(0..workload), Channel::Cast));
            }
            if n > 1 {
                for _ in 0..self.options.sends {
                    let mut dest = self.rng.gen_range(0..n - 1);
                    if dest >= origin {
                        dest += 1;
                    }
                    planned.push((self.rng.gen_range(0..workload), Channel::Send { dest }));
                }
            }
            planned.sort_unstable();
            let mut next_index = std::collections::BTreeMap::new();
            for (at, channel) in planned {
                let index = next_index.entry(channel).or_insert(0u32);
                let id = MsgId { origin, channel, index: *index };
                *index += 1;
                self.submissions_left += 1;
                self.schedule(Instant(at), Event::Submit { node: origin, id });
            }
        }
        let mut candidates: Vec<usize> = (0..n).filter(|c| !self.options.crash_nodes.contains(c)).collect();
        for &node in &self.options.crash_nodes {
            let at = Instant(self.rng.gen_range(0..workload));
            self.schedule(at, Event::Crash { node });
        }
        let crashes = self.options.crashes.min(n.saturating_sub(1 + self.options.crash_nodes.len()));
        for _ in 0..crashes {
            let node = candidates.remove(self.rng.gen_range(0..candidates.len()));
            let at = Instant(self.rng.gen_range(0..workload));
            self.schedule(at, Event::Crash { node });
        }
        for (at_ms, action) in &self.options.script {
            let at = Instant::ZERO + Duration::from_millis(*at_ms);
            let event = match *action {
                crate::options::ScriptAction::Crash(node) => Event::Crash { node },
                crate::options::ScriptAction::Start(node) => Event::Start { node },
                crate::options::ScriptAction::Leave(node) => Event::Leave { node },
                crate::options::ScriptAction::Switch(node, ref spec) => Event::Switch { node, spec: spec.clone() },
                crate::options::ScriptAction::Migrate(node) => Event::Migrate { node, again: false },
                crate::options::ScriptAction::Lag(node, lagging) => Event::Lag { node, lagging },
                crate::options::ScriptAction::Stall(node, ms) => {
                    Event::Stall { node, until: at + Duration::from_millis(ms) }
                }
            };
            self.schedule(at, event);
        }
        for partition in &self.options.partitions {
            // A partition a script never heals ends beyond any clock: it has no end to schedule.
            let at = |ms: u64| ms.checked_mul(1_000_000).map(Instant);
            for change in [at(partition.start_ms), at(partition.end_ms)].into_iter().flatten() {
                self.schedule(change, Event::PartitionChange);
            }
        }
    }

    fn note(&mut self, text: String) {
        self.story.push((self.now, text));
    }

    fn run(mut self) -> SimReport {
        let time_max = Instant::ZERO + Duration::from_millis(self.options.time_max_ms);
        for index in 0..self.nodes.len() {
            self.flush(index);
        }
        loop {
            let next_event = self.queue.peek().map(|Reverse(s)| s.at);
            let next_timer = self
                .nodes
                .iter()
                .filter(|n| n.alive)
                .filter_map(|n| n.node.poll_timeout().map(|at| n.stalled.map_or(at, |until| at.max(until))))
                .min();
            let Some(at) = [next_event, next_timer].into_iter().flatten().min() else { break };
            if at > time_max {
                break;
            }
            self.now = self.now.max(at);
            if next_event == Some(at) {
                let Reverse(scheduled) = self.queue.pop().expect("peeked");
                self.handle(scheduled.event);
            } else {
                for index in 0..self.nodes.len() {
                    let node = &mut self.nodes[index];
                    let running = node.alive && node.stalled.is_none();
                    if running && node.node.poll_timeout().is_some_and(|t| t <= self.now) {
                        node.node.handle_timeout(self.now);
                        self.flush(index);
                    }
                }
            }
            if self.quiet() {
                self.trace.quiesced = true;
                break;
            }
        }
        self.finish()
    }

    fn quiet(&self) -> bool {
        let drained = self.in_flight == 0
            && self.submissions_left == 0
            && self.faults_left == 0
            && self
                .nodes
                .iter()
                .filter(|n| n.alive)
                .all(|n| n.backlog.is_empty() && n.node.stack(n.stack).is_some_and(|s| s.buffered() == 0));
        // With membership, quiet also means no view change under way (a member blocked by a flush,
        // or a leaver still in the group): a view that looks converged may be about to change.
        let settled = (0..self.nodes.len()).filter(|&i| self.nodes[i].alive).all(|i| {
            let n = &self.nodes[i];
            !n.blocked.contains(&n.stack) && !self.trace.left[i]
        });
        drained && (!self.membership || self.converged() && settled)
    }

    /// Whether every live member's stack merges partitions (property `Heal`, its `inter`), judged
    /// on the stacks they run now: a group may switch to one that does, and a side of a split
    /// that did cannot merge with one that did not.
    fn merges(&self) -> bool {
        self.nodes.iter().filter(|n| n.alive).all(|n| n.view().stack.layers().contains(&LayerKind::Inter))
    }

    /// Every live node is in the same view, whose members are exactly the live nodes. Without
    /// `Heal`, a partition, a stall or a false suspicion splits the group for good, so the views
    /// need only divide the live nodes among them: every member of a live node's view is live
    /// and in that same view. (Before, every swarm seed with such a split was a liveness failure,
    /// and the buffers it left were never checked.)
    fn converged(&self) -> bool {
        if !self.merges() {
            return (0..self.nodes.len()).filter(|&i| self.nodes[i].alive).all(|i| {
                let view = self.nodes[i].view();
                view.members
                    .iter()
                    .map(|e| self.endpoints[e])
                    .all(|m| self.nodes[m].alive && key(self.nodes[m].view()) == key(view))
            });
        }
        let live: Vec<usize> = (0..self.nodes.len()).filter(|&i| self.nodes[i].alive).collect();
        let Some(&first) = live.first() else { return true };
        let view = self.nodes[first].view();
        let mut members: Vec<usize> = view.members.iter().map(|e| self.endpoints[e]).collect();
        // Ranks follow the view's order (a merged view lists the granter's members first).
        members.sort_unstable();
        members == live && live.iter().all(|&i| key(self.nodes[i].view()) == key(view))
    }

    fn handle(&mut self, event: Event) {
        if !matches!(event, Event::Deliver { .. } | Event::Submit { .. }) {
            self.faults_left -= 1;
        }
        // What reaches a stalled process waits until it runs again, in the order it came (still
        // pending: the counters above are put back, and taken when it is handled).
        if let Some(node) = event.runs_at().filter(|&node| self.nodes[node].stalled.is_some()) {
            if !matches!(event, Event::Deliver { .. } | Event::Submit { .. }) {
                self.faults_left += 1;
            }
            self.nodes[node].held.push_back(event);
            return;
        }
        match event {
            Event::Deliver { from, to, mut datagrams, record } => {
                self.in_flight -= 1;
                let records = &mut self.datagrams_log[record.unwrap_or_default()];
                if !self.nodes[to].alive {
                    records.iter_mut().for_each(|r| r.lost = Some(Lost::ReceiverDown { at: self.now }));
                    self.datagrams_lost += datagrams.len() as u64;
                    return;
                }
                records.iter_mut().for_each(|r| r.delivered = Some(self.now));
                self.hasher.update(&self.now.0.to_le_bytes());
                mark(&mut self.hasher, b'r', &[from as u64, to as u64]);
                match datagrams.len() {
                    1 => self.nodes[to].node.handle_datagram(self.now, datagrams.pop().expect("one")),
                    n => {
                        self.bundled += n as u64;
                        self.nodes[to].node.handle_datagrams(self.now, datagrams);
                    }
                }
                self.flush(to);
            }
            Event::Submit { node, id } => {
                self.submissions_left -= 1;
                if self.nodes[node].alive {
                    self.nodes[node].backlog.push_back(id);
                    self.submit(node);
                }
            }
            Event::Crash { node } => {
                mark(&mut self.hasher, b'c', &[node as u64, self.now.0]);
                self.nodes[node].alive = false;
                self.trace.crashed[node] = Some(self.now);
                self.note(format!("node {node} crashes (fail-stop)"));
                if self.options.restart && self.membership {
                    self.schedule(self.now + Duration::from_millis(self.options.restart_ms), Event::Restart { node });
                }
                if !self.membership {
                    // Static membership: the simulator plays the failure detector.
                    let at = self.now + Duration::from_millis(self.options.detect_ms);
                    for other in (0..self.nodes.len()).filter(|&o| o != node) {
                        self.schedule(at, Event::FailNotice { node: other, failed: node });
                    }
                }
            }
            Event::Stall { node, until } => {
                if self.nodes[node].alive {
                    let ms = until.saturating_since(self.now).as_millis();
                    self.note(format!("node {node} stops running for {ms} ms"));
                    mark(&mut self.hasher, b'p', &[node as u64, until.0]);
                    // A stall within a stall ends with the later of the two.
                    let until = self.nodes[node].stalled.map_or(until, |other| other.max(until));
                    self.nodes[node].stalled = Some(until);
                    self.schedule(until, Event::Resume { node });
                }
            }
            Event::Resume { node } => {
                if self.nodes[node].stalled.is_some_and(|until| until <= self.now) {
                    self.nodes[node].stalled = None;
                    if self.nodes[node].alive {
                        self.note(format!("node {node} runs again"));
                        // Its late timers fire now, and what they do (a suspicion, at worst) must
                        // be part of the run: a group that looked quiet as it woke would end it
                        // first.
                        self.schedule(self.now + AFTER_STALL, Event::AfterStall);
                    }
                    // What came meanwhile, in order, before anything else (a crashed process's
                    // deliveries are lost as any to it).
                    while let Some(event) = self.nodes[node].held.pop_front() {
                        self.handle(event);
                    }
                }
            }
            Event::AfterStall => {}
            Event::Restart { node } => self.restart(node),
            Event::Start { node } => self.start(node),
            Event::Leave { node } => {
                if self.nodes[node].alive {
                    self.trace.left[node] = true;
                    self.note(format!("node {node} leaves"));
                    let sim = &mut self.nodes[node];
                    let _ = sim.node.handle_action(self.now, sim.stack, Action::Leave);
                    self.flush(node);
                }
            }
            Event::Lag { node, lagging } => {
                // A node that restarted is a new endpoint: the lag was its predecessor's.
                if self.nodes[node].alive && self.nodes[node].lagging != lagging {
                    self.note(format!(
                        "node {node}'s application {}",
                        if lagging { "falls behind" } else { "catches up" }
                    ));
                    let sim = &mut self.nodes[node];
                    sim.lagging = lagging;
                    let _ = sim.node.handle_action(self.now, sim.stack, Action::Lagging(lagging));
                    self.flush(node);
                }
            }
            Event::Switch { node, spec } => {
                if self.nodes[node].alive {
                    self.note(format!("node {node} asks the group to switch to {spec}"));
                    let sim = &mut self.nodes[node];
                    // Refused while a view change is in progress (the application would retry).
                    if let Err(e) = sim.node.handle_action(self.now, sim.stack, Action::Switch(spec)) {
                        self.note(format!("node {node}'s switch request was refused: {e}"));
                    }
                    self.flush(node);
                }
            }
            Event::Migrate { node, again } => {
                if self.nodes[node].alive {
                    if !again {
                        let address = MIGRATED_BASE + self.routes.len() as u32;
                        self.routes.insert(address, node);
                        self.address[node] = address;
                        self.note(format!("node {node} moves to address {address}"));
                        self.trace.migrations.push((node, address));
                        self.refresh_peers();
                        self.migrate_tries[node] = 0;
                    } else if self.migrate_tries[node] >= MIGRATE_TRIES {
                        self.note(format!("node {node} gives up asking for a view with its new address"));
                        return;
                    } else {
                        self.migrate_tries[node] += 1;
                    }
                    let sim = &mut self.nodes[node];
                    let action = Action::Migrate(Address::Sim(self.address[node]));
                    // Refused while a view change is in progress: asked again at the next view.
                    if let Err(e) = sim.node.handle_action(self.now, sim.stack, action) {
                        self.note(format!("node {node}'s migration was refused: {e}"));
                    }
                    self.flush(node);
                }
            }
            Event::FailNotice { node, failed } => {
                if self.nodes[node].alive {
                    if node == 0 || (0..node).all(|o| !self.nodes[o].alive) {
                        self.note(format!("survivors are told node {failed} failed"));
                    }
                    let stack = self.nodes[node].stack;
                    let Some(rank) = self.nodes[node].view().members.iter().position(|e| self.endpoints[e] == failed)
                    else {
                        return;
                    };
                    let ranks: RankSet = [rank as u16].into_iter().collect();
                    self.nodes[node].node.handle_fail(self.now, stack, ranks).expect("the stack is live");
                    self.flush(node);
                }
            }
            Event::PartitionChange => {
                let active: Vec<_> = self
                    .options
                    .partitions
                    .iter()
                    .filter(|p| p.start_ms <= self.now.0 / 1_000_000 && self.now.0 / 1_000_000 < p.end_ms)
                    .map(|p| format!("{:?}{}", p.side, if p.one_way { " (one way)" } else { "" }))
                    .collect();
                let text = if active.is_empty() {
                    "the network heals".to_string()
                } else {
                    format!("the network partitions: {} cut off", active.join(", "))
                };
                self.note(text);
            }
        }
    }

    fn finish(mut self) -> SimReport {
        let mut stats = Stats::default();
        let mut bypass = motet_core::BypassStats::default();
        for (index, sim) in self.nodes.iter().enumerate() {
            stats.merge(&sim.node.stats());
            bypass.merge(&sim.node.bypass_stats());
            let buffered = if sim.alive {
                sim.node.stack(sim.stack).map(|s| s.buffered_by_layer()).unwrap_or_default()
            } else {
                Vec::new()
            };
            if index < self.trace.buffered.len() {
                self.trace.buffered[index] = buffered;
            } else {
                self.trace.buffered.push(buffered);
            }
        }
        if self.trace.quiesced {
            self.note("the group is quiet: every retransmission buffer is empty".into());
        } else {
            self.note(format!("time limit reached with {} datagrams in flight", self.in_flight));
        }
        // A group that cannot merge may end split, but only after something that splits a group:
        // a crash, a partition, a stall or a lost datagram (a false suspicion). A run with none
        // of them must end in one view, whatever its stack.
        let faults = self.trace.crashed.iter().any(Option::is_some)
            || !self.options.partitions.is_empty()
            || self.options.script.iter().any(|(_, action)| matches!(action, crate::options::ScriptAction::Stall(..)))
            || self.datagrams_lost > 0;
        self.trace.splits = faults && !self.merges();
        let violations = oracle::check(&self.trace);
        let views_installed = self.trace.views.iter().filter(|v| v.view.0 > 0).count() as u64;
        let crash = self.trace.crashed.iter().flatten().max().copied();
        // A partition a script never heals has no heal to count from: convergence is then timed
        // from the faults before it (the run cannot converge into one view anyway).
        let heal = self.options.partitions.iter().filter_map(|p| p.end_ms.checked_mul(1_000_000).map(Instant)).max();
        let last_fault = crash.into_iter().chain(heal).max();
        let converged = self.trace.quiesced && self.membership;
        let last_view = self.trace.views.last().map(|v| v.time);
        let converge = match (converged, last_fault, last_view) {
            (true, Some(fault), Some(view)) => Some(view.saturating_since(fault)),
            _ => None,
        };
        let cast_deliveries = self.trace.deliveries.iter().filter(|d| d.cast).count() as u64;
        let send_deliveries = self.trace.deliveries.len() as u64 - cast_deliveries;
        self.hasher.update(&self.now.0.to_le_bytes());
        SimReport {
            seed: self.options.seed,
            trace_hash: self.hasher.finalize().to_hex()[..16].to_string(),
            violations,
            cast_deliveries,
            send_deliveries,
            datagrams: self.datagrams,
            datagrams_lost: self.datagrams_lost,
            bundled: self.bundled,
            end: self.now,
            stats,
            story: self.story,
            views_installed,
            converge,
            bypass,
            trace: self.trace,
            datagrams_log: self.datagrams_log,
        }
    }
}

/// A trace record: a tag and its values, each in full (node indices past 255 must not hash alike:
/// the determinism and bypass checks compare these hashes).
fn mark(hasher: &mut blake3::Hasher, tag: u8, values: &[u64]) {
    hasher.update(&[tag]);
    for value in values {
        hasher.update(&value.to_le_bytes());
    }
}
