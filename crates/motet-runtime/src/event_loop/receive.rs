//! The receiving half of the event loop: `recvmmsg` batches from each socket into the node.

use super::{EventLoop, RuntimeStats};
use crate::io::UdpIo;
use motet_core::Node;
use std::io;
use std::time::Duration;

/// Receive batches handled per [`EventLoop::poll`] before timers and actions get a turn.
const BATCHES_PER_POLL: usize = 16;

/// Where [`EventLoop::receive`] reads.
#[derive(Clone, Copy, Debug)]
pub(super) enum Source {
    Unicast,
    Multicast,
    Retired(usize),
}

impl EventLoop {
    /// Reads batches from one socket until it is empty or the application lags. `fresh`: the
    /// time the turn read at its start, while nothing has been handled since (it did not wait);
    /// cleared once a batch is handled.
    pub(super) fn receive(&mut self, source: Source, fresh: &mut Option<motet_core::Instant>) {
        for _ in 0..BATCHES_PER_POLL {
            if self.ready.full(0, 0, &self.config) {
                return;
            }
            // The node's time never goes back: the turn's own time serves until the node has
            // handled something (handling may read the clock, for parked actions); then the
            // clock is read per batch.
            let now = fresh.unwrap_or_else(|| self.clock.now());
            let io = match (source, self.multicast.as_mut()) {
                (Source::Unicast, _) => &mut self.io,
                (Source::Multicast, Some((io, _, _))) => io,
                (Source::Multicast, None) => {
                    self.multicast_readable = false;
                    return;
                }
                (Source::Retired(index), _) => &mut self.retired[index].io,
            };
            let (spin, loss) = (self.config.busy_poll, self.config.inject_loss);
            let result = receive_batch(io, spin, &mut self.node, &mut self.stats, now, loss);
            let drained = match result {
                Ok(batch) => {
                    *fresh = None;
                    self.recv_timeout.arrived(now);
                    let n = batch.datagrams as u64;
                    self.stats.datagrams_in += n;
                    self.stats.recv_batches += 1;
                    self.stats.control_truncated += batch.truncated as u64;
                    if let Source::Retired(_) = source {
                        self.stats.datagrams_in_retired += n;
                    }
                    self.drain();
                    batch.drained
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => false,
                Err(e) => {
                    // ICMP errors surface on some systems as receive errors; they say nothing
                    // the failure detector does not.
                    tracing::debug!(error = %e, "receive error");
                    self.stats.receive_errors += 1;
                    false
                }
            };
            if drained {
                match source {
                    Source::Unicast => self.readable = false,
                    Source::Multicast => self.multicast_readable = false,
                    Source::Retired(index) => self.retired[index].readable = false,
                }
                return;
            }
        }
    }
}

/// Datagrams flow while one arrived within this: the loop then waits in the receive call even
/// close to a deadline ([`RecvTimeout::for_wait`]).
const FLOWING: Duration = Duration::from_millis(1);

/// Waits in the receive call in a row that returned a datagram, after which the loop reads a
/// batch instead, while receive offload is wanted and not yet on ([`RecvTimeout::returned`]).
const PROBE_AFTER: u32 = 32;

/// When the loop may wait in the receive call (a blocking `recv`/`recvmsg`, bounded by the
/// socket's receive timeout) instead of in `epoll`. The kernel rounds that timeout up to whole
/// jiffies and sleeps one more (measured at 250 Hz: 1-4 ms slept 8 ms, 5-8 ms 12 ms, 16 ms
/// 20 ms), so timeouts are multiples of 4 ms and the wait is asked to end `overshoot` before the
/// loop's next deadline; a deadline closer than that waits in `epoll`, whose timeout is precise.
/// `overshoot` starts at what 250 Hz kernels add and grows to whatever a wait that ran out is seen
/// to add (a 100 Hz kernel), so no timer fires late by more than the first such surprise.
#[derive(Debug)]
pub(super) struct RecvTimeout {
    overshoot: Duration,
    /// The wait now in progress: when it started and what it asked for.
    asked: Option<(motet_core::Instant, Duration)>,
    /// Waits in a row that returned a datagram.
    returned: u32,
    /// When the loop last handled a datagram ([`RecvTimeout::arrived`]).
    last_arrival: Option<motet_core::Instant>,
    /// The node's next alarm at the start of the last turn ([`RecvTimeout::note_alarm`]).
    alarm: Option<motet_core::Instant>,
    /// A pending alarm that something other than a timer brought nearer (an arrival, an action),
    /// until it passes.
    fresh: Option<motet_core::Instant>,
}

impl Default for RecvTimeout {
    fn default() -> RecvTimeout {
        RecvTimeout {
            overshoot: Duration::from_millis(5),
            asked: None,
            returned: 0,
            last_arrival: None,
            alarm: None,
            fresh: None,
        }
    }
}

/// The shortest receive timeout asked for; timeouts are taken from a ladder of doublings above it,
/// so that the socket option changes a few times per timer period, not on every turn.
const RECV_TIMEOUT_MIN: Duration = Duration::from_millis(4);

/// The most the kernel is believed to add to a receive timeout: two jiffies of a 100 Hz kernel
/// and some.
const OVERSHOOT_MAX: Duration = Duration::from_millis(25);

/// The longest receive timeout asked for.
const RECV_TIMEOUT_MAX: Duration = Duration::from_secs(86_400);

/// `d` in nanoseconds, saturating (a `u128` division costs a library call on every turn).
fn nanos(d: Duration) -> u64 {
    d.as_secs().saturating_mul(1_000_000_000).saturating_add(u64::from(d.subsec_nanos()))
}

impl RecvTimeout {
    /// The receive timeout for a loop whose next deadline is `wait` away (`None`: none) and that
    /// may fire its timers up to `slack` late, or `None` when it must not wait in the receive call
    /// (a deadline too close: `epoll`, or due now): `Some(None)` waits for ever. `now` is the
    /// turn's time, and `caller` the timeout the application gave `EventLoop::poll`, if any.
    ///
    /// A deadline too close for the kernel's coarse timeout is waited for in the receive call
    /// all the same while datagrams flow (one arrived within [`FLOWING`]): the next one is
    /// expected long before the deadline, and the loop checks its timers on every datagram, so a
    /// timer is late only if the flow stops there, by at most the shortest receive timeout and
    /// the kernel's overshoot, counted from the deadline (about 8 ms at 250 Hz, 20 ms at 100 Hz).
    /// Only for a deadline the protocol's timers set (a periodic sweep): not while one that an
    /// arrival or an action brought nearer is pending ([`RecvTimeout::note_alarm`]), such as the
    /// short delay before a gap is NAKed, since the flow may stop just because that timer has not
    /// fired. Not with a `slack` of 0 either, which keeps timers exact. Without this, a round trip
    /// near one of the protocol's periodic
    /// sweeps (a quarter of them, with the sweeps of `vsync`) waited in `epoll` and then read:
    /// two system calls instead of one. The application's own timeout is kept: a shorter one
    /// than the receive call can honour waits in `epoll`.
    pub(super) fn for_wait(
        &self,
        wait: Option<Duration>,
        slack: Duration,
        now: motet_core::Instant,
        caller: Option<Duration>,
    ) -> Option<Option<Duration>> {
        let Some(wait) = wait.filter(|w| !w.is_zero()) else {
            return wait.is_none().then_some(None);
        };
        // `EventLoop::poll(Some(Duration::MAX))` with no timer is a wait for ever: taken a day
        // at most at a time (the loop turns and waits again), so no sum or doubling overflows.
        // The slack is the protocol's: the application's own timeout bounds the wait as asked.
        // In nanoseconds: every turn asks, and `Duration`'s arithmetic normalises at each step.
        let late = nanos(wait.min(RECV_TIMEOUT_MAX)).saturating_add(nanos(slack)).min(caller.map_or(u64::MAX, nanos));
        let Some(room) = late.checked_sub(nanos(self.overshoot)).filter(|&room| room >= nanos(RECV_TIMEOUT_MIN)) else {
            let flowing = self.last_arrival.is_some_and(|at| crate::clock::between(at, now) <= FLOWING);
            let caller_allows = caller.is_none_or(|t| t >= RECV_TIMEOUT_MIN + self.overshoot);
            let sweep = self.fresh.is_none();
            return (flowing && sweep && caller_allows && !slack.is_zero()).then_some(Some(RECV_TIMEOUT_MIN));
        };
        // The highest rung at or below `room`, from the bit length of how many shortest timeouts
        // fit in it (doubling a `Duration` rung by rung cost about 50 instructions a turn). `room`
        // is at most a day and the slack: the shift is bounded all the same.
        let rungs = room / nanos(RECV_TIMEOUT_MIN);
        Some(Some(RECV_TIMEOUT_MIN * (1u32 << rungs.ilog2().min(31))))
    }

