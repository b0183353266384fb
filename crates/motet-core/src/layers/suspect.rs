//! `suspect`: the heartbeat failure detector (thesis Fig 2.3, Table 2.1 `Suspect`).
//!
//! Provides: [`Service::FailureDetection`]. Requires below: [`Service::Transport`].
//! Header: `Beat` and `Heartbeat` (cast unreliably every sweep), `Ping` (on the group's gossip
//! channel, to the coordinator's and the deputy's addresses), `Excluded` (on the gossip channel,
//! to each member a flush failed) and `NoHdr`.
//!
//! A member that a watcher has not heard from (a heartbeat, or any message passing this layer) for
//! `timeout` is suspected by that watcher, and `Suspect` goes up to the membership layers. Suspicion is never withdrawn within
//! a view: the next view decides. The timeout is a trade-off measured in the simulator
//! (docs/membership.md): with the defaults a member must miss about ten consecutive heartbeats,
//! which at 20% loss happens with probability 0.2^10 ≈ 1e-7.
//!
//! The detector has two shapes, because the all-to-all one costs every member O(n) receives a
//! sweep, O(n²) for the view, which was all of the bypass's cost growth from 2 to 64 members
//! (docs/bypass.md; Ensemble's own `suspect` pings all, thesis Fig 2.3):
//! - **Through the coordinator**, while the view is quiet: the coordinator and its deputy (the
//!   lowest other rank, whom `elect` hands over to) cast `Beat` every sweep, and each other member
//!   pings both of them. The coordinator and the deputy watch every member, the others watch those
//!   two: about 4n receives a sweep for the view. Enough, because the coordinator is the one that
//!   acts on a member's failure (`intra`), the others only need to notice that the coordinator is
//!   gone, and the deputy, taking over, already knows who else is. Any two failures at once, and
//!   a partition that leaves the coordinator or the deputy on its side, are found in one timeout,
//!   as by the all-to-all detector.
//! - **All-to-all**, from the first sign of trouble to the end of the view: every member casts
//!   `Heartbeat` every sweep and watches every other member. A member turns it on when it suspects
//!   anyone, when a view change starts (`Block`, `Fail`), and when it hears another member's
//!   `Heartbeat`, so it spreads through a partition within a sweep. A new coordinator taking over
//!   mid-view must hear from every member, and a flush must not wait forever on a member that went
//!   silent: both happen only after one of these. Members it did not watch get a full `timeout`
//!   from the switch before they can be suspected. (A suspicion heard only through `slander`, which
//!   is above this layer, does not switch it; the suspecting member's own `Heartbeat` does, and the
//!   `Block` of the view change that follows.)
//!
//! The price is detection time when three or more members are lost at once, the coordinator and
//! the deputy among them (three crashes, or a partition that leaves both): the rank that takes
//! over takes one timeout to suspect those two and another for the others it cannot hear, where
//! the all-to-all detector takes one (docs/membership.md, "Failure detection").
//!
//! **Our own stalls count against nobody.** Silence is measured in the time this member ran. A
//! sweep that comes half a timeout or more late (the process was stopped, descheduled, swapped,
//! or its application held the event loop) moves every member's last-heard time on by the
//! lateness beyond one period. Lesser lateness (an application that polls every few hundred
//! milliseconds, coarse timers, a busy host) is not forgiven: it cannot make a member that sends
//! every period look silent for a whole timeout, and forgiving it would stretch the detection of a
//! real failure by the same factor. A member that stalled past the timeout used to suspect every other member at
//! its first sweep after waking, before it had read what they sent meanwhile, and went on alone:
//! two `motet perf latency` processes, each serving a raw socket for longer than the timeout,
//! split this way every time. A member that really failed during our stall is suspected a timeout
//! after we resume. The other members' view of us is theirs to judge: a stall longer than their
//! timeout still gets us suspected by them, as it must.
//!
//! **A member that a flush failed is told so.** Once this member follows a flush that fails some
//! members (`Fail`), `bottom` drops everything they send for the rest of the view, but they still
//! hear this member's heartbeats. Each sweep it therefore tells them (`Excluded`, with the view's
//! id and its rank), and a member told suspects the teller at once: it can never take part in a
//! flush of the teller's. Without it, two coordinators that failed each other (each suspecting
//! the other side), each followed by a member the other still heard, each waited for ever for the
//! member following the other: `intra` had no flush timeout then, and heartbeats kept the deaf member
//! unsuspected. Found by swarms of stacks without `Slander` (2 seeds in 1,000 of
//! `Gmp+Sync+Suspect+Causal+Local`, 2 in 2,000 with `Heal` too), whose spread suspicions had hidden it.
//! `Excluded` names the rank told, since other members of the group may share its process. The
//! price, in a rare case: a member that followed a round failing X, where a later round of
//! another coordinator keeps X, still tells X (its `bottom` stays deaf to X for the view), and X
//! suspects it, which may cost it the next view; it merges back.

