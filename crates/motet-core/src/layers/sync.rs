//! `sync`: the view-change flush (thesis Fig 2.3, Table 2.1 `Block`/`BlockOk`; Ensemble `sync`,
//! with the cut idea of `collect`, digest Appendix A.4).
//!
//! Provides: [`Service::Flush`]. Requires below: [`Service::ReliableCast`],
//! [`Service::ReliableSend`], [`Service::CastCounts`] and [`Service::LocalDelivery`] (the
//! coordinator hears its own casts). Header: `Flush`, `FlushOk`, `Cut`, `CutOk`, `NoHdr`.
//!
//! A round, run by the coordinator's membership layer through this layer:
//! 1. the coordinator casts `Flush { round, failed }`;
//! 2. every member not being excluded applies `Fail(failed)` and sends `Block` down: `appl` stops
//!    the application, flow control and `pt2pt` hold the `Block` until their pending messages are
//!    out and acknowledged, and it comes back up as `BlockOk` with `mnak`'s per-origin counts, which
//!    the member sends to the coordinator (`FlushOk`) with every rank it failed in the rounds it
//!    followed; the coordinator suspects those too (see below);
//! 3. the coordinator casts the cut, the per-origin maximum over the survivors' counts (`Cut`);
//! 4. every member delivers up to the cut (repaired by `mnak` from whoever holds the casts) and
//!    nothing of a failed origin beyond it, then answers `CutOk` and tells the layers above which
//!    round it completed (`CutDone`): only that round's view may be installed.
//!
//! So every member that installs the next view delivered exactly the same casts in this one
//! (virtual synchrony), although members fail, and coordinators change, during the flush: a new
//! round starts over with fresh counts, and counts only grow. A member follows the latest round
//! of a coordinator it has not seen excluded: a round from an excluded coordinator (whose casts
//! other members still relay) is ignored. Once it has acknowledged a cut it is committed to that
//! round's view and follows no other coordinator's round (its coordinator counts it as a member of
//! the view); if that view never comes, `intra` makes it go on alone. A later round of the *same*
//! coordinator (more members to exclude or leaving, found after the cut) it does follow: the
//! coordinator casts the view of its latest round only, so the committed round's view will never
//! come, and refusing would leave the new round waiting for this member until the commit timeout
//! (members leaving one after the other made every member of a group that shut down wait 3 s).
//!
//! A member that followed an earlier round of another coordinator failed that round's ranks: its
//! `bottom` drops all they send for the rest of the view. If a later round keeps them, neither
//! side can finish it: their `Block` waits in `pt2pt` for acknowledgements the deaf member never
//! sends. So `FlushOk` carries the member's failed ranks and the coordinator's `intra` suspects
//! them, if the report is of its active round from a member that survives it, which restarts the
//! round without them. `slander` used to be the only carrier of that suspicion; a
//! stack without it waited for ever (seed 885 of 7-node swarms of `Gmp+Sync+Suspect+Heal+Causal+
//! Local`, 2026-11-28).

use crate::event::{Dn, DropReason, Msg, Qos, Up};
use crate::layer::{Layer, LayerSpec, Outbox, Service};
use crate::view::{RankSet, ViewState};
use crate::Rank;
use motet_wire::hdr::sync::Header;
use motet_wire::Header as AnyHeader;
use std::sync::Arc;

/// `sync` has no parameters.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {}

/// Static description.
pub static SPEC: LayerSpec = LayerSpec {
    name: "sync",
    summary: "view-change flush: block, drain, agree on a cut of casts, deliver it",
    provides: &[Service::Flush],
    requires_below: &[Service::ReliableCast, Service::ReliableSend, Service::CastCounts, Service::LocalDelivery],
    // Rounds are run by the coordinator's membership layer: without one no flush ever runs, and
    // the layers that rely on it to settle a view (a sequencer that failed, casts held behind a
    // failed member) wait for ever.
    requires_above: &[Service::Membership],
    above_every: &[],
    below_every: &[],
};