    /// A wait returned a datagram. True when the loop should read its next batch without
    /// waiting: every [`PROBE_AFTER`]th wait in a row, while `probing` (receive offload is wanted
    /// and not yet on).
    ///
    /// Why: a wait reads one datagram, and cannot tell whether more are queued behind it, which
    /// is what tells a busy socket (`UdpIo::count_read`, which turns receive offload on). So now
    /// and then a batch looks: under load it takes several datagrams; in a round trip it finds
    /// none, which costs one more turn of the loop, with an empty read, per [`PROBE_AFTER`] round
    /// trips. (Whether the wait slept is no sign: on one CPU the peer's answer to a round trip is
    /// often queued before the loop gets to its wait, because the send woke the peer, which ran
    /// first; and how long a wait that did not sleep takes depends on the host.)
    fn returned(&mut self, probing: bool) -> bool {
        self.asked = None;
        self.returned += 1;
        if !probing || self.returned < PROBE_AFTER {
            return false;
        }
        self.returned = 0;
        true
    }

    /// The node's next alarm at the start of a turn at `now`. An alarm nearer than the one at the
    /// start of the last turn was set during that turn by an arrival or an action: it stays
    /// `fresh` until it passes. (The turn's timers run at its end, after this, and what they set
    /// is what the next turn starts with; so a sweep that rearms itself is never fresh, and the
    /// next sweep that becomes the nearest alarm is later, not nearer.)
    pub(super) fn note_alarm(&mut self, alarm: Option<motet_core::Instant>, now: motet_core::Instant) {
        if self.fresh.is_some_and(|f| f <= now) {
            self.fresh = None;
        }
        if let Some(at) = alarm.filter(|&at| self.alarm.is_none_or(|before| at < before)) {
            self.fresh = Some(self.fresh.map_or(at, |f| f.min(at)));
        }
        self.alarm = alarm;
    }

