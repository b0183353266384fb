//! `totem`: total order of application casts by a rotating token (property `Token`; the
//! token-based total order of Horus and Ensemble, thesis Figs 4.1-4.3, as in Totem and RMP; digest
//! §2.3 `Total`). The alternative to `sequencer`: no member relays every order, the right to
//! order moves to whoever has something to send.
//!
//! Provides: [`Service::TotalOrder`]. Requires below: [`Service::ReliableCast`],
//! [`Service::ReliableSend`] (the token travels point-to-point) and [`Service::LocalDelivery`];
//! above: [`Service::Flush`]. Header: `Data { seq }`, `Unordered`, `Token { seq }`, `Request`,
//! `NoHdr`.
//!
//! One token per view, first held by rank 0. Its holder casts its application casts with the next
//! global sequence numbers (`Data { seq }`); a member with casts and no token holds them and casts
//! `Request` once. Every member notes who asked; a member that casts ordered data is no longer
//! waiting. After sending, the holder passes the token (`Token { seq }`, reliable point-to-point)
//! to the next waiting member in ring order, or keeps it when nobody waits, so an idle group is
//! silent. Everyone, the holders included (through `local`), delivers casts in `seq` order.
//!
//! View changes: after the flush has passed this layer nobody orders anything; a member still
//! holding casts without the token casts them as `Unordered` inside the cut (they were accepted, so
//! they must be delivered in this view). When the cut is delivered, every member going on to the
//! next view holds the same casts and finishes the same way: the ordered ones by `seq` (skipping
//! numbers whose casts no survivor has), then the unordered ones by origin rank and FIFO position.
//! If the holder fails, the token is lost and ordering waits for the view change, which the
//! failure detector starts.

use crate::event::{Dn, DropReason, Msg, Qos, Up};
use crate::fast::{self, DnStep, Down, UpStep};
use crate::layer::{Layer, LayerSpec, Outbox, Service};
use crate::view::{RankSet, ViewState};
use crate::Rank;
use motet_wire::hdr::totem::Header;
use std::collections::{BTreeMap, VecDeque};

/// The largest sequence number a token may carry: 2^62, as for the wire's logical times. No group
/// numbers that many casts, and counting on from it cannot overflow.
const SEQ_MAX: u64 = 1 << 62;

/// Ordered casts a member can have on the wire: a flow-control window of the smallest messages
/// (`WINDOW_BYTES_MAX` / `MESSAGE_CHARGE`, 2^14).
const WINDOW_CASTS_MAX: u64 = super::WINDOW_BYTES_MAX / super::flow::MESSAGE_CHARGE;

/// `totem` parameters.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Application casts held while waiting for the token before casts are flow-blocked
    /// (`FlowBlock`, released when the token comes). Default 1024.
    pub pending_max: usize,
}

impl Default for Config {
    fn default() -> Config {
        Config { pending_max: 1024 }
    }
}

/// Static description.
pub static SPEC: LayerSpec = LayerSpec {
    name: "totem",
    summary: "total order by a rotating token: the holder numbers its casts, then passes the token on",
    provides: &[Service::TotalOrder],
    requires_below: &[Service::ReliableCast, Service::ReliableSend, Service::LocalDelivery],
    requires_above: &[Service::Flush],
    above_every: &[],
    below_every: &[],
};

/// `totem` state.
#[derive(Debug, PartialEq)]
pub struct Totem {
    pending_max: usize,
    /// Flow control below blocks casts; we block them while `pending` is full; what `appl` was
    /// last told (casts are blocked when either is).
    below_blocked: bool,
    own_blocked: bool,
    reported: bool,
    rank: Rank,
    n: usize,
    /// This member holds the token; `next` is the next sequence number to give.
    holder: bool,
    next: u64,
    /// Our application casts waiting for the token.
    pending: VecDeque<Msg>,
    /// We cast a `Request` and have not had the token since.
    requested: bool,
    /// Members known to wait for the token.
    waiting: RankSet,
    /// Ordered casts received and not yet delivered, by sequence number.
    held: BTreeMap<u64, (Rank, Msg)>,
    /// The next sequence number to deliver.
    deliver_next: u64,
    /// Casts that were never ordered (cast during the flush), per origin.
    unordered: Vec<VecDeque<Msg>>,
    /// How far beyond the highest number this member knows of an ordered cast or a token may be
    /// numbered (see [`Totem::ahead`]).
    ahead_max: u64,
    blocked: bool,
    completed: bool,
}

