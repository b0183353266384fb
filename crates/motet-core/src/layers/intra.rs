//! `intra`: view changes within a partition — failures and leaves (thesis Fig 2.3; Ensemble
//! `intra`).
//!
//! Provides: [`Service::Membership`]. Requires below: [`Service::Flush`] and
//! [`Service::Election`]. Header: `View { round, survivors }` and `NoHdr`.
//!
//! The coordinator (from `elect`) excludes every suspected or leaving member: it runs a flush round
//! through `sync` (a new round whenever the set to exclude grows or the coordinator changes) in
//! which the suspected are failed and leavers still take part (so all they sent is delivered),
//! collects every participant's `FlushOk`, announces the cut, collects every `CutOk`, and casts
//! the next view as the list of surviving ranks, leavers left out. Every member derives the same next `ViewState` from
//! it: members and addresses of the survivors in rank order, view id = (logical time + 1, the
//! coordinator), previous id = this view's (whether it is primary is `primary`'s decision).
//! A member installs a view only from the round whose cut it completed (`CutDone`), which is what
//! makes members that install the same view agree on what they delivered. A member left out of the
//! view forms a view of its own (a singleton partition), unless it asked to leave, in which case
//! its stack exits. For merges (`inter`) a round can end in `MergeReady` instead, and the view is
//! then cast whole (`Full`), since it has members from outside this view.
//!
//! A round whose survivors have not all answered its current phase `flush_timeout` after it
//! started is started again without those that did not (they are suspected, counter
//! `FlushTimedOut`): the bound on a view change that Ensemble's `intra` lacks. The failure detector
//! finds failed members first (the timeout is longer); this catches one that stays audible and
//! never answers, which held the whole group for ever twice in the simulator's swarms
//! (docs/membership.md, "Failure detection").

use crate::event::{Dn, DropReason, Msg, Qos, Up};
use crate::layer::{Layer, LayerSpec, Outbox, Service};
use crate::view::{RankSet, ViewId, ViewState};
use crate::Rank;
use motet_wire::hdr::intra::Header;
use motet_wire::Header as AnyHeader;
use std::collections::BTreeMap;
use std::sync::Arc;

/// `intra` parameters.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// How long a member that acknowledged a cut waits for its view before going on alone (the
    /// coordinator failed after the cut). Default 5 s. It must outlast `merge.merge_timeout` by
    /// at least a second ([`crate::StackConfig::validate`]): the cut of a merge round is followed
    /// by the merge request, and when no one answers it the coordinator ends the round with a view
    /// of the partition after `merge_timeout`. A shorter wait made every member of the requesting
    /// partition go on alone instead (the scenario `unanswered_merge.txt`).
    #[serde(
        rename = "commit_timeout_ms",
        deserialize_with = "crate::time::millis",
        serialize_with = "crate::time::ser_millis"
    )]
    pub commit_timeout: crate::time::Duration,
    /// How long the coordinator waits for a round's `FlushOk`s, then its `CutOk`s, before it
    /// suspects the members that did not answer and starts the round again without them. Default
    /// 10 s. A failed member is the failure detector's to find (`suspect.timeout`, which this must
    /// exceed); this is for a member that stays audible and never answers (its `Block` held for
    /// ever below it, a bug), which would otherwise hold the view change, and with it the whole
    /// group, for ever: Ensemble's `intra` has no such bound; JGroups' flush has one (8 s).
    #[serde(
        rename = "flush_timeout_ms",
        deserialize_with = "crate::time::millis",
        serialize_with = "crate::time::ser_millis"
    )]
    pub flush_timeout: crate::time::Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            commit_timeout: crate::time::Duration::from_millis(5_000),
            flush_timeout: crate::time::Duration::from_millis(10_000),
        }
    }
}

/// Static description.
pub static SPEC: LayerSpec = LayerSpec {
    name: "intra",
    summary: "coordinator-driven view changes inside a partition: failures and leaves",
    provides: &[Service::Membership],
    requires_below: &[Service::Flush, Service::Election],
    requires_above: &[],
    above_every: &[],
    below_every: &[],
};

