//! In-process harness: a few nodes joined by a perfect, instantaneous network, driven by hand.
//! Used by benchmarks and tests that need whole stacks talking without a simulator.

use crate::event::{Action, AppEvent};
use crate::node::{Node, StackId};
use crate::spec::StackSpec;
use crate::time::{Duration, Instant};
use crate::view::{Address, EndpointId, GroupName, ViewState};
use crate::{ApiError, StackConfig};
use std::sync::Arc;

/// `n` nodes, one endpoint each, in one static view.
#[derive(Debug)]
pub struct Group {
    /// The nodes, by rank.
    pub nodes: Vec<(Node, StackId)>,
    /// Virtual time.
    pub now: Instant,
    /// Application events delivered so far, per rank (counts only, to stay allocation-free).
    pub delivered: Vec<u64>,
    /// The latest view each member installed.
    pub views: Vec<Option<Arc<ViewState>>>,
    /// Whether each member's endpoint has exited (left the group).
    pub exited: Vec<bool>,
    /// When set, datagrams between these members and the others are dropped (a partition).
    pub partition: Option<Vec<usize>>,
    /// Addresses other than `Sim(rank)` and the member they reach (endpoint migration); an
    /// address mapped to `None` reaches nobody any more (its socket was closed).
    pub routes: std::collections::BTreeMap<u32, Option<usize>>,
    /// Whether the pump settles delayed processing when the network is quiet, as a driver does
    /// when idle (full batches: `Node::settle`; on by default; a test may leave it to the inputs,
    /// the deadlines and its own calls).
    pub settle: bool,
    /// When set, every datagram the network carries is recorded here too (a corpus for tests
    /// that replay or alter real traffic).
    pub tap: Option<Vec<bytes::Bytes>>,
    /// Each member's datagrams queued at the moment reach each receiver as one batch
    /// ([`Node::handle_datagrams`], as the runtime hands over a bundle's parts) instead of one by
    /// one. Off by default.
    pub batches: bool,
}

impl Group {
    /// A group of `n` members running `stack`, with the bypass on.
    pub fn new(n: usize, stack: &str) -> Group {
        Group::with_bypass(n, stack, crate::Bypass::On)
    }

    /// A group of `n` members running `stack`, with the bypass `On`, `Off` or checked (`Diff`).
    pub fn with_bypass(n: usize, stack: &str, bypass: crate::Bypass) -> Group {
        Group::with_config(n, stack, bypass, StackConfig::default())
    }

    /// A group of `n` members running `stack` with the layers' parameters `config`.
    pub fn with_config(n: usize, stack: &str, bypass: crate::Bypass, config: StackConfig) -> Group {
        let view = Arc::new(ViewState::initial(
            GroupName::new("testkit"),
            StackSpec::parse(stack).expect("valid stack"),
            config,
            (0..n as u64).map(EndpointId).collect(),
            (0..n as u32).map(Address::Sim).collect(),
        ));
        let now = Instant::ZERO;
        let nodes = (0..n)
            .map(|rank| {
                let mut node = Node::new();
                node.set_bypass(bypass);
                node.set_peers(view.group.clone(), view.addresses.clone());
                let id = node.join(now, Arc::clone(&view), rank as u16).expect("stack builds");
                (node, id)
            })
            .collect();
        let mut group = Group {
            nodes,
            now,
            delivered: vec![0; n],
            views: vec![None; n],
            exited: vec![false; n],
            partition: None,
            routes: Default::default(),
            settle: true,
            tap: None,
            batches: false,
        };
        group.pump();
        group
    }

    /// An action at `rank`, then every resulting datagram delivered until the network is quiet.
    pub fn act(&mut self, rank: usize, action: Action) -> Result<(), ApiError> {
        let (node, id) = &mut self.nodes[rank];
        let result = node.handle_action(self.now, *id, action);
        self.pump();
        result
    }

    /// Advances time by `by`, fires due timers and delivers the consequences.
    pub fn tick(&mut self, by: Duration) {
        self.now = self.now + by;
        for (node, _) in &mut self.nodes {
            node.handle_timeout(self.now);
        }
        self.pump();
    }

