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
    /// The last NAK that asked for the first hole (the one the sweep asks again first), and when
    /// it is asked again ([`to_ask`]).
    pub(super) first: Option<FirstAsk>,
    /// How long NAKs take to be answered ([`Asked::answered`]; `mnak` times them, `pt2pt` not).
    pub(super) rtt: RoundTrip,
}

/// The last NAK of the first hole ([`Asked::asked`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct FirstAsk {
    /// What it asked for, inclusive.
    pub(super) lo: Seqno,
    pub(super) hi: Seqno,
    /// When it is asked for again if it is still open.
    pub(super) due: Instant,
    /// How long it waited for an answer: twice as long next time, up to the sweep interval.
    pub(super) wait: Duration,
    /// When the hole was first asked for (by this NAK or the first of those it repeats).
    pub(super) at: Instant,
    /// The hole was asked for once: its answer times the round trip exactly.
    pub(super) once: bool,
    /// Nothing of its answer came yet: the first to come is timed ([`Asked::answered`]).
    pub(super) timed: bool,
}

/// A smoothed estimate of how long a NAK takes to be answered (TCP's `srtt`, RFC 6298 §2, with
/// its gain of 1/8), from the first hole's NAKs. It keeps the first hole's first re-ask from
/// going out before the answer could come, on a link slower than the configured schedule
/// assumes ([`Asked::first_wait`]): on a 40 ms round trip, re-asks an eighth of a 50 ms sweep
/// apart (6.25, 18.75 ms) went out before any answer, and each brought a second copy of what was
/// on its way.
///
/// Samples are of NAKs sent once (Karn's rule: the answer to a NAK sent twice cannot be told
/// from the first one's), except the first: on a link slower than an eighth of a sweep every
/// first NAK is repeated before its answer comes, so Karn's rule alone never took one (TCP keeps
/// its backed-off timeout for the next segment instead). That first sample is timed from the
/// first NAK, so it is too long if that NAK was lost, and it is provisional: the first exact
/// sample replaces it (on a LAN with loss, a provisional sample of several milliseconds
/// otherwise slowed the re-asks for many answers while the gain of 1/8 wore it down).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct RoundTrip {
    /// The smoothed round trip; zero before the first sample.
    srtt: Duration,
    /// `srtt` is one sample of a NAK sent more than once.
    provisional: bool,
}

impl RoundTrip {
    /// Takes one round trip, `exact` if its NAK was sent once.
    pub(super) fn sample(&mut self, r: Duration, exact: bool) {
        let r = r.0.max(1);
        if self.srtt.0 == 0 || (self.provisional && exact) {
            self.srtt = Duration(r);
            self.provisional = !exact;
        } else if exact {
            self.srtt = Duration(self.srtt.0 - self.srtt.0 / 8 + r / 8);
        }
    }

    /// When an answer is due, once there is a sample: a quarter more than the smoothed round
    /// trip (the margin RACK gives reordering, RFC 8985 §6.2).
    pub(super) fn expected(&self) -> Option<Duration> {
        (self.srtt.0 > 0).then(|| Duration(self.srtt.0.saturating_add(self.srtt.0 / 4)))
    }
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

    /// Records a NAK for `lo..=hi` sent at `now`, with `first` where the first hole begins
    /// (not always at the next number expected: casts held there wait for a cut; the first
    /// version, which assumed so, armed the timer in the past, found by the swarms).
    ///
    /// A NAK of the first hole is followed by another an eighth of the sweep `interval` later if
    /// it is still open (or when its answer is due, if that is later: [`Asked::first_wait`]),
    /// then after twice as long each time, up to an `interval` (as TCP backs off its
    /// retransmissions): one lost NAK or answer, the usual case when losses are
    /// independent, is repaired soon; a hole nobody answers (its origin cut off or paused) costs
    /// one NAK an interval.
    ///
    /// Returns when the repair timer must run for this NAK's re-ask: the caller arms it (a NAK
    /// sent outside the timer, by a cut or with no `nak_delay`, armed only a whole interval, so
    /// its first re-ask came eight times later than this says: a review's finding).
    #[must_use]
    pub(super) fn asked(
        &mut self,
        lo: Seqno,
        hi: Seqno,
        first: Option<Seqno>,
        now: Instant,
        interval: Duration,
    ) -> Instant {
        // Nothing of it asked for before (as a later hole, by a sweep): its answer times the
        // round trip exactly; an earlier NAK's answer may be on its way (a review's finding).
        let fresh = lo >= self.asked_upto;
        self.asked_upto = self.asked_upto.max(hi + 1);
        let Some(first) = first.filter(|first| (lo..=hi).contains(first)) else { return now + interval };
        let ask = match self.first_asked(first) {
            Some(last) => {
                let wait = Duration(last.wait.0.saturating_mul(2)).min(interval);
                FirstAsk { lo, hi, due: now + wait, wait, once: false, ..last }
            }
            None => {
                let wait = self.first_wait(interval);
                FirstAsk { lo, hi, due: now + wait, wait, at: now, once: fresh, timed: true }
            }
        };
        self.first = Some(ask);
        ask.due
    }