/// A flush round this member coordinates.
#[derive(Debug, PartialEq)]
struct Round {
    round: u64,
    failed: RankSet,
    /// Members leaving: they take part in the flush (so everything they sent is delivered) but
    /// are not in the next view.
    leavers: RankSet,
    /// A merge flush (asked by `inter`): report `MergeReady` instead of casting a view.
    merge: bool,
    /// `MergeReady` was reported: `inter` ends the round (the merged view, or this partition's
    /// own), and no other round may start before it does.
    ready: bool,
    flush_ok: BTreeMap<Rank, Arc<[u64]>>,
    cut_ok: RankSet,
    cut_sent: bool,
    /// When the members that have not answered yet are suspected (`flush_timeout`).
    deadline: crate::time::Instant,
    /// Timeouts of the current phase at which no other member had answered, waited out
    /// ([`SILENT_TIMEOUTS_EXTRA`]).
    silent_timeouts: u32,
}

/// Extra flush timeouts a coordinator waits, in a phase where no other member has answered,
/// before it suspects them all. That nobody answers is likelier to be its own messages held than
/// every other member stuck: its flush waits in its own flow control behind what it had queued,
/// which a lagging member's trickle (`mflow.lag_trickle_bytes` a `lag_report_interval`, 64 KiB
/// every 500 ms) lets out slowly: about 8.5 s for a message of the default largest size (1 MiB),
/// 17 s for one of 2 MiB, which `appl.message_size_max` allows. The coordinator then suspected
/// every other member at 10 s and went on alone (a review's finding). A partition, or members
/// that failed, the failure detector finds within its own timeout.
const SILENT_TIMEOUTS_EXTRA: u32 = 2;

impl Round {
    /// Survivors (of `n` ranks) that owe an answer in this round's current phase: a `FlushOk`
    /// before the cut, a `CutOk` after it. Empty once every survivor delivered the cut.
    fn missing(&self, n: usize) -> impl Iterator<Item = Rank> + '_ {
        (0..n as Rank).filter(move |&r| {
            !self.failed.contains(r)
                && if self.cut_sent { !self.cut_ok.contains(r) } else { !self.flush_ok.contains_key(&r) }
        })
    }
}

/// `intra` state.
#[derive(Debug, PartialEq)]
pub struct Intra {
    commit_timeout: crate::time::Duration,
    flush_timeout: crate::time::Duration,
    view: Arc<ViewState>,
    rank: Rank,
    coord: Rank,
    suspects: RankSet,
    leavers: RankSet,
    rounds: u64,
    active: Option<Round>,
    cut_done: Option<(Rank, u64)>,
    /// When the wait for the view of the round whose cut we delivered ends (`commit_timeout`
    /// after the latest such cut: the coordinator may start a later round after it).
    commit_deadline: Option<crate::time::Instant>,
    /// As coordinator, the next view was cast: no further round in this view (a second round
    /// would announce a different view under the same view id).
    view_cast: bool,
    installed: bool,
    /// The switch request chosen so far among those delivered in this view (`switch` layer): the
    /// highest origin rank's latest. The flush makes the set, so the choice, the same at every
    /// member going on to the next view, which runs this stack.
    switch_to: Option<(Rank, crate::spec::StackSpec)>,
    /// Every member finished this transfer view's state transfer (`xfer`): end the view.
    xfer_complete: bool,
    /// New addresses of members that migrate (`migrate`), each member's latest request delivered
    /// in this view: the next view has them (the flush makes the set equal everywhere).
    moves: BTreeMap<Rank, crate::view::Address>,
}

impl Intra {
    /// An `intra` for `view`.
    pub fn new(config: &Config, view: &Arc<ViewState>, rank: Rank) -> Intra {
        Intra {
            commit_timeout: config.commit_timeout,
            flush_timeout: config.flush_timeout,
            view: Arc::clone(view),
            rank,
            coord: view.coord,
            suspects: RankSet::new(),
            leavers: RankSet::new(),
            rounds: 0,
            active: None,
            cut_done: None,
            commit_deadline: None,
            view_cast: false,
            installed: false,
            switch_to: None,
            xfer_complete: false,
            moves: BTreeMap::new(),
        }
    }

    fn survivors<'a>(&'a self, failed: &'a RankSet) -> impl Iterator<Item = Rank> + 'a {
        (0..self.view.len() as Rank).filter(move |&r| !failed.contains(r))
    }

