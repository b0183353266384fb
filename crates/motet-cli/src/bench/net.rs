//! The benchmark's network for the stacks: the same work as the yardstick's loop
//! (`hand::Group::cast`), so that the paths are compared on their protocols and not on their
//! drivers. An action at one node, each datagram it produces carried to its receivers as one
//! contiguous datagram, their replies carried on, every event read, and each node that did
//! anything settled (delayed processing, full batches) and its due alarms fired before the
//! network is quiet.
//!
//! A datagram is copied into a shared chunk ([`motet_wire::Chunks`]), as the runtime receives
//! one: not into a vector of its own, whose allocation, the shared count its first clone
//! allocates (a receiver's retransmission copy) and the two releases cost every path 380 to 790
//! instructions per cast (callgrind, 2 members) that none pays in the runtime.
//!
//! The testkit's `Group`, which the benchmark used before, is a general test network (routes of
//! migrated addresses, partitions, a tap, and passes over every node until none moves): it cost
//! each stack path about 470 instructions per cast more than the yardstick's loop.

use motet_core::{
    Action, Address, ApiError, AppEvent, Bypass, Destination, EndpointId, GroupName, Instant, Node, StackId,
};
use motet_core::{Duration, StackConfig, StackSpec, ViewState};
use std::sync::Arc;

/// A group of nodes, one member each, in one view.
pub(crate) struct Net {
    nodes: Vec<(Node, StackId)>,
    now: Instant,
    /// Application messages delivered at each node.
    pub(crate) delivered: Vec<u64>,
    /// Nodes that may have output, to visit (kept between calls: no allocation per cast), and
    /// whether each is among them.
    pending: Vec<usize>,
    queued: Vec<bool>,
    /// Where datagrams are put together, as the runtime's receive path copies them.
    chunks: motet_wire::Chunks,
    /// No node's alarm is due before this (`None`: none is armed). It may be early (an alarm
    /// fired or moved later since), never late: every node that did anything updates it.
    next_alarm: Option<Instant>,
}

impl Net {
    pub(crate) fn new(members: usize, stack: &str, bypass: Bypass) -> Net {
        let view = Arc::new(ViewState::initial(
            GroupName::new("bench"),
            StackSpec::parse(stack).expect("validated or built in"),
            StackConfig::default(),
            (0..members as u64).map(EndpointId).collect(),
            (0..members as u32).map(Address::Sim).collect(),
        ));
        let nodes = (0..members)
            .map(|rank| {
                let mut node = Node::new();
                node.set_bypass(bypass);
                let id = node.join(Instant::ZERO, Arc::clone(&view), rank as u16).expect("the stack builds");
                (node, id)
            })
            .collect();
        let (delivered, queued) = (vec![0; members], vec![false; members]);
        let mut net = Net {
            nodes,
            now: Instant::ZERO,
            delivered,
            pending: Vec::new(),
            queued,
            chunks: motet_wire::Chunks::default(),
            next_alarm: None,
        };
        (0..members).for_each(|n| net.visit(n));
        net.pump();
        net
    }

    /// An action at `rank`, then everything it causes until the network is quiet.
    pub(crate) fn act(&mut self, rank: usize, action: Action) -> Result<(), ApiError> {
        let (node, id) = &mut self.nodes[rank];
        let result = node.handle_action(self.now, *id, action);
        self.visit(rank);
        self.pump();
        result
    }

    /// Advances time by `by`: [`Net::advance_to`] that much later.
    pub(crate) fn tick(&mut self, by: Duration) {
        self.advance_to(self.now + by);
    }

    /// Moves the clock to `at`, as a driver's time passes between two casts: the alarms due by
    /// then fire (at `at`, a fraction of a millisecond late at most) and what they cause is
    /// carried. The clock moves with every cast, so that each alarm fires in its turn, as in the
    /// runtime: a clock that jumped a whole sweep at a time fired a delayed acknowledgement and
    /// the retransmission it exists to prevent at the same instant, and the retransmission went
    /// first (8 spurious ones a sweep at 2 members, callgrind: 27 instructions per cast on the
    /// bypass, 31 on the layered path).
    #[inline]
    pub(crate) fn advance_to(&mut self, at: Instant) {
        debug_assert!(at >= self.now, "the clock moves forward");
        self.now = at;
        if self.next_alarm.is_some_and(|next| next <= at) {
            self.fire_due();
        }
    }

    /// The alarms due now fire, what they cause is carried, and the next alarm is found again
    /// (once a sweep or so: out of the per-cast loop).
    #[inline(never)]
    fn fire_due(&mut self) {
        let at = self.now;
        for n in 0..self.nodes.len() {
            let node = &mut self.nodes[n].0;
            if node.poll_alarm().is_some_and(|due| due <= at) {
                node.handle_timeout(at);
                self.visit(n);
            }
        }
        self.pump();
        self.next_alarm = self.nodes.iter().filter_map(|(node, _)| node.poll_alarm()).min();
    }

    /// Node `n` may have output.
    fn visit(&mut self, n: usize) {
        if !self.queued[n] {
            self.queued[n] = true;
            self.pending.push(n);
        }
    }

    fn pump(&mut self) {
        while let Some(from) = self.pending.pop() {
            self.queued[from] = false;
            while let Some(out) = self.nodes[from].0.poll_transmit() {
                let datagram = self.chunks.datagram(&out.head, &out.payload);
                // A cast goes to every member but its sender, as the yardstick's loop carries it
                // (not through `Destination::addresses`, whose chained iterator cost about 45
                // instructions a cast that the yardstick does not pay).
                let (all, except, single) = match &out.to {
                    Destination::Cast { view, except } => (&view.addresses[..], Some(usize::from(*except)), None),
                    Destination::Send(address) => (&[][..], None, Some(*address)),
                    Destination::Peers(peers) => (&peers[..], None, None),
                };
                for (i, &address) in all.iter().enumerate().chain(single.as_ref().map(|a| (usize::MAX, a))) {
                    let Address::Sim(to) = address else { continue };
                    if Some(i) == except {
                        continue;
                    }
                    let to = to as usize;
                    self.nodes[to].0.handle_datagram(self.now, datagram.clone());
                    self.visit(to);
                }
            }
            let (node, id) = &mut self.nodes[from];
            let mut again = false;
            while let Some((stack, event)) = node.poll_event() {
                match event {
                    AppEvent::Cast { .. } | AppEvent::Send { .. } => self.delivered[from] += 1,
                    // A new view (none in a benchmark run, but a stack may replace itself).
                    AppEvent::View { .. } => *id = stack,
                    _ => {}
                }
            }
            // Idle: delayed processing, then the alarms due now (end-of-turn work such as a
            // sequencer's order or an early stability report), as a driver's loop turn ends.
            node.settle();
            match node.poll_alarm() {
                Some(at) if at <= self.now => {
                    node.handle_timeout(self.now);
                    again = true;
                }
                Some(at) => self.next_alarm = Some(self.next_alarm.map_or(at, |next| next.min(at))),
                None => {}
            }
            if again {
                self.visit(from);
            }
        }
    }
}
