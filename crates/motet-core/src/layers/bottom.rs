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
    /// A member's node shares this view's key with another view's stack: this view's traffic
    /// goes in the full form (`Stack::compress` asks), whose 64-bit id reaches its stack there.
    full: bool,
    /// When this member last asked for the full form (at most every [`FULL_ASK_EVERY`]).
    asked: Option<crate::time::Instant>,
}

/// How often a member whose node drops this view's compressed datagrams asks again for the full
/// form (the request is one unreliable cast: lost, the next drop after this asks again).
const FULL_ASK_EVERY: crate::time::Duration = crate::time::Duration::from_millis(10);

impl Bottom {
    /// A `bottom` for `view`.
    pub fn new(_config: &Config, _view: &ViewState, _rank: Rank) -> Bottom {
        Bottom { failed: RankSet::new(), enabled: true, full: false, asked: None }
    }

    /// Whether this view's datagrams go in the full form: a member asked (docs/bypass.md,
    /// "Connection ids").
    pub(crate) fn full_form(&self) -> bool {
        self.full
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
            // A member asks for the full form (its node shares this view's key).
            Up::Cast { msg, .. }
                if msg.hdrs.last().is_some_and(|h| matches!(*h, motet_wire::Header::Bottom(Header::Full))) =>
            {
                if !self.full {
                    tracing::info!("a member's node shares this view's connection key: sending in the full form");
                }
                self.full = true;
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
            // This node drops this view's compressed datagrams: ask every member for the full
            // form, and send in it too. At most every `FULL_ASK_EVERY`.
            Dn::KeyShared if self.enabled => {
                self.full = true;
                let now = out.now();
                if self.asked.is_none_or(|at| now >= at + FULL_ASK_EVERY) {
                    self.asked = Some(now);
                    let msg = crate::event::Msg::default().with(Header::Full);
                    out.dn(Dn::Cast { msg, qos: crate::event::Qos::Unreliable });
                }
            }
            Dn::KeyShared => {}
            // The flush reached the bottom: everything above is drained. (`mnak`, if present,
            // adds its counts on the way up.)
            Dn::Block => out.up(Up::BlockOk(std::sync::Arc::from(Vec::new()))),
            // No `mnak` below would have answered: there is nothing to wait for.
            Dn::Cut(_) => out.up(Up::CutReached),
            // Nothing lies below: stability and membership requests end here.
            Dn::StableReq
            | Dn::Replaced
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

    /// A node that shares the view's key has `bottom` ask every member for the full form, at
    /// most every `FULL_ASK_EVERY`; a member that hears it sends in the full form, and the
    /// request goes no higher.
    #[test]
    fn a_shared_key_asks_for_the_full_form_and_a_request_is_heard() {
        let view = crate::testing::view(3);
        let mut h = Harness::new(Bottom::new(&Config {}, &view, 0), 0);
        let asks = |out: &[Out]| {
            out.iter()
                .filter(|o| matches!(o, Out::Dn(Dn::Cast { msg, .. }) if msg.hdrs.last().is_some_and(|h| matches!(*h, motet_wire::Header::Bottom(Header::Full)))))
                .count()
        };
        assert_eq!(asks(&h.dn(Dn::KeyShared)), 1);
        assert!(h.layer.full_form());
        assert_eq!(asks(&h.dn(Dn::KeyShared)), 0, "not again within FULL_ASK_EVERY");
        h.now = h.now + FULL_ASK_EVERY;
        assert_eq!(asks(&h.dn(Dn::KeyShared)), 1);
        let mut other = Harness::new(Bottom::new(&Config {}, &view, 1), 1);
        assert!(!other.layer.full_form());
        let out = other.up(Up::Cast { origin: 0, msg: Msg::default().with(Header::Full), qos: Qos::Unreliable });
        assert!(out.is_empty(), "{out:?}");
        assert!(other.layer.full_form());
    }

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
