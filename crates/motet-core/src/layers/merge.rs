//! `merge`: the reliable merge protocol between two partitions' coordinators (thesis Fig 2.3,
//! Table 2.1 `MergeRequest`/`MergeGranted`/`MergeDenied`/`MergeFailed`; Ensemble `merge`).
//!
//! Provides: [`Service::MergeProtocol`]. Requires: nothing (it talks on the group's gossip
//! channel). Header: `Request`, `Granted`, `Denied` (gossip between coordinators) and `NoHdr`.
//!
//! Gossip is unreliable, so this layer makes a merge request reliable the way Ensemble's does:
//! the requester repeats `Request` every `retry_interval` until the granter answers `Granted`, and
//! gives up `merge_timeout` after its merge flush began (`MergeFailed`), so a requester is never
//! blocked for long, and not for longer than its members wait for the round's view.
//! `Denied` ("busy with another view change") does not end the request: a repeat that reached the
//! granter before the denial may still be granted once it is free, and a requester that had given
//! up would then be counted in a view it never installs (found by the simulator with state
//! transfer, whose extra view changes make granters busy often: a livelock of merge, exclusion,
//! merge). The requester keeps asking until granted or timed out. `Denied` also answers a request
//! `inter` will never grant (a merged view too large, past either partition's `members_max`, or
//! onto a stack the requester could not take): the requester then goes on asking until
//! `merge_timeout` too, and tries again at a later gossip (docs/membership.md). `heal` keeps
//! partitions too large to merge from asking at all (their hellos carry their sizes). A granter keeps the grant it sent and answers a repeated request with it (the first
//! `Granted` may have been lost), without bothering `inter` again. What to request, and whether to
//! grant, is `inter`'s decision; this layer only carries it.

use crate::event::{Dn, DropReason, Msg, Up};
use crate::layer::{Layer, LayerSpec, Outbox, Service};
use crate::time::{Duration, Instant};
use crate::view::{Address, ViewState};
use crate::Rank;
use motet_wire::hdr::merge::Header;
use motet_wire::Header as AnyHeader;

/// `merge` parameters.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// How often the requester repeats its request while waiting. Default 200 ms.
    #[serde(
        rename = "retry_interval_ms",
        deserialize_with = "crate::time::millis",
        serialize_with = "crate::time::ser_millis"
    )]
    pub retry_interval: Duration,
    /// How long a requester's merge round may take, from the start of its flush to an answer,
    /// before it gives up and goes on as its partition (`MergeFailed`). Default 3 s. Keep it
    /// well under `intra.commit_timeout`, which its members wait for the round's view.
    #[serde(
        rename = "merge_timeout_ms",
        deserialize_with = "crate::time::millis",
        serialize_with = "crate::time::ser_millis"
    )]
    pub merge_timeout: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config { retry_interval: Duration::from_millis(200), merge_timeout: Duration::from_millis(3_000) }
    }
}

/// Static description.
pub static SPEC: LayerSpec = LayerSpec {
    name: "merge",
    summary: "carries merge requests and answers between coordinators, with retries and a timeout",
    provides: &[Service::MergeProtocol],
    requires_below: &[],
    requires_above: &[],
    above_every: &[],
    below_every: &[],
};

/// The request we are waiting on.
#[derive(Debug, PartialEq)]
struct Pending {
    contact: Address,
    /// Our view id, which names the request: (ltime, coordinator).
    id: (u64, u64),
    request: Header,
    deadline: Instant,
}

/// `merge` state.
#[derive(Debug, PartialEq)]
pub struct Merge {
    config: Config,
    pending: Option<Pending>,
    /// The last grant we sent, to answer repeats of its request: (request id, contact, `Granted`).
    granted: Option<((u64, u64), Address, Header)>,
    /// Requests already raised to `inter`, so repeats are not raised again (one per view in
    /// practice: a coordinator handles one merge per view), and whether each came forwarded.
    raised: Vec<((u64, u64), bool)>,
    /// A request `inter` passes on to our coordinator, and where: its repeats follow it.
    forwarding: Option<((u64, u64), Address)>,
}

/// How many distinct requests one view remembers having raised; more are raised again.
const RAISED_MAX: usize = 16;

