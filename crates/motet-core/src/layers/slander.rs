//! `slander`: failure suspicion sharing (thesis Fig 2.3; Ensemble `slander`).
//!
//! Provides: [`Service::SuspicionSharing`]. Requires below: [`Service::FailureDetection`] and
//! [`Service::ReliableCast`]. Header: `Slander { ranks }` and `NoHdr`.
//!
//! A member's own suspicions are cast reliably to the view, so one member's suspicion reaches the
//! coordinator (and every would-be coordinator) even when only that member noticed; received
//! suspicions are passed up as if local. Each rank is slandered at most once per view.

use crate::event::{Dn, DropReason, Msg, Qos, Up};
use crate::layer::{Layer, LayerSpec, Outbox, Service};
use crate::view::{RankSet, ViewState};
use crate::Rank;
use motet_wire::hdr::slander::Header;

/// `slander` has no parameters.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {}

/// Static description.
pub static SPEC: LayerSpec = LayerSpec {
    name: "slander",
    summary: "shares suspicions with the whole view so the coordinator hears them",
    provides: &[Service::SuspicionSharing],
    requires_below: &[Service::FailureDetection, Service::ReliableCast],
    requires_above: &[],
    above_every: &[],
    below_every: &[],
};

/// `slander` state.
#[derive(Debug, PartialEq)]
pub struct Slander {
    rank: Rank,
    n: usize,
    /// Ranks we have already told the view about.
    slandered: RankSet,
}

impl Slander {
    /// A `slander` for `view`.
    pub fn new(_config: &Config, view: &ViewState, rank: Rank) -> Slander {
        Slander { rank, n: view.len(), slandered: RankSet::new() }
    }
}

impl Layer for Slander {
    fn handle_up(&mut self, ev: Up, out: &mut Outbox<'_>) {
        match ev {
            Up::Suspect(ranks) => {
                let fresh: Vec<u64> = ranks.iter().filter(|&r| !self.slandered.contains(r)).map(u64::from).collect();
                if !fresh.is_empty() {
                    self.slandered.union_with(&ranks);
                    let msg = Msg::default().with(Header::Slander { ranks: fresh });
                    out.dn(Dn::Cast { msg, qos: Qos::Reliable });
                }
                out.up(Up::Suspect(ranks));
            }
            Up::Cast { origin, mut msg, qos }
                if matches!(msg.hdrs.last().as_deref(), Some(motet_wire::Header::Slander(Header::Slander { .. }))) =>
            {
                let Some(Header::Slander { ranks }) = msg.pop_as::<Header>() else { unreachable!("checked") };
                // Cast reliably only: a suspicion on an unreliable cast is forged.
                if qos == Qos::Unreliable {
                    out.drop_input(super::LayerKind::Slander, DropReason::HeaderMismatch);
                    return;
                }
                if origin == self.rank {
                    return;
                }
                if ranks.iter().any(|&r| r as usize >= self.n) {
                    out.drop_input(super::LayerKind::Slander, DropReason::Gossip);
                    return;
                }
                tracing::debug!(from = origin, ?ranks, "suspicion shared by another member");
                out.up(Up::Suspect(ranks.iter().map(|&r| r as Rank).collect()));
            }
            other => out.pass_up(super::LayerKind::Slander, other, Header::NoHdr),
        }
    }

    fn handle_dn(&mut self, ev: Dn, out: &mut Outbox<'_>) {
        out.pass_dn(ev, Header::NoHdr);
    }

    fn check_invariants(&self) {
        assert!(self.slandered.iter().all(|r| usize::from(r) < self.n));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::harness::{Harness, Out};

    /// Suspicions are cast reliably only: one on an unreliable cast (no sequence number to guess)
    /// is forged, and suspects nobody.
    #[test]
    fn a_suspicion_on_an_unreliable_cast_is_dropped() {
        let view = crate::testing::view(3);
        let mut h = Harness::new(Slander::new(&Config::default(), &view, 0), 0);
        let msg = || Msg::default().with(Header::Slander { ranks: vec![2] });
        assert!(h.up(Up::Cast { origin: 1, msg: msg(), qos: Qos::Unreliable }).is_empty());
        assert_eq!(h.stats.drops(DropReason::HeaderMismatch), 1);
        let out = h.up(Up::Cast { origin: 1, msg: msg(), qos: Qos::Reliable });
        assert!(matches!(&out[..], [Out::Up(Up::Suspect(ranks))] if ranks.contains(2)), "{out:?}");
    }
}