impl Totem {
    /// A `totem` for `view`.
    pub fn new(config: &Config, view: &ViewState, rank: Rank) -> Totem {
        Totem {
            pending_max: config.pending_max.max(1),
            below_blocked: false,
            own_blocked: false,
            reported: false,
            rank,
            n: view.len(),
            holder: rank == 0,
            next: 0,
            pending: VecDeque::new(),
            requested: false,
            waiting: RankSet::new(),
            held: BTreeMap::new(),
            deliver_next: 0,
            unordered: vec![VecDeque::new(); view.len()],
            ahead_max: match view.stack.layers().contains(&super::LayerKind::Mflow) {
                // Per member: what a holder numbers at once (its pending casts) that may still
                // wait in `mflow`'s queue, and a window of them on the wire.
                true => {
                    let params = &view.params;
                    let numbered = (params.totem.pending_max as u64)
                        .saturating_add(params.mflow.pending_max as u64)
                        .saturating_add(WINDOW_CASTS_MAX);
                    numbered.saturating_mul(view.len() as u64)
                }
                // Without flow control a member may lag any number of casts behind, as for the
                // sequencer (`casts_ahead_max`): a bound would drop a genuine token (lost for the
                // view: nobody could cast in order again) or genuine casts (a review's finding).
                false => u64::MAX,
            },
            blocked: false,
            completed: false,
        }
    }

    /// Whether `seq` is too far beyond the highest number this member knows of (delivered, held,
    /// or given while it held the token) to be any member's. The casts numbered in between, which
    /// it has not seen, are numbered and not yet received: each member's at most its pending casts
    /// handed to `mflow` at once and a window on the wire (`ahead_max`, n times that). Casts that
    /// arrived and wait behind a gap count in the highest number, not against the bound (measured
    /// from `deliver_next`, a long gap made genuine casts look too far ahead: a review's finding).
    /// One forged or corrupt number far ahead would otherwise hold every later cast here for the
    /// rest of the view, or, as a token, number this member's casts from there.
    fn ahead(&self, seq: u64) -> bool {
        let held = self.held.last_key_value().map_or(0, |(&last, _)| last.saturating_add(1));
        let known = self.deliver_next.max(held).max(self.next);
        seq.saturating_sub(known) > self.ahead_max
    }

    /// Whether cast `seq` is refused: too far ahead ([`Totem::ahead`]), or, held, it would leave
    /// more than `ahead_max` numbers missing between the next to deliver and the highest held.
    /// The first alone bounds how far one cast is ahead, not how far held casts reach: each
    /// accepted cast raises what counts as known, so a faulty member numbering its casts
    /// `ahead_max` apart, one after the other, had every one held for the rest of the view (a
    /// review's finding). The numbers missing are casts numbered and not yet received, at most
    /// `ahead_max` of them for genuine members (the premise of `ahead`); the casts that did
    /// arrive are not bounded, since `mflow` credits a cast when it arrives, not when it is
    /// delivered: a holder may cast a window after window while one earlier cast is repaired.
    /// (The thirty-third session bounded their count instead, and dropped genuine casts so,
    /// which had already been delivered by `mnak`: members then delivered different casts. The
    /// thirty-fourth session's review found it.)
    fn refused(&self, seq: u64) -> bool {
        // No token numbers a cast past `SEQ_MAX` (tokens beyond it are dropped), and without flow
        // control `ahead` refuses nothing: the bound keeps the span below from overflowing.
        if seq > SEQ_MAX || self.ahead(seq) {
            return true;
        }
        if seq <= self.deliver_next || self.held.contains_key(&seq) {
            return false;
        }
        let top = self.held.last_key_value().map_or(seq, |(&last, _)| last.max(seq));
        let span = top - self.deliver_next + 1;
        let missing = span.saturating_sub(self.held.len() as u64 + 1);
        missing > self.ahead_max
    }