    /// Round `round` of `coord` started. If we delivered the cut of an earlier round of that
    /// coordinator, it restarted (a member was suspected in the cut phase) and still concludes
    /// the view change for us: the wait for its view covers the new round, whose phases (the
    /// flush, then the cut's delivery) `coord` bounds by `flush_timeout` each before it starts
    /// again, then `commit_timeout` as from any cut. Without this, a restarted round that took
    /// longer than `commit_timeout` from the first cut (a backlog to repair under load) sent every
    /// member, and the coordinator, on alone.
    ///
    /// Not once this member suspects `coord`: its wait then ends `commit_timeout` after the
    /// suspicion (`Up::Suspect`), and a round of `coord` heard later (other members still relay
    /// its casts) lengthened it again. In a simulator run (seed 243 of the `vsync` swarm) a member
    /// that had suspected its coordinator so waited about 15 s for a view that never came.
    fn later_round(&mut self, coord: Rank, round: u64, out: &mut Outbox<'_>) {
        if self.installed
            || self.suspects.contains(coord)
            || !self.cut_done.is_some_and(|(c, r)| c == coord && round > r)
        {
            return;
        }
        let deadline = out.now() + self.flush_timeout + self.flush_timeout + self.commit_timeout;
        if self.commit_deadline.is_none_or(|d| d < deadline) {
            self.commit_deadline = Some(deadline);
            out.alarm(deadline);
        }
    }

    /// At a member: round `round` of `coord`, whose cut this member delivered in an earlier round,
    /// excludes it. The coordinator concludes only its latest round, so the view this member
    /// committed to never comes: it goes on alone at once, as it would at its commit timeout.
    fn excluded(&mut self, coord: Rank, round: u64, out: &mut Outbox<'_>) {
        if self.installed || !self.cut_done.is_some_and(|(c, r)| c == coord && round > r) {
            return;
        }
        tracing::info!(coord, round, "a later round of the coordinator we committed to excludes us");
        self.commit_deadline = Some(out.now());
        out.alarm(out.now());
    }

    /// At the coordinator: starts a round when there is someone to exclude that the current round
    /// does not exclude yet.
    fn maybe_start(&mut self, out: &mut Outbox<'_>) {
        if self.coord != self.rank || self.installed || self.view_cast {
            return;
        }
        let (failed, leavers) = (self.suspects.clone(), self.leavers.clone());
        // A merge round whose flush is done waits for `inter`: its request may be granted at any
        // moment, and a round started now dropped the grant (`cast_full` takes the merge round's
        // only) while the granter installed a view listing this whole partition, none of whose
        // members would ever install it. `inter` ends the wait (a grant, or this partition's own
        // view once the request is refused or unanswered); the new view's stack finds the
        // suspicions again, and a leave carries into it.
        if self.active.as_ref().is_some_and(|a| a.ready) {
            return;
        }
        let nothing_to_do = failed.is_empty()
            && leavers.is_empty()
            && self.switch_to.is_none()
            && !self.xfer_complete
            && self.moves.is_empty();
        if nothing_to_do || self.active.as_ref().is_some_and(|a| a.failed == failed && a.leavers == leavers) {
            return;
        }
        self.rounds += 1;
        let round = self.rounds;
        tracing::info!(round, ?failed, ?leavers, "view change: flush round started");
        self.start(round, failed, leavers, false, out);
    }

    /// At the coordinator, for `inter`: a flush round that ends in `MergeReady`.
    fn merge_flush(&mut self, out: &mut Outbox<'_>) {
        // A coordinator that is leaving does not merge: its request would name it as the
        // requester's contact though the partition's view leaves it out, and the grant would go
        // to another member, which drops it. Its leave round goes on; the next coordinator merges.
        if self.coord != self.rank || self.installed || self.view_cast || self.leavers.contains(self.rank) {
            return;
        }
        self.rounds += 1;
        let round = self.rounds;
        tracing::info!(round, "merge: flushing this partition");
        let (failed, leavers) = (self.suspects.clone(), self.leavers.clone());
        self.start(round, failed, leavers, true, out);
    }

    fn start(&mut self, round: u64, failed: RankSet, leavers: RankSet, merge: bool, out: &mut Outbox<'_>) {
        self.later_round(self.rank, round, out);
        let deadline = out.now() + self.flush_timeout;
        let (flush_ok, cut_ok, cut_sent) = (BTreeMap::new(), RankSet::new(), false);
        self.active = Some(Round {
            round,
            failed: failed.clone(),
            leavers,
            merge,
            ready: false,
            flush_ok,
            cut_ok,
            cut_sent,
            deadline,
            silent_timeouts: 0,
        });
        out.alarm(deadline);
        out.dn(Dn::SyncFlush { round, failed });
    }

