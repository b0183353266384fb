//! `causal`: causal order of application casts by vector timestamps (property `Causal`; Ensemble
//! `causal`, digest Appendix A.2, placed just below the application layer like the total-order
//! layers; membership traffic is exempt).
//!
//! Provides: [`Service::CausalOrder`]. Requires below: [`Service::ReliableCast`] (per-origin FIFO,
//! which both the delivery rule and the header compression rely on) and
//! [`Service::LocalDelivery`]; above: [`Service::Flush`] (a view ends at an agreed cut, so every
//! survivor holds the same casts when it settles what can never be delivered). Header:
//! `Data(entries)` on application casts, `NoHdr` on everything else.
//!
//! A cast's timestamp has one entry per rank of the view (not per endpoint ever seen): how many of
//! that rank's casts its sender had delivered when it cast, and for the sender itself how many it
//! had cast before. A member delivers a cast of `o` once it has delivered exactly the casts of `o`
//! before it and, of every other rank, at least as many as the timestamp says; until then it holds
//! it. Compression: casts of one origin arrive in FIFO order, so the header carries only the
//! entries that changed since the origin's previous cast, and never the origin's own (it is
//! always one more). A sender that delivered nothing in between sends an empty list.
//!
//! View changes: the cut holds every cast some survivor delivered, so a cast held at the cut waits
//! for a cast no survivor has (one a failed member delivered and nobody else received). Such casts
//! (only failed members can have sent them) are dropped at the cut, the same way at every survivor
//! (counted as `Orphan`).
//!
//! A timestamp entry for a rank `k` counts casts of `k` its sender delivered, so received by it;
//! with `mflow` in the stack, `k` is at most a window of casts ahead of this member, so an entry
//! more than `casts_ahead_max` (`layers/mod.rs`) beyond the casts of `k` received here is no genuine
//! member's, and the cast is dropped (`OutOfWindow`): held, it and every later cast of its origin
//! would wait for the rest of the view. Without flow control there is no such bound.

use crate::event::{Dn, DropReason, Msg, Qos, Up};
use crate::fast::{self, DnStep, Down, UpStep};
use crate::layer::{Layer, LayerSpec, Outbox, Service};
use crate::view::ViewState;
use crate::Rank;
use motet_wire::hdr::causal::{entries_len, Header, ENTRIES_BYTES_MAX};
use std::collections::VecDeque;
use std::sync::Arc;

/// `causal` has no parameters.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {}

/// Static description.
pub static SPEC: LayerSpec = LayerSpec {
    name: "causal",
    summary: "causal order of application casts: vector timestamps, sent as changed entries only",
    provides: &[Service::CausalOrder],
    requires_below: &[Service::ReliableCast, Service::LocalDelivery],
    requires_above: &[Service::Flush],
    above_every: &[],
    below_every: &[],
};

/// `causal` state.
#[derive(Debug, PartialEq)]
pub struct Causal {
    rank: Rank,
    /// Casts delivered, per origin rank.
    delivered: Vec<u64>,
    /// The timestamp of this member's previous cast (to send only what changed).
    sent: Vec<u64>,
    /// Casts this member has cast.
    casts: u64,
    /// Per origin: the timestamp of its last cast received (to expand the next one).
    last: Vec<Vec<u64>>,
    /// Per origin: casts received, and so the own entry of the next one.
    received: Vec<u64>,
    /// Per origin, in FIFO order: casts waiting for what they depend on, with their timestamps.
    held: Vec<VecDeque<(Vec<u64>, Msg)>>,
    /// The view's cut was delivered and settled.
    completed: bool,
    /// The bypass's place in a release of held casts ([`Layer::fast_release`]): the origin to
    /// look at next and whether this pass over the origins delivered any, as `deliver_ready`'s
    /// loop would stand. `None` between inputs.
    releasing: Option<(usize, bool)>,
    /// The header of a cast that changes no entry, shared (a sender that delivered nothing since
    /// its previous cast: the common case of one sender, and the compression template's).
    unchanged: Arc<[(u16, u64)]>,
    /// How far an entry may be beyond the casts of its rank received here
    /// ([`super::casts_ahead_max`]).
    ahead_max: u64,
}

