//! `inter`: merging partitions (thesis Fig 2.3, Table 2.1 `MergeRequest`/`MergeGranted`/
//! `MergeDenied`/`MergeFailed`; Ensemble `inter` and `merge`).
//!
//! Provides: [`Service::Merging`]. Requires below: [`Service::Membership`]. Header: `Request`,
//! `Granted` (group gossip between coordinators) and `NoHdr`.
//!
//! The requester (the coordinator of the partition with the smaller view id, told by `heal`)
//! flushes its own partition (`intra` runs a round ending in `MergeReady`), then sends `Request`
//! with its view to the other coordinator, repeating every `retry_interval`. The granter flushes
//! its partition the same way, builds the merged view — its survivors then the requester's
//! members, id (max logical time + 1, granter), both previous ids, primary if the granter's was —
//! it to its members and sends `Granted` to the requester, who casts it to its own (the granter's
//! old stack, lingering, answers a repeated request with the same grant). Both
//! partitions were flushed, so each member ends its old view with virtual synchrony, and all
//! install the same view. A requester that hears nothing within `merge_timeout` installs a view of
//! its own partition instead (a failed merge), so its members are never blocked for long. A
//! coordinator busy with another view change answers `Denied`, and the requester ends its flush
//! at once the same way (the merge is retried at a later gossip).

use crate::event::{Dn, DropReason, Msg, Up};
use crate::layer::{Layer, LayerSpec, Outbox, Service};
use crate::time::{Duration, Instant};
use crate::view::{Address, EndpointId, ViewId, ViewState};
use crate::Rank;
use motet_wire::hdr::inter::Header;
use motet_wire::hdr::intra::FullView;
use motet_wire::Header as AnyHeader;
use std::sync::Arc;

/// `inter` parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// How often the requester repeats its request while waiting. Default 200 ms.
    pub retry_interval: Duration,
    /// How long the requester waits for the merged view before giving up. Default 3 s.
    pub merge_timeout: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config { retry_interval: Duration::from_millis(200), merge_timeout: Duration::from_millis(3_000) }
    }
}

/// Static description.
pub static SPEC: LayerSpec = LayerSpec {
    name: "inter",
    summary: "merges two flushed partitions into one view (request, grant, fail)",
    provides: &[Service::Merging],
    requires_below: &[Service::Membership],
    requires_above: &[],
};

/// What this coordinator is doing about a merge.
#[derive(Debug)]
enum Phase {
    Idle,
    /// We asked to merge into `contact`'s partition; `round` once our own flush is done.
    Requesting {
        contact: Address,
        round: Option<(u64, Vec<Rank>)>,
        deadline: Instant,
        /// The granter said no before our flush was done: end it at once when it is.
        denied: bool,
    },
    /// We are flushing to grant `request`.
    Granting {
        request: Box<FullView>,
    },
    /// The view is cast; this stack is about to be replaced. A granter keeps its grant to answer
    /// a repeated request (the requester may have missed it).
    Done {
        grant: Option<(Address, (u64, u64), Header)>,
    },
}

/// `inter` state.
#[derive(Debug)]
pub struct Inter {
    config: Config,
    view: Arc<ViewState>,
    rank: Rank,
    coord: Rank,
    phase: Phase,
}

impl Inter {
    /// An `inter` for `view`.
    pub fn new(config: &Config, view: &Arc<ViewState>, rank: Rank) -> Inter {
        Inter { config: config.clone(), view: Arc::clone(view), rank, coord: view.coord, phase: Phase::Idle }
    }

    /// Our partition after the merge flush: the survivors of the current view.
    fn partition(&self, survivors: &[Rank]) -> ViewState {
        let old = &self.view;
        ViewState {
            members: survivors.iter().map(|&r| old.members[usize::from(r)]).collect(),
            addresses: survivors.iter().map(|&r| old.addresses[usize::from(r)]).collect(),
            ..ViewState::clone(old)
        }
    }

    /// Our own next view when a merge fails: the survivors alone.
    fn alone(&self, survivors: &[Rank]) -> ViewState {
        let mut next = self.partition(survivors);
        let me = self.view.members[usize::from(self.rank)];
        next.view_id = ViewId { ltime: self.view.view_id.ltime + 1, coord: me };
        next.coord = next.members.iter().position(|&e| e == me).unwrap_or(0) as Rank;
        next.prev_ids = vec![self.view.view_id];
        next.primary = self.view.primary && 2 * next.members.len() > self.view.len();
        next
    }

    fn merged(&self, survivors: &[Rank], request: &FullView) -> ViewState {
        let ours = self.partition(survivors);
        let theirs = ours.with_full(request);
        let me = self.view.members[usize::from(self.rank)];
        let mut members = ours.members.clone();
        members.extend(theirs.members.iter().copied());
        let mut addresses = ours.addresses.clone();
        addresses.extend(theirs.addresses.iter().copied());
        ViewState {
            coord: ours.members.iter().position(|&e| e == me).unwrap_or(0) as Rank,
            view_id: ViewId { ltime: self.view.view_id.ltime.max(theirs.view_id.ltime) + 1, coord: me },
            members,
            addresses,
            // Only the granter's status carries over: the requester may never install this view.
            primary: self.view.primary,
            prev_ids: vec![self.view.view_id, theirs.view_id],
            ..ours
        }
    }

    fn send(&self, to: Address, header: Header, out: &mut Outbox<'_>) {
        out.dn(Dn::Gossip { to: Some(to), msg: Msg::default().with(header) });
    }

