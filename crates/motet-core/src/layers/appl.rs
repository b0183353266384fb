//! `appl`: the application's representative inside the stack (thesis §2.1.10, §2.3.3).
//!
//! Provides: [`Service::Application`]. Requires: nothing. Header: `Data` for application messages,
//! `NoHdr` for messages of the layers above passing through.
//!
//! `appl` is placed mid-stack as in Ensemble: membership and stability layers sit above it and
//! never see application traffic (thesis Fig 2.3). It turns application [`Action`]s into events
//! and application messages coming up into [`AppEvent`]s. It enforces back-pressure: while a
//! flow-control layer below reports `FlowBlock`, the matching actions fail with
//! [`ApiError::FlowBlocked`] instead of queueing without bound.

use crate::error::ApiError;
use crate::event::{Action, AppEvent, Dn, DropReason, Msg, Qos, Up};
use crate::fast::{self, DnStep, Down, UpStep};
use crate::layer::{Layer, LayerSpec, Outbox, Service};
use crate::view::{RankSet, ViewState};
use crate::Rank;
use motet_wire::hdr::appl::Header;
use std::sync::Arc;

/// `appl` parameters.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Largest application message accepted, in bytes. Default 1 MiB. Larger messages fail with
    /// [`ApiError::TooLarge`]; send large state in chunks. A stack without `frag` sends each
    /// message as one datagram, and takes at most [`UNFRAGMENTED_MAX`] whatever this says.
    pub message_size_max: usize,
}

/// Room left in a datagram for the heads and headers of a message in the full form (the
/// largest is a few hundred bytes; `causal`'s vector grows with the group).
pub const HEAD_ROOM: usize = 4096;

/// The most members a subcast may name (under half of [`HEAD_ROOM`]); a header naming more does
/// not decode.
pub use motet_wire::hdr::appl::SUBSET_MAX;

/// The largest message a stack without `frag` accepts: one datagram, less [`HEAD_ROOM`]. A
/// larger one was numbered, then dropped at the node as too large to send (and again at each
/// retransmission), and its sender's stream stopped there for good.
pub const UNFRAGMENTED_MAX: usize = motet_wire::DATAGRAM_SIZE_MAX - HEAD_ROOM;

impl Config {
    /// The largest message a stack of `spec` takes with these parameters: `message_size_max`,
    /// or [`UNFRAGMENTED_MAX`] if that is smaller and the stack has no `frag`. What a runtime
    /// checks an application's message against before queueing it.
    pub fn message_size_max_of(&self, spec: &crate::spec::StackSpec) -> usize {
        match spec.layers().contains(&crate::layers::LayerKind::Frag) {
            true => self.message_size_max,
            false => self.message_size_max.min(UNFRAGMENTED_MAX),
        }
    }
}

impl Default for Config {
    fn default() -> Config {
        Config { message_size_max: 1 << 20 }
    }
}

/// Static description.
pub static SPEC: LayerSpec = LayerSpec {
    name: "appl",
    summary: "the application's proxy: actions in, upcalls out, back-pressure enforced",
    provides: &[Service::Application],
    requires_below: &[],
    requires_above: &[],
    above_every: &[],
    below_every: &[],
};

/// `appl` state.
#[derive(Debug, PartialEq)]
pub struct Appl {
    view: Arc<ViewState>,
    rank: Rank,
    message_size_max: usize,
    left: bool,
    cast_blocked: bool,
    send_blocked: RankSet,
    /// A view change is flushing this stack: no new messages (thesis Table 2.1 `Block`).
    blocked: bool,
    /// The application lags its events (`Action::Lagging`): its casts, which are delivered back
    /// to it, are refused with `FlowBlocked` until it catches up. (The layers' own casts, which
    /// pass through here, are not: an order, an acknowledgement or a leave must get out.)
    lagging: bool,
    /// The application takes its own casts back (`Action::Loopback`).
    loopback: bool,
    /// The guarantee the stack gives the application's casts: the strongest ordering a layer
    /// below provides.
    cast_qos: Qos,
    /// Whether a layer below makes casts reliable (`mnak`): then the application's casts all
    /// come reliably, and one on an unreliable cast (no sequence number to guess) is forged. A
    /// stack without one (`top:appl:bottom`) delivers what arrives.
    reliable_below: bool,
    /// Ranks known to have failed (`Dn::Fail` going down through this layer): a send to one is
    /// refused, where it was accepted and dropped below (`pt2pt`'s `FromFailed`) unseen.
    failed: RankSet,
    /// Switch and migration requests made in this view ([`REQUESTS_MAX`]).
    requests: u32,
}

