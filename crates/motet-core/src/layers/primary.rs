//! `primary`: primary-partition views (thesis Fig 2.3 and Appendix A.2 `Primary`; Ensemble
//! `primary`; digest §8.D item 45).
//!
//! Provides: [`Service::PrimaryPartition`]. Requires below: [`Service::Membership`]. Header:
//! `NoHdr`.
//!
//! A view is primary when it descends from a primary view and holds a majority of it: every
//! member computes this for a view of its own partition (one previous id: ours) as it comes up
//! from `intra`, and the granter of a merge computes it for the merged view — from its own
//! survivors only — as the view goes down to be cast and sent (the requester takes the flag from
//! the view it receives). Any other view is not primary.
//!
//! Why this is safe (the simulator's `Primary` oracle checks that all primary views form one
//! chain of descent): two views that each hold a majority of the same primary view share a
//! member, and a member installs at most one next view of a view — `sync` commits it to one
//! round's cut, and one that misses its view goes on alone, not primary. Members that might not
//! install a view never count: a merge counts only the granter's side, which installs the view by
//! its own cast, not the requester's, which needs the grant to arrive.
//!
//! What this gives up: a group that loses its primary partition (an even split, or a majority
//! crashed) does not regain one by merging; counting the requester's side safely needs a commit
//! round across both partitions (dynamic voting with ambiguous sessions, Yeger Lotem, Keidar and
//! Dolev 1997), which this layer does not have yet. Without this layer no view after the first is
//! primary.

use crate::event::{Dn, Up};
use crate::layer::{Layer, LayerSpec, Outbox, Service};
use crate::view::{EndpointId, ViewState};
use crate::Rank;
use motet_wire::hdr::primary::Header;
use std::sync::Arc;

/// `primary` has no parameters.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {}

/// Static description.
pub static SPEC: LayerSpec = LayerSpec {
    name: "primary",
    summary: "marks a view primary when it holds a majority of the primary view it follows",
    provides: &[Service::PrimaryPartition],
    requires_below: &[Service::Membership],
    requires_above: &[],
    above_every: &[],
    below_every: &[],
};

/// `primary` state.
#[derive(Debug, PartialEq)]
pub struct Primary {
    view: Arc<ViewState>,
}

impl Primary {
    /// A `primary` for `view`.
    pub fn new(_config: &Config, view: &Arc<ViewState>, _rank: Rank) -> Primary {
        Primary { view: Arc::clone(view) }
    }

    /// Whether a next view whose members from our view are `ours` is primary.
    fn majority(&self, ours: impl Iterator<Item = EndpointId>) -> bool {
        let kept = ours.filter(|&e| self.view.rank_of(e).is_some()).count();
        self.view.primary && 2 * kept > self.view.len()
    }

    /// `view` with its primary flag decided, if it is ours to decide: a view of our partition
    /// alone, or a merged view we grant (our id first among its previous ids).
    fn mark(&self, view: Arc<ViewState>, granting: bool) -> Arc<ViewState> {
        let decide = if granting {
            view.prev_ids.len() == 2 && view.prev_ids[0] == self.view.view_id
        } else {
            view.prev_ids[..] == [self.view.view_id]
        };
        if !decide {
            return view;
        }
        let primary = self.majority(view.members.iter().copied());
        tracing::info!(primary, members = view.members.len(), "primary partition decided");
        if view.primary == primary {
            return view;
        }
        Arc::new(ViewState { primary, ..ViewState::clone(&view) })
    }
}

impl Layer for Primary {
    fn handle_up(&mut self, ev: Up, out: &mut Outbox<'_>) {
        match ev {
            Up::NewView(view) => out.up(Up::NewView(self.mark(view, false))),
            other => out.pass_up(super::LayerKind::Primary, other, Header::NoHdr),
        }
    }

