//! Holes in a sequence received out of order, and which of them a repair timer asks for: shared
//! by `mnak` and `pt2pt` (receiver-driven repair, thesis §2.3.3 and §5.6 pp.87-88).

use crate::event::Msg;
use crate::time::{Duration, Instant};
use motet_wire::Seqno;
use std::collections::BTreeMap;

/// Holes looked at per origin per timer: a bound on the NAKs one sweep sends (the rest are asked
/// for at later sweeps).
pub(super) const HOLES_MAX: usize = 32;

/// What one sender's messages received ahead of a gap cost a receiver, in bytes: each its payload
/// and `MESSAGE_CHARGE`, what the flow-control windows count.
fn cost(len: usize) -> u64 {
    (len as u64).saturating_add(super::MESSAGE_CHARGE)
}

/// How many bytes of one sender's messages a receiver keeps ahead of a gap
/// ([`Ahead::fits`]), in a stack with `flow` (`mflow` for casts, `pt2ptw` for sends): twice the
/// largest window, since the sender is at most a window ahead of what this receiver has taken in
/// order, so genuine messages never reach it. Without flow control, no bound in bytes (only the
/// count, `recv_window_max`): there a receiver may fall any distance behind, and what it drops is
/// asked for again, at the cost of a repair round. Forged or corrupt datagrams of up to 64 KiB,
/// each alone inside the count, could otherwise make a receiver keep a gigabyte per sender.
pub(super) fn ahead_bytes_max(view: &crate::view::ViewState, flow: super::LayerKind) -> u64 {
    match view.stack.layers().contains(&flow) {
        true => 2 * super::WINDOW_BYTES_MAX,
        false => u64::MAX,
    }
}

/// One sender's messages received ahead of a gap, by sequence number, and what they cost
/// ([`cost`]). Both paths of a layer hold them through these methods, so the cost is always
/// theirs; reading goes through the map.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Ahead {
    msgs: BTreeMap<Seqno, Msg>,
    bytes: u64,
}

impl std::ops::Deref for Ahead {
    type Target = BTreeMap<Seqno, Msg>;
    fn deref(&self) -> &BTreeMap<Seqno, Msg> {
        &self.msgs
    }
}

impl Ahead {
    /// Whether a message of `len` payload bytes can be kept within `max` bytes.
    pub(super) fn fits(&self, len: usize, max: u64) -> bool {
        self.bytes.saturating_add(cost(len)) <= max
    }

    /// Keeps `msg` as number `seqno` (which must not be held yet).
    pub(super) fn insert(&mut self, seqno: Seqno, msg: Msg) {
        self.bytes += cost(msg.payload.len());
        let before = self.msgs.insert(seqno, msg);
        debug_assert!(before.is_none(), "{seqno} was held already");
    }

    /// Takes number `seqno`, if it is held.
    pub(super) fn remove(&mut self, seqno: &Seqno) -> Option<Msg> {
        let msg = self.msgs.remove(seqno)?;
        self.bytes -= cost(msg.payload.len());
        Some(msg)
    }

    /// Keeps only the numbers `keep` accepts.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(Seqno) -> bool) {
        self.msgs.retain(|&seqno, _| keep(seqno));
        self.bytes = self.msgs.values().map(|msg| cost(msg.payload.len())).sum();
    }

    /// Forgets everything held.
    pub(super) fn clear(&mut self) {
        self.msgs.clear();
        self.bytes = 0;
    }

    /// What is held costs what it says (for `check_invariants`).
    pub(super) fn check(&self) {
        assert_eq!(self.bytes, self.msgs.values().map(|msg| cost(msg.payload.len())).sum::<u64>());
    }
}

/// What [`Asked::hold`] found due for an arrival ahead of a gap.
#[derive(Debug, PartialEq)]
pub(super) enum Hold {
    /// The gap before it is already NAKed, or due to be.
    Nothing,
    /// A new gap `(lo, hi)`, to be NAKed now.
    Nak(Seqno, Seqno),
    /// A new gap, to be NAKed by the repair timer at this time, if it is still open then.
    Timer(Instant),
}

/// What a receiver has asked one sender for. Both paths of a layer (its handler and its fast-path
/// declaration) keep it through these methods, so they cannot drift apart.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Asked {
    /// Everything below this was received, or NAKed, or is due to be NAKed when its gap has lasted
    /// `nak_delay`.
    pub(super) naked_upto: Seqno,
    /// Everything below this was received or asked for at least once (`naked_upto` runs ahead of
    /// it by the holes whose NAK waits for `nak_delay`).
    pub(super) asked_upto: Seqno,
    /// Everything below this was received or asked for before the last full repair sweep (one a
    /// sweep interval or more after the one before, [`Asked::full_sweep`]): a hole here that is
    /// still open at the next full sweep was asked for a sweep interval ago or more, so its NAK
    /// or the answer was lost, and it is asked for again ([`to_ask`]).
    pub(super) swept_upto: Seqno,
    /// When the last full sweep was.
    pub(super) swept_at: Instant,
}

impl Asked {
    /// The part of the gap before an arrival `seqno`, ahead of `expected`, that is neither NAKed
    /// nor due to be: `(lo, hi)`, if any. Changes nothing (what a fast-path condition reads).
    pub(super) fn new_gap(&self, expected: Seqno, seqno: Seqno) -> Option<(Seqno, Seqno)> {
        let lo = expected.max(self.naked_upto);
        (lo < seqno).then(|| (lo, seqno - 1))
    }