    /// At the coordinator, when the active round's phase has lasted `flush_timeout`: suspects the
    /// survivors that have not answered, which starts the round again without them.
    fn flush_timed_out(&mut self, out: &mut Outbox<'_>) {
        let Some(active) = self.active.as_mut() else { return };
        if self.coord != self.rank || self.installed || self.view_cast {
            return;
        }
        // After the cut, once we delivered it ourselves, `commit_timeout` (shorter) governs: a
        // coordinator whose view cannot be cast goes on alone, as its members do.
        if active.cut_sent && self.cut_done == Some((self.rank, active.round)) {
            return;
        }
        let missing: RankSet = active.missing(self.view.len()).collect();
        if missing.is_empty() {
            return; // every survivor delivered the cut: a merge round waiting for its answer
        }
        // The alarm came half a timeout or more late: this process did not run (stopped, or
        // descheduled), and the answers may be waiting unread. The time missed counts against no
        // member (as `suspect`'s sweeps): wait half a timeout more.
        let late = out.now().saturating_since(active.deadline);
        if late.0 >= self.flush_timeout.0 / 2 {
            tracing::info!(round = active.round, ?late, "flush timeout came late (this member stalled): waiting again");
            active.deadline = out.now() + crate::time::Duration(self.flush_timeout.0 / 2);
            return out.alarm(active.deadline);
        }
        if missing.iter().all(|r| r == self.rank) {
            // Only our own answer is missing (our `Block` held below us): suspecting ourselves is
            // not ours to do; those that hold it are found by the failure detector or `Excluded`.
            tracing::warn!(round = active.round, "flush timeout: this coordinator's own flush is not done");
            active.deadline = out.now() + self.flush_timeout;
            return out.alarm(active.deadline);
        }
        let others = (0..self.view.len() as Rank).filter(|&r| r != self.rank && !active.failed.contains(r));
        let nobody_answered = others.clone().count() > 0 && others.into_iter().all(|r| missing.contains(r));
        if nobody_answered && active.silent_timeouts < SILENT_TIMEOUTS_EXTRA {
            active.silent_timeouts += 1;
            tracing::warn!(
                round = active.round,
                "flush timeout: no other member answered (this coordinator's own messages may be held, behind flow control toward a lagging member): waiting again"
            );
            active.deadline = out.now() + self.flush_timeout;
            return out.alarm(active.deadline);
        }
        tracing::warn!(
            round = active.round,
            ?missing,
            phase = if active.cut_sent { "cut" } else { "flush" },
            "flush timeout: suspecting the members that did not answer"
        );
        for _ in missing.iter().filter(|&r| r != self.rank) {
            out.count(super::LayerKind::Intra, crate::event::Counter::FlushTimedOut);
        }
        self.suspects.union_with(&missing.iter().filter(|&r| r != self.rank).collect());
        self.maybe_start(out);
    }

    /// At the coordinator, for `inter`: casts a whole view concluding merge round `round`.
    fn cast_full(&mut self, round: u64, view: &ViewState, out: &mut Outbox<'_>) {
        if self.installed {
            return;
        }
        let Some(active) = self.active.as_ref().filter(|a| a.round == round && a.merge) else { return };
        let survivors: Vec<Rank> = self.survivors(&active.failed).collect();
        if self.view_cast || !survivors.iter().all(|&r| active.cut_ok.contains(r)) {
            return;
        }
        self.view_cast = true;
        let msg = Msg::default().with(Header::Full { round, view: Box::new(view.to_full()) });
        out.dn(Dn::Cast { msg, qos: Qos::Reliable });
    }