    /// An answer to a NAK of ours, `seqno`, arrived at `now`: the first to come for the first
    /// hole's NAK times the round trip ([`RoundTrip`]).
    pub(super) fn answered(&mut self, seqno: Seqno, now: Instant) {
        if let Some(ask) = &mut self.first {
            if ask.timed && (ask.lo..=ask.hi).contains(&seqno) {
                ask.timed = false;
                self.rtt.sample(now.saturating_since(ask.at), ask.once);
            }
        }
    }

    /// How long the first hole's first NAK waits for its answer before it is asked again: an
    /// eighth of the sweep `interval`, or when the answer is due ([`RoundTrip::expected`]) if
    /// that is later, up to the `interval`.
    pub(super) fn first_wait(&self, interval: Duration) -> Duration {
        let eighth = Duration(interval.0 / 8);
        self.rtt.expected().map_or(eighth, |due| due.max(eighth).min(interval))
    }

    /// Makes the first hole's re-ask due by `now` (its origin failed: the others are asked at
    /// once, not when the origin's backoff would have asked it again, up to an interval later).
    pub(super) fn ask_first_by(&mut self, now: Instant) {
        if let Some(ask) = &mut self.first {
            ask.due = ask.due.min(now);
        }
    }

    /// The last NAK of the first hole, if it still covers `first`, where the first hole begins (a
    /// first hole that filled in part keeps its NAK; a hole that became the first when the one
    /// before it filled was asked for by another NAK, and waits for a full sweep, as any later
    /// hole).
    fn first_asked(&self, first: Seqno) -> Option<FirstAsk> {
        self.first.filter(|ask| (ask.lo..=ask.hi).contains(&first))
    }

