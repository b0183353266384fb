//! `xfer`: state transfer (property `Xfer`; Ensemble `xfer`, digest item 43: "joiner receives
//! application state; xfer view ends only after all XferDone"; `ViewState::xfer_view`).
//!
//! Provides: [`Service::StateTransfer`]. Requires below: [`Service::ReliableCast`]; above:
//! [`Service::Membership`], which ends the transfer view. Header: `Chunk`, `Last`, `Done`, `NoHdr`.
//!
//! A view formed by a merge (a new process joining is a merge of a singleton partition) is a
//! *state-transfer view*. In it the application's casts wait (`appl` refuses them with `Blocked`,
//! the runtime holds them for the next view), so the state cannot change while it is copied:
//! what is transferred is the provider's state at the view's start, i.e. after the previous
//! views' cuts. Rank 0 (a member of the granting partition, whose state wins) is the provider:
//! its application is told `XferProvide` and streams its state in chunks (`Action::XferChunk`,
//! any number, the last marked), which this layer casts; every other member's application gets
//! them (`AppEvent::XferChunk`) in order, stages them, and installs the state when the last one
//! arrives. Each member then says `XferDone`, which is cast (the provider's last chunk is its own
//! done: it has nothing to install); when every member of the view is done, `intra` runs a view
//! change with nobody excluded and the next view is a normal one.
//!
//! If a member fails during the transfer, the next view is again a transfer view (inherited), and
//! the new rank 0 provides. Receivers install only complete transfers, so the new provider holds
//! either the granting partition's state or, if every member of that partition failed, its own
//! partition's: every member ends with one partition's state. (Members whose state was already
//! equal receive it again; the seeds do not say how Ensemble chose receivers.)
//!
//! A transfer that stops moving is a fault the failure detector cannot see (the members stay
//! audible). The provider, which is also the view's coordinator (rank 0), watches its progress
//! once its stream has ended and some receiver has said `Done` (the state could be received and
//! installed: a member still installing a large one is not taken for a stalled one while nobody
//! is done, for `install_timeout` (240 s) after the stream's end, after which every receiver not
//! done is): when no member's `Done` came for `stall_timeout` (default 60 s), it suspects the
//! members that have not said it, and `intra` (above) starts the view change that excludes them;
//! the transfer then ends without them (counter `XferStalled`). A member excluded so that stays
//! audible merges back, and if it never says done in the next transfer view either, it holds
//! the group that long again. Before, a member that never said done held every cast of the group
//! for good. A provider whose own application streams nothing at all for `stall_timeout` leaves
//! the group (`LeaveReq`, counted `XferStalled`), as one that crashed would be
//! excluded, and the next view's rank 0 provides. Its receivers could not act on it: a suspicion
//! of their coordinator raised here would reach no layer that acts on it (`slander` and `elect`
//! are below).

use crate::event::{AppEvent, Dn, DropReason, Msg, Qos, Up};
use crate::layer::{Layer, LayerSpec, Outbox, Service};
use crate::time::{Duration, Instant};
use crate::view::{RankSet, ViewState};
use crate::Rank;
use motet_wire::hdr::xfer::Header;

/// `xfer` parameters.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// How long the provider waits, once its stream has ended and some receiver is done, without
    /// another member's `Done` before it suspects the members not done. Default 60 s.
    #[serde(
        rename = "stall_timeout_ms",
        deserialize_with = "crate::time::millis",
        serialize_with = "crate::time::ser_millis"
    )]
    pub stall_timeout: Duration,
    /// How long after its stream ended the provider waits, while no receiver has said `Done`,
    /// before it suspects them all: the time a receiver may take to install the state (a large
    /// one, or an application busy with a backlog) before it is taken for one that never will.
    /// A receiver excluded so merges back and gets the state again, so raise this for states that
    /// take longer to install. Default 240 s (four `stall_timeout`s); one shorter than
    /// `stall_timeout` counts as `stall_timeout`.
    #[serde(
        rename = "install_timeout_ms",
        deserialize_with = "crate::time::millis",
        serialize_with = "crate::time::ser_millis"
    )]
    pub install_timeout: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config { stall_timeout: Duration::from_millis(60_000), install_timeout: Duration::from_millis(240_000) }
    }
}

/// Static description.
pub static SPEC: LayerSpec = LayerSpec {
    name: "xfer",
    summary: "state transfer: in a merged view rank 0 streams its state, the view ends when all are done",
    provides: &[Service::StateTransfer],
    requires_below: &[Service::ReliableCast],
    requires_above: &[Service::Membership],
    above_every: &[],
    below_every: &[],
};