    /// The loop handled datagrams at `at` (see [`RecvTimeout::for_wait`]).
    pub(super) fn arrived(&mut self, at: motet_core::Instant) {
        self.last_arrival = Some(at);
    }

    /// A wait of `timeout` starts at `now`.
    fn start(&mut self, now: motet_core::Instant, timeout: Option<Duration>) {
        self.asked = timeout.map(|t| (now, t));
    }

    /// The wait ran out at `now` with nothing received: learn how late the kernel ended it. A
    /// wait later than [`OVERSHOOT_MAX`] was a stall (a paused VM, a stopped process), not the
    /// kernel's rounding, and teaches nothing: learning it would keep the loop out of the
    /// receive call near every timer from then on.
    fn ran_out(&mut self, now: motet_core::Instant) {
        self.returned = 0;
        if let Some((started, asked)) = self.asked.take() {
            let late = crate::clock::between(started, now).saturating_sub(asked);
            if late > self.overshoot && late <= OVERSHOOT_MAX {
                self.overshoot = late + Duration::from_millis(1);
                tracing::debug!(overshoot = ?self.overshoot, "the kernel's receive timeout runs late; waiting in epoll closer to deadlines");
            }
        }
    }
}

impl EventLoop {
    /// Waits for the first datagram in the receive call, up to `timeout` (`None`: for ever), and
    /// takes the batch it comes with (see [`EventLoop::poll`]); `now` is when the wait starts.
    /// Returns the time the datagrams were handled at, if any came.
    pub(super) fn receive_waiting(
        &mut self,
        now: motet_core::Instant,
        timeout: Option<Duration>,
    ) -> Option<motet_core::Instant> {
        self.stats.recv_waits += 1;
        self.recv_timeout.start(now, timeout);
        let (io, node, clock, stats, loss) =
            (&mut self.io, &mut self.node, &self.clock, &mut self.stats, self.config.inject_loss);
        // The time is read when the first datagram is handed over, after the wait.
        let mut arrived = None;
        let result = io.recv_wait(timeout, |datagram| {
            let at = *arrived.get_or_insert_with(|| clock.now());
            handle(node, stats, at, loss, datagram);
        });
        match result {
            Ok(batch) => {
                if let Some(at) = arrived {
                    self.recv_timeout.arrived(at);
                }
                if self.recv_timeout.returned(self.io.offload_pending()) {
                    self.readable = true;
                }
                self.stats.datagrams_in += batch.datagrams as u64;
                self.stats.recv_batches += 1;
                self.stats.control_truncated += batch.truncated as u64;
                self.readable |= !batch.drained;
                self.drain();
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.recv_timeout.ran_out(self.clock.now()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::debug!(error = %e, "receive error");
                self.stats.receive_errors += 1;
            }
        }
        arrived
    }
}

/// One read into the node (a busy-polling loop's spin, or a `recvmmsg` batch): bundles unpacked,
/// injected loss applied.
fn receive_batch(
    io: &mut UdpIo,
    spin: bool,
    node: &mut Node,
    stats: &mut RuntimeStats,
    now: motet_core::Instant,
    loss: f64,
) -> io::Result<crate::io::Batch> {
    let each = |datagram| handle(node, stats, now, loss, datagram);
    match spin {
        true => io.recv_spin(each),
        false => io.recv_batch(each),
    }
}

/// One datagram into the node: a bundle unpacked, injected loss applied.
fn handle(node: &mut Node, stats: &mut RuntimeStats, now: motet_core::Instant, loss: f64, datagram: bytes::Bytes) {
    if loss > 0.0 && rand::random::<f64>() < loss {
        stats.injected_loss += 1;
    } else if motet_wire::bundle::is_bundle(&datagram) {
        match motet_wire::bundle::decode(&datagram) {
            Ok(parts) => node.handle_datagrams(now, parts),
            Err(_) => stats.malformed_bundles += 1,
        }
    } else {
        node.handle_datagram(now, datagram);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ladder of receive timeouts: multiples of 4 ms below the deadline less the kernel's
    /// overshoot, nothing near a deadline, and no overflow for a wait of `Duration::MAX`.
    #[test]
    fn receive_timeouts_climb_a_ladder_below_the_deadline_and_never_overflow() {
        let timeouts = RecvTimeout::default();
        let slack = Duration::from_millis(5);
        let for_wait = |wait| timeouts.for_wait(wait, slack, motet_core::Instant(0), None);
        assert_eq!(for_wait(None), Some(None), "no deadline: for ever");
        assert_eq!(for_wait(Some(Duration::ZERO)), None, "due now");
        assert_eq!(for_wait(Some(Duration::from_millis(3))), None, "too close");
        assert_eq!(for_wait(Some(Duration::from_millis(100))), Some(Some(Duration::from_millis(64))));
        let longest = for_wait(Some(Duration::MAX)).expect("waits").expect("a timeout");
        assert!(longest <= RECV_TIMEOUT_MAX && longest > RECV_TIMEOUT_MAX / 2, "{longest:?}");
        // Every rung is the highest doubling of the shortest timeout that ends by the deadline
        // less the overshoot, and the caller's timeout bounds it.
        for ms in (9..2_000).step_by(7).chain([86_400_000, u64::MAX / 2]) {
            let wait = Duration::from_millis(ms);
            let room = wait.min(RECV_TIMEOUT_MAX) + slack - timeouts.overshoot;
            let mut rung = RECV_TIMEOUT_MIN;
            while rung * 2 <= room {
                rung *= 2;
            }
            assert_eq!(for_wait(Some(wait)), Some(Some(rung)), "{ms} ms");
            let caller = Duration::from_millis(ms / 2);
            let got = timeouts.for_wait(Some(wait), slack, motet_core::Instant(0), Some(caller));
            assert!(got.is_none_or(|t| t.is_some_and(|t| t + timeouts.overshoot <= caller)), "{ms} ms: {got:?}");
        }
    }

    /// Waits that keep returning datagrams make the loop read a batch every [`PROBE_AFTER`]th
    /// time while receive offload is pending, to learn whether the socket is busy; a wait that ran
    /// out starts the count again.
    #[test]
    fn waits_that_keep_returning_datagrams_make_the_loop_look_for_more_now_and_then() {
        let mut timeouts = RecvTimeout::default();
        let probes = |t: &mut RecvTimeout, probing: bool, n: u32| (0..n).filter(|_| t.returned(probing)).count();
        assert_eq!(probes(&mut timeouts, false, 10 * PROBE_AFTER), 0, "offload on, or not wanted: no need");
        timeouts = RecvTimeout::default();
        assert_eq!(probes(&mut timeouts, true, PROBE_AFTER - 1), 0);
        timeouts.start(motet_core::Instant(0), Some(Duration::from_millis(4)));
        timeouts.ran_out(motet_core::Instant(4_000_000));
        assert_eq!(probes(&mut timeouts, true, PROBE_AFTER - 1), 0, "a wait that ran out starts the count again");
        assert_eq!(probes(&mut timeouts, true, 1), 1);
        assert_eq!(probes(&mut timeouts, true, 10 * PROBE_AFTER), 10);
    }

    /// Close to a deadline, a loop whose datagrams flow still waits in the receive call, with
    /// the shortest timeout, unless the application's own timeout is shorter than the call can
    /// honour; one whose last datagram is older than [`FLOWING`] waits in `epoll`.
    #[test]
    fn datagrams_that_flow_let_the_loop_wait_in_the_receive_call_close_to_a_deadline() {
        let at = |us: u64| motet_core::Instant(us * 1_000);
        let slack = Duration::from_millis(5);
        let close = Some(Duration::from_millis(2));
        let mut timeouts = RecvTimeout::default();
        // The first alarm is fresh until it passes (nothing to compare it with); the sweep after
        // it is later, set by the timers: not fresh.
        timeouts.note_alarm(Some(at(2_000)), at(0));
        timeouts.note_alarm(Some(at(12_014)), at(9_000));
        assert_eq!(timeouts.for_wait(close, slack, at(10_000), None), None, "nothing arrived yet");
        timeouts.arrived(at(10_000));
        let shortest = Some(Some(RECV_TIMEOUT_MIN));
        assert_eq!(timeouts.for_wait(close, slack, at(10_014), None), shortest, "a datagram 14 µs ago");
        assert_eq!(timeouts.for_wait(close, slack, at(10_014), Some(Duration::from_secs(5))), shortest);
        assert_eq!(timeouts.for_wait(close, slack, at(10_014), close), None, "the application's timeout is close");
        assert_eq!(timeouts.for_wait(Some(Duration::ZERO), slack, at(10_014), None), None, "due now");
        assert_eq!(
            timeouts.for_wait(close, slack, at(10_000 + 2 * FLOWING.as_micros() as u64), None),
            None,
            "the flow stopped"
        );
        assert_eq!(timeouts.for_wait(close, Duration::ZERO, at(10_014), None), None, "no slack: exact timers");
        // An arrival brings an alarm nearer (a gap's NAK, 2 ms away): exact until it passes.
        timeouts.note_alarm(Some(at(12_000)), at(10_000));
        assert_eq!(timeouts.for_wait(close, slack, at(10_014), None), None, "a fresh alarm");
        timeouts.note_alarm(Some(at(12_000)), at(11_000));
        assert_eq!(timeouts.for_wait(close, slack, at(11_014), None), None, "still pending, still fresh");
        timeouts.note_alarm(Some(at(12_014)), at(12_001));
        timeouts.arrived(at(12_001));
        assert_eq!(timeouts.for_wait(close, slack, at(12_001), None), shortest, "passed: the sweep again");
        // The application's own timeout bounds a wait in the receive call as asked.
        let far = Some(Duration::from_millis(100));
        assert_eq!(timeouts.for_wait(far, slack, at(200_000), Some(Duration::from_millis(8))), None);
        let far = Some(Duration::from_millis(100));
        assert_eq!(timeouts.for_wait(far, slack, at(10_014), None), Some(Some(Duration::from_millis(64))), "unchanged");
    }

    /// A wait the kernel ended late teaches the overshoot (a 100 Hz kernel); one that ended very
    /// late was a stall and teaches nothing.
    #[test]
    fn the_overshoot_is_learned_from_the_kernel_not_from_a_stall() {
        let at = |ms: u64| motet_core::Instant(ms * 1_000_000);
        let mut timeouts = RecvTimeout::default();
        timeouts.start(at(0), Some(Duration::from_millis(8)));
        timeouts.ran_out(at(8 + 12));
        assert_eq!(timeouts.overshoot, Duration::from_millis(13), "12 ms late: learned");
        timeouts.start(at(100), Some(Duration::from_millis(8)));
        timeouts.ran_out(at(100 + 8 + 2_000));
        assert_eq!(timeouts.overshoot, Duration::from_millis(13), "a 2 s stall: not learned");
    }
}