    /// When the repair timer is next due, after `now`, for holes that begin at `first`: when the
    /// first hole is to be asked again, or a sweep interval after the last full sweep, whichever
    /// comes first. The caller arms it after each sweep that leaves holes open, since no NAK of
    /// that sweep may have armed it.
    pub(super) fn due(&self, first: Seqno, now: Instant, interval: Duration) -> Instant {
        let full = self.swept_at + interval;
        let at = self.first_asked(first).map_or(full, |ask| full.min(ask.due));
        // A sweep at `now` asks for what is due then, so both lie ahead. Were one not to, an
        // alarm in the past would fire at once, again and again: the simulator hung so on the
        // first version of this, which looked for the first hole at the next number expected.
        debug_assert!(at > now, "repair due at {at:?}, not after {now:?}");
        if at > now {
            at
        } else {
            now + interval
        }
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

/// What one requester may still have retransmitted to it in answer to its NAKs: a token bucket,
/// refilled at a rate a second up to a burst ([`Budget::take`]), shared by `mnak` and `pt2pt`.
///
/// A NAK of a few bytes asks for up to `retransmit_max` whole messages, so a member that repeats
/// one (a fault, or an attack from inside the group) could spend the others' send capacity
/// without bound. The bucket bounds what each requester gets, whatever it asks; what it does not
/// get it asks for again at its next re-ask, as after a lost answer. The burst holds what one of
/// an honest requester's sweeps may ask of one member ([`burst`]), and its sweeps come an
/// interval apart ([`to_ask`]): the simulator's sets, heavy swarms at 27% loss among them, never
/// reached the bound. Aeron and NORM bound repair the same way, per receiver and per stream.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Budget {
    /// Taken and not refilled yet: 0 is a full bucket.
    used: u64,
    /// When the bucket was last refilled (or last found full).
    at: Instant,
}

impl Budget {
    /// Takes up to `want` at `now` from a bucket refilled at `rate` (at least 1) a second up to
    /// `burst`: how many may be retransmitted. Refills by whole tokens, and moves its clock by
    /// the time those took, so the fraction of the next one is kept (moved to `now`, it lost up
    /// to a token a refill: at 1,000 a second and a NAK every 1.9 ms, about half the rate; a
    /// review's finding); a bucket found full starts again from `now`.
    pub(super) fn take(&mut self, want: u64, rate: u64, burst: u64, now: Instant) -> u64 {
        const NANOS: u128 = 1_000_000_000;
        let rate = rate.max(1);
        let refill = u128::from(now.saturating_since(self.at).0) * u128::from(rate) / NANOS;
        if refill >= u128::from(self.used) {
            self.used = 0;
            self.at = now;
        } else if refill > 0 {
            // Below `used`, so within u64; the time the whole tokens took is below the elapsed.
            self.used -= refill as u64;
            self.at = self.at + Duration((refill * NANOS / u128::from(rate)) as u64);
        }
        let granted = want.min(burst.saturating_sub(self.used));
        self.used += granted;
        granted
    }
}

/// The burst of a [`Budget`]: a sweep interval's worth of `rate`, and at least what one sweep may
/// ask of one member, an answer to each of `HOLES_MAX` holes (`retransmit_max` each): an honest
/// requester's full sweep is never cut short by the burst alone (a review's finding: `mnak`'s
/// default, 5,000 a sweep, was less than its 32 × 256).
pub(super) fn burst(rate: u64, interval: Duration, retransmit_max: usize) -> u64 {
    let per_sweep = u128::from(rate) * u128::from(interval.0) / 1_000_000_000;
    let sweep_asks = (HOLES_MAX as u64).saturating_mul(retransmit_max as u64);
    u64::try_from(per_sweep).unwrap_or(u64::MAX).max(sweep_asks)
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

/// What a repair timer at `now` asks for (`later`: a later hole asked for once may be asked
/// for again; not of a failed origin, below).
/// - The first hole again, an eighth of a sweep interval after its first NAK (or when its answer
///   is due, if that is later), then after twice as long each time up to the interval (the NAK or
///   its answer may have been lost; [`Asked::asked`]). Until the fortieth session it was asked
///   again at every firing of the timer, which also fires at each new gap's `nak_delay` (2 ms)
///   and for early reports: the more gaps traffic opened, the more often (every few
///   milliseconds under loss, before its answer could come), so the NAKs grew with the loss they
///   answered.
/// - At a full sweep, every hole (the first too, when no NAK of it is on record) asked for
///   before the last full sweep, again (likewise).
/// - Of the rest, only what lies at or above `asked_upto`: each is asked for once, when its
///   `nak_delay` is over, as it would have been at once without a delay; a hole asked for since
///   the last full sweep may have its answer on the way.
///
/// So a later hole is asked for again at the first full sweep after its last NAK, never sooner
/// than a sweep interval after it and within two (full sweeps come every interval while holes are
/// open: the timer is armed for them, [`Asked::due`]).
///
/// Until the thirty-ninth session only the first hole was asked for again: under heavy loss, the
/// holes whose one NAK or answer was lost waited to become the first, one at a time, about two
/// sweeps each. A `total` swarm run with 27% loss (seed 9, 500 casts a member) took 11 s to
/// repair the coordinator's stream, so its flush reached the members 6 to 11 s late, timed out,
/// and split the group.
pub(super) fn to_ask(
    holes: impl Iterator<Item = (Seqno, Seqno)>,
    asked: &Asked,
    now: Instant,
    interval: Duration,
    later: bool,
) -> Vec<(Seqno, Seqno)> {
    let full = asked.full_sweep(now, interval);
    let mut asks: Vec<(Seqno, Seqno)> = Vec::new();
    // Adjacent parts of one hole go in one NAK.
    let mut ask = |lo: Seqno, hi: Seqno| match asks.last_mut() {
        Some(last) if last.1 + 1 == lo => last.1 = hi,
        _ => asks.push((lo, hi)),
    };
    for (k, (lo, hi)) in holes.take(HOLES_MAX).enumerate() {
        let mut lo = lo;
        if k == 0 {
            if let Some(last) = asked.first_asked(lo) {
                // What the first hole's last NAK asked for: again when it is due.
                if now >= last.due {
                    ask(lo, hi.min(last.hi));
                }
                if hi <= last.hi {
                    continue;
                }
                lo = last.hi + 1;
            }
        }
        // The part asked for before the last full sweep, at a full sweep; then the part never
        // asked for. What lies between was asked for since the last full sweep: its answer may
        // be on the way (a hole that grew, as a tail that gossip reveals, straddles them).
        if full && (k == 0 || later) && lo < asked.swept_upto {
            ask(lo, hi.min(asked.swept_upto - 1));
        }
        if hi >= asked.asked_upto {
            ask(lo.max(asked.asked_upto), hi);
        }
    }
    asks
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The round trip is timed from the first answer to a NAK of the first hole, and holds the
    /// first re-ask back until the answer is due when that is later than the configured schedule:
    /// on a 40 ms link, at 50 ms, not 6.25 ms; never later than the sweep interval.
    #[test]
    fn a_slow_answer_holds_the_first_re_ask_back_until_it_is_due() {
        let ms = Duration::from_millis;
        let (interval, t) = (ms(50), Instant::ZERO + ms(1_000));
        let eighth = Duration(interval.0 / 8);
        let mut asked = Asked::default();
        assert_eq!(asked.first_wait(interval), eighth, "no sample yet: the configured pace");
        // A NAK of the first hole, 0-3, sent once and answered 32 ms later.
        let _ = asked.asked(0, 3, Some(0), t, interval);
        asked.answered(2, t + ms(32));
        assert_eq!(asked.rtt.expected(), Some(ms(40)), "a quarter more than the round trip");
        asked.answered(3, t + ms(45));
        assert_eq!(asked.rtt.expected(), Some(ms(40)), "one sample per NAK");
        assert_eq!(asked.first_wait(interval), ms(40));
        // The first re-ask waits for it; the backoff goes on from there, up to the interval.
        let again = asked.asked(4, 4, Some(4), t + ms(100), interval);
        assert_eq!(again, t + ms(140));
        assert_eq!(asked.asked(4, 4, Some(4), again, interval), again + interval);
        // A NAK sent twice times nothing once there is a sample (Karn): its answer may be the
        // first one's.
        asked.answered(4, again + ms(1));
        assert_eq!(asked.rtt.expected(), Some(ms(40)), "unchanged");
        // Fast answers bring it down to the configured pace, never below it.
        for k in 0..40u64 {
            let at = t + ms(1_000 + 10 * k);
            let _ = asked.asked(10 + k, 10 + k, Some(10 + k), at, interval);
            asked.answered(10 + k, at + Duration::from_micros(500));
        }
        assert!(asked.rtt.expected().expect("sampled") < ms(2));
        assert_eq!(asked.first_wait(interval), eighth);
        // A very slow link: the interval at most.
        let mut slow = Asked::default();
        let _ = slow.asked(0, 0, Some(0), t, interval);
        slow.answered(0, t + ms(5_000));
        assert_eq!(slow.first_wait(interval), interval);
    }

    /// With no sample yet, a NAK answered only after its re-ask is timed from the first NAK (on
    /// a link slower than the re-ask every NAK is repeated, and Karn's rule alone never times
    /// one); that sample is provisional, and the first of a NAK sent once replaces it.
    #[test]
    fn a_first_sample_of_a_repeated_nak_is_provisional() {
        let ms = Duration::from_millis;
        let (interval, t) = (ms(50), Instant::ZERO + ms(1_000));
        let mut asked = Asked::default();
        let again = asked.asked(0, 0, Some(0), t, interval);
        assert_eq!(again, t + Duration(interval.0 / 8));
        let again = asked.asked(0, 0, Some(0), again, interval);
        let _ = asked.asked(0, 0, Some(0), again, interval);
        asked.answered(0, t + ms(32));
        assert_eq!(asked.rtt.expected(), Some(ms(40)), "32 ms from the first NAK");
        // Another repeated NAK adds nothing; one sent once replaces the provisional sample.
        let again = asked.asked(1, 1, Some(1), t + ms(100), interval);
        let _ = asked.asked(1, 1, Some(1), again, interval);
        asked.answered(1, again + ms(1));
        assert_eq!(asked.rtt.expected(), Some(ms(40)));
        let _ = asked.asked(2, 2, Some(2), t + ms(300), interval);
        asked.answered(2, t + ms(304));
        assert_eq!(asked.rtt.expected(), Some(ms(5)), "replaced, not averaged");
        let _ = asked.asked(3, 3, Some(3), t + ms(400), interval);
        asked.answered(3, t + ms(412));
        assert_eq!(asked.rtt.expected(), Some(Duration::from_micros(6_250)), "then averaged by 1/8: srtt 4 to 5 ms");
    }

    #[test]
    fn a_budget_grants_its_burst_then_its_rate() {
        let ms = Duration::from_millis;
        let t = Instant::ZERO + ms(1_000);
        let mut b = Budget::default();
        // 1,000 a second, a burst of 50 (50 ms' worth).
        let burst = burst(1_000, ms(50), 1);
        assert_eq!(burst, 50);
        assert_eq!(b.take(30, 1_000, burst, t), 30);
        assert_eq!(b.take(30, 1_000, burst, t), 20, "the rest of the burst");
        assert_eq!(b.take(30, 1_000, burst, t), 0, "nothing left at the same instant");
        // 10 ms later: 10 more; the fraction of one kept for later.
        assert_eq!(b.take(30, 1_000, burst, t + ms(10)), 10);
        assert_eq!(b.take(1, 1_000, burst, t + ms(10) + Duration::from_micros(600)), 0);
        assert_eq!(b.take(1, 1_000, burst, t + ms(11)), 1, "the 400 µs left over counted too");
        // Idle: full again, and no more than full.
        assert_eq!(b.take(500, 1_000, burst, t + ms(5_000)), 50);
        // A bucket found full starts its refill when it is next taken from, not at its last
        // refill: the time it sat full earns nothing.
        let mut b = Budget::default();
        assert_eq!(b.take(0, 1_000, burst, t), 0);
        let us = Duration::from_micros;
        assert_eq!(b.take(50, 1_000, burst, t + us(900)), 50);
        assert_eq!(b.take(1, 1_000, burst, t + us(1_500)), 0, "600 µs since it was found full");
        // Whole tokens move the clock by the time they took: drained, then asked every 1.9 ms
        // for 19 ms, it grants 19, not one a NAK (10).
        let mut b = Budget::default();
        assert_eq!(b.take(50, 1_000, burst, t), 50);
        let granted: u64 = (1..=10).map(|k| b.take(5, 1_000, burst, t + us(1_900 * k))).sum();
        assert_eq!(granted, 19);
        // What one sweep may ask (32 holes, a whole answer each) is never cut by the burst alone.
        assert_eq!(super::burst(10, ms(50), 256), 32 * 256);
    }

    #[test]
    fn holes_lie_before_between_and_after_what_is_held() {
        let got: Vec<_> = holes(0, [2, 4, 5].into_iter(), 9).collect();
        assert_eq!(got, [(0, 1), (3, 3), (6, 8)]);
        assert_eq!(holes(3, [3, 4].into_iter(), 0).count(), 0, "nothing missing");
        let ms = Duration::from_millis;
        let (interval, t) = (ms(50), Instant::ZERO + ms(1_000));
        let at = |d: u64| t + ms(d);
        // The first hole's last NAK asked for 0-1 and is due again at `due`.
        let first = |lo, hi, due| Some(FirstAsk { lo, hi, due, wait: ms(50), at: t, once: false, timed: false });
        // Hole 0-1 was asked for at `t`, due again 50 ms later, and 3 with it; 6-8 never.
        let asked = Asked {
            naked_upto: 9,
            asked_upto: 4,
            swept_upto: 0,
            swept_at: t,
            first: first(0, 1, at(50)),
            ..Asked::default()
        };
        assert_eq!(to_ask(got.iter().copied(), &asked, at(2), interval, true), [(6, 8)], "the new hole, once");
        assert_eq!(
            to_ask(got.iter().copied(), &asked, at(50), interval, true),
            [(0, 1), (6, 8)],
            "the first again when due"
        );
        let asked = Asked { swept_upto: 4, swept_at: at(50), first: first(0, 1, at(100)), ..asked };
        assert_eq!(
            to_ask(got.iter().copied(), &asked, at(60), interval, true),
            [(6, 8)],
            "nothing again before it is due"
        );
        assert_eq!(
            to_ask(got.iter().copied(), &asked, at(100), interval, true),
            [(0, 1), (3, 3), (6, 8)],
            "and again a full sweep later"
        );
        assert_eq!(
            to_ask(got.iter().copied(), &asked, at(100), interval, false),
            [(0, 1), (6, 8)],
            "only the first of a failed origin"
        );
        assert_eq!(asked.due(0, at(50), interval), at(100));
        // A first hole with no NAK of it on record (it became the first when the one before it
        // filled) waits for a full sweep, as any later hole.
        let asked = Asked { first: None, ..asked };
        assert_eq!(to_ask(got.iter().copied(), &asked, at(60), interval, true), [(6, 8)]);
        assert_eq!(to_ask(got.iter().copied(), &asked, at(100), interval, false), [(0, 1), (6, 8)]);
        // A first hole that filled in part: what is left of its NAK's range is asked again.
        let asked = Asked { first: first(0, 3, at(20)), asked_upto: 4, swept_upto: 0, swept_at: t, ..asked };
        assert_eq!(to_ask([(2, 3), (6, 8)].into_iter(), &asked, at(20), interval, true), [(2, 3), (6, 8)]);
        assert_eq!(asked.due(2, at(10), interval), at(20));
        assert_eq!(asked.due(4, at(10), interval), at(50), "else the next full sweep");
        // A hole that grew past what the last full sweep had asked for (a tail that gossip
        // revealed): only its old part and its new part, not what was asked for since.
        let asked = Asked {
            naked_upto: 30,
            asked_upto: 20,
            swept_upto: 8,
            swept_at: t,
            first: first(0, 1, at(50)),
            ..Asked::default()
        };
        let grown = [(0, 1), (6, 29)];
        assert_eq!(to_ask(grown.into_iter(), &asked, at(50), interval, true), [(0, 1), (6, 7), (20, 29)]);
        // A first hole that grew: the part its NAK asked for again, then the rest as any hole.
        let asked = Asked { first: first(6, 9, at(50)), ..asked };
        assert_eq!(to_ask([(6, 29)].into_iter(), &asked, at(50), interval, true), [(6, 9), (20, 29)]);
        assert_eq!(to_ask([(6, 29)].into_iter(), &asked, at(10), interval, true), [(20, 29)]);
    }

    /// The first hole's NAK is repeated an eighth of the sweep interval later, then after twice
    /// as long each time up to the interval; a later NAK that does not ask for the first hole
    /// changes nothing, and a new first hole starts again from an eighth.
    #[test]
    fn the_first_holes_nak_backs_off_to_the_sweep_interval() {
        let ms = Duration::from_millis;
        let interval = ms(80);
        let mut asked = Asked::default();
        let mut now = Instant::ZERO + ms(1_000);
        let mut waits = Vec::new();
        for _ in 0..6 {
            asked.swept(now);
            let rearm = asked.asked(5, 7, Some(5), now, interval);
            let due = asked.due(5, now, interval);
            assert_eq!(rearm, due);
            waits.push(due.saturating_since(now).as_millis());
            now = due;
        }
        assert_eq!(waits, [10, 20, 40, 80, 80, 80]);
        assert_eq!(asked.asked(9, 9, Some(5), now, interval), now + interval);
        assert_eq!(asked.first.map(|f| (f.lo, f.hi)), Some((5, 7)), "a later hole's NAK");
        let _ = asked.asked(8, 9, Some(8), now, interval);
        assert_eq!(asked.first.map(|f| f.wait), Some(ms(10)), "a new first hole");
    }
}