/// `xfer` state.
#[derive(Debug, PartialEq)]
pub struct Xfer {
    rank: Rank,
    n: usize,
    active: bool,
    done: RankSet,
    said_done: bool,
    complete: bool,
    /// Chunks received (receivers) or sent (the provider).
    chunks: u64,
    /// The stream's last chunk was sent (the provider) or received (a receiver).
    ended: bool,
    stall_timeout: Duration,
    /// When the transfer last moved (`None` outside a transfer view, or once complete).
    moved: Option<Instant>,
    /// Members this layer suspected already.
    suspected: RankSet,
    /// When the provider's stream ended (the provider only).
    ended_at: Option<Instant>,
    /// `install_timeout`: how long after the end a provider no receiver has said `Done` to
    /// suspects them all. Longer than a stall among receivers (some done, some not), since a
    /// receiver may still be installing a large state, but bounded: a receiver whose application
    /// never says done (the common join, one founder and one newcomer) held every cast of the
    /// group for good (a review's finding).
    install_timeout: Duration,
}

impl Xfer {
    /// An `xfer` for `view`.
    pub fn new(config: &Config, view: &ViewState, rank: Rank) -> Xfer {
        Xfer {
            rank,
            n: view.len(),
            active: view.xfer_view,
            done: RankSet::new(),
            said_done: false,
            complete: false,
            chunks: 0,
            ended: false,
            stall_timeout: config.stall_timeout,
            // Never shorter than a stall among receivers: a configuration that raised only
            // `stall_timeout` (valid before this parameter) keeps its waits.
            install_timeout: config.install_timeout.max(config.stall_timeout),
            moved: None,
            suspected: RankSet::new(),
            ended_at: None,
        }
    }

    /// The transfer moved: the provider's watch starts again from now.
    fn moved(&mut self, out: &mut Outbox<'_>) {
        if self.active && !self.complete && self.rank == 0 {
            if self.moved.is_none() {
                out.alarm(out.now() + self.stall_timeout);
            }
            self.moved = Some(out.now());
        }
    }

    /// Whom the transfer waits for, at the provider (the coordinator, whose `intra` acts on a
    /// suspicion) once its stream has ended: the members that have not said `Done`, once one has,
    /// or `install_timeout` after the end if none has. Nobody elsewhere, or
    /// before the stream ended: receivers cannot be done before it ends (suspecting them then, a
    /// provider excluded them all), and a suspicion a receiver raised here would reach no layer
    /// that acts on it.
    fn waited_for(&self, now: Instant) -> RankSet {
        let receivers = 1..self.n as Rank;
        let some_done = receivers.clone().any(|r| self.done.contains(r));
        let none_done_for_long = self.ended_at.is_some_and(|at| now >= at + self.install_timeout);
        if self.rank != 0 || !self.ended || !(some_done || none_done_for_long) {
            return RankSet::new();
        }
        receivers.filter(|&r| !self.done.contains(r)).collect()
    }

    /// The provider's stream ended (its last chunk went): it is done too, as it has nothing to
    /// install. Its application's own `XferDone`, if it comes, is then a no-op. Before, a
    /// provider whose application never said done held the transfer view (and every cast of the
    /// group) for good once every receiver was done: nobody was left to suspect (a review's
    /// finding).
    fn stream_ended(&mut self, out: &mut Outbox<'_>) {
        self.ended = true;
        self.ended_at = Some(out.now());
        if !self.said_done {
            self.said_done = true;
            out.dn(Dn::Cast { msg: Msg::default().with(Header::Done), qos: Qos::Reliable });
        }
    }
}