    fn handle_dn(&mut self, ev: Dn, out: &mut Outbox<'_>) {
        match ev {
            Dn::CastFull { round, view } => out.dn(Dn::CastFull { round, view: self.mark(view, true) }),
            Dn::MergeGrant { contact, request, mut view } => {
                let ours = (self.view.view_id.ltime, self.view.view_id.coord.0);
                if view.prev.len() == 2 && view.prev[0] == ours {
                    view.primary = self.majority(view.members.iter().map(|&e| EndpointId(e)));
                }
                out.dn(Dn::MergeGrant { contact, request, view });
            }
            other => out.pass_dn(other, Header::NoHdr),
        }
    }

    fn check_invariants(&self) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::harness::{Harness, Out};
    use crate::view::{ViewId, ViewState};

    /// A primary view of five members, and a next view of the given ranks of it.
    fn five() -> Arc<ViewState> {
        crate::testing::view(5)
    }

    fn next(old: &ViewState, ranks: &[usize], prev: Vec<ViewId>) -> Arc<ViewState> {
        Arc::new(ViewState {
            members: ranks.iter().map(|&r| old.members[r]).collect(),
            addresses: ranks.iter().map(|&r| old.addresses[r]).collect(),
            view_id: ViewId { ltime: old.view_id.ltime + 1, coord: old.members[ranks[0]] },
            coord: 0,
            prev_ids: prev,
            primary: false,
            ..old.clone()
        })
    }

    fn up_primary(h: &mut Harness<Primary>, view: Arc<ViewState>) -> bool {
        match &h.up(Up::NewView(view))[..] {
            [Out::Up(Up::NewView(v))] => v.primary,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_majority_of_a_primary_view_is_primary_and_a_minority_is_not() {
        let old = five();
        assert!(old.primary);
        let mut h = Harness::new(Primary::new(&Config {}, &old, 0), 0);
        assert!(up_primary(&mut h, next(&old, &[0, 1, 2], vec![old.view_id])));
        assert!(!up_primary(&mut h, next(&old, &[0, 1], vec![old.view_id])));
    }

    #[test]
    fn nothing_follows_a_non_primary_view_as_primary() {
        let old = Arc::new(ViewState { primary: false, ..ViewState::clone(&five()) });
        let mut h = Harness::new(Primary::new(&Config {}, &old, 0), 0);
        assert!(!up_primary(&mut h, next(&old, &[0, 1, 2, 3, 4], vec![old.view_id])));
    }

    #[test]
    fn a_merged_view_counts_only_the_granters_survivors() {
        let old = five();
        let other = ViewId { ltime: 9, coord: EndpointId(99) };
        let mut h = Harness::new(Primary::new(&Config {}, &old, 0), 0);
        // Two of our five survived the merge flush: with any number of requesters, not primary.
        let mut merged = ViewState::clone(&next(&old, &[0, 1], vec![old.view_id, other]));
        merged.members.extend([EndpointId(100), EndpointId(101), EndpointId(102)]);
        merged.addresses.extend(merged.addresses.clone().into_iter().take(3));
        merged.primary = true;
        let out = h.dn(Dn::CastFull { round: 1, view: Arc::new(merged.clone()) });
        assert!(matches!(&out[..], [Out::Dn(Dn::CastFull { view, .. })] if !view.primary), "{out:?}");
        let out =
            h.dn(Dn::MergeGrant { contact: old.addresses[0], request: (9, 99), view: Box::new(merged.to_full()) });
        assert!(matches!(&out[..], [Out::Dn(Dn::MergeGrant { view, .. })] if !view.primary), "{out:?}");
        // Three survived: primary.
        let merged = next(&old, &[0, 1, 2], vec![old.view_id, other]);
        let out = h.dn(Dn::CastFull { round: 1, view: merged });
        assert!(matches!(&out[..], [Out::Dn(Dn::CastFull { view, .. })] if view.primary), "{out:?}");
        // A merged view granted by the other side keeps the granter's flag, whatever we hold.
        let theirs =
            Arc::new(ViewState { primary: true, ..ViewState::clone(&next(&old, &[0], vec![other, old.view_id])) });
        assert!(up_primary(&mut h, Arc::clone(&theirs)));
        let out = h.dn(Dn::CastFull { round: 1, view: theirs });
        assert!(matches!(&out[..], [Out::Dn(Dn::CastFull { view, .. })] if view.primary), "{out:?}");
    }
}