    /// Delivers datagrams between the nodes (no loss) and drains application events until quiet.
    pub fn pump(&mut self) {
        self.pump_dropping(|_, _, _| false);
    }

    /// [`Group::pump`], but a datagram from `from` to `to` for which `drop(from, to, datagram)`
    /// says so is lost (a test that loses one kind of message).
    pub fn pump_dropping(&mut self, mut drop: impl FnMut(usize, usize, &bytes::Bytes) -> bool) {
        loop {
            let mut moved = false;
            for from in 0..self.nodes.len() {
                let mut batches: Vec<Vec<bytes::Bytes>> = vec![Vec::new(); self.nodes.len()];
                while let Some(out) = self.nodes[from].0.poll_transmit() {
                    moved = true;
                    let datagram = out.to_bytes();
                    if let Some(tap) = &mut self.tap {
                        tap.push(datagram.clone());
                    }
                    for address in out.to.addresses() {
                        // An address of no node here (a forged one, in tests that forge traffic)
                        // reaches nobody, as on a real network.
                        let Address::Sim(to) = address else { continue };
                        let Some(to) = self.routes.get(&to).copied().unwrap_or(Some(to as usize)) else { continue };
                        if to >= self.nodes.len() {
                            continue;
                        }
                        if self.partition.as_ref().is_some_and(|side| side.contains(&from) != side.contains(&to))
                            || drop(from, to, &datagram)
                        {
                            continue;
                        }
                        match self.batches {
                            true => batches[to].push(datagram.clone()),
                            false => self.nodes[to].0.handle_datagram(self.now, datagram.clone()),
                        }
                    }
                }
                for (to, batch) in batches.into_iter().enumerate().filter(|(_, b)| !b.is_empty()) {
                    self.nodes[to].0.handle_datagrams(self.now, batch);
                }
                while let Some((stack, event)) = self.nodes[from].0.poll_event() {
                    match event {
                        AppEvent::Cast { .. } | AppEvent::Send { .. } => self.delivered[from] += 1,
                        AppEvent::View { view, .. } => {
                            // The newest stack is the one actions go to.
                            self.nodes[from].1 = stack;
                            self.views[from] = Some(view);
                        }
                        AppEvent::Exit => self.exited[from] = true,
                        _ => {}
                    }
                }
            }
            // Alarms due now (end-of-turn work such as a sequencer's order announcement) fire
            // before the network is called quiet, as a driver's loop turn would.
            for (node, _) in &mut self.nodes {
                // Idle: delayed processing, as a driver's loop does after sending.
                if self.settle {
                    node.settle();
                }
                if node.poll_alarm().is_some_and(|at| at <= self.now) {
                    node.handle_timeout(self.now);
                    moved = true;
                }
            }
            if !moved {
                break;
            }
        }
    }