impl Layer for Xfer {
    fn handle_up(&mut self, ev: Up, out: &mut Outbox<'_>) {
        match ev {
            Up::Init => {
                if self.active && self.rank == 0 {
                    out.deliver(AppEvent::XferProvide);
                }
                self.moved(out);
                out.up(Up::Init);
            }
            Up::XferChunk { payload, last } => {
                if self.active && self.rank == 0 {
                    // After the last chunk, or after `XferDone`, the stream has ended: counted,
                    // not dropped unseen (the application had `Ok` from `appl`).
                    if self.ended || self.said_done {
                        return out.drop_input(super::LayerKind::Xfer, DropReason::AfterEnd);
                    }
                    self.chunks += 1;
                    self.moved(out);
                    let msg = Msg::new(payload).with(if last { Header::Last } else { Header::Chunk });
                    out.dn(Dn::Cast { msg, qos: Qos::Reliable });
                    if last {
                        self.stream_ended(out);
                    }
                }
            }
            Up::XferDone => {
                if self.active && !self.said_done {
                    // A provider done before its last chunk ends the stream first: its receivers
                    // wait for `Last` before they say `Done`, and the transfer view never ended
                    // (a review's finding).
                    if self.rank == 0 && !self.ended {
                        self.chunks += 1;
                        out.dn(Dn::Cast { msg: Msg::default().with(Header::Last), qos: Qos::Reliable });
                        return self.stream_ended(out);
                    }
                    self.said_done = true;
                    out.dn(Dn::Cast { msg: Msg::default().with(Header::Done), qos: Qos::Reliable });
                }
            }
            Up::Cast { origin, mut msg, qos } => match msg.pop_as::<Header>() {
                Some(Header::NoHdr) => out.up(Up::Cast { origin, msg, qos }),
                // This layer casts its headers reliably only: one on an unreliable cast (it has no
                // sequence number, so a forger need not guess one) is forged.
                Some(_) if qos == Qos::Unreliable => out.drop_input(super::LayerKind::Xfer, DropReason::HeaderMismatch),
                Some(h @ (Header::Chunk | Header::Last)) => {
                    if !self.active || origin != 0 {
                        return out.drop_input(super::LayerKind::Xfer, DropReason::NotForMe);
                    }
                    if self.rank != 0 {
                        if self.ended {
                            return out.drop_input(super::LayerKind::Xfer, DropReason::AfterEnd);
                        }
                        self.chunks += 1;
                        self.ended = h == Header::Last;
                        self.moved(out);
                        out.deliver(AppEvent::XferChunk { payload: msg.payload, last: self.ended });
                    }
                }
                Some(Header::Done) => {
                    self.done.insert(origin);
                    self.moved(out);
                    if self.active && !self.complete && self.done.iter().count() == self.n {
                        self.complete = true;
                        self.moved = None;
                        tracing::info!("state transfer complete at every member: the transfer view ends");
                        out.up(Up::XferComplete);
                    }
                }
                None => out.drop_input(super::LayerKind::Xfer, DropReason::HeaderMismatch),
            },
            // A flush round began (`sync`, below, at every member the round includes): the view
            // is changing, the application's chunks are refused until the next one, and its
            // successor watches its own transfer. Before, the watch went on through the flush
            // (it waited for `Dn::Block`, which `sync` sends down from below this layer, so it
            // never came), and a round near the deadline could make a healthy provider leave,
            // or a lingering stack count a stall (a review's finding).
            ev @ Up::Flushing { .. } => {
                self.moved = None;
                out.pass_up(super::LayerKind::Xfer, ev, Header::NoHdr)
            }
            other => out.pass_up(super::LayerKind::Xfer, other, Header::NoHdr),
        }
    }

    fn handle_dn(&mut self, ev: Dn, out: &mut Outbox<'_>) {
        out.pass_dn(ev, Header::NoHdr);
    }

    fn handle_timer(&mut self, out: &mut Outbox<'_>) {
        let Some(moved) = self.moved else { return };
        let due = moved + self.stall_timeout;
        if out.now() < due {
            return out.alarm(due);
        }
        let stalled = self.waited_for(out.now());
        if !stalled.is_empty() {
            tracing::warn!(
                ?stalled,
                chunks = self.chunks,
                "state transfer made no progress within stall_timeout: suspected"
            );
            for _ in stalled.iter().filter(|&r| !self.suspected.contains(r)) {
                out.count(super::LayerKind::Xfer, crate::event::Counter::XferStalled);
            }
            self.suspected.union_with(&stalled);
            out.up(Up::Suspect(stalled));
        } else if self.rank == 0 && self.chunks == 0 && !self.suspected.contains(0) {
            // The provider's own application streamed nothing at all for `stall_timeout`: its
            // receivers would wait for good, and they cannot act on it (a suspicion of their
            // coordinator raised here would reach no layer that acts on it: `slander` and `elect`
            // are below). The provider leaves, as one that crashed would be excluded; the next
            // view owes the transfer again, and its rank 0 provides. Only before the first chunk:
            // a stream that stops midway may be held by flow control, that is by a slow receiver,
            // and a provider that left for it would hand the same receiver to the next provider.
            tracing::warn!(
                chunks = self.chunks,
                "this member's application streamed no state within stall_timeout: it leaves, so that another member provides"
            );
            out.count(super::LayerKind::Xfer, crate::event::Counter::XferStalled);
            self.suspected.insert(0);
            out.up(Up::LeaveReq(self.rank));
        }
        // Watched again until the view changes (a flush round: `Up::Flushing`): the suspicion is raised again,
        // counted once, should the round it started not exclude them.
        self.moved = Some(out.now());
        out.alarm(out.now() + self.stall_timeout);
    }