    /// The most unordered casts one origin can have cast in a view.
    fn unordered_max(&self) -> u64 {
        (self.pending_max as u64).saturating_add(WINDOW_CASTS_MAX)
    }

    /// Tells `appl` when casts become blocked or free (ours and flow control's, combined).
    fn report(&mut self, out: &mut Outbox<'_>) {
        let blocked = self.below_blocked || self.own_blocked;
        if blocked != self.reported {
            self.reported = blocked;
            out.up(Up::FlowBlock { dest: None, blocked });
        }
    }

    fn deliver(&mut self, origin: Rank, msg: Msg, out: &mut Outbox<'_>) {
        out.up(Up::Cast { origin, msg, qos: Qos::Reliable });
    }

    fn deliver_ordered(&mut self, out: &mut Outbox<'_>) {
        while let Some((origin, msg)) = self.held.remove(&self.deliver_next) {
            self.deliver_next += 1;
            self.deliver(origin, msg, out);
        }
    }

    /// As holder: orders and casts what waits, then passes the token to the next waiting member.
    fn use_token(&mut self, out: &mut Outbox<'_>) {
        if !self.holder || self.blocked {
            return;
        }
        while let Some(msg) = self.pending.pop_front() {
            out.dn(Dn::Cast { msg: msg.with(Header::Data { seq: self.next }), qos: Qos::Reliable });
            self.next += 1;
        }
        self.own_blocked = false;
        self.report(out);
        self.requested = false;
        self.waiting.remove(self.rank);
        let n = self.n as Rank;
        let next = (1..n).map(|k| (self.rank + k) % n).find(|&r| self.waiting.contains(r));
        if let Some(dest) = next {
            self.holder = false;
            self.waiting.remove(dest);
            out.dn(Dn::Send { dest, msg: Msg::default().with(Header::Token { seq: self.next }) });
        }
    }

    fn complete(&mut self, out: &mut Outbox<'_>) {
        let held = std::mem::take(&mut self.held);
        for (_, (origin, msg)) in held {
            self.deliver(origin, msg, out);
        }
        for origin in 0..self.unordered.len() {
            while let Some(msg) = self.unordered[origin].pop_front() {
                self.deliver(origin as Rank, msg, out);
            }
        }
        self.completed = true;
    }
}

