//! `inter`: merging partitions into one view (thesis Fig 2.3, Table 2.1; Ensemble `inter`).
//!
//! Provides: [`Service::Merging`]. Requires below: [`Service::Membership`] and
//! [`Service::MergeProtocol`] (`merge` carries the request and its answer). Header: `NoHdr`.
//!
//! The requester (the coordinator of the partition with the smaller view id, told by `heal`)
//! flushes its own partition (`intra` runs a round ending in `MergeReady`), then has `merge` send
//! its view to the other coordinator. The granter flushes its partition the same way and builds
//! the merged view — its survivors then the requester's members, id (max logical time + 1,
//! granter), both previous ids — casts it to its members and has `merge` send it to the requester,
//! who casts it to its own. Both partitions were flushed, so each member ends its old view with
//! virtual synchrony, and all install the same view. A refused or unanswered request ends the
//! requester's flush with a view of its own partition, so its members are never blocked for long;
//! the merge is retried at a later gossip. A coordinator busy with another view change refuses.
//! Whether a view is primary is decided by `primary`, not here: views leave this layer non-primary.

use crate::event::{Dn, Up};
use crate::layer::{Layer, LayerSpec, Outbox, Service};
use crate::time::Instant;
use crate::view::{Address, EndpointId, ViewId, ViewState};
use crate::Rank;
use motet_wire::hdr::inter::Header;
use motet_wire::hdr::intra::{FullView, LTIME_MAX};
use std::sync::Arc;

/// `inter`'s parameters (the merge protocol's timeouts are `merge`'s).
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// The most members a merged view may have: a request that would make the view larger is
    /// refused, and a grant of a larger view is not taken. Every member keeps state that grows
    /// with the view (`causal`'s and `safe`'s grow with its square), and nothing authenticates
    /// a request yet, so one forged request of thousands of members would otherwise make every
    /// member build a stack for them (a review's finding). At most `RANKS_MAX`.
    pub members_max: usize,
}

impl Default for Config {
    fn default() -> Config {
        Config { members_max: MEMBERS_MAX_DEFAULT }
    }
}

/// [`Config::members_max`] by default.
pub const MEMBERS_MAX_DEFAULT: usize = 1024;

/// Static description.
pub static SPEC: LayerSpec = LayerSpec {
    name: "inter",
    summary: "merges two flushed partitions into one view (decides requests and grants)",
    provides: &[Service::Merging],
    requires_below: &[Service::Membership, Service::MergeProtocol],
    requires_above: &[],
    above_every: &[],
    below_every: &[],
};

/// What this coordinator is doing about a merge.
#[derive(Debug, PartialEq)]
enum Phase {
    Idle,
    /// We asked to merge into `contact`'s partition; `round` once our own flush is done and the
    /// request is sent. `since`: when the merge flush began, from which `merge_timeout` counts.
    Requesting {
        contact: Address,
        since: Instant,
        round: Option<(u64, Vec<Rank>)>,
    },
    /// We are flushing to grant `request`.
    Granting {
        request: Box<FullView>,
    },
    /// The view is cast; this stack is about to be replaced.
    Done,
}

/// `inter` state.
#[derive(Debug, PartialEq)]
pub struct Inter {
    view: Arc<ViewState>,
    members_max: usize,
    rank: Rank,
    coord: Rank,
    phase: Phase,
}

/// A request's name: the requester's view id as (ltime, coordinator).
fn request_id(request: &FullView) -> (u64, u64) {
    (request.ltime, request.coord)
}

/// Bytes of a view's datagram besides the view itself (the datagram's head and the layers'
/// other headers, well under this), counted when a merged view's size is checked.
const VIEW_HEADROOM: usize = 512;

/// The requester's coordinator's address.
fn contact_of(request: &FullView) -> Address {
    request.addresses[request.members.iter().position(|&e| e == request.coord).unwrap_or(0)].into()
}

impl Inter {
    /// An `inter` for `view`.
    pub fn new(config: &Config, view: &Arc<ViewState>, rank: Rank) -> Inter {
        Inter { view: Arc::clone(view), members_max: config.members_max, rank, coord: view.coord, phase: Phase::Idle }
    }