    /// Messages buffered in all stacks.
    pub fn buffered(&self) -> usize {
        self.nodes.iter().map(|(node, id)| node.stack(*id).map_or(0, |s| s.buffered())).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Counter;

    #[test]
    fn a_member_that_leaves_gets_exit_and_the_others_a_view_without_it() {
        let mut group = Group::new(3, "vsync");
        for i in 0..30u32 {
            group.act(i as usize % 3, Action::Cast(i.to_le_bytes().to_vec().into())).unwrap();
        }
        group.act(1, Action::Leave).unwrap();
        for _ in 0..20 {
            group.tick(Duration::from_millis(100));
        }
        assert!(group.exited[1], "the leaver's stack exits");
        assert!(!group.exited[0] && !group.exited[2]);
        for rank in [0, 2] {
            let view = group.views[rank].as_ref().unwrap();
            assert_eq!(view.members, vec![EndpointId(0), EndpointId(2)]);
            assert_eq!(view.view_id.ltime, 1);
        }
        // The leaver's casts sent before it asked were delivered everywhere (30 casts, 3 members).
        assert_eq!(group.delivered, vec![30, 30, 30]);
        // The new view works.
        group.act(2, Action::Cast(b"after".as_slice().into())).unwrap();
        assert_eq!(group.delivered, vec![31, 30, 31]);
        assert_eq!(group.act(1, Action::Cast(b"x".as_slice().into())), Err(ApiError::NoSuchStack));
    }

    #[test]
    fn a_partition_splits_the_group_and_healing_merges_it_back() {
        let mut group = Group::new(4, "vsync");
        group.partition = Some(vec![0, 1]);
        for _ in 0..30 {
            group.tick(Duration::from_millis(100));
        }
        let members = |g: &Group, r: usize| g.views[r].as_ref().unwrap().members.clone();
        assert_eq!(members(&group, 0), vec![EndpointId(0), EndpointId(1)]);
        assert_eq!(members(&group, 3), vec![EndpointId(2), EndpointId(3)]);
        // Two halves of four: neither holds a majority of the last primary view.
        assert!(!group.views[0].as_ref().unwrap().primary && !group.views[3].as_ref().unwrap().primary);
        group.partition = None;
        for _ in 0..40 {
            group.tick(Duration::from_millis(100));
        }
        let all: Vec<EndpointId> = (0..4).map(EndpointId).collect();
        for rank in 0..4 {
            let mut got = members(&group, rank);
            got.sort();
            assert_eq!(got, all, "rank {rank}: {:?}", group.views[rank]);
        }
        let id = group.views[0].as_ref().unwrap().view_id;
        assert!((1..4).all(|r| group.views[r].as_ref().unwrap().view_id == id));
        // The merged view carries both partitions' view ids and works.
        assert_eq!(group.views[0].as_ref().unwrap().prev_ids.len(), 2);
        group.act(1, Action::Cast(b"together".as_slice().into())).unwrap();
        let before = group.delivered.clone();
        assert!(before.iter().all(|&d| d == before[0]), "{before:?}");
    }

    #[test]
    fn the_group_switches_stacks_and_back_with_traffic_in_flight() {
        let mut group = Group::new(3, "vsync");
        let total = StackSpec::parse("total").unwrap();
        let mut sent = 0;
        for (asker, target) in [(1, "total"), (2, "vsync")] {
            for i in 0..30u32 {
                group.act(i as usize % 3, Action::Cast(i.to_le_bytes().to_vec().into())).unwrap();
                sent += 1;
            }
            group.act(asker, Action::Switch(StackSpec::parse(target).unwrap())).unwrap();
            for _ in 0..20 {
                group.tick(Duration::from_millis(100));
            }
            for rank in 0..3 {
                let view = group.views[rank].as_ref().unwrap();
                assert_eq!(view.members.len(), 3, "nobody is excluded");
                assert_eq!(view.stack, StackSpec::parse(target).unwrap(), "rank {rank}");
            }
            assert_eq!(group.delivered, vec![sent; 3], "every cast delivered once everywhere");
        }
        assert_eq!(group.views[0].as_ref().unwrap().view_id.ltime, 2);
        // A stack without `Switch` cannot be asked for, nor switched from.
        let fifo = StackSpec::parse("fifo").unwrap();
        assert!(matches!(group.act(0, Action::Switch(fifo.clone())), Err(ApiError::NoSwitch(_))));
        let mut static_group = Group::new(2, "fifo");
        assert!(matches!(static_group.act(0, Action::Switch(total)), Err(ApiError::NoSwitch(_))));
    }

    #[test]
    fn a_member_migrates_to_a_new_address_with_traffic_in_flight() {
        let mut group = Group::new(3, "vsync");
        let mut sent = 0;
        for i in 0..30u32 {
            group.act(i as usize % 3, Action::Cast(i.to_le_bytes().to_vec().into())).unwrap();
            sent += 1;
        }
        // Member 1's process moves to address 100; until the next view both reach it.
        group.routes.insert(100, Some(1));
        group.act(1, Action::Migrate(Address::Sim(100))).unwrap();
        for i in 0..30u32 {
            group.act(i as usize % 3, Action::Cast(i.to_le_bytes().to_vec().into())).unwrap();
            sent += 1;
        }
        for _ in 0..10 {
            group.tick(Duration::from_millis(100));
        }
        for rank in 0..3 {
            let view = group.views[rank].as_ref().unwrap();
            assert_eq!(view.members.len(), 3, "nobody is excluded");
            assert_eq!(view.addresses, vec![Address::Sim(0), Address::Sim(100), Address::Sim(2)], "rank {rank}");
        }
        // The old address is gone: the group goes on at the new one.
        group.routes.insert(1, None);
        for i in 0..30u32 {
            group.act(i as usize % 3, Action::Cast(i.to_le_bytes().to_vec().into())).unwrap();
            sent += 1;
        }
        group.act(0, Action::send(1, b"to the new address".as_slice().into())).unwrap();
        for _ in 0..10 {
            group.tick(Duration::from_millis(100));
        }
        assert_eq!(group.delivered, vec![sent, sent + 1, sent], "every message delivered once everywhere");
        assert_eq!(group.views[0].as_ref().unwrap().members.len(), 3, "nobody was suspected");
        // A stack without `Migrate` refuses, saying what to add.
        let mut static_group = Group::new(2, "fifo");
        let refused = static_group.act(0, Action::Migrate(Address::Sim(9)));
        assert!(matches!(refused, Err(ApiError::NoMigrate(_))), "{refused:?}");
    }

    #[test]
    fn a_subcast_is_delivered_at_the_named_members_only() {
        for stack in ["fifo", "total", "causal"] {
            let mut group = Group::new(3, stack);
            for i in 0..10u8 {
                group.act(1, Action::Cast(vec![i].into())).unwrap();
                group.act(1, Action::Subcast(vec![0, 2], vec![i].into())).unwrap();
            }
            group.tick(Duration::from_millis(100));
            assert_eq!(group.delivered, vec![20, 10, 20], "{stack}");
            assert!(matches!(
                group.act(0, Action::Subcast(vec![5], b"x".as_slice().into())),
                Err(ApiError::NoSuchRank { rank: 5, len: 3 })
            ));
        }
    }

    /// A fast stream does not fill the retransmission buffers for a whole stability period: each
    /// member reports its counts every `report_every` buffered casts and stability follows, so the
    /// buffers hold about that many casts per member, with no time passing at all.
    #[test]
    fn a_fast_stream_keeps_its_buffers_bounded_between_stability_sweeps() {
        let mut group = Group::new(3, "vsync");
        let every = StackConfig::default().mnak.report_every as usize;
        let mut most = 0;
        for i in 0..10_000u32 {
            group.act(i as usize % 3, Action::Cast(i.to_le_bytes().to_vec().into())).unwrap();
            most = most.max(group.buffered());
        }
        assert_eq!(group.delivered, vec![10_000; 3]);
        // Each member's buffers hold what it sent and received since the last report: at most
        // about `every` casts, a few times over in flight (three members report at different
        // times), never the 30,000 copies the group made.
        assert!(most <= 3 * 3 * every, "at most {most} buffered");
        // The reports' timers and the gossip they cause repair nothing on a perfect network.
        for (node, _) in &group.nodes {
            let stats = node.stats();
            assert_eq!((stats.counter(Counter::NakSent), stats.counter(Counter::Retransmit)), (0, 0));
        }
        // Without the trigger, only the sweep (which no passing time ever runs here) frees them.
        let mut config = StackConfig::default();
        config.mnak.report_every = 0;
        let mut off = Group::with_config(3, "vsync", crate::Bypass::On, config);
        for i in 0..4_000u32 {
            off.act(i as usize % 3, Action::Cast(i.to_le_bytes().to_vec().into())).unwrap();
        }
        assert!(off.buffered() >= 3 * 4_000, "every member keeps every cast: {}", off.buffered());
    }

    #[test]
    fn fifo_group_delivers_and_frees_buffers_after_stability() {
        let mut group = Group::new(3, "fifo");
        for i in 0..200u32 {
            group.act(i as usize % 3, Action::Cast(i.to_le_bytes().to_vec().into())).unwrap();
        }
        group.act(0, Action::send(2, vec![0u8; 5000].into())).unwrap();
        assert_eq!(group.delivered, vec![200, 200, 201]);
        assert!(group.buffered() > 0, "nothing is stable before gossip");
        for _ in 0..5 {
            group.tick(Duration::from_millis(100));
        }
        assert_eq!(group.buffered(), 0, "stability gossip and acks free every buffer");
    }
}