/// `sync` state.
#[derive(Debug, PartialEq)]
pub struct Sync {
    rank: Rank,
    n: usize,
    /// The round this member is flushing for: (coordinator, round).
    flushing: Option<(Rank, u64)>,
    /// The round whose cut this member is delivering.
    cutting: Option<(Rank, u64)>,
    /// Every member excluded by a round we followed: their rounds are over for us.
    failed: RankSet,
    /// We acknowledged this round's cut: we are committed to its view and follow no other
    /// coordinator's round, nor an earlier round (otherwise its coordinator could count us in a
    /// view we never install — two primaries).
    committed: Option<(Rank, u64)>,
    /// A later round of the coordinator whose cut we were delivering excluded us before we
    /// committed: `intra` is told once we commit (`Up::Excluded`).
    excluded: Option<(Rank, u64)>,
}

impl Sync {
    /// A `sync` for `view`.
    pub fn new(_config: &Config, view: &ViewState, rank: Rank) -> Sync {
        Sync {
            rank,
            n: view.len(),
            flushing: None,
            cutting: None,
            failed: RankSet::new(),
            committed: None,
            excluded: None,
        }
    }

    /// Sends `header` to the coordinator, or hands `local` up when we are the coordinator.
    fn to_coord(&self, coord: Rank, header: Header, local: Up, out: &mut Outbox<'_>) {
        if coord == self.rank {
            out.up(local);
        } else {
            out.dn(Dn::Send { dest: coord, msg: Msg::default().with(header) });
        }
    }

    fn ranks(&self, values: &[u64], out: &mut Outbox<'_>) -> Option<RankSet> {
        if values.iter().any(|&r| r as usize >= self.n) {
            out.drop_input(super::LayerKind::Sync, DropReason::Gossip);
            return None;
        }
        Some(values.iter().map(|&r| r as Rank).collect())
    }

    fn vector(&self, values: impl Into<Arc<[u64]>> + AsRef<[u64]>, out: &mut Outbox<'_>) -> Option<Arc<[u64]>> {
        if values.as_ref().len() != self.n {
            out.drop_input(super::LayerKind::Sync, DropReason::Gossip);
            return None;
        }
        Some(values.into())
    }
}

impl Layer for Sync {
    fn handle_up(&mut self, ev: Up, out: &mut Outbox<'_>) {
        match ev {
            Up::Cast { origin, mut msg, qos } if matches!(msg.hdrs.last().as_deref(), Some(AnyHeader::Sync(h)) if *h != Header::NoHdr) =>
            {
                // Cast reliably only: a flush message on an unreliable cast (it has no sequence
                // number, so a forger need not guess one) is forged.
                if qos == Qos::Unreliable {
                    return out.drop_input(super::LayerKind::Sync, DropReason::HeaderMismatch);
                }
                match msg.pop_as::<Header>() {
                    Some(Header::Flush { round, failed }) => {
                        let Some(failed) = self.ranks(&failed, out) else { return };
                        if failed.contains(self.rank) || failed.contains(origin) {
                            // We are being excluded: the next view is not ours. If it is a later
                            // round of the coordinator whose cut we delivered, the view we
                            // committed to will never come either: `intra` stops waiting for it
                            // (it waited its commit timeout, lengthened by each later round it
                            // heard of: 15 s in a simulator run, seed 243 of the `vsync` swarm).
                            // `mnak` delivers the coordinator's casts in order, whatever the cut
                            // says, so the round may exclude us before we reach its earlier cut:
                            // then we tell `intra` once we commit (a review's finding).
                            let later = |at: Option<(Rank, u64)>| at.is_some_and(|(c, r)| c == origin && round > r);
                            if failed.contains(self.rank) && later(self.committed) {
                                out.up(Up::Excluded { coord: origin, round });
                            } else if failed.contains(self.rank) && later(self.cutting) {
                                self.excluded = Some((origin, round));
                            }
                            return;
                        }
                        if self.failed.contains(origin) || self.committed.is_some_and(|(c, r)| c != origin || round < r)
                        {
                            // A round of a coordinator that a later round excluded (its casts are
                            // still relayed by others), or of another coordinator than the one whose
                            // view we committed to: it can no longer conclude for us.
                            return;
                        }
                        tracing::debug!(coord = origin, round, ?failed, "flushing for the coordinator's round");
                        self.failed.union_with(&failed);
                        self.flushing = Some((origin, round));
                        self.cutting = None;
                        out.up(Up::Flushing { coord: origin, round });
                        out.up(Up::Suspect(failed.clone()));
                        out.dn(Dn::Fail(failed));
                        out.dn(Dn::Block);
                    }
                    Some(Header::Cut { round, cut }) if self.flushing == Some((origin, round)) => {
                        let Some(cut) = self.vector(cut, out) else { return };
                        self.cutting = Some((origin, round));
                        out.dn(Dn::Cut(cut));
                    }
                    Some(Header::Cut { .. }) => {} // a stale or foreign round
                    _ => out.drop_input(super::LayerKind::Sync, DropReason::HeaderMismatch),
                }
            }
            Up::Send { origin, mut msg } if matches!(msg.hdrs.last().as_deref(), Some(AnyHeader::Sync(h)) if *h != Header::NoHdr) => {
                match msg.pop_as::<Header>() {
                    Some(Header::FlushOk { round, counts, failed }) => {
                        let Some(counts) = self.vector(counts, out) else { return };
                        let Some(failed) = self.ranks(&failed, out) else { return };
                        out.up(Up::FlushOk { from: origin, round, counts, failed });
                    }
                    Some(Header::CutOk { round }) => out.up(Up::CutOk { from: origin, round }),
                    _ => out.drop_input(super::LayerKind::Sync, DropReason::HeaderMismatch),
                }
            }
            Up::BlockOk(counts) => {
                if let Some((coord, round)) = self.flushing {
                    // Our own failed ranks reached our `intra` as we followed each round.
                    let failed = self.failed.iter().map(u64::from).collect();
                    let header = Header::FlushOk { round, counts: counts.iter().copied().collect(), failed };
                    let local = Up::FlushOk { from: self.rank, round, counts, failed: RankSet::new() };
                    self.to_coord(coord, header, local, out);
                }
            }
            Up::CutReached => {
                if let Some((coord, round)) = self.cutting.take() {
                    tracing::debug!(coord, round, "cut delivered: committed to this round's view");
                    self.committed = Some((coord, round));
                    if coord != self.rank {
                        out.dn(Dn::AwaitView { coord });
                    }
                    self.to_coord(coord, Header::CutOk { round }, Up::CutOk { from: self.rank, round }, out);
                    out.up(Up::CutDone { coord, round });
                    if let Some((by, later)) = self.excluded.take().filter(|&(by, later)| by == coord && later > round)
                    {
                        out.up(Up::Excluded { coord: by, round: later });
                    }
                }
            }
            other => out.pass_up(super::LayerKind::Sync, other, Header::NoHdr),
        }
    }