/// The most switch and migration requests a member makes in one view. Each is a cast of the
/// layers' own, which flow control queues past `pending_max` rather than refuse (it must get out),
/// so an application asking in a loop while its window is closed grew that queue without bound.
/// Each asks for the next view, which a first request starts at once; only the latest of a member
/// counts, so more than a few in one view are never needed.
pub const REQUESTS_MAX: u32 = 8;

impl Appl {
    /// Counts a switch or migration request, or refuses it past [`REQUESTS_MAX`] in this view.
    fn request(&mut self) -> Result<(), ApiError> {
        if self.requests >= REQUESTS_MAX {
            return Err(ApiError::TooManyRequests { max: REQUESTS_MAX });
        }
        self.requests += 1;
        Ok(())
    }

    /// Whether the application asked to leave through this stack.
    pub(crate) fn has_left(&self) -> bool {
        self.left
    }

    /// Whether the application takes its own casts back ([`Action::Loopback`]).
    pub(crate) fn loopback(&self) -> bool {
        self.loopback
    }

    /// Whether a cast from `origin` is delivered to the application: not this member's own when
    /// its loop-back is off.
    fn delivers(&self, origin: Rank) -> bool {
        self.loopback || origin != self.rank
    }

    /// An `appl` for `view`.
    pub fn new(config: &Config, view: &Arc<ViewState>, rank: Rank) -> Appl {
        Appl {
            view: Arc::clone(view),
            rank,
            message_size_max: config.message_size_max_of(&view.stack),
            left: false,
            cast_blocked: false,
            send_blocked: RankSet::new(),
            blocked: false,
            lagging: false,
            loopback: true,
            cast_qos: cast_qos(view),
            reliable_below: provided_below(view, Service::ReliableCast),
            failed: RankSet::new(),
            requests: 0,
        }
    }