impl Merge {
    /// A `merge` for `view`.
    pub fn new(config: &Config, _view: &ViewState, _rank: Rank) -> Merge {
        Merge { config: config.clone(), pending: None, granted: None, raised: Vec::new(), forwarding: None }
    }

    fn send(to: Address, header: Header, out: &mut Outbox<'_>) {
        out.dn(Dn::Gossip { to: Some(to), msg: Msg::default().with(header) });
    }

    /// An answer to request `id`: only the pending request's answer counts.
    fn answered(&mut self, id: (u64, u64)) -> bool {
        if self.pending.as_ref().is_some_and(|p| p.id == id) {
            self.pending = None;
            true
        } else {
            false
        }
    }
}

impl Layer for Merge {
    fn handle_up(&mut self, ev: Up, out: &mut Outbox<'_>) {
        match ev {
            Up::Gossip(mut msg) if matches!(msg.hdrs.last().as_deref(), Some(AnyHeader::Merge(h)) if *h != Header::NoHdr) =>
            {
                match msg.pop_as::<Header>() {
                    Some(header @ (Header::Request { .. } | Header::Forwarded { .. })) => {
                        let forwarded = matches!(header, Header::Forwarded { .. });
                        let (Header::Request { view } | Header::Forwarded { view }) = header else {
                            unreachable!("matched")
                        };
                        let id = (view.ltime, view.coord);
                        if let Some((granted_id, contact, grant)) = &self.granted {
                            if *granted_id == id {
                                Merge::send(*contact, grant.clone(), out);
                                return;
                            }
                        }
                        if self.raised.iter().any(|&(raised, _)| raised == id) {
                            // A repeat: `inter` is already flushing to grant it, or it goes on to
                            // our coordinator (a repeat lost on the way is made good by the next).
                            if let Some((_, to)) = self.forwarding.filter(|&(f, _)| f == id && !forwarded) {
                                Merge::send(to, Header::Forwarded { view }, out);
                            }
                            return;
                        }
                        if self.raised.len() == RAISED_MAX {
                            self.raised.remove(0);
                        }
                        self.raised.push((id, forwarded));
                        out.up(Up::MergeRequest(view));
                    }
                    Some(Header::Granted { request, view }) => {
                        if self.answered(request) {
                            out.up(Up::MergeGranted(view));
                        }
                    }
                    Some(Header::Denied { request }) => {
                        // Busy: keep repeating (see the module documentation).
                        if self.pending.as_ref().is_some_and(|p| p.id == request) {
                            out.count(super::LayerKind::Merge, crate::event::Counter::MergeDenied);
                        }
                    }
                    _ => out.drop_input(super::LayerKind::Merge, DropReason::HeaderMismatch),
                }
            }
            other => out.pass_up(super::LayerKind::Merge, other, Header::NoHdr),
        }
    }

    fn handle_dn(&mut self, ev: Dn, out: &mut Outbox<'_>) {
        match ev {
            Dn::MergeRequest { contact, view, since } => {
                let id = (view.ltime, view.coord);
                let request = Header::Request { view };
                Merge::send(contact, request.clone(), out);
                // From the start of the merge flush, not from now: the requester's members wait
                // for the round's view `intra.commit_timeout` (5 s) from their cut, which came
                // after that start. Counted from the request, a flush of over 2 s let their wait
                // end first, and each went on alone instead of in the partition's view that an
                // unanswered request ends in. A request still gets two repeats' time (a flush of
                // over 4 s ends its members' wait first anyway).
                let floor = out.now() + Duration(self.config.retry_interval.0.saturating_mul(3));
                let deadline = (since + self.config.merge_timeout).max(floor);
                self.pending = Some(Pending { contact, id, request, deadline });
                out.alarm(out.now() + self.config.retry_interval);
            }
            Dn::MergeGrant { contact, request, view } => {
                // A grant ends our interest in that request's repeats only with this stack.
                let grant = Header::Granted { request, view };
                Merge::send(contact, grant.clone(), out);
                self.granted = Some((request, contact, grant));
            }
            Dn::MergeDeny { contact, request } => Merge::send(contact, Header::Denied { request }, out),
            Dn::MergeForward { to, view } => {
                let id = (view.ltime, view.coord);
                // Passed on once only: a request that reached us forwarded stops here (the
                // requester times out and asks again at a later gossip, with a fresh contact).
                if self.raised.iter().any(|&(raised, forwarded)| raised == id && !forwarded) {
                    self.forwarding = Some((id, to));
                    Merge::send(to, Header::Forwarded { view }, out);
                }
            }
            other => out.pass_dn(other, Header::NoHdr),
        }
    }