    /// Records an arrival `seqno` ahead of `expected`, and says what is due for its
    /// [`Asked::new_gap`]: a NAK now, or (with a `nak_delay`) a repair timer at `now + nak_delay`,
    /// which the caller arms (`mnak` also notes it as its sweep's time).
    pub(super) fn hold(&mut self, expected: Seqno, seqno: Seqno, nak_delay: Duration, now: Instant) -> Hold {
        let gap = self.new_gap(expected, seqno);
        self.naked_upto = self.naked_upto.max(seqno + 1);
        match gap {
            Some((lo, hi)) if nak_delay.is_zero() => Hold::Nak(lo, hi),
            Some(_) => Hold::Timer(now + nak_delay),
            None => Hold::Nothing,
        }
    }

    /// Records a NAK sent for everything up to `hi`.
    pub(super) fn asked(&mut self, hi: Seqno) {
        self.asked_upto = self.asked_upto.max(hi + 1);
    }

    /// Whether a repair timer at `now` is a full sweep: a sweep interval or more after the last
    /// one. The timers also fire for other reasons (a new gap's `nak_delay`, 2 ms; a delayed
    /// acknowledgement), and a hole asked again at each of them was asked every few milliseconds,
    /// before its answer could come (a review's finding).
    pub(super) fn full_sweep(&self, now: Instant, interval: Duration) -> bool {
        now >= self.swept_at + interval
    }

    /// A full sweep at `now` has asked for what it asks ([`to_ask`]): what was asked for until now
    /// is asked for again at the next full sweep if it is still missing then.
    pub(super) fn swept(&mut self, now: Instant) {
        self.swept_upto = self.asked_upto;
        self.swept_at = now;
    }
}

/// The holes in what was received, each `(lo, hi)` inclusive: from `next` (the next number
/// expected) up to the first number `held` out of order (ascending), between held numbers, and up
/// to `end` (the number after the last one known to exist; `next` or less for none).
pub(super) fn holes(
    next: Seqno,
    held: impl Iterator<Item = Seqno>,
    end: Seqno,
) -> impl Iterator<Item = (Seqno, Seqno)> {
    let mut next = next;
    held.map(|held| (held, held + 1)).chain([(end, end)]).filter_map(move |(stop, after)| {
        let hole = (stop > next).then(|| (next, stop - 1));
        next = next.max(after);
        hole
    })
}

/// What a repair timer asks for: the first hole again (a NAK or its answer may have been lost),
/// at a full sweep every later hole that was asked for before the last full sweep again too
/// (likewise), and of the rest only what lies at or above `asked_upto` (each is asked for once,
/// when its `nak_delay` is over, as it would have been at once without a delay; a hole asked for
/// since the last full sweep may have its answer on the way). A later hole is so asked for again
/// at the first full sweep after its last NAK, never sooner than a sweep interval after it
/// (usually within two; up to about four when the timer keeps firing for other reasons just
/// before a full sweep is due, which moves the sweep back).
///
/// Until the thirty-ninth session only the first hole was asked for again: under heavy loss, the
/// holes whose one NAK or answer was lost waited to become the first, one at a time, about two
/// sweeps each. A `total` swarm run with 27% loss (seed 9, 500 casts a member) took 11 s to
/// repair the coordinator's stream, so its flush reached the members 6 to 11 s late, timed out,
/// and split the group.
pub(super) fn to_ask(holes: impl Iterator<Item = (Seqno, Seqno)>, asked: &Asked, full: bool) -> Vec<(Seqno, Seqno)> {
    let mut asks = Vec::new();
    for (k, (lo, hi)) in holes.take(HOLES_MAX).enumerate() {
        if k == 0 {
            asks.push((lo, hi));
            continue;
        }
        // The part asked for before the last full sweep, at a full sweep; then the part never
        // asked for. What lies between was asked for since the last full sweep: its answer may
        // be on the way (a hole that grew, as a tail that gossip reveals, straddles them).
        if full && lo < asked.swept_upto {
            asks.push((lo, hi.min(asked.swept_upto - 1)));
        }
        if hi >= asked.asked_upto {
            asks.push((lo.max(asked.asked_upto), hi));
        }
    }
    asks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holes_lie_before_between_and_after_what_is_held() {
        let got: Vec<_> = holes(0, [2, 4, 5].into_iter(), 9).collect();
        assert_eq!(got, [(0, 1), (3, 3), (6, 8)]);
        assert_eq!(holes(3, [3, 4].into_iter(), 0).count(), 0, "nothing missing");
        let asked = Asked { naked_upto: 9, asked_upto: 4, swept_upto: 0, swept_at: Instant::ZERO };
        assert_eq!(to_ask(got.iter().copied(), &asked, true), [(0, 1), (6, 8)], "the first again, the rest once");
        let asked = Asked { swept_upto: 4, ..asked };
        assert_eq!(to_ask(got.iter().copied(), &asked, true), [(0, 1), (3, 3), (6, 8)], "and again a full sweep later");
        assert_eq!(to_ask(got.iter().copied(), &asked, false), [(0, 1), (6, 8)], "but not at another timer");
        // A hole that grew past what the last full sweep had asked for (a tail that gossip
        // revealed): only its old part and its new part, not what was asked for since.
        let asked = Asked { naked_upto: 30, asked_upto: 20, swept_upto: 8, swept_at: Instant::ZERO };
        let grown = [(0, 1), (6, 29)];
        assert_eq!(to_ask(grown.into_iter(), &asked, true), [(0, 1), (6, 7), (20, 29)]);
    }
}