    /// Why a granted view is not to be taken, if it is not: it must keep every member of our
    /// partition, stay within `members_max`, and run a stack that keeps what ours has of
    /// membership, merging and `Primary` (the rule a switch is held to). A correct granter's
    /// always does; without authentication a forged one could otherwise have this partition
    /// install a view of any size, or without membership for good.
    fn refusal(&self, survivors: &[Rank], view: &FullView) -> Option<String> {
        if view.members.len() > self.members_max {
            return Some(format!("{} members, more than inter.members_max ({})", view.members.len(), self.members_max));
        }
        if let Some(&r) = survivors.iter().find(|&&r| !view.members.contains(&self.view.members[usize::from(r)].0)) {
            return Some(format!("it leaves out rank {r} of this partition"));
        }
        match crate::StackSpec::parse(&view.stack) {
            Ok(stack) => super::switch::keeps(&self.view.stack, &stack).err().map(|e| e.to_string()),
            Err(_) => None, // another build's: `with_full` keeps ours
        }
    }

    /// Our partition after the merge flush: the survivors of the current view.
    fn partition(&self, survivors: &[Rank]) -> ViewState {
        let old = &self.view;
        ViewState {
            members: survivors.iter().map(|&r| old.members[usize::from(r)]).collect(),
            addresses: survivors.iter().map(|&r| old.addresses[usize::from(r)]).collect(),
            clients: survivors.iter().map(|&r| old.is_client(r)).collect(),
            ..ViewState::clone(old)
        }
    }

    /// Our own next view when a merge is refused or fails: the survivors alone.
    fn alone(&self, survivors: &[Rank]) -> ViewState {
        let mut next = self.partition(survivors);
        let me = self.view.members[usize::from(self.rank)];
        next.view_id = ViewId { ltime: self.view.view_id.ltime + 1, coord: me };
        next.coord = next.members.iter().position(|&e| e == me).unwrap_or(0) as Rank;
        next.prev_ids = vec![self.view.view_id];
        next.primary = false;
        next
    }

    /// The merged view, built by the granter: its survivors, then the requester's members. The
    /// granter's id comes first among the previous ids (`primary` relies on it).
    fn merged(&self, survivors: &[Rank], request: &FullView) -> ViewState {
        let ours = self.partition(survivors);
        let theirs = ours.with_full(request);
        let me = self.view.members[usize::from(self.rank)];
        let mut members = ours.members.clone();
        members.extend(theirs.members.iter().copied());
        let mut addresses = ours.addresses.clone();
        addresses.extend(theirs.addresses.iter().copied());
        let mut clients = ours.clients.clone();
        clients.extend(theirs.clients.iter().copied());
        ViewState {
            coord: ours.members.iter().position(|&e| e == me).unwrap_or(0) as Rank,
            view_id: ViewId { ltime: self.view.view_id.ltime.max(theirs.view_id.ltime) + 1, coord: me },
            members,
            addresses,
            clients,
            primary: false,
            prev_ids: vec![self.view.view_id, theirs.view_id],
            xfer_view: ours.stack.layers().contains(&super::LayerKind::Xfer),
            ..ours
        }
    }

    fn on_ready(&mut self, round: u64, survivors: Vec<Rank>, out: &mut Outbox<'_>) {
        match std::mem::replace(&mut self.phase, Phase::Idle) {
            Phase::Requesting { contact, since, round: None } => {
                out.dn(Dn::MergeRequest { contact, view: Box::new(self.partition(&survivors).to_full()), since });
                self.phase = Phase::Requesting { contact, since, round: Some((round, survivors)) };
            }
            Phase::Granting { request } => {
                let merged = Arc::new(self.merged(&survivors, &request));
                tracing::info!(members = merged.members.len(), "merge granted: casting the merged view");
                // Both copies pass `primary` (below), which marks them alike.
                out.dn(Dn::CastFull { round, view: Arc::clone(&merged) });
                let grant = Dn::MergeGrant {
                    contact: contact_of(&request),
                    request: request_id(&request),
                    view: Box::new(merged.to_full()),
                };
                out.dn(grant);
                self.phase = Phase::Done;
            }
            other => self.phase = other,
        }
    }