    fn flush_ok(&mut self, from: Rank, round: u64, counts: Arc<[u64]>, failed: &RankSet, out: &mut Outbox<'_>) {
        if self.installed {
            return; // we went on alone: this view's id is taken
        }
        let Some(active) = self.active.as_mut().filter(|a| a.round == round && !a.cut_sent) else { return };
        // A member this round excludes has no say in the cut: what only it received need not be
        // delivered (virtual synchrony binds the survivors), and counts from it (stale, or a
        // faulty member's inflated ones) could name casts no survivor can ever get.
        if active.failed.contains(from) {
            return;
        }
        // The member is deaf to ranks an earlier round it followed failed (its `bottom` drops
        // them): it cannot finish a round they survive, nor they one it survives, since their
        // `Block` waits for its acknowledgements (seed 885; `sync`). Exclude them too: a new round.
        // Only a report of the active round from a survivor counts, so a late one cannot exclude
        // a healthy member. (We cannot be among them: it would not follow our round.)
        let deaf: RankSet = failed.iter().filter(|&r| r != self.rank && !active.failed.contains(r)).collect();
        if !deaf.is_empty() {
            tracing::info!(member = from, ?deaf, "a member cannot hear these (an earlier round failed them): excluded");
            self.suspects.union_with(&deaf);
            return self.maybe_start(out);
        }
        active.flush_ok.insert(from, counts);
        let failed = active.failed.clone();
        let survivors: Vec<Rank> = self.survivors(&failed).collect();
        let active = self.active.as_mut().expect("checked");
        if survivors.iter().all(|r| active.flush_ok.contains_key(r)) {
            let n = self.view.len();
            let reported = |o: usize| survivors.iter().filter_map(|r| active.flush_ok.get(r)).map(move |c| c[o]);
            let cut: Arc<[u64]> = (0..n).map(|o| reported(o).max().unwrap_or(0)).collect();
            active.cut_sent = true;
            // The cut phase has a timeout of its own.
            active.deadline = out.now() + self.flush_timeout;
            active.silent_timeouts = 0;
            out.alarm(active.deadline);
            tracing::debug!(round, "every survivor flushed: cut announced");
            out.dn(Dn::SyncCut { round, cut });
        }
    }

    fn cut_ok(&mut self, from: Rank, round: u64, out: &mut Outbox<'_>) {
        if self.installed {
            return; // we went on alone: this view's id is taken
        }
        let Some(active) = self.active.as_mut().filter(|a| a.round == round && a.cut_sent) else { return };
        active.cut_ok.insert(from);
        let failed = active.failed.clone();
        let survivors: Vec<Rank> = self.survivors(&failed).collect();
        let active = self.active.as_mut().expect("checked");
        if survivors.iter().all(|&r| active.cut_ok.contains(r)) {
            if active.merge {
                if active.ready {
                    return; // reported already (a repeated answer)
                }
                active.ready = true;
                let survivors = survivors.into_iter().filter(|&r| !active.leavers.contains(r)).collect();
                out.up(Up::MergeReady { round, survivors });
                return;
            }
            self.view_cast = true;
            let survivors: Vec<u64> =
                survivors.into_iter().filter(|&r| !active.leavers.contains(r)).map(u64::from).collect();
            tracing::info!(round, ?survivors, "every survivor delivered the cut: next view cast");
            out.dn(Dn::Cast { msg: Msg::default().with(Header::View { round, survivors }), qos: Qos::Reliable });
        }
    }

    /// The view every member derives from the coordinator's list of survivors.
    fn next_view(&self, coord: Rank, survivors: &[Rank]) -> ViewState {
        let old = &self.view;
        let members: Vec<_> = survivors.iter().map(|&r| old.members[usize::from(r)]).collect();
        let mut next = ViewState {
            coord: survivors.iter().position(|&r| r == coord).unwrap_or(0) as Rank,
            view_id: ViewId { ltime: old.view_id.ltime + 1, coord: old.members[usize::from(coord)] },
            // Members that asked to migrate move in `carry_over`.
            addresses: survivors.iter().map(|&r| old.addresses[usize::from(r)]).collect(),
            clients: survivors.iter().map(|&r| old.is_client(r)).collect(),
            primary: false, // decided by `primary`, if the stack has it
            prev_ids: vec![old.view_id],
            members,
            ..ViewState::clone(old)
        };
        self.carry_over(&mut next);
        next
    }

    /// What a next view of this partition takes from this one: the stack a switch asked for in
    /// it, the new addresses of members that asked to migrate (`migrate`), and a state transfer
    /// still owed (a transfer view that ends before every member is done is followed by another,
    /// unless the member goes on alone: nothing to copy, it keeps the state it had installed).
    /// Before, a view of this partition alone after a failed merge dropped the migrations, and
    /// each member asked again in a later view (a review's finding).
    fn carry_over(&self, next: &mut ViewState) {
        if let Some((_, spec)) = &self.switch_to {
            next.stack = spec.clone();
        }
        for (&rank, &address) in &self.moves {
            if let Some(r) = next.rank_of(self.view.members[usize::from(rank)]) {
                next.addresses[usize::from(r)] = address;
            }
        }
        next.xfer_view = self.view.xfer_view && !self.xfer_complete && next.len() > 1;
    }