    /// Turns an application action into events. Validation happens before anything is emitted,
    /// so a failed action has no effect.
    pub fn handle_action(&mut self, action: Action, out: &mut Outbox<'_>) -> Result<(), ApiError> {
        if self.left {
            return Err(ApiError::Left);
        }
        // `Lagging` and `Loopback` are taken while blocked too: they concern what arrives, not
        // what is sent.
        if self.blocked && !matches!(action, Action::Leave | Action::Lagging(_) | Action::Loopback(_)) {
            return Err(ApiError::Blocked);
        }
        match action {
            Action::Cast(_) if self.view.xfer_view => {
                // The state is being copied: casts wait for the next view (state transfer).
                return Err(ApiError::Blocked);
            }
            Action::Cast(payload) => {
                self.check_size(payload.len())?;
                if self.cast_blocked || self.lagging {
                    return Err(ApiError::FlowBlocked { dest: None });
                }
                out.dn(Dn::Cast { msg: Msg::new(payload).with(Header::Data), qos: self.cast_qos });
            }
            Action::Send(mut dests, payload) => {
                self.check_size(payload.len())?;
                // Each destination once, as a subcast's (a rank named twice was sent and delivered
                // twice); none at all is a mistake the caller should hear of, not an `Ok` that
                // sent nothing.
                dests.sort_unstable();
                dests.dedup();
                if dests.is_empty() {
                    return Err(ApiError::NoDestination);
                }
                for &dest in &dests {
                    if usize::from(dest) >= self.view.len() {
                        return Err(ApiError::NoSuchRank { rank: dest, len: self.view.len() });
                    }
                    if self.failed.contains(dest) {
                        return Err(ApiError::MemberFailed { rank: dest });
                    }
                    if self.send_blocked.contains(dest) {
                        return Err(ApiError::FlowBlocked { dest: Some(dest) });
                    }
                }
                for dest in dests {
                    if dest == self.rank {
                        // A send to oneself needs no network.
                        out.deliver(AppEvent::Send { origin: self.rank, payload: payload.clone() });
                    } else {
                        out.dn(Dn::Send { dest, msg: Msg::new(payload.clone()).with(Header::Data) });
                    }
                }
            }
            Action::Switch(spec) => {
                if !self.view.stack.layers().contains(&crate::layers::LayerKind::Switch) {
                    return Err(ApiError::NoSwitch(format!("from `{}`", self.view.stack)));
                }
                // What every member checks of a request (`switch` drops one that fails it).
                super::switch::check_target(&self.view.stack, self.view.xfer_view, &spec)?;
                self.request()?;
                out.up(Up::SwitchReq(spec));
            }
            Action::Migrate(address) => {
                if !self.view.stack.layers().contains(&crate::layers::LayerKind::Migrate) {
                    return Err(ApiError::NoMigrate(self.view.stack.to_string()));
                }
                self.request()?;
                out.up(Up::MigrateReq(address));
            }
            Action::Subcast(mut ranks, payload) => {
                self.check_size(payload.len())?;
                if let Some(&rank) = ranks.iter().find(|&&r| usize::from(r) >= self.view.len()) {
                    return Err(ApiError::NoSuchRank { rank, len: self.view.len() });
                }
                // The header carries each rank once, and no more of them than fit the room left
                // for headers: a datagram too large to send was numbered, then dropped at every
                // send and retransmission, and its sender's stream (and every later flush) stopped.
                ranks.sort_unstable();
                ranks.dedup();
                if ranks.len() > SUBSET_MAX {
                    return Err(ApiError::SubsetTooLarge { members: ranks.len(), max: SUBSET_MAX });
                }
                if self.view.xfer_view {
                    return Err(ApiError::Blocked);
                }
                if self.cast_blocked || self.lagging {
                    return Err(ApiError::FlowBlocked { dest: None });
                }
                let msg = Msg::new(payload).with(Header::Subset(ranks.into()));
                out.dn(Dn::Cast { msg, qos: self.cast_qos });
            }
            Action::XferChunk { payload, last } => {
                self.check_size(payload.len())?;
                if !self.view.xfer_view || self.rank != 0 {
                    return Err(ApiError::NotInTransfer);
                }
                // Chunks are casts: they respect multicast flow control like the application's.
                if self.cast_blocked {
                    return Err(ApiError::FlowBlocked { dest: None });
                }
                out.up(Up::XferChunk { payload, last });
            }
            Action::XferDone => {
                if !self.view.xfer_view {
                    return Err(ApiError::NotInTransfer);
                }
                out.up(Up::XferDone);
            }
            Action::Lagging(lagging) => {
                if std::mem::replace(&mut self.lagging, lagging) && !lagging && !self.cast_blocked {
                    // Casts refused meanwhile may go again.
                    out.deliver(AppEvent::FlowBlock { dest: None, blocked: false });
                }
                out.dn(Dn::Lagging(lagging));
            }
            Action::Loopback(loopback) => self.loopback = loopback,
            Action::Leave => {
                // Membership layers above handle the request; in a static stack `top` ends the
                // stack at once. Either way the driver reports `Exit` when the stack ends.
                self.left = true;
                out.up(Up::LeaveReq(self.rank));
            }
        }
        Ok(())
    }

    fn check_size(&self, size: usize) -> Result<(), ApiError> {
        if size > self.message_size_max {
            return Err(ApiError::TooLarge { size, max: self.message_size_max });
        }
        Ok(())
    }
}

/// Whether a layer below `appl` in `view`'s stack provides `service`.
fn provided_below(view: &ViewState, service: Service) -> bool {
    let mut below = view.stack.layers().iter().skip_while(|&&k| k != crate::layers::LayerKind::Appl);
    below.any(|k| k.spec().provides.contains(&service))
}

/// The guarantee asked for the application's casts in `view`'s stack.
fn cast_qos(view: &ViewState) -> Qos {
    let provides = |service| provided_below(view, service);
    if provides(Service::TotalOrder) {
        Qos::Total
    } else if provides(Service::CausalOrder) {
        Qos::Causal
    } else if provides(Service::SafeDelivery) {
        Qos::Safe
    } else {
        Qos::Reliable
    }
}