    fn handle_dn(&mut self, ev: Dn, out: &mut Outbox<'_>) {
        match ev {
            Dn::SyncFlush { round, failed } => {
                let failed = failed.iter().map(u64::from).collect();
                out.dn(Dn::Cast { msg: Msg::default().with(Header::Flush { round, failed }), qos: Qos::Reliable });
            }
            Dn::SyncCut { round, cut } => {
                let msg = Msg::default().with(Header::Cut { round, cut: cut.to_vec() });
                out.dn(Dn::Cast { msg, qos: Qos::Reliable });
            }
            other => out.pass_dn(other, Header::NoHdr),
        }
    }

    fn check_invariants(&self) {
        if let (Some(cutting), Some(flushing)) = (self.cutting, self.flushing) {
            assert_eq!(cutting, flushing, "a cut belongs to the round being flushed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::harness::{Harness, Out};

    fn from(origin: Rank, header: Header) -> Up {
        Up::Cast { origin, msg: Msg::default().with(header), qos: Qos::Reliable }
    }

    fn flush(round: u64) -> Header {
        Header::Flush { round, failed: vec![3] }
    }

    fn blocks(out: &[Out]) -> bool {
        out.iter().any(|o| matches!(o, Out::Dn(Dn::Block)))
    }

    #[test]
    fn a_committed_member_follows_a_later_round_of_its_coordinator_only() {
        let view = crate::testing::view_of("vsync", 4);
        let mut h = Harness::new(Sync::new(&Config::default(), &view, 2), 2);
        assert!(blocks(&h.up(from(0, flush(1)))));
        h.up(from(0, Header::Cut { round: 1, cut: vec![0; 4] }));
        let out = h.up(Up::CutReached);
        assert!(out.iter().any(|o| matches!(o, Out::Up(Up::CutDone { coord: 0, round: 1 }))), "{out:?}");
        // Committed to (0, 1): another coordinator's round and an earlier round are ignored...
        assert!(h.up(from(1, flush(5))).is_empty());
        assert!(h.up(from(0, flush(0))).is_empty());
        // ...a later round of the same coordinator (which abandoned round 1) is followed, and
        // `intra` told (its wait for the view restarts).
        let out = h.up(from(0, flush(2)));
        assert!(blocks(&out));
        assert!(out.iter().any(|o| matches!(o, Out::Up(Up::Flushing { coord: 0, round: 2 }))), "{out:?}");
        h.up(from(0, Header::Cut { round: 2, cut: vec![0; 4] }));
        let out = h.up(Up::CutReached);
        assert!(out.iter().any(|o| matches!(o, Out::Up(Up::CutDone { coord: 0, round: 2 }))), "{out:?}");
    }

    /// A later round of the coordinator a member committed to that excludes it tells `intra`,
    /// which stops waiting for the view (it never comes); one of another coordinator, or one that
    /// excludes another member, does not.
    #[test]
    fn a_later_round_that_excludes_a_committed_member_tells_intra() {
        let view = crate::testing::view_of("vsync", 4);
        let mut h = Harness::new(Sync::new(&Config::default(), &view, 2), 2);
        let excluded = |out: &[Out]| out.iter().any(|o| matches!(o, Out::Up(Up::Excluded { coord: 0, round: 2 })));
        let excluding = |round| Header::Flush { round, failed: vec![2] };
        // Not committed yet: excluded, nothing to stop waiting for.
        assert!(h.up(from(0, excluding(0))).is_empty());
        h.up(from(0, flush(1)));
        h.up(from(0, Header::Cut { round: 1, cut: vec![0; 4] }));
        h.up(Up::CutReached);
        assert!(h.up(from(1, excluding(5))).is_empty(), "another coordinator's round");
        assert!(h.up(from(0, excluding(1))).is_empty(), "not a later round");
        let out = h.up(from(0, excluding(2)));
        assert!(excluded(&out) && !blocks(&out), "{out:?}");

        // The excluding round may come before the cut is reached (`mnak` delivers the
        // coordinator's casts in order): `intra` is told once this member commits.
        let mut h = Harness::new(Sync::new(&Config::default(), &view, 2), 2);
        h.up(from(0, flush(1)));
        h.up(from(0, Header::Cut { round: 1, cut: vec![0; 4] }));
        assert!(!excluded(&h.up(from(0, excluding(2)))));
        let out = h.up(Up::CutReached);
        let done = out.iter().position(|o| matches!(o, Out::Up(Up::CutDone { coord: 0, round: 1 })));
        let told = out.iter().position(|o| matches!(o, Out::Up(Up::Excluded { coord: 0, round: 2 })));
        assert!(done.is_some() && told > done, "committed, then told: {out:?}");
    }

    /// Seed 885: a member that followed another coordinator's round is deaf to what that round
    /// failed; it reports those ranks with its `FlushOk`, and the coordinator's `sync` hands them
    /// to `intra` with the report (which decides whether they count: see its tests).
    #[test]
    fn a_flushed_member_reports_what_it_failed_to_its_coordinator() {
        use crate::layer::harness::sent;
        let view = crate::testing::view_of("vsync", 5);
        let mut member = Harness::new(Sync::new(&Config::default(), &view, 2), 2);
        member.up(from(0, Header::Flush { round: 1, failed: vec![3] })); // coordinator 0 fails 3
        member.up(from(1, Header::Flush { round: 1, failed: vec![0] })); // then 1 takes over
        let out = member.up(Up::BlockOk(vec![0; 5].into()));
        let [(1, Header::FlushOk { round: 1, ref failed, .. })] = sent::<Header>(&out)[..] else { panic!("{out:?}") };
        assert_eq!(**failed, [0, 3]);

        let mut coord = Harness::new(Sync::new(&Config::default(), &view, 1), 1);
        let ok = |failed| Up::Send {
            origin: 2,
            msg: Msg::default().with(Header::FlushOk { round: 1, counts: vec![0; 5].into(), failed }),
        };
        let out = coord.up(ok(vec![0, 3].into()));
        let [Out::Up(Up::FlushOk { from: 2, round: 1, failed, .. })] = &out[..] else { panic!("{out:?}") };
        assert_eq!(failed.iter().collect::<Vec<_>>(), [0, 3]);
        // A rank outside the view: the report is dropped.
        assert!(coord.up(ok(vec![9].into())).iter().all(|o| !matches!(o, Out::Up(_))));
    }
}