use crate::event::{Counter, Dn, DropReason, Msg, Qos, Up};
use crate::layer::{Layer, LayerSpec, Outbox, Service};
use crate::time::{Duration, Instant};
use crate::view::{Address, RankSet, ViewId, ViewState};
use crate::Rank;
use motet_wire::hdr::suspect::{Header, Ping};
use motet_wire::Header as AnyHeader;
use std::sync::Arc;

/// `suspect` parameters.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Heartbeat period. Default 100 ms.
    #[serde(
        rename = "sweep_interval_ms",
        deserialize_with = "crate::time::millis",
        serialize_with = "crate::time::ser_millis"
    )]
    pub sweep_interval: Duration,
    /// Silence after which a member is suspected. Default 1 s.
    #[serde(
        rename = "timeout_ms",
        deserialize_with = "crate::time::millis",
        serialize_with = "crate::time::ser_millis"
    )]
    pub timeout: Duration,
    /// Every member heartbeats to all and watches all from the start of every view, as Ensemble's
    /// `suspect` did. Default `false`: through the coordinator and its deputy while the view is
    /// quiet (the module's comment). `true` costs every member O(n) receives a sweep and finds
    /// three or more failures at once a timeout sooner.
    pub all_to_all: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config { sweep_interval: Duration::from_millis(100), timeout: Duration::from_millis(1_000), all_to_all: false }
    }
}

/// Static description.
pub static SPEC: LayerSpec = LayerSpec {
    name: "suspect",
    summary: "heartbeat failure detector: suspects members silent for longer than the timeout",
    provides: &[Service::FailureDetection],
    requires_below: &[Service::Transport],
    requires_above: &[],
    above_every: &[],
    below_every: &[],
};

/// `suspect` state.
#[derive(Debug, PartialEq)]
pub struct Suspect {
    config: Config,
    rank: Rank,
    /// The view, which names our pings, its coordinator and deputy (the rank `elect` hands over
    /// to), and their addresses, where the pings go (docs: the module's comment).
    view_id: ViewId,
    coord: Rank,
    deputy: Rank,
    coord_address: Address,
    deputy_address: Address,
    /// When each member was last heard from (moved on by our own stalls: the module's comment).
    last_heard: Vec<Instant>,
    /// When the last sweep ran (or the layer started): a sweep half a timeout late or more finds
    /// that this member stalled.
    last_sweep: Instant,
    /// Suspected or failed: no longer watched.
    suspected: RankSet,
    /// Failed by a flush this member followed (`Fail`): `bottom` drops all they send for the rest
    /// of the view, so each sweep tells them (`Excluded`, to `addresses`), and they suspect us.
    failed: RankSet,
    /// The view: its members' addresses are where `Excluded` goes (shared, not copied: a stack's
    /// memory counts, at 10^5 groups a process).
    view: Arc<ViewState>,
    /// Every member heartbeats to all and watches all (see the module's comment); off while the
    /// view is quiet.
    all_to_all: bool,
    /// The stack is replaced and lingers (`Dn::Replaced`): it still beats, for members that have
    /// not installed the next view yet, but suspects no one. Before, a member that left was
    /// suspected in the lingering stack a timeout after the view without it, and every graceful
    /// leave was logged and counted as a failure (a review's finding).
    replaced: bool,
}