impl Causal {
    /// A `causal` for `view`.
    pub fn new(_config: &Config, view: &ViewState, rank: Rank) -> Causal {
        let n = view.len();
        Causal {
            rank,
            delivered: vec![0; n],
            sent: vec![0; n],
            casts: 0,
            last: vec![vec![0; n]; n],
            received: vec![0; n],
            held: vec![VecDeque::new(); n],
            completed: false,
            releasing: None,
            unchanged: Arc::from(Vec::new()),
            ahead_max: super::casts_ahead_max(view),
        }
    }

    /// The entries that changed since this member's previous cast (its own is implicit).
    fn changed(&self) -> Arc<[(u16, u64)]> {
        let me = usize::from(self.rank);
        let changed = (0..self.delivered.len()).filter(|&k| k != me && self.delivered[k] != self.sent[k]);
        if changed.clone().next().is_none() {
            return Arc::clone(&self.unchanged);
        }
        changed.map(|k| (k as u16, self.delivered[k])).collect()
    }

    /// Why a cast from `origin` carrying `entries` is refused, if it is: an entry for no other
    /// rank of the view, or entries not in strictly rising rank order, as `changed` and
    /// `in_parts` make them (`Malformed`), or one further beyond the casts of its rank received
    /// here than any genuine member's can be (`OutOfWindow`). The order lets
    /// `deliverable_now` read a timestamp in one pass: with repeated ranks allowed it looked each
    /// rank up in the whole list, n times the entries per cast (about 65,000 steps a cast at 256
    /// members casting, and 10^8 for a hostile header of 32,000 entries at 4,096).
    fn refuse(&self, origin: usize, entries: &[(u16, u64)]) -> Option<DropReason> {
        let n = self.delivered.len();
        let rising = entries.windows(2).all(|pair| pair[0].0 < pair[1].0);
        if !rising || entries.iter().any(|&(rank, _)| usize::from(rank) >= n || usize::from(rank) == origin) {
            return Some(DropReason::Malformed);
        }
        let far = |&(rank, count): &(u16, u64)| count.saturating_sub(self.received[usize::from(rank)]) > self.ahead_max;
        entries.iter().any(far).then_some(DropReason::OutOfWindow)
    }

    /// Changed entries `changed` of this member's next cast that fit in one header: all of them,
    /// or, past [`ENTRIES_BYTES_MAX`], the last part, the others sent ahead as `Stamp` casts
    /// (found by a review: a header of about 850 changed entries passed the room kept for
    /// headers, and the cast could never be sent).
    fn in_parts(changed: Arc<[(u16, u64)]>, out: &mut Outbox<'_>) -> Arc<[(u16, u64)]> {
        if !too_long(&changed) {
            return changed;
        }
        let mut part: Vec<(u16, u64)> = Vec::new();
        let mut bytes = 0;
        for &entry in changed.iter() {
            // The entry alone, without the count's byte; a part's count takes at most two bytes
            // (fewer than 2^14 entries).
            let len = entries_len(&[entry]) - 1;
            if bytes + len + 2 > ENTRIES_BYTES_MAX {
                let stamp = Msg::default().with(Header::Stamp(std::mem::take(&mut part).into()));
                out.dn(Dn::Cast { msg: stamp, qos: Qos::Reliable });
                bytes = 0;
            }
            part.push(entry);
            bytes += len;
        }
        part.into()
    }

    /// Part of `origin`'s next timestamp, sent ahead of it (`Stamp`): its entries replace those
    /// of `origin`'s previous timestamp, as its next cast's will.
    fn restamp(&mut self, origin: Rank, entries: &[(u16, u64)], out: &mut Outbox<'_>) {
        let o = usize::from(origin);
        if let Some(reason) = self.refuse(o, entries) {
            return out.drop_input(super::LayerKind::Causal, reason);
        }
        for &(rank, count) in entries {
            self.last[o][usize::from(rank)] = count;
        }
    }