    fn install(&mut self, coord: Rank, round: u64, survivors: Vec<u64>, out: &mut Outbox<'_>) {
        if self.installed || self.cut_done != Some((coord, round)) {
            return; // not the round whose cut we delivered
        }
        // Ranks of this view in rank order, as a coordinator lists them: anything else (a rank
        // twice, one out of range) is a faulty coordinator's, and no view at all.
        if survivors.iter().any(|&r| r as usize >= self.view.len()) || survivors.windows(2).any(|w| w[0] >= w[1]) {
            out.drop_input(super::LayerKind::Intra, DropReason::Gossip);
            return;
        }
        self.installed = true;
        let survivors: Vec<Rank> = survivors.iter().map(|&r| r as Rank).collect();
        if survivors.contains(&self.rank) {
            out.up(Up::NewView(Arc::new(self.next_view(coord, &survivors))));
        } else {
            self.leave_view(out);
        }
    }

    /// This member is not in the next view: it exits if it asked to leave, else it goes on alone.
    fn leave_view(&mut self, out: &mut Outbox<'_>) {
        self.installed = true;
        if self.leavers.contains(self.rank) {
            tracing::info!("left the group");
            out.up(Up::Exit);
        } else {
            tracing::info!("not in the next view: going on alone (a partition of one, merging later)");
            let mut alone = self.next_view(self.rank, &[self.rank]);
            alone.primary = false;
            out.up(Up::NewView(Arc::new(alone)));
        }
    }
}

impl Layer for Intra {
    fn handle_up(&mut self, ev: Up, out: &mut Outbox<'_>) {
        match ev {
            Up::Suspect(ranks) => {
                // The coordinator whose cut we delivered is suspected: a later round of its
                // (which lengthened the wait) may never end. The wait for its view ends at most
                // `commit_timeout` from now, as it would have from the cut.
                if let (false, Some((coord, _))) = (self.installed, self.cut_done) {
                    let deadline = out.now() + self.commit_timeout;
                    if coord != self.rank && ranks.contains(coord) && self.commit_deadline.is_some_and(|d| d > deadline)
                    {
                        self.commit_deadline = Some(deadline);
                        out.alarm(deadline);
                    }
                }
                // Never exclude ourselves: if the others suspect us, they exclude us in their view.
                self.suspects.union_with(&ranks.iter().filter(|&r| r != self.rank).collect());
                self.maybe_start(out);
            }
            Up::Elect(coord) => {
                self.coord = coord;
                out.up(Up::Elect(coord));
                self.maybe_start(out);
            }
            Up::LeaveReq(rank) => {
                self.leavers.insert(rank);
                self.maybe_start(out);
            }
            Up::XferComplete => {
                self.xfer_complete = true;
                self.maybe_start(out);
            }
            // A switch to the stack the view runs changes nothing, and starts no view change (each
            // such request flushed the group and rebuilt every member's stack). Ignored, not
            // recorded: recorded, it outranked a lower rank's request for another stack, and
            // nothing happened until some other view change (a review of the first version).
            Up::Switch { spec, .. } if spec == self.view.stack => {}
            Up::Switch { origin, spec } => {
                if self.switch_to.as_ref().is_none_or(|(chosen, _)| origin >= *chosen) {
                    self.switch_to = Some((origin, spec));
                }
                // At the coordinator: a view change with nobody excluded.
                self.maybe_start(out);
            }
            Up::Migrate { origin, address } => {
                let Some(&current) = self.view.addresses.get(usize::from(origin)) else { return };
                // An address of another kind than the member's (a simulated one in a group on
                // UDP), or another member's, would send the group's traffic for it nowhere, or
                // to someone else: refused (a faulty or misconfigured member; found by a review).
                let kind = |a: &crate::view::Address| std::mem::discriminant(a);
                let taken = self.view.addresses.contains(&address)
                    || self.moves.iter().any(|(&r, &a)| r != origin && a == address);
                if kind(&address) != kind(&current) || (address != current && taken) {
                    tracing::warn!(
                        member = origin,
                        ?address,
                        "a migration to another member's address, or to another kind of address, refused"
                    );
                    return;
                }
                if current != address {
                    self.moves.insert(origin, address);
                } else {
                    self.moves.remove(&origin); // moving back, or a request for where it is
                }
                // At the coordinator: a view change with nobody excluded.
                self.maybe_start(out);
            }
            Up::FlushOk { from, round, counts, failed } => self.flush_ok(from, round, counts, &failed, out),
            Up::CutOk { from, round } => self.cut_ok(from, round, out),
            Up::Flushing { coord, round } => self.later_round(coord, round, out),
            Up::Excluded { coord, round } => self.excluded(coord, round, out),
            Up::CutDone { coord, round } => {
                self.cut_done = Some((coord, round));
                let deadline = out.now() + self.commit_timeout;
                self.commit_deadline = Some(deadline);
                out.alarm(deadline);
            }
            // Views are cast reliably only: one on an unreliable cast (it has no sequence number,
            // so a forger need not guess one) is forged.
            Up::Cast { ref msg, qos: Qos::Unreliable, .. } if matches!(msg.hdrs.last().as_deref(), Some(AnyHeader::Intra(h)) if *h != Header::NoHdr) => {
                out.drop_input(super::LayerKind::Intra, DropReason::HeaderMismatch)
            }
            Up::Cast { origin, mut msg, .. }
                if matches!(msg.hdrs.last().as_deref(), Some(AnyHeader::Intra(Header::View { .. }))) =>
            {
                let Some(Header::View { round, survivors }) = msg.pop_as::<Header>() else { unreachable!("checked") };
                self.install(origin, round, survivors, out);
            }
            Up::Cast { origin, mut msg, .. }
                if matches!(msg.hdrs.last().as_deref(), Some(AnyHeader::Intra(Header::Full { .. }))) =>
            {
                let Some(Header::Full { round, view }) = msg.pop_as::<Header>() else { unreachable!("checked") };
                if self.installed || self.cut_done != Some((origin, round)) {
                    return;
                }
                self.installed = true;
                let mut next = self.view.with_full(&view);
                if next.prev_ids == [self.view.view_id] {
                    // A view of this partition alone (`inter`'s, after a merge that was refused or
                    // unanswered). A full view carries neither what the transfer still owes nor a
                    // switch asked in this view, so they are carried over as in a view of the
                    // survivors (`next_view`). Before, the transfer view ended with a receiver that
                    // had not installed the state, and the switch was lost (a review's finding).
                    self.carry_over(&mut next);
                }
                if next.rank_of(self.view.members[usize::from(self.rank)]).is_some() {
                    out.up(Up::NewView(Arc::new(next)));
                } else {
                    self.leave_view(out);
                }
            }
            other => out.pass_up(super::LayerKind::Intra, other, Header::NoHdr),
        }
    }