impl Suspect {
    /// A `suspect` for `view`.
    pub fn new(config: &Config, view: &Arc<ViewState>, rank: Rank) -> Suspect {
        // `elect`'s choice once the coordinator is suspected: the lowest other rank.
        let deputy = (0..view.len() as Rank).find(|&r| r != view.coord).unwrap_or(view.coord);
        Suspect {
            config: config.clone(),
            rank,
            view_id: view.view_id,
            coord: view.coord,
            deputy,
            coord_address: view.addresses[usize::from(view.coord)],
            deputy_address: view.addresses[usize::from(deputy)],
            last_heard: vec![Instant::ZERO; view.len()],
            last_sweep: Instant::ZERO,
            suspected: RankSet::new(),
            failed: RankSet::new(),
            view: Arc::clone(view),
            all_to_all: config.all_to_all,
            replaced: false,
        }
    }

    /// The members that watch every other in a quiet view, and cast `Beat`.
    fn watchers(&self) -> [Rank; 2] {
        [self.coord, self.deputy]
    }

    /// Whether this member watches `rank` now: in a quiet view the coordinator and the deputy
    /// watch every member, the others watch those two.
    fn watches(&self, rank: Rank) -> bool {
        rank != self.rank
            && !self.suspected.contains(rank)
            && (self.all_to_all || self.watchers().contains(&self.rank) || self.watchers().contains(&rank))
    }

    /// Turns the all-to-all detector on. A member not watched until now gets a full timeout from
    /// now: it has been pinging the coordinator, not us, and starts casting heartbeats within a
    /// sweep of hearing ours.
    fn widen(&mut self, out: &mut Outbox<'_>) {
        if self.all_to_all {
            return;
        }
        let now = out.now();
        for rank in 0..self.last_heard.len() as Rank {
            if !self.watches(rank) {
                self.last_heard[usize::from(rank)] = now;
            }
        }
        self.all_to_all = true;
        out.count(super::LayerKind::Suspect, Counter::DetectorWidened);
        tracing::debug!("failure detector: all-to-all heartbeats until the next view");
    }
}

