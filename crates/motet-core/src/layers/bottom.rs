//! `bottom`: the bottom-most layer (thesis §5.6 p.88, Figs 5.1 and 5.3; SOSP §4.1.3).
//!
//! Provides: [`Service::Transport`] (unreliable casts and sends). Requires: nothing.
//! Header: `NoHdr` only. Keeps the set of failed ranks and drops everything they send, giving the
//! layers above "the illusion that failed endpoints have really failed (they are not heard from
//! again)". After `Leave` it neither sends nor receives.

use crate::event::{Dn, DropReason, Up};
use crate::fast::{self, DnStep, Down, UpStep};
use crate::layer::{Layer, LayerSpec, Outbox, Service};
use crate::view::{RankSet, ViewState};
use crate::Rank;
use motet_wire::hdr::bottom::Header;

/// `bottom` has no parameters.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {}

/// Static description.
pub static SPEC: LayerSpec = LayerSpec {
    name: "bottom",
    summary: "unreliable transport; drops messages from failed members",
    provides: &[Service::Transport],
    requires_below: &[],
    requires_above: &[],
    above_every: &[],
    below_every: &[],
};

/// `bottom` state.
#[derive(Debug, PartialEq)]
pub struct Bottom {
    failed: RankSet,
    enabled: bool,
}

impl Bottom {
    /// A `bottom` for `view`.
    pub fn new(_config: &Config, _view: &ViewState, _rank: Rank) -> Bottom {
        Bottom { failed: RankSet::new(), enabled: true }
    }
}

impl Layer for Bottom {
    fn handle_up(&mut self, ev: Up, out: &mut Outbox<'_>) {
        match ev {
            Up::Cast { origin, .. } | Up::Send { origin, .. } if !self.enabled || self.failed.contains(origin) => {
                out.drop_input(
                    super::LayerKind::Bottom,
                    if self.enabled { DropReason::FromFailed } else { DropReason::Disabled },
                );
            }
            other => out.pass_up(super::LayerKind::Bottom, other, Header::NoHdr),
        }
    }

    fn handle_dn(&mut self, ev: Dn, out: &mut Outbox<'_>) {
        match ev {
            ev @ (Dn::Cast { .. } | Dn::Send { .. }) if self.enabled => out.pass_dn(ev, Header::NoHdr),
            // Gossip crosses partitions on the group's channel: no per-view header below.
            ev @ Dn::Gossip { .. } if self.enabled => out.dn(ev),
            Dn::Gossip { .. } => out.drop_input(super::LayerKind::Bottom, DropReason::Disabled),
            Dn::Cast { .. } | Dn::Send { .. } => out.drop_input(super::LayerKind::Bottom, DropReason::Disabled),
            Dn::Fail(ranks) => self.failed.union_with(&ranks),
            Dn::Leave => self.enabled = false,
            // The flush reached the bottom: everything above is drained. (`mnak`, if present,
            // adds its counts on the way up.)
            Dn::Block => out.up(Up::BlockOk(std::sync::Arc::from(Vec::new()))),
            // No `mnak` below would have answered: there is nothing to wait for.
            Dn::Cut(_) => out.up(Up::CutReached),
            // Nothing lies below: stability and membership requests end here.
            Dn::StableReq
            | Dn::AwaitView { .. }
            | Dn::Lagging(_)
            | Dn::Stable(_)
            | Dn::SyncFlush { .. }
            | Dn::SyncCut { .. }
            | Dn::MergeFlush
            | Dn::MergeRequest { .. }
            | Dn::MergeGrant { .. }
            | Dn::MergeForward { .. }
            | Dn::MergeDeny { .. }
            | Dn::CastFull { .. } => {}
        }
    }

    // Fast path: messages pass while enabled, from origins not failed.
    fn fast_dn(&self, down: &Down) -> Option<DnStep> {
        self.enabled.then(|| DnStep::pass(Header::NoHdr, down)).flatten()
    }

    fn fast_up(&self, up: &fast::Up<'_>) -> Option<UpStep> {
        let common = self.enabled && !self.failed.contains(up.origin) && fast::is(up.header, Header::NoHdr);
        common.then(|| UpStep::pass(up)).flatten()
    }

    fn fast_inert(&self, trace: fast::Trace) -> Option<usize> {
        // Going up, the per-message condition is only "the origin has not failed".
        (self.enabled && (trace.is_down() || self.failed.is_empty())).then_some(usize::MAX)
    }

    fn check_invariants(&self) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Msg, Qos};
    use crate::layer::harness::{Harness, Out};

    #[test]
    fn drops_messages_from_failed_members() {
        let view = crate::testing::view(3);
        let mut h = Harness::new(Bottom::new(&Config {}, &view, 0), 0);
        let msg = Msg::default().with(Header::NoHdr);
        let out = h.up(Up::Cast { origin: 2, msg: msg.clone(), qos: Qos::Unreliable });
        assert!(matches!(&out[..], [Out::Up(Up::Cast { origin: 2, .. })]));
        h.dn(Dn::Fail([2].into_iter().collect()));
        assert!(h.up(Up::Cast { origin: 2, msg: msg.clone(), qos: Qos::Unreliable }).is_empty());
        assert_eq!(h.stats.drops(DropReason::FromFailed), 1);
        // A header of another layer is a mismatch, not a panic.
        let foreign = Msg::default().with(motet_wire::hdr::local::Header::NoHdr);
        assert!(h.up(Up::Send { origin: 1, msg: foreign }).is_empty());
        assert_eq!(h.stats.drops(DropReason::HeaderMismatch), 1);
        // Both are `bottom`'s, and nothing is the node's.
        let by_layer: Vec<_> = h.stats.drops_by_layer().collect();
        assert_eq!(
            by_layer,
            [
                (Some(super::super::LayerKind::Bottom), DropReason::FromFailed, 1),
                (Some(super::super::LayerKind::Bottom), DropReason::HeaderMismatch, 1)
            ]
        );
    }
}