impl Layer for Totem {
    fn handle_up(&mut self, ev: Up, out: &mut Outbox<'_>) {
        match ev {
            Up::Cast { origin, mut msg, qos } => match msg.pop_as::<Header>() {
                Some(Header::NoHdr) => out.up(Up::Cast { origin, msg, qos }),
                // This layer casts its headers reliably only: one on an unreliable cast (it has no
                // sequence number, so a forger need not guess one) is forged.
                Some(_) if qos == Qos::Unreliable => {
                    out.drop_input(super::LayerKind::Totem, DropReason::HeaderMismatch)
                }
                Some(Header::Data { .. } | Header::Unordered) if self.completed => self.deliver(origin, msg, out),
                Some(Header::Data { seq }) => {
                    if self.refused(seq) {
                        return out.drop_input(super::LayerKind::Totem, DropReason::OutOfWindow);
                    }
                    self.waiting.remove(origin); // it had the token: served
                    if seq < self.deliver_next || self.held.contains_key(&seq) {
                        return out.drop_input(super::LayerKind::Totem, DropReason::Duplicate);
                    }
                    self.held.insert(seq, (origin, msg));
                    self.deliver_ordered(out);
                }
                // At most what a member can cast unordered: its pending casts at the flush, and a
                // window of those cast below meanwhile.
                Some(Header::Unordered) if self.unordered[usize::from(origin)].len() as u64 >= self.unordered_max() => {
                    out.drop_input(super::LayerKind::Totem, DropReason::OutOfWindow)
                }
                Some(Header::Unordered) => self.unordered[usize::from(origin)].push_back(msg),
                Some(Header::Request) => {
                    if origin != self.rank {
                        self.waiting.insert(origin);
                        self.use_token(out);
                    }
                }
                Some(Header::Token { .. }) | None => {
                    out.drop_input(super::LayerKind::Totem, DropReason::HeaderMismatch)
                }
            },
            Up::Send { origin, mut msg } => match msg.pop_as::<Header>() {
                Some(Header::NoHdr) => out.up(Up::Send { origin, msg }),
                Some(Header::Token { seq }) => {
                    if self.holder {
                        return out.drop_input(super::LayerKind::Totem, DropReason::Duplicate);
                    }
                    // A token numbers the next casts from `seq`: never below what this member
                    // has delivered (a genuine token cannot be: its holder numbered those), and
                    // far from where counting on would overflow. Such a token is not a member's.
                    if seq < self.deliver_next || seq > SEQ_MAX {
                        return out.drop_input(super::LayerKind::Totem, DropReason::Malformed);
                    }
                    if self.ahead(seq) {
                        return out.drop_input(super::LayerKind::Totem, DropReason::OutOfWindow);
                    }
                    self.holder = true;
                    self.next = seq;
                    self.use_token(out);
                }
                _ => out.drop_input(super::LayerKind::Totem, DropReason::HeaderMismatch),
            },
            Up::CutReached => {
                self.complete(out);
                out.up(Up::CutReached);
            }
            Up::FlowBlock { dest: None, blocked } => {
                self.below_blocked = blocked;
                self.report(out);
            }
            other => out.pass_up(super::LayerKind::Totem, other, Header::NoHdr),
        }
    }

    fn handle_dn(&mut self, ev: Dn, out: &mut Outbox<'_>) {
        match ev {
            Dn::Cast { msg, qos: Qos::Total } if self.blocked => {
                out.dn(Dn::Cast { msg: msg.with(Header::Unordered), qos: Qos::Reliable });
            }
            Dn::Cast { msg, qos: Qos::Total } => {
                self.pending.push_back(msg);
                if self.pending.len() >= self.pending_max && !self.holder {
                    self.own_blocked = true;
                    self.report(out);
                }
                if self.holder {
                    self.use_token(out);
                } else if !self.requested {
                    self.requested = true;
                    out.dn(Dn::Cast { msg: Msg::default().with(Header::Request), qos: Qos::Reliable });
                }
            }
            Dn::Block => {
                // Accepted casts that never got the token go out now, unordered, inside the cut.
                self.blocked = true;
                while let Some(msg) = self.pending.pop_front() {
                    out.dn(Dn::Cast { msg: msg.with(Header::Unordered), qos: Qos::Reliable });
                }
                out.dn(Dn::Block);
            }
            other => out.pass_dn(other, Header::NoHdr),
        }
    }

    // The fast path (docs/bypass.md): the token holder's cast, when nobody waits for the token
    // and nothing is pending, goes down numbered at once; an arriving ordered cast is delivered
    // when it is the next in order, then releases the ones held behind it, or is held.

    fn fast_dn(&self, down: &Down) -> Option<DnStep> {
        match (down.dest, down.qos) {
            (None, Qos::Total) => {
                // `use_token` with this cast alone, keeping the token, telling `appl` nothing.
                let alone = self.holder && !self.blocked && self.pending.is_empty() && self.waiting.is_empty();
                (alone && self.below_blocked == self.reported)
                    .then(|| DnStep::to(Header::Data { seq: self.next }, Qos::Reliable))
            }
            _ => DnStep::pass(Header::NoHdr, down),
        }
    }