    /// Whether a cast from `origin` carrying `entries` would be delivered at once (nothing of
    /// its origin held before it, and every entry of its timestamp delivered), without building
    /// the timestamp. `None` if the cast is refused ([`Causal::refuse`]).
    fn deliverable_now(&self, origin: usize, entries: &[(u16, u64)]) -> Option<bool> {
        let n = self.delivered.len();
        if self.refuse(origin, entries).is_some() {
            return None;
        }
        // One pass: the entries are in rising rank order (`refuse`); a rank they do not name keeps
        // the origin's previous timestamp's count.
        let mut named = entries.iter().peekable();
        let others = (0..n).filter(|&k| k != origin).all(|k| {
            let count = match named.next_if(|e| usize::from(e.0) == k) {
                Some(&(_, count)) => count,
                None => self.last[origin][k],
            };
            self.delivered[k] >= count
        });
        Some(self.held[origin].is_empty() && self.delivered[origin] == self.received[origin] && others)
    }

    /// Records the timestamp of the next cast of `origin`, which carries `entries`, as its last
    /// (in place: a cast delivered at once needs no copy of it).
    fn stamp(&mut self, origin: usize, entries: &[(u16, u64)]) {
        let last = &mut self.last[origin];
        for &(rank, count) in entries {
            last[usize::from(rank)] = count;
        }
        last[origin] = self.received[origin];
        self.received[origin] += 1;
    }

    /// Whether a cast of `origin` with timestamp `vt` can be delivered now.
    fn deliverable(&self, origin: usize, vt: &[u64]) -> bool {
        vt.iter().enumerate().all(|(k, &t)| if k == origin { self.delivered[k] == t } else { self.delivered[k] >= t })
    }

    /// Delivers every held cast whose predecessors are delivered, until none is.
    fn deliver_ready(&mut self, out: &mut Outbox<'_>) {
        let mut progress = true;
        while progress {
            progress = false;
            for origin in 0..self.held.len() {
                while let Some((vt, _)) = self.held[origin].front() {
                    if !self.deliverable(origin, vt) {
                        break;
                    }
                    let (_, msg) = self.held[origin].pop_front().expect("front exists");
                    self.delivered[origin] += 1;
                    out.up(Up::Cast { origin: origin as Rank, msg, qos: Qos::Reliable });
                    progress = true;
                }
            }
        }
    }

    fn recv(&mut self, origin: Rank, entries: &[(u16, u64)], msg: Msg, out: &mut Outbox<'_>) {
        let o = usize::from(origin);
        if let Some(reason) = self.refuse(o, entries) {
            return out.drop_input(super::LayerKind::Causal, reason);
        }
        self.stamp(o, entries);
        if self.completed {
            // Nothing should arrive after the cut; if it does, it goes up only in order.
            if self.deliverable(o, &self.last[o]) {
                self.delivered[o] += 1;
                out.up(Up::Cast { origin, msg, qos: Qos::Reliable });
            } else {
                out.drop_input(super::LayerKind::Causal, DropReason::Orphan);
            }
            return;
        }
        self.held[o].push_back((self.last[o].clone(), msg));
        self.deliver_ready(out);
    }
}

/// Whether changed entries take more than one header's room ([`ENTRIES_BYTES_MAX`]); counted
/// only for a list that could (an entry takes at most 13 bytes).
fn too_long(changed: &[(u16, u64)]) -> bool {
    changed.len() * 13 + 2 > ENTRIES_BYTES_MAX && entries_len(changed) > ENTRIES_BYTES_MAX
}

impl Layer for Causal {
    fn handle_up(&mut self, ev: Up, out: &mut Outbox<'_>) {
        match ev {
            Up::Cast { origin, mut msg, qos } => match msg.pop_as::<Header>() {
                Some(Header::NoHdr) => out.up(Up::Cast { origin, msg, qos }),
                // This layer casts its headers reliably: one on an unreliable cast (no sequence
                // number, no repair) would raise an origin's count out of order and hold every
                // genuine cast of it behind that for the rest of the view.
                Some(Header::Data(_) | Header::Stamp(_)) if qos == Qos::Unreliable => {
                    out.drop_input(super::LayerKind::Causal, DropReason::HeaderMismatch)
                }
                Some(Header::Data(entries)) => self.recv(origin, &entries, msg, out),
                Some(Header::Stamp(entries)) => self.restamp(origin, &entries, out),
                None => out.drop_input(super::LayerKind::Causal, DropReason::HeaderMismatch),
            },
            Up::CutReached => {
                self.deliver_ready(out);
                for held in &mut self.held {
                    for _ in held.drain(..) {
                        out.drop_input(super::LayerKind::Causal, DropReason::Orphan);
                    }
                }
                self.completed = true;
                out.up(Up::CutReached);
            }
            other => out.pass_up(super::LayerKind::Causal, other, Header::NoHdr),
        }
    }