impl Layer for Suspect {
    fn handle_up(&mut self, ev: Up, out: &mut Outbox<'_>) {
        match ev {
            Up::Init => {
                self.last_heard.iter_mut().for_each(|t| *t = out.now());
                self.last_sweep = out.now();
                // A view of one has no one to beat to, watch or suspect: no sweep at all. A
                // process of many groups, each a member alone until it finds the others (or for
                // good), swept each ten times a second for nothing (a review's finding).
                if self.view.len() > 1 {
                    out.alarm(out.now() + self.config.sweep_interval);
                }
                out.up(Up::Init);
            }
            Up::Cast { origin, ref msg, .. } | Up::Send { origin, ref msg } => {
                self.last_heard[usize::from(origin)] = out.now();
                // A heartbeat is consumed here: it carries nothing else.
                match msg.hdrs.last().as_deref() {
                    Some(AnyHeader::Suspect(Header::Heartbeat)) => self.widen(out),
                    Some(AnyHeader::Suspect(Header::Beat)) => {}
                    _ => out.pass_up(super::LayerKind::Suspect, ev, Header::NoHdr),
                }
            }
            Up::Gossip(mut msg)
                if matches!(msg.hdrs.last().as_deref(), Some(AnyHeader::Suspect(Header::Excluded { .. }))) =>
            {
                // A member that follows another coordinator's flush failed us: it hears nothing of
                // ours for the rest of the view, so it can take part in no flush of ours, and its
                // heartbeats must not keep us waiting for it.
                let Some(Header::Excluded { ping, to }) = msg.pop_as::<Header>() else { unreachable!("matched above") };
                // Another view's, or told to another member of the group in this process.
                if ping.view_ltime != self.view_id.ltime || ping.view_coord != self.view_id.coord.0 {
                    return;
                }
                if to != u64::from(self.rank) {
                    return;
                }
                match Rank::try_from(ping.rank) {
                    Ok(origin) if usize::from(origin) < self.last_heard.len() && origin != self.rank => {
                        if !self.suspected.contains(origin) {
                            self.widen(out);
                            self.suspected.insert(origin);
                            out.count(super::LayerKind::Suspect, Counter::Suspected);
                            tracing::info!(suspected = origin, "a member failed us: suspected");
                            out.up(Up::Suspect([origin].into_iter().collect()));
                        }
                    }
                    _ => out.drop_input(super::LayerKind::Suspect, DropReason::Gossip),
                }
            }
            Up::Gossip(mut msg) if matches!(msg.hdrs.last().as_deref(), Some(AnyHeader::Suspect(Header::Ping(_)))) => {
                let Some(Header::Ping(ping)) = msg.pop_as::<Header>() else { unreachable!("matched above") };
                if ping.view_ltime != self.view_id.ltime || ping.view_coord != self.view_id.coord.0 {
                    return; // another view's (the channel crosses views and partitions)
                }
                match Rank::try_from(ping.rank) {
                    Ok(origin) if usize::from(origin) < self.last_heard.len() => {
                        self.last_heard[usize::from(origin)] = out.now();
                    }
                    _ => out.drop_input(super::LayerKind::Suspect, DropReason::Gossip),
                }
            }
            other => out.up(other),
        }
    }

    fn handle_dn(&mut self, ev: Dn, out: &mut Outbox<'_>) {
        match &ev {
            // A view change has started: the flush's coordinator, perhaps a new one, must notice a
            // member that goes silent during it.
            Dn::Block => self.widen(out),
            Dn::Replaced => self.replaced = true,
            Dn::Fail(ranks) => {
                self.widen(out);
                self.suspected.union_with(ranks);
                self.failed.union_with(&ranks.iter().filter(|&r| r != self.rank).collect());
            }
            _ => {}
        }
        out.pass_dn(ev, Header::NoHdr);
    }

    fn handle_timer(&mut self, out: &mut Outbox<'_>) {
        let now = out.now();
        // A sweep half a timeout late means we did not run: that time counts against nobody (the
        // module's comment). Capped at now: a member heard as we woke was heard now, not later.
        let late = (now - self.last_sweep).saturating_sub(self.config.sweep_interval);
        if late >= Duration(self.config.timeout.0 / 2).max(self.config.sweep_interval) {
            for heard in &mut self.last_heard {
                *heard = (*heard + late).min(now);
            }
            out.count(super::LayerKind::Suspect, Counter::Stalled);
            tracing::info!(late_ms = late.as_millis(), "this member's sweep came late: its own stall suspects nobody");
        }
        self.last_sweep = now;
        let mut newly = RankSet::new();
        for (rank, &heard) in self.last_heard.iter().enumerate() {
            let rank = rank as Rank;
            if !self.replaced && self.watches(rank) && now - heard > self.config.timeout {
                newly.insert(rank);
            }
        }
        if !newly.is_empty() {
            self.widen(out);
            self.suspected.union_with(&newly);
        }
        // After the check, so that the sweep that suspects already casts to all.
        if self.all_to_all {
            out.dn(Dn::Cast { msg: Msg::default().with(Header::Heartbeat), qos: Qos::Unreliable });
        } else if self.watchers().contains(&self.rank) {
            out.dn(Dn::Cast { msg: Msg::default().with(Header::Beat), qos: Qos::Unreliable });
        } else {
            let ping =
                Ping { view_ltime: self.view_id.ltime, view_coord: self.view_id.coord.0, rank: u64::from(self.rank) };
            out.dn(Dn::Gossip { to: Some(self.coord_address), msg: Msg::default().with(Header::Ping(ping)) });
            // One ping reaches every stack of the group at an address: once is enough when the
            // coordinator and the deputy share a process.
            if self.deputy_address != self.coord_address {
                out.dn(Dn::Gossip { to: Some(self.deputy_address), msg: Msg::default().with(Header::Ping(ping)) });
            }
        }
        // Every member a flush failed: it would otherwise go on hearing our heartbeats and wait for
        // us in a flush of its own (two coordinators that failed each other, each followed by a
        // member the other still hears, waited for ever).
        let ping =
            Ping { view_ltime: self.view_id.ltime, view_coord: self.view_id.coord.0, rank: u64::from(self.rank) };
        for rank in self.failed.iter() {
            let Some(&address) = self.view.addresses.get(usize::from(rank)) else { continue };
            let msg = Msg::default().with(Header::Excluded { ping, to: u64::from(rank) });
            out.dn(Dn::Gossip { to: Some(address), msg });
        }
        if !newly.is_empty() {
            for _ in newly.iter() {
                out.count(super::LayerKind::Suspect, Counter::Suspected);
            }
            tracing::info!(suspected = ?newly, "no heartbeat within the timeout: suspected");
            out.up(Up::Suspect(newly));
        }
        out.alarm(now + self.config.sweep_interval);
    }