    fn handle_dn(&mut self, ev: Dn, out: &mut Outbox<'_>) {
        match ev {
            Dn::MergeFlush => self.merge_flush(out),
            Dn::CastFull { round, view } => self.cast_full(round, &view, out),
            other => out.pass_dn(other, Header::NoHdr),
        }
    }

    fn handle_timer(&mut self, out: &mut Outbox<'_>) {
        match self.active.as_ref().map(|a| a.deadline) {
            Some(deadline) if out.now() < deadline => out.alarm(deadline),
            Some(_) => self.flush_timed_out(out),
            None => {}
        }
        // The alarm of an earlier cut, superseded by a later round's.
        if let Some(deadline) = self.commit_deadline.filter(|&d| out.now() < d) {
            return out.alarm(deadline);
        }
        // Committed to a view that never came: its coordinator failed after the cut. Go on alone
        // (not primary) and merge back later.
        if !self.installed && self.cut_done.is_some() && !self.view_cast {
            let own_merge =
                self.active.as_ref().is_some_and(|a| a.merge && self.cut_done == Some((self.rank, a.round)));
            match self.cut_done {
                // Our own merge round: a merge we asked for that no one answered.
                _ if own_merge => tracing::info!("no answer to this partition's merge request: going on as it is"),
                Some((coord, _)) if coord != self.rank => tracing::warn!(
                    committed = ?self.cut_done,
                    "the view this member committed to never came (its coordinator failed after the cut): going on alone"
                ),
                _ => tracing::warn!(
                    committed = ?self.cut_done,
                    "this coordinator's round did not end in a view: going on alone"
                ),
            }
            self.leave_view(out);
        }
    }

    fn check_invariants(&self) {
        assert!(usize::from(self.coord) < self.view.len());
        if let Some(active) = &self.active {
            assert!(active.round <= self.rounds);
        }
    }
}

#[cfg(test)]
mod tests;