    fn handle_dn(&mut self, ev: Dn, out: &mut Outbox<'_>) {
        match ev {
            Dn::Cast { msg, qos: Qos::Causal } => {
                let changed = Causal::in_parts(self.changed(), out);
                self.sent.clone_from(&self.delivered);
                self.casts += 1;
                out.dn(Dn::Cast { msg: msg.with(Header::Data(changed)), qos: Qos::Reliable });
            }
            other => out.pass_dn(other, Header::NoHdr),
        }
    }

    // The fast path (docs/bypass.md): a causal cast going down gets its changed entries; one
    // coming up is delivered at once when its timestamp is satisfied, then releases the held
    // casts that it made deliverable, in `deliver_ready`'s order; one that is not is held.

    fn fast_dn(&self, down: &Down) -> Option<DnStep> {
        match (down.dest, down.qos) {
            (None, Qos::Causal) => {
                let changed = self.changed();
                // Changes too long for one header go in parts, on the layered path.
                (!too_long(&changed)).then(|| DnStep::to(Header::Data(changed), Qos::Reliable))
            }
            _ => DnStep::pass(Header::NoHdr, down),
        }
    }

    fn fast_dn_apply(&mut self, down: &Down, _out: &mut Outbox<'_>) {
        if let (None, Qos::Causal) = (down.dest, down.qos) {
            self.sent.clone_from(&self.delivered);
            self.casts += 1;
        }
    }

    fn fast_up(&self, up: &fast::Up<'_>) -> Option<UpStep> {
        match up.header {
            motet_wire::Header::Causal(Header::NoHdr) => UpStep::pass(up),
            motet_wire::Header::Causal(Header::Data(entries))
                if up.cast && !self.completed && up.qos != Qos::Unreliable =>
            {
                match self.deliverable_now(usize::from(up.origin), entries)? {
                    // Delivering it may make held casts deliverable: they follow it.
                    true => Some(UpStep { release: self.buffered() > 0, ..UpStep::to(Qos::Reliable) }),
                    false => Some(UpStep { absorb: true, ..UpStep::to(up.qos) }),
                }
            }
            _ => None,
        }
    }

    fn fast_up_apply(&mut self, up: &fast::Up<'_>, msg: &Msg, _out: &mut Outbox<'_>) {
        let motet_wire::Header::Causal(Header::Data(entries)) = up.header else { return };
        let origin = usize::from(up.origin);
        let now = self.deliverable_now(origin, entries) == Some(true);
        self.stamp(origin, entries);
        if !now {
            self.held[origin].push_back((self.last[origin].clone(), msg.clone()));
            return;
        }
        self.delivered[origin] += 1;
        // `deliver_ready` after this delivery: the rest of this pass, then more passes. Set
        // whatever it was, so a release cut short can never leave a stale place behind.
        self.releasing = (self.buffered() > 0).then_some((origin + 1, true));
    }

    fn fast_release(&mut self, _origin: Rank, _cast: bool, _out: &mut Outbox<'_>) -> Option<(Rank, Msg)> {
        // `deliver_ready`, one cast at a time.
        let (mut origin, mut progress) = self.releasing?;
        loop {
            if origin == self.held.len() {
                if !progress {
                    self.releasing = None;
                    return None;
                }
                (origin, progress) = (0, false);
            }
            if self.held[origin].front().is_some_and(|(vt, _)| self.deliverable(origin, vt)) {
                let (_, msg) = self.held[origin].pop_front().expect("front exists");
                self.delivered[origin] += 1;
                // The same origin's next cast is looked at next, as the handler's inner loop does.
                self.releasing = Some((origin, true));
                return Some((origin as Rank, msg));
            }
            origin += 1;
        }
    }