    /// A refused or failed merge: end the flush with a view of our own partition.
    fn fail(&mut self, out: &mut Outbox<'_>) {
        if let Phase::Requesting { round: Some((round, survivors)), .. } = &self.phase {
            tracing::info!("merge refused or unanswered: going on as this partition (a later gossip retries)");
            let alone = self.alone(survivors);
            out.dn(Dn::CastFull { round: *round, view: Arc::new(alone) });
            self.phase = Phase::Done;
        }
    }
}

impl Layer for Inter {
    fn handle_up(&mut self, ev: Up, out: &mut Outbox<'_>) {
        match ev {
            Up::Elect(coord) => self.coord = coord,
            Up::MergeWith { contact, .. } if matches!(self.phase, Phase::Idle) && self.coord == self.rank => {
                tracing::info!(?contact, "another partition found: flushing to merge with it");
                self.phase = Phase::Requesting { contact, since: out.now(), round: None };
                out.dn(Dn::MergeFlush);
            }
            Up::MergeWith { .. } => {}
            Up::MergeReady { round, survivors } => self.on_ready(round, survivors, out),
            Up::MergeRequest(request) => {
                let theirs = (request.primary, ViewId { ltime: request.ltime, coord: EndpointId(request.coord) });
                let disjoint = request.members.iter().all(|&e| self.view.rank_of(EndpointId(e)).is_none());
                let smaller = theirs < (self.view.primary, self.view.view_id);
                if !disjoint || !smaller {
                    return; // not ours to answer (or already merged)
                }
                if self.coord != self.rank {
                    // The requester learnt our address when we coordinated a partition that has
                    // merged into this one since: pass it on to our coordinator, whose answer goes
                    // to the requester directly. A stack being replaced leaves it to the next.
                    if !matches!(self.phase, Phase::Done) {
                        tracing::debug!(
                            requester = request.coord,
                            coord = self.coord,
                            "merge request passed on to the coordinator"
                        );
                        let to = self.view.addresses[usize::from(self.coord)];
                        out.dn(Dn::MergeForward { to, view: request });
                    }
                    return;
                }
                // A view's member lists travel in one vector each, at most `RANKS_MAX` long: a
                // merged view past it could never be cast (nor decoded), and n-by-n state
                // (`causal`, `safe`) grows with its square. The smaller partition stays apart.
                // And the merged view is cast whole, in one datagram: a view of about 2,000
                // members with IPv6 addresses and 64-bit ids is past `DATAGRAM_SIZE_MAX` though
                // within `RANKS_MAX` (or a forged request can make it so). Granted, it was
                // dropped as oversized at every transmission, and every member but the granter
                // went on alone at the end of its wait.
                //
                // The merged view's logical time is one past the larger of the two, and a view
                // past `LTIME_MAX` does not decode: granted, one request at `LTIME_MAX` (a forged
                // one) gave the granter a view its members could not receive, and every later
                // view of its lineage could not be sent to another partition, for good. The
                // merged view must leave room for one view after it (the exclusion of a forged
                // request's members) that still decodes.
                let merged = self.view.len() + request.members.len();
                let bytes = self.view.to_full().encoded_len() + request.encoded_len() + VIEW_HEADROOM;
                let ltime = self.view.view_id.ltime.max(request.ltime);
                // The requester takes the merged view only within its own `members_max` and with
                // a stack that keeps what its own has (`refusal`): a grant it would refuse is
                // not made (a review's finding: a requester with a lower limit was granted, its
                // members never installed the view, and the granter's partition excluded them
                // and merged again, for ever).
                let their_max =
                    crate::layers::StackConfig::from_wire(&request.params).map_or(usize::MAX, |p| p.inter.members_max);
                let max = self.members_max.min(their_max).min(motet_wire::RANKS_MAX);
                let kept = crate::StackSpec::parse(&request.stack)
                    .map_or(Ok(()), |stack| super::switch::keeps(&stack, &self.view.stack));
                let why = if merged > max {
                    Some(format!(
                        "{merged} members, more than inter.members_max ({max}, the smaller of both partitions')"
                    ))
                } else if bytes > motet_wire::DATAGRAM_SIZE_MAX {
                    Some(format!("{bytes} bytes, more than one datagram ({})", motet_wire::DATAGRAM_SIZE_MAX))
                } else if ltime + 2 > LTIME_MAX {
                    Some("a logical time past the largest a view may have".to_string())
                } else {
                    kept.err().map(|e| format!("the requester could not take our stack: {e}"))
                };
                if let Some(why) = why.filter(|_| matches!(self.phase, Phase::Idle)) {
                    tracing::warn!(requester = request.coord, %why, "merge request refused");
                    out.dn(Dn::MergeDeny { contact: contact_of(&request), request: request_id(&request) });
                    return;
                }
                match &self.phase {
                    Phase::Idle => {
                        tracing::info!(
                            requester = request.coord,
                            members = request.members.len(),
                            "a smaller partition asks to merge: flushing to grant"
                        );
                        self.phase = Phase::Granting { request };
                        out.dn(Dn::MergeFlush);
                    }
                    Phase::Granting { request: granting } if request_id(granting) == request_id(&request) => {}
                    // This stack is being replaced (it lingers only to finish retransmissions):
                    // the next view's stack answers.
                    Phase::Done => {}
                    _ => {
                        tracing::debug!(
                            requester = request.coord,
                            "merge request refused: another view change is running"
                        );
                        out.dn(Dn::MergeDeny { contact: contact_of(&request), request: request_id(&request) });
                    }
                }
            }
            Up::MergeGranted(view) => {
                if let Phase::Requesting { round: Some((round, survivors)), .. } = &self.phase {
                    if let Some(why) = self.refusal(survivors, &view) {
                        tracing::warn!(granter = view.coord, %why, "a granted view is not taken: going on as this partition");
                        return self.fail(out);
                    }
                    tracing::info!(members = view.members.len(), "merge granted: installing the merged view");
                    out.dn(Dn::CastFull { round: *round, view: Arc::new(self.view.with_full(&view)) });
                    self.phase = Phase::Done;
                }
            }
            Up::MergeDenied | Up::MergeFailed => self.fail(out),
            // Whatever view replaces this stack (a merge's, or `intra`'s after a failure or a
            // leave), it lingers only to finish retransmissions: requests are the next view's to
            // answer or pass on.
            Up::NewView(view) => {
                self.phase = Phase::Done;
                out.up(Up::NewView(view));
            }
            other => out.pass_up(super::LayerKind::Inter, other, Header::NoHdr),
        }
    }