impl Layer for Appl {
    fn handle_up(&mut self, ev: Up, out: &mut Outbox<'_>) {
        match ev {
            Up::Init => {
                out.deliver(AppEvent::View { view: Arc::clone(&self.view), rank: self.rank });
                out.up(Up::Init);
            }
            // A member that asked to leave delivers until it is excluded (`Exit`): its request
            // may miss this view's round and go on in the next view, and a member that moves to a
            // next view must have delivered what the others moving there did (virtual synchrony).
            Up::Cast { origin, mut msg, qos } => match msg.pop_as::<Header>() {
                // Its own cast, with the loop-back off, or a subcast for others: it kept its place
                // in the order; there is nothing to deliver.
                Some(Header::Data | Header::Subset(_)) if qos == Qos::Unreliable && self.reliable_below => {
                    out.drop_input(super::LayerKind::Appl, DropReason::HeaderMismatch)
                }
                Some(Header::Data | Header::Subset(_)) if !self.delivers(origin) => {}
                Some(Header::Data) => out.deliver(AppEvent::Cast { origin, payload: msg.payload }),
                Some(Header::Subset(ranks)) if ranks.binary_search(&self.rank).is_err() => {}
                Some(Header::Subset(_)) => out.deliver(AppEvent::Cast { origin, payload: msg.payload }),
                Some(Header::NoHdr) => out.up(Up::Cast { origin, msg, qos }),
                None => out.drop_input(super::LayerKind::Appl, DropReason::HeaderMismatch),
            },
            Up::Send { origin, mut msg } => match msg.pop_as::<Header>() {
                Some(Header::Data) => out.deliver(AppEvent::Send { origin, payload: msg.payload }),
                Some(Header::NoHdr) => out.up(Up::Send { origin, msg }),
                Some(Header::Subset(_)) => out.drop_input(super::LayerKind::Appl, DropReason::HeaderMismatch),
                None => out.drop_input(super::LayerKind::Appl, DropReason::HeaderMismatch),
            },
            Up::FlowBlock { dest, blocked } => {
                match dest {
                    None => self.cast_blocked = blocked,
                    Some(rank) if blocked => self.send_blocked.insert(rank),
                    Some(rank) => self.send_blocked = self.send_blocked.iter().filter(|&r| r != rank).collect(),
                }
                // While the application lags its casts stay refused: the unblock waits for the
                // end of the lag (`Action::Lagging`), or the runtime would retry them in vain.
                if blocked || dest.is_some() || !self.lagging {
                    out.deliver(AppEvent::FlowBlock { dest, blocked });
                }
            }
            other => out.up(other),
        }
    }

    fn handle_dn(&mut self, ev: Dn, out: &mut Outbox<'_>) {
        if let Dn::Fail(ranks) = &ev {
            self.failed.union_with(ranks);
        }
        if matches!(ev, Dn::Block) && !self.blocked {
            self.blocked = true;
            out.deliver(AppEvent::Block);
        }
        out.pass_dn(ev, Header::NoHdr);
    }

    // Fast path: an application cast or send that `handle_action` would pass down at once, and
    // an application message from below that it would deliver.
    fn fast_dn(&self, down: &Down) -> Option<DnStep> {
        if self.left || self.blocked || down.len > self.message_size_max {
            return None;
        }
        match down.dest {
            None if self.view.xfer_view || self.cast_blocked || self.lagging => None,
            None => Some(DnStep::to(Header::Data, self.cast_qos)),
            Some(dest) if usize::from(dest) >= self.view.len() || dest == self.rank => None,
            Some(dest) if self.send_blocked.contains(dest) || self.failed.contains(dest) => None,
            Some(_) => DnStep::pass(Header::Data, down),
        }
    }

    // Going down, the per-message part of the condition is the size (the compiled trace's
    // `len_max`) and, for a send, the destination (the stack checks it is another member of the
    // view before it takes the bypass); the rest is state that only layered handlers change
    // (a leave request, a flush, flow control's blocks). A cast is inert only where `appl` passes
    // it on with the guarantee the trace starts with (no ordering layer below).
    fn fast_inert(&self, trace: fast::Trace) -> Option<usize> {
        let open = !self.left && !self.blocked;
        let inert = match trace {
            fast::Trace::CastDn => {
                open && !self.view.xfer_view && !self.cast_blocked && !self.lagging && self.cast_qos == Qos::Reliable
            }
            // Sends to a failed member are refused by `handle_action`: while any is known, `appl`
            // is asked per send (its condition refuses those).
            fast::Trace::SendDn => open && self.send_blocked.is_empty() && self.failed.is_empty(),
            fast::Trace::CastUp | fast::Trace::SendUp => false,
        };
        inert.then_some(self.message_size_max)
    }