    fn fast_inert(&self, trace: fast::Trace) -> Option<usize> {
        // Causal order: only casts have work here.
        (!trace.is_cast()).then_some(usize::MAX)
    }

    fn check_invariants(&self) {
        assert!(self.releasing.is_none(), "a release of held casts ended within its input");
        let me = usize::from(self.rank);
        assert!(self.delivered[me] <= self.casts, "delivered more own casts than cast");
        for (origin, held) in self.held.iter().enumerate() {
            assert!(self.delivered[origin] + held.len() as u64 <= self.received[origin]);
        }
    }

    fn buffered(&self) -> usize {
        self.held.iter().map(VecDeque::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::harness::{Harness, Out};

    fn delivered(out: &[Out]) -> Vec<(Rank, u8)> {
        out.iter()
            .filter_map(|o| match o {
                Out::Up(Up::Cast { origin, msg, .. }) => Some((*origin, msg.payload.to_bytes()[0])),
                _ => None,
            })
            .collect()
    }

    /// Casts `tag` at `h` and returns what goes down (with its header).
    fn cast(h: &mut Harness<Causal>, tag: u8) -> Msg {
        match &h.dn(Dn::Cast { msg: Msg::new(vec![tag].into()), qos: Qos::Causal })[..] {
            [Out::Dn(Dn::Cast { msg, qos: Qos::Reliable })] => msg.clone(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_reply_waits_for_what_it_answers() {
        let view = crate::testing::view_of("vsync+Causal", 3);
        let (mut a, mut b, mut c) = (
            Harness::new(Causal::new(&Config {}, &view, 0), 0),
            Harness::new(Causal::new(&Config {}, &view, 1), 1),
            Harness::new(Causal::new(&Config {}, &view, 2), 2),
        );
        let question = cast(&mut a, 1);
        assert_eq!(delivered(&b.up(Up::Cast { origin: 0, msg: question.clone(), qos: Qos::Reliable })), vec![(0, 1)]);
        let answer = cast(&mut b, 2);
        assert_eq!(answer.hdrs, vec![Header::Data(vec![(0, 1)].into()).into()], "only the changed entry");
        // c receives the answer first: it waits for the question.
        assert!(delivered(&c.up(Up::Cast { origin: 1, msg: answer, qos: Qos::Reliable })).is_empty());
        assert_eq!(c.layer.buffered(), 1);
        let out = c.up(Up::Cast { origin: 0, msg: question, qos: Qos::Reliable });
        assert_eq!(delivered(&out), vec![(0, 1), (1, 2)]);
        // b casts again having delivered nothing new: no entry at all.
        assert_eq!(cast(&mut b, 3).hdrs, vec![Header::Data(Vec::new().into()).into()]);
    }

    /// A timestamp whose changes do not fit in one header (1,000 members, each entry past 2^14)
    /// goes in parts: `Stamp` casts ahead of the cast, each within `ENTRIES_BYTES_MAX`, and a
    /// receiver rebuilds the whole timestamp from them: it holds the cast until it has delivered
    /// what the timestamp names, then delivers it. Before, the one header took about 5 KB, more
    /// than the room kept for headers, and the cast was too large to send (found by a review).
    #[test]
    fn a_timestamp_too_long_for_one_header_goes_in_parts() {
        const N: usize = 1000;
        let view = crate::testing::view_of("vsync+Causal", N);
        let mut sender = Harness::new(Causal::new(&Config {}, &view, 1), 1);
        let mut receiver = Harness::new(Causal::new(&Config {}, &view, 2), 2);
        let counts: Vec<u64> = (0..N as u64).map(|k| 20_000 + k).collect();
        sender.layer.delivered.clone_from(&counts);
        sender.layer.delivered[1] = 0;
        sender.layer.received.clone_from(&sender.layer.delivered);
        let down = Down { dest: None, qos: Qos::Causal, len: 1 };
        assert!(sender.layer.fast_dn(&down).is_none(), "the parts go on the layered path");
        let out = sender.dn(Dn::Cast { msg: Msg::new(vec![7].into()), qos: Qos::Causal });
        let casts: Vec<&Msg> = out
            .iter()
            .map(|o| match o {
                Out::Dn(Dn::Cast { msg, qos: Qos::Reliable }) => msg,
                other => panic!("{other:?}"),
            })
            .collect();
        assert!(casts.len() >= 3, "{} casts", casts.len());
        let entries = |msg: &Msg| match msg.hdrs.last().map(|h| h.as_ref().clone()) {
            Some(motet_wire::Header::Causal(Header::Stamp(e) | Header::Data(e))) => e,
            other => panic!("{other:?}"),
        };
        for (k, msg) in casts.iter().enumerate() {
            assert!(entries_len(&entries(msg)) <= ENTRIES_BYTES_MAX);
            let last = k + 1 == casts.len();
            assert_eq!(msg.payload.is_empty(), !last, "only the cast itself carries data");
        }
        let all: usize = casts.iter().map(|m| entries(m).len()).sum();
        assert_eq!(all, N - 1, "every entry but the sender's own");
        assert_eq!(sender.layer.casts, 1, "the parts are not casts of the sender");
        // The receiver has delivered all but one cast of member 999: the cast waits for it.
        receiver.layer.delivered.clone_from(&counts);
        receiver.layer.delivered[1] = 0;
        receiver.layer.casts = counts[2];
        receiver.layer.delivered[N - 1] -= 1;
        receiver.layer.received.clone_from(&receiver.layer.delivered);
        receiver.layer.received[1] = 0;
        for msg in &casts {
            assert!(delivered(&receiver.up(Up::Cast { origin: 1, msg: (*msg).clone(), qos: Qos::Reliable })).is_empty());
        }
        assert_eq!(receiver.layer.buffered(), 1);
        let before = Msg::new(vec![9].into()).with(Header::Data(Vec::new().into()));
        let out = receiver.up(Up::Cast { origin: (N - 1) as Rank, msg: before, qos: Qos::Reliable });
        assert_eq!(delivered(&out), vec![((N - 1) as Rank, 9), (1, 7)]);
        receiver.layer.check_invariants();
    }

    #[test]
    fn the_cut_drops_what_can_never_be_delivered() {
        let view = crate::testing::view_of("vsync+Causal", 3);
        let mut c = Harness::new(Causal::new(&Config {}, &view, 2), 2);
        // A cast of 1 that depends on a cast of 0 nobody else has.
        let msg = Msg::new(vec![9].into()).with(Header::Data(vec![(0, 1)].into()));
        assert!(delivered(&c.up(Up::Cast { origin: 1, msg, qos: Qos::Reliable })).is_empty());
        let out = c.up(Up::CutReached);
        assert!(matches!(&out[..], [Out::Up(Up::CutReached)]));
        assert_eq!((c.layer.buffered(), c.stats.drops(DropReason::Orphan)), (0, 1));
    }

    /// A causal header on an unreliable cast is dropped: counted, it raised its origin's count and
    /// held every genuine cast of that origin behind it.
    #[test]
    fn a_causal_header_on_an_unreliable_cast_is_dropped() {
        let view = crate::testing::view_of("vsync+Causal", 3);
        let mut c = Harness::new(Causal::new(&Config {}, &view, 2), 2);
        let forged = Msg::new(vec![8].into()).with(Header::Data(vec![(1, 1)].into()));
        assert!(delivered(&c.up(Up::Cast { origin: 1, msg: forged, qos: Qos::Unreliable })).is_empty());
        let stamp = Msg::default().with(Header::Stamp(vec![(1, 3)].into()));
        assert!(c.up(Up::Cast { origin: 1, msg: stamp, qos: Qos::Unreliable }).is_empty());
        assert_eq!(c.stats.drops(DropReason::HeaderMismatch), 2);
        let genuine = Msg::new(vec![9].into()).with(Header::Data(Vec::new().into()));
        assert_eq!(delivered(&c.up(Up::Cast { origin: 1, msg: genuine, qos: Qos::Reliable })), vec![(1, 9)]);
        // An unreliable cast without this layer's data passes.
        let gossip = Msg::new(vec![4].into()).with(Header::NoHdr);
        assert_eq!(delivered(&c.up(Up::Cast { origin: 0, msg: gossip, qos: Qos::Unreliable })), vec![(0, 4)]);
    }

    #[test]
    fn bad_entries_and_foreign_traffic() {
        let view = crate::testing::view_of("vsync+Causal", 2);
        let mut h = Harness::new(Causal::new(&Config {}, &view, 1), 1);
        let bad = Msg::new(vec![1].into()).with(Header::Data(vec![(5, 1)].into()));
        assert!(h.up(Up::Cast { origin: 0, msg: bad, qos: Qos::Reliable }).is_empty());
        assert_eq!(h.stats.drops(DropReason::Malformed), 1);
        // Entries not in rising rank order (a repeated rank, here) are no genuine member's.
        let view = crate::testing::view_of("vsync+Causal", 4);
        let mut c = Harness::new(Causal::new(&Config {}, &view, 3), 3);
        for entries in [vec![(1, 0), (1, 0)], vec![(2, 0), (1, 0)]] {
            let msg = Msg::new(vec![1].into()).with(Header::Data(entries.into()));
            assert!(c.up(Up::Cast { origin: 0, msg, qos: Qos::Reliable }).is_empty());
        }
        assert_eq!(c.stats.drops(DropReason::Malformed), 2);
        let msg = Msg::new(vec![1].into()).with(Header::Data(vec![(1, 0), (2, 0)].into()));
        assert_eq!(delivered(&c.up(Up::Cast { origin: 0, msg, qos: Qos::Reliable })), vec![(0, 1)]);
        let out = h.dn(Dn::Cast { msg: Msg::default(), qos: Qos::Reliable });
        assert!(matches!(&out[..], [Out::Dn(Dn::Cast { msg, .. })] if msg.hdrs == vec![Header::NoHdr.into()]));
    }

    /// A cast that claims to follow more casts of a member than can have been sent and not yet
    /// received here is dropped (`OutOfWindow`) on both paths, and the next cast of its origin
    /// is not held behind it. One at the bound is genuine and waits. Without flow control there
    /// is no bound, and it waits too.
    #[test]
    fn a_timestamp_beyond_what_can_be_on_its_way_is_dropped() {
        let view = crate::testing::view_of("vsync+Causal", 3);
        let mut h = Harness::new(Causal::new(&Config {}, &view, 2), 2);
        let max = h.layer.ahead_max;
        assert_eq!(max, 1 << 15, "the stack has mflow");
        let stamped = |tag: u8, count: u64| Msg::new(vec![tag].into()).with(Header::Data(vec![(0, count)].into()));
        assert!(h.up(Up::Cast { origin: 1, msg: stamped(1, max + 1), qos: Qos::Reliable }).is_empty());
        assert_eq!((h.stats.drops(DropReason::OutOfWindow), h.layer.buffered()), (1, 0));
        let entries: Arc<[(u16, u64)]> = vec![(0, max + 1)].into();
        let header = motet_wire::Header::from(Header::Data(entries));
        let up = fast::Up { origin: 1, cast: true, qos: Qos::Reliable, header: &header, len: 1 };
        assert!(h.layer.fast_up(&up).is_none(), "the fast path leaves it to the layered one");
        // Its origin's next cast depends on nothing: delivered, not held behind the dropped one.
        let next = Msg::new(vec![2].into()).with(Header::Data(Vec::new().into()));
        assert_eq!(delivered(&h.up(Up::Cast { origin: 1, msg: next, qos: Qos::Reliable })), vec![(1, 2)]);
        // At the bound: held, waiting for casts of 0 that may be on their way.
        assert!(h.up(Up::Cast { origin: 1, msg: stamped(3, max), qos: Qos::Reliable }).is_empty());
        assert_eq!((h.stats.drops(DropReason::OutOfWindow), h.layer.buffered()), (1, 1));
        h.layer.check_invariants();

        let view = crate::testing::view_of("Gmp+Sync+Suspect+Causal", 3);
        let mut h = Harness::new(Causal::new(&Config {}, &view, 2), 2);
        assert!(h.up(Up::Cast { origin: 1, msg: stamped(1, 4 * max), qos: Qos::Reliable }).is_empty());
        assert_eq!((h.stats.drops(DropReason::OutOfWindow), h.layer.buffered()), (0, 1));
    }
}