    fn check_invariants(&self) {
        assert!(self.active || (self.chunks == 0 && !self.complete));
        assert!(!self.complete || self.done.iter().count() == self.n);
        assert!(self.rank != 0 || !self.ended || self.said_done, "a provider whose stream ended is done");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::harness::{Harness, Out};
    use crate::time::{Duration, Instant};
    use std::sync::Arc;

    fn xfer_view(n: usize) -> Arc<ViewState> {
        let mut view = (*crate::testing::view_of("vsync+Xfer", n)).clone();
        view.xfer_view = true;
        Arc::new(view)
    }

    #[test]
    fn rank_0_streams_the_others_receive_and_all_done_completes() {
        let view = xfer_view(2);
        let mut provider = Harness::new(Xfer::new(&Config::default(), &view, 0), 0);
        let mut receiver = Harness::new(Xfer::new(&Config::default(), &view, 1), 1);
        provider.up(Up::Init);
        assert_eq!(provider.app.pop_front(), Some(AppEvent::XferProvide));
        receiver.up(Up::Init);
        assert!(receiver.app.is_empty());
        let cast = |h: &mut Harness<Xfer>, ev| match &h.up(ev)[..] {
            [Out::Dn(Dn::Cast { msg, .. })] => msg.clone(),
            other => panic!("{other:?}"),
        };
        let first = cast(&mut provider, Up::XferChunk { payload: b"ab".as_slice().into(), last: false });
        // The last chunk is the provider's done as well: it has nothing to install.
        let (last, done0) = match &provider.up(Up::XferChunk { payload: b"c".as_slice().into(), last: true })[..] {
            [Out::Dn(Dn::Cast { msg: last, .. }), Out::Dn(Dn::Cast { msg: done, .. })] => (last.clone(), done.clone()),
            other => panic!("{other:?}"),
        };
        assert!(provider.up(Up::XferDone).is_empty(), "its application's done is a no-op after it");
        receiver.up(Up::Cast { origin: 0, msg: first, qos: Qos::Reliable });
        receiver.up(Up::Cast { origin: 0, msg: last, qos: Qos::Reliable });
        let got: Vec<_> = receiver.app.drain(..).collect();
        assert!(matches!(&got[..], [AppEvent::XferChunk { last: false, .. }, AppEvent::XferChunk { last: true, .. }]));
        let done1 = cast(&mut receiver, Up::XferDone);
        assert!(receiver.up(Up::Cast { origin: 0, msg: done0, qos: Qos::Reliable }).is_empty());
        let out = receiver.up(Up::Cast { origin: 1, msg: done1, qos: Qos::Reliable });
        assert!(matches!(&out[..], [Out::Up(Up::XferComplete)]));
    }

    /// A provider done before its last chunk ends the stream first (its receivers waited for
    /// `Last` for ever, and the transfer view never ended); a chunk after the end is dropped and
    /// counted, at the provider and at a receiver. Review findings.
    #[test]
    fn a_stream_ends_once_and_nothing_follows_its_end() {
        let view = xfer_view(2);
        let mut provider = Harness::new(Xfer::new(&Config::default(), &view, 0), 0);
        provider.up(Up::Init);
        let headers = |out: &[Out]| -> Vec<Vec<motet_wire::Header>> {
            out.iter()
                .filter_map(|o| match o {
                    Out::Dn(Dn::Cast { msg, .. }) => Some(msg.hdrs.iter().map(|h| h.into_owned()).collect()),
                    _ => None,
                })
                .collect()
        };
        let out = provider.up(Up::XferDone);
        let (last, done) = (motet_wire::Header::from(Header::Last), motet_wire::Header::from(Header::Done));
        assert_eq!(headers(&out), vec![vec![last], vec![done]]);
        assert!(provider.up(Up::XferChunk { payload: b"late".as_slice().into(), last: true }).is_empty());
        assert_eq!(provider.stats.drops(DropReason::AfterEnd), 1);
        let mut receiver = Harness::new(Xfer::new(&Config::default(), &view, 1), 1);
        receiver.up(Up::Init);
        for h in [Header::Last, Header::Chunk] {
            receiver.up(Up::Cast { origin: 0, msg: Msg::new(b"x".as_slice().into()).with(h), qos: Qos::Reliable });
        }
        assert_eq!(receiver.app.len(), 1, "the chunk after the last is not delivered");
        assert_eq!(receiver.stats.drops(DropReason::AfterEnd), 1);
    }

    /// At the provider (the coordinator), a transfer whose stream has ended and that gets no
    /// member's `Done` for `stall_timeout` suspects the members that have not said it; a `Done`
    /// starts the watch again. Receivers, and a provider still streaming, suspect nobody. Before,
    /// a member that never said done held every cast of the group for good.
    #[test]
    fn a_transfer_that_stops_moving_suspects_whom_it_waits_for() {
        let view = xfer_view(3);
        let t = Config::default().stall_timeout.as_millis();
        let suspected = crate::layer::harness::suspected;
        let at = |ms: u64| Instant::ZERO + Duration::from_millis(ms);
        let mut provider = Harness::new(Xfer::new(&Config::default(), &view, 0), 0);
        provider.up(Up::Init);
        assert_eq!(provider.alarm, Some(at(t)));
        provider.now = at(t / 2);
        provider.up(Up::XferChunk { payload: b"s".as_slice().into(), last: false });
        assert!(suspected(&provider.timer(at(t))).is_empty(), "still streaming: its application is waited for");
        provider.now = at(t + 1);
        provider.up(Up::XferChunk { payload: b"s".as_slice().into(), last: true });
        provider.up(Up::XferDone);
        // Member 1 says done halfway; member 2 never does.
        provider.now = at(t + t / 2);
        provider.up(Up::Cast { origin: 1, msg: Msg::default().with(Header::Done), qos: Qos::Reliable });
        let due = provider.alarm.expect("watched");
        assert!(suspected(&provider.timer(at(2 * t))).is_empty(), "it moved");
        let due = provider.alarm.unwrap_or(due);
        assert_eq!(due, at(t + t / 2 + t));
        assert_eq!(suspected(&provider.timer(due)), [vec![2]]);
        assert_eq!(provider.stats.counter(crate::event::Counter::XferStalled), 1);
        assert_eq!(suspected(&provider.timer(due + Duration::from_millis(t))), [vec![2]], "raised again");
        assert_eq!(provider.stats.counter(crate::event::Counter::XferStalled), 1, "counted once");
        // While no receiver is done (a large state being installed), nobody is suspected for
        // `install_timeout` after the stream's end (four stall timeouts by default); then every
        // receiver is (a receiver whose application never says done held the group for good: a
        // review's finding).
        let mut slow = Harness::new(Xfer::new(&Config::default(), &view, 0), 0);
        slow.up(Up::Init);
        slow.up(Up::XferChunk { payload: b"s".as_slice().into(), last: true });
        slow.up(Up::Cast { origin: 0, msg: Msg::default().with(Header::Done), qos: Qos::Reliable });
        assert!(suspected(&slow.timer(at(3 * t))).is_empty());
        assert_eq!(suspected(&slow.timer(at(4 * t))), [vec![1, 2]]);
        // Raised, it waits that long.
        let config = Config { install_timeout: Duration::from_millis(10 * t), ..Config::default() };
        let mut slow = Harness::new(Xfer::new(&config, &view, 0), 0);
        slow.up(Up::Init);
        slow.up(Up::XferChunk { payload: b"s".as_slice().into(), last: true });
        assert!(suspected(&slow.timer(at(9 * t))).is_empty());
        assert_eq!(suspected(&slow.timer(at(10 * t))), [vec![1, 2]]);
        // A receiver suspects nobody: its suspicion would reach no layer that acts on it.
        let mut receiver = Harness::new(Xfer::new(&Config::default(), &view, 1), 1);
        receiver.up(Up::Init);
        assert!(suspected(&receiver.timer(at(10 * t))).is_empty());
        // Complete: nothing more is watched.
        for origin in 1..3 {
            provider.up(Up::Cast { origin, msg: Msg::default().with(Header::Done), qos: Qos::Reliable });
        }
        provider.up(Up::Cast { origin: 0, msg: Msg::default().with(Header::Done), qos: Qos::Reliable });
        assert!(suspected(&provider.timer(at(100 * t))).is_empty());
    }

    #[test]
    fn outside_a_transfer_view_nothing_happens() {
        let view = crate::testing::view_of("vsync+Xfer", 2);
        let mut h = Harness::new(Xfer::new(&Config::default(), &view, 0), 0);
        h.up(Up::Init);
        assert!(h.app.is_empty());
        assert!(h.up(Up::XferDone).is_empty());
        let chunk = Msg::new(b"x".as_slice().into()).with(Header::Chunk);
        assert!(h.up(Up::Cast { origin: 0, msg: chunk, qos: Qos::Reliable }).is_empty());
        assert_eq!(h.stats.drops(DropReason::NotForMe), 1);
    }

    /// The transfer's casts come reliably only: a chunk, a last chunk or a done on an unreliable
    /// cast (no sequence number to guess) is forged, and ends nothing.
    #[test]
    fn the_transfer_s_headers_on_an_unreliable_cast_are_dropped() {
        let view = xfer_view(2);
        let mut receiver = Harness::new(Xfer::new(&Config::default(), &view, 1), 1);
        receiver.up(Up::Init);
        for header in [Header::Chunk, Header::Last, Header::Done] {
            let forged = Msg::new(b"x".as_slice().into()).with(header);
            assert!(receiver.up(Up::Cast { origin: 0, msg: forged, qos: Qos::Unreliable }).is_empty());
        }
        assert!(receiver.app.is_empty(), "{:?}", receiver.app);
        assert_eq!(receiver.stats.drops(DropReason::HeaderMismatch), 3);
        // The genuine stream still goes on from its start.
        let chunk = Msg::new(b"x".as_slice().into()).with(Header::Last);
        receiver.up(Up::Cast { origin: 0, msg: chunk, qos: Qos::Reliable });
        assert!(matches!(receiver.app.pop_front(), Some(AppEvent::XferChunk { last: true, .. })));
    }

    /// A provider whose application streams nothing for `stall_timeout` leaves (once), so that
    /// another member provides; before, its receivers waited for good. One that streams is not.
    #[test]
    fn a_provider_that_streams_nothing_leaves() {
        let view = xfer_view(3);
        let config = Config { stall_timeout: Duration::from_millis(1_000), ..Config::default() };
        let leaves = |stream: bool| {
            let mut provider = Harness::new(Xfer::new(&config, &view, 0), 0);
            provider.up(Up::Init);
            let mut left = 0;
            for second in 1..=5u64 {
                if stream {
                    provider.now = Instant::ZERO + Duration::from_millis(second * 1_000 - 500);
                    provider.up(Up::XferChunk { payload: b"ab".as_slice().into(), last: false });
                }
                let out = provider.timer(Instant::ZERO + Duration::from_millis(second * 1_000 + 1));
                left += out.iter().filter(|o| matches!(o, Out::Up(Up::LeaveReq(0)))).count();
            }
            (left, provider.stats.counter(crate::event::Counter::XferStalled))
        };
        assert_eq!(leaves(false), (1, 1), "it leaves, once");
        assert_eq!(leaves(true), (0, 0), "a provider that streams stays");
    }

    /// A flush round stops the watch: the application's chunks are refused while the view
    /// changes, and the next view watches its own transfer (found by a review: the watch waited
    /// for `Dn::Block`, which never reaches this layer, and a round near the deadline made a
    /// healthy provider leave).
    #[test]
    fn a_flush_round_stops_the_watch() {
        let view = xfer_view(3);
        let config = Config { stall_timeout: Duration::from_millis(1_000), ..Config::default() };
        let mut provider = Harness::new(Xfer::new(&config, &view, 0), 0);
        provider.up(Up::Init);
        provider.now = Instant::ZERO + Duration::from_millis(900);
        let out = provider.up(Up::Flushing { coord: 0, round: 1 });
        assert!(matches!(&out[..], [Out::Up(Up::Flushing { .. })]), "passed up: {out:?}");
        let out = provider.timer(Instant::ZERO + Duration::from_millis(1_001));
        assert!(out.is_empty(), "{out:?}");
        assert_eq!(provider.stats.counter(crate::event::Counter::XferStalled), 0);
        assert_eq!(provider.alarm, None, "no longer watched");
    }
}