    fn on_ready(&mut self, round: u64, survivors: Vec<Rank>, out: &mut Outbox<'_>) {
        match std::mem::replace(&mut self.phase, Phase::Idle) {
            Phase::Requesting { round: None, denied: true, .. } => self.fail(round, &survivors, out),
            Phase::Requesting { contact, round: None, deadline, denied } => {
                let request = Header::Request { view: Box::new(self.partition(&survivors).to_full()) };
                self.send(contact, request, out);
                self.phase = Phase::Requesting { contact, round: Some((round, survivors)), deadline, denied };
                out.alarm(out.now() + self.config.retry_interval);
            }
            Phase::Granting { request } => {
                let merged = self.merged(&survivors, &request);
                let contact = request.addresses[request.members.iter().position(|&e| e == request.coord).unwrap_or(0)];
                let granted =
                    Header::Granted { request: (request.ltime, request.coord), view: Box::new(merged.to_full()) };
                self.send(contact.into(), granted.clone(), out);
                out.dn(Dn::CastFull { round, view: Arc::new(merged) });
                self.phase = Phase::Done { grant: Some((contact.into(), (request.ltime, request.coord), granted)) };
            }
            other => self.phase = other,
        }
    }
}

impl Inter {
    /// A failed or denied merge: end the flush with a view of our own partition.
    fn fail(&mut self, round: u64, survivors: &[Rank], out: &mut Outbox<'_>) {
        let alone = self.alone(survivors);
        out.dn(Dn::CastFull { round, view: Arc::new(alone) });
        self.phase = Phase::Done { grant: None };
    }
}

impl Layer for Inter {
    fn handle_up(&mut self, ev: Up, out: &mut Outbox<'_>) {
        match ev {
            Up::Elect(coord) => self.coord = coord,
            Up::MergeWith { contact, view } if matches!(self.phase, Phase::Idle) && self.coord == self.rank => {
                let _ = view;
                let deadline = out.now() + self.config.merge_timeout;
                self.phase = Phase::Requesting { contact, round: None, deadline, denied: false };
                out.alarm(deadline);
                out.dn(Dn::MergeFlush);
            }
            Up::MergeWith { .. } => {}
            Up::MergeReady { round, survivors } => self.on_ready(round, survivors, out),
            Up::Gossip(mut msg) if matches!(msg.hdrs.last(), Some(AnyHeader::Inter(h)) if *h != Header::NoHdr) => {
                match msg.pop_as::<Header>() {
                    Some(Header::Request { view: request }) => {
                        if let Phase::Done { grant: Some((contact, id, granted)) } = &self.phase {
                            if *id == (request.ltime, request.coord) {
                                self.send(*contact, granted.clone(), out);
                            }
                            return;
                        }
                        let theirs =
                            (request.primary, ViewId { ltime: request.ltime, coord: EndpointId(request.coord) });
                        let disjoint = request.members.iter().all(|&e| self.view.rank_of(EndpointId(e)).is_none());
                        let smaller = theirs < (self.view.primary, self.view.view_id);
                        if self.coord != self.rank || !disjoint || !smaller {
                            return; // not ours to answer (or already merged)
                        }
                        if matches!(self.phase, Phase::Idle) {
                            self.phase = Phase::Granting { request };
                            out.dn(Dn::MergeFlush);
                        } else {
                            let contact = request.addresses
                                [request.members.iter().position(|&e| e == request.coord).unwrap_or(0)];
                            self.send(contact.into(), Header::Denied { request: (request.ltime, request.coord) }, out);
                        }
                    }
                    Some(Header::Denied { request }) => {
                        if request != (self.view.view_id.ltime, self.view.view_id.coord.0) {
                            return;
                        }
                        match &mut self.phase {
                            Phase::Requesting { round: Some((round, survivors)), .. } => {
                                let (round, survivors) = (*round, survivors.clone());
                                self.fail(round, &survivors, out);
                            }
                            Phase::Requesting { denied, .. } => *denied = true,
                            _ => {}
                        }
                    }
                    Some(Header::Granted { request, view }) => {
                        let ours = (self.view.view_id.ltime, self.view.view_id.coord.0);
                        if let Phase::Requesting { round: Some((round, _)), .. } = &self.phase {
                            if request == ours {
                                let round = *round;
                                out.dn(Dn::CastFull { round, view: Arc::new(self.view.with_full(&view)) });
                                self.phase = Phase::Done { grant: None };
                            }
                        }
                    }
                    _ => out.drop_input(DropReason::HeaderMismatch),
                }
            }
            other => out.pass_up(other, Header::NoHdr),
        }
    }

    fn handle_dn(&mut self, ev: Dn, out: &mut Outbox<'_>) {
        out.pass_dn(ev, Header::NoHdr);
    }

    fn handle_timer(&mut self, out: &mut Outbox<'_>) {
        let now = out.now();
        if let Phase::Requesting { contact, round, deadline, .. } = &self.phase {
            let (contact, deadline) = (*contact, *deadline);
            match round {
                Some((round, survivors)) if now >= deadline => {
                    let (round, survivors) = (*round, survivors.clone());
                    self.fail(round, &survivors, out);
                }
                Some((_, survivors)) => {
                    let request = Header::Request { view: Box::new(self.partition(survivors).to_full()) };
                    self.send(contact, request, out);
                    out.alarm(now + self.config.retry_interval);
                }
                // Our own flush is still running (it ends in MergeReady, handled then).
                None => out.alarm(now + self.config.retry_interval),
            }
        }
    }

    fn check_invariants(&self) {
        assert!(usize::from(self.coord) < self.view.len());
    }
}