    fn fast_up(&self, up: &fast::Up<'_>) -> Option<UpStep> {
        let forged = up.qos == Qos::Unreliable && self.reliable_below;
        (fast::is(up.header, Header::Data) && !forged).then_some(UpStep::to(up.qos))
    }

    fn fast_data(&self, header: &motet_wire::Header) -> bool {
        matches!(header, motet_wire::Header::Appl(h) if *h != Header::NoHdr)
    }

    // Reads only the origin, whether a cast, and the payload: the fused trace going down runs it
    // for the endpoint's own cast on the message as it goes down, not cut to this layer's header
    // (`stack::bypass::fused`, `own_cast_up`). An action that read the headers would need that
    // cut made there.
    fn fast_up_apply(&mut self, up: &fast::Up<'_>, msg: &Msg, out: &mut Outbox<'_>) {
        if up.cast && !self.delivers(up.origin) {
            return;
        }
        let payload = msg.payload.clone();
        out.deliver(if up.cast {
            AppEvent::Cast { origin: up.origin, payload }
        } else {
            AppEvent::Send { origin: up.origin, payload }
        });
    }

    fn fast_loopback_inert(&self) -> bool {
        // Its own casts coming back are the application's only with the loop-back on.
        !self.loopback
    }

    fn check_invariants(&self) {
        assert!(usize::from(self.rank) < self.view.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::harness::{Harness, Out};

    /// A stack without `frag` refuses a message too large for one datagram, before any layer has
    /// numbered it; with `frag`, the configured maximum holds.
    #[test]
    fn without_frag_a_message_must_fit_one_datagram() {
        let too_large = UNFRAGMENTED_MAX + 1;
        let view = crate::testing::view_of("top:stable:appl:local:pt2pt:mnak:bottom", 2);
        let appl = Appl::new(&Config::default(), &view, 0);
        assert_eq!(appl.check_size(too_large), Err(ApiError::TooLarge { size: too_large, max: UNFRAGMENTED_MAX }));
        assert_eq!(appl.check_size(UNFRAGMENTED_MAX), Ok(()));
        let view = crate::testing::view(2);
        assert!(view.stack.layers().contains(&crate::layers::LayerKind::Frag));
        assert_eq!(Appl::new(&Config::default(), &view, 0).check_size(too_large), Ok(()));
    }

    /// `appl`'s answer to the application's `action`, and the events it emitted.
    fn act(h: &mut Harness<Appl>, action: Action) -> (Result<(), ApiError>, Vec<crate::layer::Ev>) {
        let mut events = Vec::new();
        let mut out = Outbox {
            now: h.now,
            rank: 0,
            events: &mut events,
            alarm: &mut h.alarm,
            app: &mut h.app,
            stats: &mut h.stats,
        };
        let result = h.layer.handle_action(action, &mut out);
        (result, events)
    }

    /// A send to a member known to have failed is refused with what to do, where it was accepted
    /// and dropped below unseen (a static stack told of failures by its driver returned `Ok`);
    /// sends to the others go on.
    #[test]
    fn a_send_to_a_failed_member_is_refused() {
        let view = crate::testing::view(3);
        let mut h = Harness::new(Appl::new(&Config::default(), &view, 0), 0);
        let out = h.dn(Dn::Fail([2].into_iter().collect()));
        assert!(matches!(&out[..], [Out::Dn(Dn::Fail(_))]), "passed down: {out:?}");
        let send = |dests: Vec<Rank>| Action::Send(dests.into_iter().collect(), b"x".as_slice().into());
        assert_eq!(act(&mut h, send(vec![2])).0, Err(ApiError::MemberFailed { rank: 2 }));
        let (result, events) = act(&mut h, send(vec![1, 2]));
        assert_eq!(result, Err(ApiError::MemberFailed { rank: 2 }));
        assert!(events.is_empty(), "nothing sent when one destination is refused");
        assert_eq!(act(&mut h, send(vec![1])).0, Ok(()));
    }

    /// A subcast's header names each member once, and no more than `SUBSET_MAX` of them: a list
    /// of 70,000 ranks made a datagram too large to send, which stopped its sender's stream.
    #[test]
    fn a_subcast_names_each_member_once_and_no_more_than_fit() {
        let view = crate::testing::view(3);
        let mut h = Harness::new(Appl::new(&Config::default(), &view, 0), 0);
        let action = Action::Subcast(vec![2; 70_000].into_iter().chain([1, 2]).collect(), b"x".as_slice().into());
        let (result, events) = act(&mut h, action);
        assert_eq!(result, Ok(()));
        match &events[..] {
            [crate::layer::Ev::Dn(Dn::Cast { msg, .. })] => {
                assert_eq!(msg.hdrs.get(0).map(|h| h.into_owned()), Some(Header::Subset([1, 2].into()).into()));
            }
            other => panic!("{other:?}"),
        }
        // More members than a header may name: refused, with what to do.
        let large = crate::testing::view(SUBSET_MAX + 1);
        let mut h = Harness::new(Appl::new(&Config::default(), &large, 0), 0);
        let all = (0..=SUBSET_MAX as Rank).collect();
        let (result, _) = act(&mut h, Action::Subcast(all, b"x".as_slice().into()));
        assert_eq!(result, Err(ApiError::SubsetTooLarge { members: SUBSET_MAX + 1, max: SUBSET_MAX }));
    }

    /// A member makes at most `REQUESTS_MAX` switch and migration requests in a view: the next
    /// is refused with what to do, and emits nothing (each request is a cast of the layers' own,
    /// which flow control queues rather than refuses). Each view builds its own `appl`, so the
    /// count is per view.
    #[test]
    fn switch_and_migration_requests_are_bounded_per_view() {
        let view = crate::testing::view_of("vsync", 3);
        let mut h = Harness::new(Appl::new(&Config::default(), &view, 0), 0);
        let total = || Action::Switch(crate::spec::StackSpec::parse("total").unwrap());
        for k in 0..REQUESTS_MAX {
            let action = if k % 2 == 0 { total() } else { Action::Migrate(crate::Address::Sim(9)) };
            let (result, events) = act(&mut h, action);
            assert_eq!((result, events.len()), (Ok(()), 1));
        }
        for action in [total(), Action::Migrate(crate::Address::Sim(9))] {
            let (result, events) = act(&mut h, action);
            assert_eq!((result, events.len()), (Err(ApiError::TooManyRequests { max: REQUESTS_MAX }), 0));
        }
    }

    /// In a state-transfer view, a switch must keep `Xfer`: the view it starts may still owe the
    /// transfer. Refused with what to do, emitting nothing; one that keeps it is taken.
    #[test]
    fn a_switch_in_a_transfer_view_must_keep_the_transfer() {
        let view = crate::testing::view_of("vsync+Xfer", 3);
        let view = Arc::new(ViewState { xfer_view: true, ..ViewState::clone(&view) });
        let mut h = Harness::new(Appl::new(&Config::default(), &view, 0), 0);
        let to = |spec: &str| Action::Switch(crate::spec::StackSpec::parse(spec).unwrap());
        let (result, events) = act(&mut h, to("total"));
        assert!(matches!(result, Err(ApiError::SwitchInTransfer(_))) && events.is_empty(), "{result:?}");
        assert_eq!(act(&mut h, to("total+Xfer")).0, Ok(()));
    }

    #[test]
    fn a_member_that_asked_to_leave_delivers_until_it_is_excluded() {
        let view = crate::testing::view(3);
        let mut h = Harness::new(Appl::new(&Config::default(), &view, 0), 0);
        assert_eq!(act(&mut h, Action::Leave).0, Ok(()));
        h.app.clear();
        // The leave may miss this view's round: the member then goes on to the next view, and
        // must have delivered this view's casts like the others (a seeded swarm found it did not).
        let cast = Msg::new(b"x".as_slice().into()).with(Header::Data);
        h.up(Up::Cast { origin: 1, msg: cast, qos: Qos::Reliable });
        h.up(Up::Send { origin: 2, msg: Msg::new(b"y".as_slice().into()).with(Header::Data) });
        assert!(matches!(h.app.pop_front(), Some(AppEvent::Cast { origin: 1, .. })));
        assert!(matches!(h.app.pop_front(), Some(AppEvent::Send { origin: 2, .. })));
        let fast = crate::fast::Up { origin: 1, cast: true, qos: Qos::Reliable, header: &Header::Data.into(), len: 0 };
        assert!(h.layer.fast_up(&fast).is_some(), "and on the bypass");
    }

    #[test]
    fn actions_are_validated_before_anything_is_emitted() {
        let view = crate::testing::view(3);
        let mut h = Harness::new(Appl::new(&Config { message_size_max: 4 }, &view, 0), 0);
        let run = |h: &mut Harness<Appl>, action| {
            let (result, events) = act(h, action);
            (result, events.len())
        };
        assert_eq!(
            run(&mut h, Action::Cast(b"12345".as_slice().into())).0,
            Err(ApiError::TooLarge { size: 5, max: 4 })
        );
        let (result, emitted) = run(&mut h, Action::Send(smallvec::smallvec![1, 7], b"x".as_slice().into()));
        assert_eq!((result, emitted), (Err(ApiError::NoSuchRank { rank: 7, len: 3 }), 0));
        // A send names each destination once, and at least one (before, `[1, 1]` sent twice
        // and `[]` returned `Ok` having sent nothing).
        assert_eq!(run(&mut h, Action::Send(smallvec::smallvec![1, 1], b"x".as_slice().into())), (Ok(()), 1));
        assert_eq!(
            run(&mut h, Action::Send(smallvec::smallvec![], b"x".as_slice().into())),
            (Err(ApiError::NoDestination), 0)
        );
        h.up(Up::FlowBlock { dest: None, blocked: true });
        assert_eq!(run(&mut h, Action::Cast(b"x".as_slice().into())).0, Err(ApiError::FlowBlocked { dest: None }));
        h.up(Up::FlowBlock { dest: None, blocked: false });
        assert_eq!(run(&mut h, Action::Cast(b"x".as_slice().into())), (Ok(()), 1));
        // A send to oneself is delivered locally.
        h.app.clear();
        assert_eq!(run(&mut h, Action::send(0, b"me".as_slice().into())), (Ok(()), 0));
        assert!(matches!(h.app.pop_front(), Some(AppEvent::Send { origin: 0, .. })));
        // While the application lags, its casts are refused (they would come back to it), on
        // the bypass too, but the layers' own casts pass, and so do sends; catching up says so.
        assert_eq!(run(&mut h, Action::Lagging(true)), (Ok(()), 1), "the lag goes down");
        assert_eq!(run(&mut h, Action::Cast(b"x".as_slice().into())).0, Err(ApiError::FlowBlocked { dest: None }));
        let down = crate::fast::Down { dest: None, qos: Qos::Reliable, len: 1 };
        assert!(h.layer.fast_dn(&down).is_none() && h.layer.fast_inert(crate::fast::Trace::CastDn).is_none());
        assert_eq!(run(&mut h, Action::send(1, b"x".as_slice().into())), (Ok(()), 1));
        let order = h.dn(Dn::Cast { msg: Msg::default(), qos: Qos::Reliable });
        assert!(matches!(order[..], [Out::Dn(Dn::Cast { .. })]), "{order:?}");
        // Flow control opening meanwhile is not said: the casts stay refused until the lag ends.
        h.app.clear();
        h.up(Up::FlowBlock { dest: None, blocked: true });
        h.up(Up::FlowBlock { dest: None, blocked: false });
        assert_eq!(h.app.pop_front(), Some(AppEvent::FlowBlock { dest: None, blocked: true }));
        assert_eq!(h.app.pop_front(), None, "no unblock while the application lags");
        assert_eq!(run(&mut h, Action::Lagging(false)), (Ok(()), 1));
        assert_eq!(h.app.pop_front(), Some(AppEvent::FlowBlock { dest: None, blocked: false }));
        assert_eq!(run(&mut h, Action::Cast(b"x".as_slice().into())), (Ok(()), 1));
        assert_eq!(run(&mut h, Action::Leave), (Ok(()), 1), "a leave request goes up");
        assert_eq!(run(&mut h, Action::Leave).0, Err(ApiError::Left));
    }
}