    fn fast_dn_apply(&mut self, down: &Down, _out: &mut Outbox<'_>) {
        if let (None, Qos::Total) = (down.dest, down.qos) {
            self.next += 1;
            self.own_blocked = false;
            self.requested = false;
        }
    }

    fn fast_up(&self, up: &fast::Up<'_>) -> Option<UpStep> {
        match up.header {
            motet_wire::Header::Totem(Header::NoHdr) => UpStep::pass(up),
            &motet_wire::Header::Totem(Header::Data { seq })
                if up.cast && !self.completed && up.qos != Qos::Unreliable =>
            {
                if seq < self.deliver_next || self.held.contains_key(&seq) || self.refused(seq) {
                    return None; // a duplicate, or too far ahead: the handler drops it
                }
                match seq == self.deliver_next {
                    true => Some(UpStep { release: self.held.contains_key(&(seq + 1)), ..UpStep::to(Qos::Reliable) }),
                    false => Some(UpStep { absorb: true, ..UpStep::to(up.qos) }),
                }
            }
            _ => None,
        }
    }

    fn fast_up_apply(&mut self, up: &fast::Up<'_>, msg: &Msg, _out: &mut Outbox<'_>) {
        let &motet_wire::Header::Totem(Header::Data { seq }) = up.header else { return };
        self.waiting.remove(up.origin); // it had the token: served
        match seq == self.deliver_next {
            true => self.deliver_next += 1,
            false => drop(self.held.insert(seq, (up.origin, msg.clone()))),
        }
    }

    fn fast_release(&mut self, _origin: Rank, _cast: bool, _out: &mut Outbox<'_>) -> Option<(Rank, Msg)> {
        // `deliver_ordered`, one cast at a time.
        let (origin, msg) = self.held.remove(&self.deliver_next)?;
        self.deliver_next += 1;
        Some((origin, msg))
    }

    fn fast_inert(&self, trace: fast::Trace) -> Option<usize> {
        // Total order: only casts have work here (the token travels as this layer's own send).
        (!trace.is_cast()).then_some(usize::MAX)
    }

    fn fast_templated(&self, cast: bool) -> bool {
        // Whether a cast goes down at once depends on who holds the token (rank 0, at first).
        !cast
    }

    fn check_invariants(&self) {
        assert!(!self.holder || self.pending.is_empty() || self.blocked, "a holder sends at once");
        assert!(self.held.keys().all(|&seq| seq >= self.deliver_next));
    }