    fn check_invariants(&self) {
        assert!(!self.suspected.contains(self.rank), "a member never suspects itself");
        assert!(self.all_to_all || self.suspected.is_empty(), "a suspicion turns the all-to-all detector on");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::harness::{Harness, Out};

    fn at_ms(ms: u64) -> Instant {
        Instant::ZERO + Duration::from_millis(ms)
    }

    /// Member `rank` of a view of `n`, initialised at time zero.
    fn endpoint(n: usize, rank: Rank) -> (Harness<Suspect>, std::sync::Arc<ViewState>) {
        let view = crate::testing::view_of("vsync", n);
        let mut h = Harness::new(Suspect::new(&Config::default(), &view, rank), rank);
        h.up(Up::Init);
        (h, view)
    }

    /// A member alone in its view sweeps never (no one to beat to or suspect); in a view of two
    /// it does.
    #[test]
    fn a_view_of_one_arms_no_sweep() {
        assert_eq!(endpoint(1, 0).0.alarm, None);
        assert_eq!(endpoint(2, 0).0.alarm, Some(at_ms(0) + Config::default().sweep_interval));
    }

    fn ping(view: &ViewState, rank: u64) -> Up {
        let ping = Ping { view_ltime: view.view_id.ltime, view_coord: view.view_id.coord.0, rank };
        Up::Gossip(Msg::default().with(Header::Ping(ping)))
    }

    fn cast(origin: Rank, header: Header) -> Up {
        Up::Cast { origin, msg: Msg::default().with(header), qos: Qos::Unreliable }
    }

    /// What the layer sent this sweep: `Beat`, `Heartbeat`, or a ping to that address.
    fn sent(out: &[Out]) -> Vec<String> {
        out.iter()
            .filter_map(|o| match o {
                Out::Dn(Dn::Cast { msg, .. }) => msg.clone().pop_as::<Header>().map(|h| format!("{h:?}")),
                Out::Dn(Dn::Gossip { to: Some(to), msg }) => {
                    msg.clone().pop_as::<Header>().map(|h| format!("{h:?} to {to:?}"))
                }
                _ => None,
            })
            .collect()
    }

    fn suspected(out: &[Out]) -> Vec<Rank> {
        out.iter()
            .filter_map(|o| match o {
                Out::Up(Up::Suspect(ranks)) => Some(ranks.iter().collect::<Vec<_>>()),
                _ => None,
            })
            .flatten()
            .collect()
    }

    /// Sweeps every 100 ms from `from` to `to` (inclusive), hearing nothing: what they output.
    fn sweeps(h: &mut Harness<Suspect>, from: u64, to: u64) -> Vec<Out> {
        (from..=to).step_by(100).flat_map(|t| h.timer(at_ms(t))).collect()
    }

    #[test]
    fn a_stall_of_our_own_suspects_nobody() {
        // The coordinator hears everyone until 500 ms, then does not run until 3 s: its first
        // sweep after that stall suspects nobody, though all were silent for 2.5 s.
        let (mut coord, view) = endpoint(4, 0);
        for t in (100..=500).step_by(100) {
            coord.now = at_ms(t);
            (1..4).for_each(|rank| drop(coord.up(ping(&view, rank))));
            coord.timer(at_ms(t));
        }
        let out = coord.timer(at_ms(3_000));
        assert!(suspected(&out).is_empty());
        assert_eq!(sent(&out), ["Beat"]);
        assert_eq!(coord.stats.counter(Counter::Stalled), 1);
        // Ranks 1 and 2 are heard from again as it resumes, rank 3 never: it is suspected after
        // a timeout of the coordinator's running time (the stall counting as one period), at
        // 4 s, not at once.
        for t in (3_100..=4_000).step_by(100) {
            coord.now = at_ms(t);
            (1..3).for_each(|rank| drop(coord.up(ping(&view, rank))));
            let out = coord.timer(at_ms(t));
            assert_eq!(suspected(&out), if t == 4_000 { vec![3] } else { vec![] }, "at {t} ms");
        }
        // A sweep late by less than half the timeout is not a stall (a slow loop, coarse timers):
        // forgiven, it would stretch the detection of a real failure. Here the coordinator's
        // sweeps come every 550 ms and it hears nobody: it suspects all three after 1,100 ms.
        let (mut coord, _) = endpoint(4, 0);
        assert!(suspected(&coord.timer(at_ms(550))).is_empty());
        assert_eq!(suspected(&coord.timer(at_ms(1_100))), [1, 2, 3]);
        assert_eq!(coord.stats.counter(Counter::Stalled), 0);
        // Without the rule, the stalled sweep suspected all three (checked by disabling it).
    }

    /// A replaced stack lingers to finish retransmissions: it goes on beating, for members that
    /// have not installed the next view yet, and suspects no one. Before, every graceful leave
    /// showed as a suspicion of the leaver (counted and logged) a timeout after the view without
    /// it (a review's finding).
    #[test]
    fn a_replaced_stack_beats_and_suspects_no_one() {
        let config = Config { all_to_all: true, ..Config::default() };
        let (_, view) = endpoint(3, 0);
        let mut member = Harness::new(Suspect::new(&config, &view, 1), 1);
        member.up(Up::Init);
        member.dn(Dn::Replaced);
        assert_eq!(sent(&member.timer(at_ms(100))), ["Heartbeat"]);
        let out = sweeps(&mut member, 200, 3_000);
        assert!(suspected(&out).is_empty(), "{out:?}");
        assert_eq!(member.stats.counter(Counter::Suspected), 0);
        // The same member, not replaced, suspects both others.
        let mut member = Harness::new(Suspect::new(&config, &view, 1), 1);
        member.up(Up::Init);
        assert_eq!(suspected(&sweeps(&mut member, 100, 3_000)), [0, 2]);
    }

    #[test]
    fn a_quiet_view_runs_through_the_coordinator() {
        let (mut coord, view) = endpoint(4, 0);
        assert_eq!(sent(&coord.timer(at_ms(100))), ["Beat"]);
        let (mut other, _) = endpoint(4, 2);
        let out = other.timer(at_ms(100));
        let pinged = "Ping(Ping { view_ltime: 0, view_coord: 0, rank: 2 })";
        assert_eq!(
            sent(&out),
            [format!("{pinged} to {:?}", view.addresses[0]), format!("{pinged} to {:?}", view.addresses[1])]
        );
        // The deputy beats, as the coordinator does.
        let (mut deputy, _) = endpoint(4, 1);
        assert_eq!(sent(&deputy.timer(at_ms(100))), ["Beat"]);
        // Configured all-to-all, a member heartbeats to all and watches all from the start.
        let config = Config { all_to_all: true, ..Config::default() };
        let mut all = Harness::new(Suspect::new(&config, &view, 2), 2);
        all.up(Up::Init);
        assert_eq!(sent(&all.timer(at_ms(100))), ["Heartbeat"]);
        let quiet = sweeps(&mut all, 200, 1_000);
        assert!(suspected(&quiet).is_empty());
        assert_eq!(suspected(&all.timer(at_ms(1_100))), [0, 1, 3]);
        assert_eq!(all.stats.counter(Counter::DetectorWidened), 0);
        // The coordinator's beat and pings are consumed here: nothing above hears of them.
        assert!(other.up(cast(0, Header::Beat)).is_empty());
        assert!(coord.up(ping(&view, 2)).is_empty());
        assert_eq!(coord.stats.counter(Counter::DetectorWidened), 0);
    }

    #[test]
    fn the_coordinator_suspects_a_member_that_stops_pinging_and_widens() {
        let (mut coord, view) = endpoint(4, 0);
        for t in (100..=2_000).step_by(100) {
            coord.now = at_ms(t);
            coord.up(ping(&view, 1));
            coord.up(ping(&view, 3));
            if t <= 500 {
                coord.up(ping(&view, 2));
            }
            let out = coord.timer(at_ms(t));
            if t <= 1_500 {
                assert!(suspected(&out).is_empty(), "at {t} ms");
                assert_eq!(sent(&out), ["Beat"]);
            } else {
                // 2 was last heard at 500 ms: suspected at the first sweep past the timeout,
                // which already casts to all.
                assert_eq!(suspected(&out), [2], "at {t} ms");
                assert_eq!(sent(&out), ["Heartbeat"]);
                assert_eq!(coord.stats.counter(Counter::DetectorWidened), 1);
                return;
            }
        }
        panic!("never suspected");
    }

    #[test]
    fn the_deputy_watches_every_member_and_suspects_them_with_the_coordinator() {
        let (mut deputy, view) = endpoint(4, 1);
        for t in (100..=1_100).step_by(100) {
            deputy.now = at_ms(t);
            deputy.up(ping(&view, 2));
            let out = deputy.timer(at_ms(t));
            // The coordinator and rank 3 fell silent together: both are suspected in one sweep,
            // so the flush this deputy will run waits for neither.
            assert_eq!(suspected(&out), if t == 1_100 { vec![0, 3] } else { vec![] }, "at {t} ms");
        }
    }

    #[test]
    fn a_member_watches_the_coordinator_and_the_deputy_while_the_view_is_quiet() {
        let (mut member, _) = endpoint(4, 2);
        // Rank 3 is never heard from (it pings the coordinator and the deputy, not us); the
        // coordinator beats until 700 ms, the deputy throughout.
        for t in (100..=3_000).step_by(100) {
            member.now = at_ms(t);
            member.up(cast(1, Header::Beat));
            if t <= 700 {
                member.up(cast(0, Header::Beat));
            }
            let out = member.timer(at_ms(t));
            match t {
                ..=1_700 => assert!(suspected(&out).is_empty(), "at {t} ms"),
                // The coordinator, and only it; rank 3 gets a full timeout from the switch.
                1_800 => assert_eq!(suspected(&out), [0]),
                2_900 => assert_eq!(suspected(&out), [3]),
                _ => assert!(suspected(&out).is_empty(), "at {t} ms"),
            }
        }
    }

    #[test]
    fn another_members_heartbeat_or_a_view_change_widens_the_detector() {
        let (mut member, _) = endpoint(4, 2);
        for t in (100..=5_000).step_by(100) {
            member.now = at_ms(t);
            member.up(cast(0, Header::Beat));
            member.up(cast(1, Header::Beat));
            assert!(suspected(&member.timer(at_ms(t))).is_empty(), "at {t} ms");
        }
        // Rank 1 casts a heartbeat: the all-to-all detector is on; rank 3, never heard from,
        // gets a timeout from now.
        assert!(member.up(cast(1, Header::Heartbeat)).is_empty());
        assert_eq!(member.stats.counter(Counter::DetectorWidened), 1);
        let out = member.timer(at_ms(5_100));
        assert_eq!(sent(&out), ["Heartbeat"]);
        assert!(suspected(&out).is_empty());
        assert!(suspected(&sweeps(&mut member, 5_200, 6_000)).is_empty());
        assert_eq!(suspected(&member.timer(at_ms(6_100))), [0, 1, 3]);

        let (mut member, _) = endpoint(4, 1);
        member.dn(Dn::Block);
        assert_eq!(sent(&member.timer(at_ms(100))), ["Heartbeat"]);
        assert_eq!(member.stats.counter(Counter::DetectorWidened), 1);
    }

    /// Two coordinators that failed each other, each followed by a member the other still heard:
    /// each waited for ever for the member following the other. A member that a flush failed is
    /// told so every sweep, and suspects the teller at once, though it still hears it.
    #[test]
    fn a_member_failed_by_a_flush_is_told_and_suspects_the_teller() {
        let (mut member, view) = endpoint(4, 3);
        member.dn(Dn::Fail([0, 1].into_iter().collect()));
        let out = member.timer(at_ms(100));
        let excluded = |to| format!("Excluded {{ ping: Ping {{ view_ltime: 0, view_coord: 0, rank: 3 }}, to: {to} }}");
        assert_eq!(
            sent(&out),
            [
                "Heartbeat".to_string(),
                format!("{} to {:?}", excluded(0), view.addresses[0]),
                format!("{} to {:?}", excluded(1), view.addresses[1])
            ]
        );
        // Rank 0, the coordinator of its own round, hears rank 3's heartbeats and is told.
        let (mut coord, _) = endpoint(4, 0);
        coord.up(cast(3, Header::Heartbeat));
        let told = |view: &ViewState, rank: u64, to: u64| {
            let ping = Ping { view_ltime: view.view_id.ltime, view_coord: view.view_id.coord.0, rank };
            Up::Gossip(Msg::default().with(Header::Excluded { ping, to }))
        };
        let mut other = (*view).clone();
        other.view_id.ltime += 1;
        assert!(suspected(&coord.up(told(&other, 3, 0))).is_empty(), "another view's");
        // Told to rank 1, which shares rank 0's process: not rank 0's to act on.
        assert!(suspected(&coord.up(told(&view, 3, 1))).is_empty(), "another member's");
        assert_eq!(suspected(&coord.up(told(&view, 3, 0))), [3]);
        assert!(suspected(&coord.up(told(&view, 3, 0))).is_empty(), "once");
        assert!(suspected(&coord.up(told(&view, 0, 0))).is_empty(), "never itself");
        assert!(suspected(&coord.up(told(&view, 9, 0))).is_empty(), "no such rank");
    }

    #[test]
    fn pings_of_another_view_or_rank_do_not_count() {
        let (mut coord, view) = endpoint(3, 0);
        let mut other = (*view).clone();
        other.view_id.ltime += 1;
        for t in (100..=1_200).step_by(100) {
            coord.now = at_ms(t);
            coord.up(ping(&view, 1));
            coord.up(ping(&other, 2)); // an old or a later view's: not a sign of 2 in ours
            coord.up(ping(&view, 7)); // no such rank
            let out = coord.timer(at_ms(t));
            if t == 1_100 {
                assert_eq!(suspected(&out), [2]);
            }
        }
        assert_eq!(coord.stats.drops(DropReason::Gossip), 12);
    }
}