    fn handle_dn(&mut self, ev: Dn, out: &mut Outbox<'_>) {
        out.pass_dn(ev, Header::NoHdr);
    }

    fn check_invariants(&self) {
        assert!(usize::from(self.coord) < self.view.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::harness::{Harness, Out};

    /// A `vsync` view of three members at logical time 5, from rank `rank`'s side.
    fn inter(rank: Rank) -> Harness<Inter> {
        inter_of(rank, MEMBERS_MAX_DEFAULT)
    }

    /// Likewise, with `members_max`.
    fn inter_of(rank: Rank, members_max: usize) -> Harness<Inter> {
        let view = crate::testing::view_of("vsync", 3);
        let view =
            Arc::new(ViewState { view_id: ViewId { ltime: 5, coord: EndpointId(0) }, ..ViewState::clone(&view) });
        Harness::new(Inter::new(&Config { members_max }, &view, rank), rank)
    }

    /// A request whose partition runs with `members_max`.
    fn allowing(mut request: Box<FullView>, members_max: usize) -> Box<FullView> {
        request.params = crate::layers::StackConfig { inter: Config { members_max }, ..Default::default() }.to_wire();
        request
    }

    /// A request from a one-member partition at logical time 0 (smaller than ours).
    fn request() -> Box<FullView> {
        let mut full = crate::testing::view(1).to_full();
        full.members = vec![100];
        full.coord = 100;
        full.primary = false;
        Box::new(full)
    }

    #[test]
    fn a_member_that_is_not_the_coordinator_passes_a_request_on_and_a_replaced_one_does_not() {
        let mut h = inter(1);
        let out = h.up(Up::MergeRequest(request()));
        assert!(
            matches!(&out[..], [Out::Dn(Dn::MergeForward { to: Address::Sim(0), view })] if view.coord == 100),
            "{out:?}"
        );
        // The coordinator flushes to grant it instead.
        let out = inter(0).up(Up::MergeRequest(request()));
        assert!(matches!(&out[..], [Out::Dn(Dn::MergeFlush)]), "{out:?}");
        // Once a view replaces the stack, requests are the next view's.
        let next = Arc::new(ViewState::clone(&crate::testing::view(3)));
        h.up(Up::NewView(next));
        assert!(h.up(Up::MergeRequest(request())).is_empty());
        let mut coordinator = inter(0);
        coordinator.up(Up::NewView(crate::testing::view(3)));
        assert!(coordinator.up(Up::MergeRequest(request())).is_empty());
    }

    /// A merge whose view's logical time would pass `LTIME_MAX` is refused: that view could not be
    /// decoded by its members, nor any later view of its lineage by another partition.
    #[test]
    fn a_merge_past_the_largest_logical_time_is_refused() {
        let mut late = request();
        late.ltime = LTIME_MAX - 2;
        let out = inter(0).up(Up::MergeRequest(late.clone()));
        assert!(matches!(&out[..], [Out::Dn(Dn::MergeFlush)]), "the merged view and the next decode: {out:?}");
        late.ltime = LTIME_MAX - 1;
        let out = inter(0).up(Up::MergeRequest(late));
        assert!(matches!(&out[..], [Out::Dn(Dn::MergeDeny { .. })]), "{out:?}");
    }

    /// A merge whose view would pass `RANKS_MAX` members is refused: it could never be cast.
    #[test]
    fn a_merge_past_the_largest_view_is_refused() {
        let mut big = allowing(request(), motet_wire::RANKS_MAX);
        big.members = (100..100 + motet_wire::RANKS_MAX as u64 - 3).collect();
        big.coord = 100;
        let out = inter_of(0, motet_wire::RANKS_MAX).up(Up::MergeRequest(big.clone()));
        assert!(matches!(&out[..], [Out::Dn(Dn::MergeFlush)]), "3 + 4,093 fits: {out:?}");
        big.members.push(99);
        let out = inter_of(0, motet_wire::RANKS_MAX).up(Up::MergeRequest(big));
        assert!(matches!(&out[..], [Out::Dn(Dn::MergeDeny { .. })]), "3 + 4,094 does not: {out:?}");
    }

    /// A merge whose view would not fit in a datagram is refused, though it has fewer than
    /// `RANKS_MAX` members: 2,300 members with 64-bit ids and IPv6 addresses take about 67 KB.
    #[test]
    fn a_merge_whose_view_would_not_fit_in_a_datagram_is_refused() {
        let v6 = |i: u64| {
            let mut ip = [0xfd; 16];
            ip[14..].copy_from_slice(&(i as u16).to_be_bytes());
            motet_wire::codec::WireAddress::V6(ip, 7000)
        };
        let mut big = allowing(request(), motet_wire::RANKS_MAX);
        let ids: Vec<u64> = (0..2_300u64).map(|i| u64::MAX / 2 + i * 7_919).collect();
        (big.members, big.addresses) = (ids.clone(), ids.iter().map(|&i| v6(i)).collect());
        big.coord = ids[0];
        assert!(big.encoded_len() > motet_wire::DATAGRAM_SIZE_MAX && big.members.len() < motet_wire::RANKS_MAX);
        let out = inter_of(0, motet_wire::RANKS_MAX).up(Up::MergeRequest(big.clone()));
        assert!(matches!(&out[..], [Out::Dn(Dn::MergeDeny { .. })]), "{out:?}");
        // The same request from half as many members fits.
        big.members.truncate(1_150);
        big.addresses.truncate(1_150);
        let out = inter_of(0, motet_wire::RANKS_MAX).up(Up::MergeRequest(big));
        assert!(matches!(&out[..], [Out::Dn(Dn::MergeFlush)]), "{out:?}");
    }

    /// A merge past `members_max` is refused: one request (nothing authenticates it yet) made
    /// every member build a stack for thousands of members, whose `causal` and `safe` state
    /// grows with the square (a review's finding).
    #[test]
    fn a_merge_past_members_max_is_refused() {
        let mut big = request();
        big.members = (100..100 + MEMBERS_MAX_DEFAULT as u64 - 3).collect();
        let out = inter(0).up(Up::MergeRequest(big.clone()));
        assert!(matches!(&out[..], [Out::Dn(Dn::MergeFlush)]), "3 + 1,021 fits: {out:?}");
        big.members.push(99);
        let out = inter(0).up(Up::MergeRequest(big));
        assert!(matches!(&out[..], [Out::Dn(Dn::MergeDeny { .. })]), "3 + 1,022 does not: {out:?}");
    }

    /// The granter refuses what the requester would not take: a merged view past the requester's
    /// own `members_max` (carried in its request's parameters), or a stack that lacks what the
    /// requester's has. Before, it granted and cast the view, the requester's members never
    /// installed it, and the two partitions excluded and merged each other again, for ever.
    #[test]
    fn a_granter_refuses_what_the_requester_would_not_take() {
        let denied = |request: Box<FullView>| {
            let out = inter(0).up(Up::MergeRequest(request));
            match &out[..] {
                [Out::Dn(Dn::MergeDeny { .. })] => true,
                [Out::Dn(Dn::MergeFlush)] => false,
                other => panic!("{other:?}"),
            }
        };
        assert!(!denied(request()), "3 + 1 within both limits");
        assert!(denied(allowing(request(), 3)), "3 + 1 past the requester's limit of 3");
        let mut primary = request();
        primary.stack = "vsync+Primary".into();
        assert!(denied(primary), "our stack has no Primary, the requester's has");
    }

    /// A requester takes a granted view only if it keeps this partition's members, stays within
    /// `members_max` and keeps membership, merging and `Primary` as they are; else its members go
    /// on as their own partition, as after a refusal.
    #[test]
    fn a_granted_view_that_no_correct_granter_sends_is_not_taken() {
        let requesting = || {
            let mut h = inter(0);
            h.up(Up::MergeWith { contact: Address::Sim(9), view: ViewId { ltime: 9, coord: EndpointId(900) } });
            let out = h.up(Up::MergeReady { round: 1, survivors: vec![0, 1, 2] });
            assert!(matches!(&out[..], [Out::Dn(Dn::MergeRequest { .. })]), "{out:?}");
            h
        };
        let taken = |h: &mut Harness<Inter>, view: FullView| {
            let out = h.up(Up::MergeGranted(Box::new(view)));
            match &out[..] {
                // Else the partition's own view, by its own coordinator.
                [Out::Dn(Dn::CastFull { view, .. })] => view.view_id.coord == EndpointId(900),
                other => panic!("{other:?}"),
            }
        };
        let ours = requesting().layer.view.to_full();
        let mut granted = crate::testing::view(1).to_full();
        granted.stack.clone_from(&ours.stack);
        (granted.members, granted.coord, granted.ltime) = (vec![900], 900, 9);
        granted.members.extend(&ours.members);
        granted.addresses.extend(&ours.addresses);
        assert!(taken(&mut requesting(), granted.clone()), "a genuine grant is taken");

        let mut without_one = granted.clone();
        without_one.members.pop();
        without_one.addresses.pop();
        assert!(!taken(&mut requesting(), without_one), "it leaves out a member");
        let mut huge = granted.clone();
        huge.members.extend(1_000..1_000 + MEMBERS_MAX_DEFAULT as u64);
        huge.addresses.extend(std::iter::repeat_n(granted.addresses[0], MEMBERS_MAX_DEFAULT));
        assert!(!taken(&mut requesting(), huge), "past members_max");
        let mut no_membership = granted;
        no_membership.stack = "Frag+Flow+Local".into();
        assert!(!taken(&mut requesting(), no_membership), "a stack without membership");
    }
}