    fn buffered(&self) -> usize {
        self.held.len() + self.pending.len() + self.unordered.iter().map(VecDeque::len).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::harness::{Harness, Out};

    /// A token that would number casts below what was delivered, or count towards overflow, is
    /// dropped and counted, and leaves the member without the token.
    #[test]
    fn a_token_no_member_could_send_is_dropped() {
        let view = crate::testing::view_of("vsync+Token", 3);
        let mut b = Harness::new(Totem::new(&Config::default(), &view, 1), 1);
        for seq in [u64::MAX, SEQ_MAX + 1] {
            let token = Msg::default().with(Header::Token { seq });
            assert!(b.up(Up::Send { origin: 0, msg: token }).is_empty());
        }
        assert_eq!(b.stats.drops(DropReason::Malformed), 2);
        // Still not the holder: its cast asks for the token.
        let request = casts(&b.dn(app(20)));
        assert_eq!(request[0].hdrs, vec![Header::Request.into()]);
    }

    fn app(tag: u8) -> Dn {
        Dn::Cast { msg: Msg::new(vec![tag].into()), qos: Qos::Total }
    }

    fn casts(out: &[Out]) -> Vec<Msg> {
        out.iter()
            .filter_map(|o| match o {
                Out::Dn(Dn::Cast { msg, .. }) => Some(msg.clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn the_token_moves_to_whoever_waits_and_delivery_follows_seq() {
        let view = crate::testing::view_of("vsync+Token", 3);
        let mut a = Harness::new(Totem::new(&Config::default(), &view, 0), 0);
        let mut b = Harness::new(Totem::new(&Config::default(), &view, 1), 1);
        // a holds the token: its cast is numbered at once.
        let a0 = casts(&a.dn(app(10)));
        assert_eq!(a0[0].hdrs, vec![Header::Data { seq: 0 }.into()]);
        // b waits: it asks once, however many casts it has.
        let request = casts(&b.dn(app(20)));
        assert!(casts(&b.dn(app(21))).is_empty());
        assert_eq!(request[0].hdrs, vec![Header::Request.into()]);
        // a hears the request and passes the token.
        let out = a.up(Up::Cast { origin: 1, msg: request[0].clone(), qos: Qos::Reliable });
        let token = match &out[..] {
            [Out::Dn(Dn::Send { dest: 1, msg })] => msg.clone(),
            other => panic!("{other:?}"),
        };
        let b_casts = casts(&b.up(Up::Send { origin: 0, msg: token }));
        let seqs: Vec<_> = b_casts.iter().map(|m| m.hdrs.get(0).unwrap().into_owned()).collect();
        assert_eq!(seqs, vec![motet_wire::Header::from(Header::Data { seq: 1 }), Header::Data { seq: 2 }.into()]);
        // A third member delivers by seq whatever the arrival order.
        let mut c = Harness::new(Totem::new(&Config::default(), &view, 2), 2);
        let delivered = |out: &[Out]| out.iter().filter(|o| matches!(o, Out::Up(Up::Cast { .. }))).count();
        assert_eq!(delivered(&c.up(Up::Cast { origin: 1, msg: b_casts[0].clone(), qos: Qos::Reliable })), 0);
        assert_eq!(delivered(&c.up(Up::Cast { origin: 0, msg: a0[0].clone(), qos: Qos::Reliable })), 2);
        assert_eq!(delivered(&c.up(Up::Cast { origin: 1, msg: b_casts[1].clone(), qos: Qos::Reliable })), 1);
    }

    #[test]
    fn casts_without_the_token_go_unordered_at_the_flush_and_the_cut_orders_them_last() {
        let view = crate::testing::view_of("vsync+Token", 2);
        let mut b = Harness::new(Totem::new(&Config::default(), &view, 1), 1);
        b.dn(app(20));
        let out = b.dn(Dn::Block);
        let sent = casts(&out);
        assert_eq!(sent[0].hdrs, vec![Header::Unordered.into()]);
        assert!(matches!(out.last(), Some(Out::Dn(Dn::Block))));
        let ordered = Msg::new(vec![1].into()).with(Header::Data { seq: 1 });
        b.up(Up::Cast { origin: 0, msg: ordered, qos: Qos::Reliable }); // seq 0 never arrives
        b.up(Up::Cast { origin: 1, msg: sent[0].clone(), qos: Qos::Reliable });
        let out = b.up(Up::CutReached);
        let order: Vec<u8> = out
            .iter()
            .filter_map(|o| match o {
                Out::Up(Up::Cast { msg, .. }) => Some(msg.payload.to_bytes()[0]),
                _ => None,
            })
            .collect();
        assert_eq!(order, vec![1, 20]);
        assert_eq!(b.layer.buffered(), 0);
    }

    #[test]
    fn casts_waiting_for_the_token_are_bounded_by_flow_control() {
        let view = crate::testing::view_of("vsync+Token", 2);
        let mut b = Harness::new(Totem::new(&Config { pending_max: 2 }, &view, 1), 1);
        let blocked =
            |out: &[Out]| out.iter().any(|o| matches!(o, Out::Up(Up::FlowBlock { dest: None, blocked: true })));
        assert!(!blocked(&b.dn(app(1))));
        assert!(blocked(&b.dn(app(2))), "the second cast fills the queue");
        // Flow control below releasing does not release casts while the queue is full.
        assert!(b.up(Up::FlowBlock { dest: None, blocked: false }).is_empty());
        let token = Msg::default().with(Header::Token { seq: 0 });
        let out = b.up(Up::Send { origin: 0, msg: token });
        assert!(out.iter().any(|o| matches!(o, Out::Up(Up::FlowBlock { dest: None, blocked: false }))));
        assert_eq!(casts(&out).len(), 2);
    }

    /// A cast or a token numbered beyond every member's window of casts in flight is no member's:
    /// dropped (`OutOfWindow`), it neither holds every later cast here for the view nor numbers
    /// this member's casts from there; unordered casts past what a member can cast are dropped
    /// too. The fast path refuses the same cast, so the bypass agrees.
    #[test]
    fn casts_and_tokens_numbered_far_ahead_are_dropped() {
        let view = crate::testing::view_of("vsync+Token", 2);
        let mut b = Harness::new(Totem::new(&Config { pending_max: 2 }, &view, 1), 1);
        let far = b.layer.ahead_max + 1;
        let data =
            |seq| Up::Cast { origin: 0, msg: Msg::new(vec![1].into()).with(Header::Data { seq }), qos: Qos::Reliable };
        assert!(b.up(data(far)).is_empty());
        assert_eq!(b.stats.drops(DropReason::OutOfWindow), 1);
        assert_eq!(b.layer.buffered(), 0, "not held");
        let header = motet_wire::Header::from(Header::Data { seq: far });
        let up = fast::Up { origin: 0, cast: true, qos: Qos::Reliable, header: &header, len: 1 };
        assert!(b.layer.fast_up(&up).is_none(), "the fast path refuses it too");
        let token = Msg::default().with(Header::Token { seq: far });
        b.up(Up::Send { origin: 0, msg: token });
        assert!(!b.layer.holder, "a token far ahead is not taken");
        assert_eq!(b.stats.drops(DropReason::OutOfWindow), 2);
        // Just within: held, waiting for the casts before it; and casts right after it are taken
        // too, however far from the next to deliver (a long gap does not make them look too far:
        // what is missing is counted, not the distance). One that would leave more numbers
        // missing than can be on their way is not.
        b.up(data(far - 1));
        assert_eq!(b.layer.held.len(), 1);
        b.up(data(far));
        b.up(data(far + 1));
        assert_eq!(b.layer.held.len(), 3);
        assert_eq!(b.stats.drops(DropReason::OutOfWindow), 2);
        b.up(data(far + 3));
        assert_eq!((b.layer.held.len(), b.stats.drops(DropReason::OutOfWindow)), (3, 3));
        // Unordered: at most pending_max plus a window from one origin.
        for _ in 0..b.layer.unordered_max() + 3 {
            b.up(Up::Cast { origin: 0, msg: Msg::default().with(Header::Unordered), qos: Qos::Reliable });
        }
        assert_eq!(b.layer.unordered[0].len() as u64, b.layer.unordered_max());
        assert_eq!(b.stats.drops(DropReason::OutOfWindow), 6);
    }

    /// Casts each within the bound of the one before, `ahead_max` apart, are held only while the
    /// numbers missing below them stay within `ahead_max`: before the thirty-third session every
    /// one was held for the rest of the view (each raised what counts as known), at a faulty
    /// member's rate. The fast path refuses the same casts.
    #[test]
    fn casts_held_beyond_a_gap_are_at_most_ahead_max() {
        let view = crate::testing::view_of("vsync+Token", 2);
        let mut b = Harness::new(Totem::new(&Config { pending_max: 2 }, &view, 1), 1);
        b.layer.ahead_max = 4; // small, to reach it
        let data =
            |seq| Up::Cast { origin: 0, msg: Msg::new(vec![1].into()).with(Header::Data { seq }), qos: Qos::Reliable };
        for k in 1..=10u64 {
            b.up(data(k * 4));
        }
        assert_eq!(b.layer.held.len(), 1, "4 held (0..4 missing); 8 would leave 7 missing");
        assert_eq!(b.stats.drops(DropReason::OutOfWindow), 9);
        let header = motet_wire::Header::from(Header::Data { seq: 9 });
        let up = fast::Up { origin: 0, cast: true, qos: Qos::Reliable, header: &header, len: 1 };
        assert!(b.layer.fast_up(&up).is_none(), "the fast path refuses it too");
        // The one expected next is still taken, and delivered.
        b.up(data(0));
        assert_eq!(b.layer.deliver_next, 1);
    }

    /// Genuine casts that arrived behind one missing number are all held, however many (`mflow`
    /// credits them on arrival), and delivered once it comes. The thirty-third session's bound
    /// on their count dropped those past `ahead_max`, which `mnak` had already delivered: the
    /// members then delivered different casts (a review's finding).
    #[test]
    fn genuine_casts_behind_one_gap_are_held_however_many() {
        let view = crate::testing::view_of("vsync+Token", 3);
        let mut b = Harness::new(Totem::new(&Config { pending_max: 2 }, &view, 2), 2);
        b.layer.ahead_max = 4;
        let data = |origin, seq| Up::Cast {
            origin,
            msg: Msg::new(vec![1].into()).with(Header::Data { seq }),
            qos: Qos::Reliable,
        };
        for seq in 1..=20 {
            b.up(data(1, seq));
        }
        assert_eq!((b.layer.held.len(), b.stats.drops(DropReason::OutOfWindow)), (20, 0));
        b.up(data(0, 0));
        assert_eq!(b.layer.deliver_next, 21);
    }

    /// Without flow control a member may lag any number of casts behind, so a token numbered that
    /// far ahead is genuine and taken (dropped, it was lost for the view: nobody could cast in
    /// order again), and so is a cast.
    #[test]
    fn without_flow_control_a_token_far_ahead_is_taken() {
        let bounded = crate::testing::view_of("vsync+Token", 2);
        let far = Totem::new(&Config { pending_max: 2 }, &bounded, 1).ahead_max + 1;
        let view = crate::testing::view_of("Gmp+Sync+Suspect+Token", 2);
        let mut b = Harness::new(Totem::new(&Config { pending_max: 2 }, &view, 1), 1);
        b.up(Up::Send { origin: 0, msg: Msg::default().with(Header::Token { seq: far }) });
        assert!(b.layer.holder, "the token is taken");
        let data = Up::Cast {
            origin: 0,
            msg: Msg::new(vec![1].into()).with(Header::Data { seq: 2 * far }),
            qos: Qos::Reliable,
        };
        b.up(data);
        assert_eq!(b.stats.drops(DropReason::OutOfWindow), 0);
    }

    /// Without flow control nothing bounds how far ahead a cast may be numbered, except the
    /// numbers a token can give: a cast numbered past them (by a faulty member) is dropped; it
    /// overflowed the span of held casts (a panic in a checked build).
    #[test]
    fn without_flow_control_a_cast_numbered_past_any_token_is_dropped() {
        let view = crate::testing::view_of("Gmp+Sync+Suspect+Token", 2);
        let mut b = Harness::new(Totem::new(&Config { pending_max: 2 }, &view, 1), 1);
        for seq in [u64::MAX, SEQ_MAX + 1] {
            let data = Msg::new(vec![1].into()).with(Header::Data { seq });
            assert!(b.up(Up::Cast { origin: 0, msg: data, qos: Qos::Reliable }).is_empty());
        }
        assert_eq!((b.stats.drops(DropReason::OutOfWindow), b.layer.held.len()), (2, 0));
        let data = Msg::new(vec![1].into()).with(Header::Data { seq: SEQ_MAX });
        b.up(Up::Cast { origin: 0, msg: data, qos: Qos::Reliable });
        assert_eq!(b.layer.held.len(), 1, "the last number a token can give is held");
    }
}