    fn handle_timer(&mut self, out: &mut Outbox<'_>) {
        let now = out.now();
        let Some(pending) = &self.pending else { return };
        if now >= pending.deadline {
            self.pending = None;
            out.count(super::LayerKind::Merge, crate::event::Counter::MergeUnanswered);
            out.up(Up::MergeFailed);
        } else {
            Merge::send(pending.contact, pending.request.clone(), out);
            out.alarm((now + self.config.retry_interval).min(pending.deadline));
        }
    }

    fn check_invariants(&self) {
        assert!(self.raised.len() <= RAISED_MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::harness::{Harness, Out};
    use motet_wire::hdr::intra::FullView;

    fn full(ltime: u64, coord: u64) -> Box<FullView> {
        let view = crate::testing::view(2);
        let mut full = view.to_full();
        full.ltime = ltime;
        full.coord = coord;
        Box::new(full)
    }

    fn gossip(out: &[Out]) -> Vec<Header> {
        out.iter()
            .filter_map(|o| match o {
                Out::Dn(Dn::Gossip { msg, .. }) => match msg.hdrs.last().as_deref() {
                    Some(AnyHeader::Merge(h)) => Some(h.clone()),
                    _ => None,
                },
                _ => None,
            })
            .collect()
    }

    fn incoming(header: Header) -> Up {
        Up::Gossip(Msg::default().with(header))
    }

    /// Fires the layer's alarms until `until`, collecting the outputs.
    fn run_until(h: &mut Harness<Merge>, until: Instant) -> Vec<Out> {
        let mut all = Vec::new();
        while let Some(at) = h.alarm.filter(|&at| at <= until) {
            all.extend(h.timer(at));
        }
        all
    }

    #[test]
    fn request_is_repeated_then_fails_at_the_timeout() {
        let view = crate::testing::view(2);
        let mut h = Harness::new(Merge::new(&Config::default(), &view, 0), 0);
        let out = h.dn(Dn::MergeRequest { contact: Address::Sim(9), view: full(3, 1), since: Instant::ZERO });
        assert!(matches!(gossip(&out)[..], [Header::Request { .. }]));
        let out = run_until(&mut h, Instant::ZERO + Duration::from_millis(10_000));
        assert!(matches!(out.last(), Some(Out::Up(Up::MergeFailed))), "{out:?}");
        assert_eq!(h.stats.counter(crate::event::Counter::MergeUnanswered), 1);
        assert_eq!(gossip(&out).len(), 14, "repeated every 200 ms until the 3 s timeout");
        assert!(h.alarm.is_none());
        // A late grant is not raised.
        let out = h.up(incoming(Header::Granted { request: (3, 1), view: full(4, 0) }));
        assert!(out.is_empty(), "{out:?}");
    }

    /// The timeout counts from the start of the merge flush: a request sent after a long flush
    /// gets what is left of it (and at least two repeats' time), so the round ends before its
    /// members stop waiting for its view (`intra.commit_timeout` from their cut).
    #[test]
    fn the_timeout_counts_from_the_start_of_the_merge_flush() {
        let view = crate::testing::view(2);
        let at = |ms| Instant::ZERO + Duration::from_millis(ms);
        for (sent_ms, failed_ms) in [(1_000, 3_000), (2_900, 3_500), (4_000, 4_600)] {
            let mut h = Harness::new(Merge::new(&Config::default(), &view, 0), 0);
            h.now = at(sent_ms);
            let mut out = h.dn(Dn::MergeRequest { contact: Address::Sim(9), view: full(3, 1), since: Instant::ZERO });
            out.extend(run_until(&mut h, at(failed_ms - 1)));
            assert!(out.iter().all(|o| !matches!(o, Out::Up(Up::MergeFailed))), "sent at {sent_ms} ms: {out:?}");
            // Sent, then repeated every 200 ms: at least twice however late the request went.
            assert!(gossip(&out).len() >= 3, "sent at {sent_ms} ms: {out:?}");
            let out = run_until(&mut h, at(failed_ms));
            assert!(matches!(out.last(), Some(Out::Up(Up::MergeFailed))), "sent at {sent_ms} ms: {out:?}");
        }
    }

    #[test]
    fn only_the_answer_to_our_request_counts() {
        let view = crate::testing::view(2);
        let mut h = Harness::new(Merge::new(&Config::default(), &view, 0), 0);
        h.dn(Dn::MergeRequest { contact: Address::Sim(9), view: full(3, 1), since: Instant::ZERO });
        let out = h.up(incoming(Header::Denied { request: (2, 1) }));
        assert!(out.is_empty(), "an answer to another request: {out:?}");
        // Our request denied (busy): nothing goes up, and the request is repeated until granted.
        let out = h.up(incoming(Header::Denied { request: (3, 1) }));
        assert!(out.is_empty(), "{out:?}");
        assert_eq!(h.stats.counter(crate::event::Counter::MergeDenied), 1);
        let out = run_until(&mut h, Instant::ZERO + Duration::from_millis(500));
        assert!(!gossip(&out).is_empty(), "still asking after the denial: {out:?}");
        let out = h.up(incoming(Header::Granted { request: (3, 1), view: full(4, 0) }));
        assert!(matches!(&out[..], [Out::Up(Up::MergeGranted(v))] if v.ltime == 4), "{out:?}");
        let out = run_until(&mut h, Instant::ZERO + Duration::from_millis(10_000));
        assert!(out.is_empty(), "no repeats or failure once answered: {out:?}");
    }

    #[test]
    fn a_repeated_request_is_raised_once_and_a_granted_one_is_answered_here() {
        let view = crate::testing::view(2);
        let mut h = Harness::new(Merge::new(&Config::default(), &view, 0), 0);
        let request = || incoming(Header::Request { view: full(3, 7) });
        let out = h.up(request());
        assert!(matches!(&out[..], [Out::Up(Up::MergeRequest(v))] if v.coord == 7));
        assert!(h.up(request()).is_empty(), "a repeat is not raised again");
        h.dn(Dn::MergeGrant { contact: Address::Sim(7), request: (3, 7), view: full(4, 0) });
        let out = h.up(request());
        assert!(matches!(gossip(&out)[..], [Header::Granted { request: (3, 7), .. }]), "{out:?}");
    }

    /// Where the gossip of `out` goes.
    fn destinations(out: &[Out]) -> Vec<Option<Address>> {
        out.iter().filter_map(|o| if let Out::Dn(Dn::Gossip { to, .. }) = o { Some(*to) } else { None }).collect()
    }

    #[test]
    fn a_request_passed_on_takes_its_repeats_along_and_is_never_passed_on_twice() {
        let view = crate::testing::view(2);
        let mut h = Harness::new(Merge::new(&Config::default(), &view, 1), 1);
        let request = || incoming(Header::Request { view: full(3, 7) });
        assert!(matches!(&h.up(request())[..], [Out::Up(Up::MergeRequest(_))]));
        // `inter`, not the coordinator here, passes it on to the coordinator at Sim(0).
        let out = h.dn(Dn::MergeForward { to: Address::Sim(0), view: full(3, 7) });
        assert!(matches!(gossip(&out)[..], [Header::Forwarded { .. }]), "{out:?}");
        assert_eq!(destinations(&out), [Some(Address::Sim(0))]);
        // The requester's repeats follow (a forwarded copy may be lost), without `inter`.
        let out = h.up(request());
        assert!(matches!(gossip(&out)[..], [Header::Forwarded { .. }]), "{out:?}");
        assert_eq!(destinations(&out), [Some(Address::Sim(0))]);
        // A request that came forwarded is raised, but never passed on again (no loops).
        let mut h = Harness::new(Merge::new(&Config::default(), &view, 1), 1);
        let out = h.up(incoming(Header::Forwarded { view: full(5, 8) }));
        assert!(matches!(&out[..], [Out::Up(Up::MergeRequest(v))] if v.coord == 8), "{out:?}");
        let out = h.dn(Dn::MergeForward { to: Address::Sim(0), view: full(5, 8) });
        assert!(out.is_empty(), "{out:?}");
        assert!(h.up(incoming(Header::Forwarded { view: full(5, 8) })).is_empty());
    }
}
