//! One turn of the event loop ([`EventLoop::poll`]): what earlier actions produced is sent and
//! delayed processing settled; then the wait (in `epoll`, in the receive call, or spinning on the
//! socket while busy-polling) and the reads; then due alarms, DNS lookups and migrations, and what
//! they produced is sent.

use super::receive::Source;
use super::{EventLoop, MULTICAST, SOCKET};
use crate::Error;
use std::io;
use std::sync::Arc;
use std::time::Duration;

/// With busy-polling, the turns on which the loop still asks `epoll` for readiness (one in this
/// many; every turn while a send backlog waits for the socket to become writable).
const BUSY_POLL_EPOLL_EVERY: u64 = 64;

/// Empty reads a busy-polling loop makes in one turn while it has nothing else to do (about 10 µs
/// here): timers and the application get a turn at least that often.
const BUSY_SPIN_READS: usize = 32;

impl EventLoop {
    /// Waits up to `timeout` (forever with `None`) for datagrams, due timers or a wake-up, and
    /// handles what came. Events for the application are then available from
    /// [`EventLoop::next_event`].
    ///
    /// Events waiting already do not end the wait: take them with [`EventLoop::next_event`]
    /// before calling `poll` again. An action's own events, such as a cast's delivery to its
    /// sender, are there as soon as the action returns (unless it was parked). (Ending the wait
    /// for them would make a driver whose application lags, and leaves its events waiting, spin.)
    pub fn poll(&mut self, timeout: Option<Duration>) -> Result<(), Error> {
        // What earlier actions produced goes out before we wait.
        self.send_packed();
        // Then the bookkeeping the bypass delayed (thesis §3.4.3), for the stacks holding a full
        // batch: off the path from the last receive, through the application, to this send. A
        // batch that does not fill is filed at its deadline, an alarm like the others.
        self.node.settle();
        self.stats.turns += 1;
        let lagging = self.ready.full(0, 0, &self.config);
        // A stop ends with the lag, whichever way this turn goes on (the waits below return
        // early, only when not lagging): the next stop counts again.
        self.stopped_reading &= lagging;
        // One clock read serves every deadline of the wait (each read costs about as much as a
        // protocol layer's work on a message).
        let before = self.clock.now();
        self.recv_timeout.note_alarm(self.node.poll_alarm(), before);
        let mut wait = self.node.poll_timeout().map(|at| crate::clock::between(before, at));
        let closing = self.retired.iter().filter_map(|r| r.close_at);
        if let Some(next) = self.next_lookup().into_iter().chain(closing).min() {
            let next = next.from(before);
            wait = Some(wait.map_or(next, |w| w.min(next)));
        }
        #[cfg(test)]
        if self.timers_always_due {
            wait = Some(Duration::ZERO);
        }
        let retired_readable = self.retired.iter().any(|r| r.readable);
        // The loop's own reasons not to wait: something is due, or a socket has more to read.
        let more_to_read = (self.readable || self.multicast_readable || retired_readable) && !lagging;
        let due = wait.is_some_and(|w| w.is_zero()) || more_to_read;
        if let Some(timeout) = timeout {
            wait = Some(wait.map_or(timeout, |w| w.min(timeout)));
        }
        // Parked actions to retry (the application's taking its events let them go, in
        // `next_event`) do not wait either: a loop that waited took them a timer's tick later.
        // As a caller's zero timeout, not as something due: the turn still asks `epoll`.
        if !self.retrying.is_empty() {
            wait = Some(Duration::ZERO);
        }
        // Nothing is due, and the caller lets the loop wait.
        let idle = wait.is_none_or(|w| !w.is_zero());
        if self.config.busy_poll || due {
            wait = Some(Duration::ZERO);
        }
        // A quiet loop that watches nothing but its one socket waits in the receive call itself:
        // one system call per datagram received instead of `epoll_wait` then a read (on one vCPU
        // that was 2 µs of a 13.5 µs round trip). Its timeout is the kernel's receive timeout,
        // which is coarse (jiffies): the wait is used while the next deadline is far enough away,
        // given the timer slack (`RuntimeConfig::timer_slack_ms`). Nobody else may hold the waker
        // (a blocked receive does not see it), and multicast, retired sockets or a send backlog
        // need `epoll`.
        let one_socket = self.multicast.is_none() && self.retired.is_empty();
        let watch_one = one_socket && self.backlog.is_empty();
        // Nobody else holds the waker, and nobody did since `epoll` was last asked: a holder that
        // woke the loop and then dropped its handle left the wake-up in `epoll`, which this turn
        // must then ask (the first turn after the last holder is gone does).
        let lent = Arc::strong_count(&self.waker) > 1;
        let alone = !lent && !self.waker_lent.replace(lent);
        if !self.config.busy_poll && !self.readable && !lagging && watch_one && alone {
            let slack = Duration::from_millis(self.config.timer_slack_ms);
            if let Some(timeout) = self.recv_timeout.for_wait(wait, slack, before, timeout) {
                let arrived = self.receive_waiting(before, timeout);
                return self.end_turn(arrived);
            }
        }
        // A busy-polling loop in the same position, with nothing due, spins on its socket here for
        // up to `BUSY_SPIN_READS` reads, not through whole turns: a turn's own work (timers,
        // lookups, migrations, the packing buffers, the application's return to `poll`) made an
        // empty spin about half as long again as its read, and a datagram that arrives during a
        // spin is seen at the next read. Its time is the turn's start, at most that many reads
        // old. Nothing here needs `epoll`: no other socket, no backlog, and nobody else holds the
        // waker.
        if self.config.busy_poll && idle && !lagging && watch_one && alone {
            let mut fresh = Some(before);
            let seen = self.stats.datagrams_in;
            for _ in 0..BUSY_SPIN_READS {
                self.receive(Source::Unicast, &mut fresh);
                if self.stats.datagrams_in != seen {
                    break;
                }
            }
            // A spin that found nothing yields the CPU (`sched_yield`), the back-off of Aeron's
            // idle strategies: with more spinning processes than CPUs (three members on two
            // vCPUs), each kept its CPU for a whole time slice while the one descheduled held the
            // others' credit, and 3 members casting 64 B fell from 780 k to 128 k msgs/s. With a
            // CPU of its own, the loop gets it straight back. After the turn's alarms, which
            // would otherwise wait behind it.
            let empty = self.stats.datagrams_in == seen;
            self.empty_turns = 0;
            let result = self.end_turn(fresh);
            if empty {
                self.busy_yield();
            }
            return result;
        }
        // Busy-polling tries every socket each turn anyway, and the threaded runtime checks its
        // command channel without a system call, so readiness is only needed for a send backlog
        // (writable) and, now and then, the rest. Skipping `epoll_wait` on the other turns halves
        // the system calls per spin: a datagram is seen sooner.
        // Likewise a turn that must not wait for the loop's own reasons (a timer is due, or a
        // socket has more to read) asks `epoll` nothing: what arrives meanwhile is read on the
        // next turn. A turn the caller asked not to wait (a zero timeout) does ask, without
        // waiting: a caller that only ever polls so would otherwise never hear of a datagram.
        // With other sockets to watch (multicast, retired ones), a turn asks `epoll` even when
        // due: their readiness is learnt only there, and a unicast socket that always has more
        // to read (a flood, a burst of retransmissions) would otherwise keep every turn due and
        // leave them unread for good. Likewise a turn due only for its timers asks (without
        // waiting): a socket's readiness is learnt only there too, and timers due at every turn
        // (a process whose alarms take longer than the gaps between them) left the socket unread
        // while its buffer overflowed and the group suspected the member.
        let seen = self.stats.datagrams_in;
        let skip = if self.config.busy_poll {
            !self.stats.turns.is_multiple_of(BUSY_POLL_EPOLL_EVERY)
        } else {
            more_to_read && one_socket
        };
        // A turn that does not wait in `epoll` keeps the time read at its start (a busy-polling
        // spin that finds nothing then reads the clock once, not three times: each read is about
        // a tenth of the spin).
        let mut fresh = None;
        if skip && self.backlog.is_empty() {
            self.mio_events.clear();
            fresh = Some(before);
        } else {
            match self.poll.poll(&mut self.mio_events, wait) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io("polling", e)),
            }
        }
        let mut writable = false;
        for event in &self.mio_events {
            if event.token() == SOCKET {
                self.readable |= event.is_readable();
                writable |= event.is_writable();
            } else if event.token() == MULTICAST {
                self.multicast_readable |= event.is_readable();
            } else if let Some(retired) = self.retired.iter_mut().find(|r| r.token == event.token()) {
                retired.readable |= event.is_readable();
            }
        }
        if writable {
            self.drain_backlog();
        }
        // Counted once per stop: a busy-polling loop turns millions of times a second.
        self.stats.app_backpressure += u64::from(lagging && !self.stopped_reading);
        self.stopped_reading = lagging;
        if !lagging {
            if self.readable || self.config.busy_poll {
                self.receive(Source::Unicast, &mut fresh);
            }
            if self.multicast.is_some() && (self.multicast_readable || self.config.busy_poll) {
                self.receive(Source::Multicast, &mut fresh);
            }
            for index in 0..self.retired.len() {
                if self.retired[index].readable || self.config.busy_poll {
                    self.receive(Source::Retired(index), &mut fresh);
                }
            }
        }
        // Busy-polling turns of one read each (the threaded runtime's, whose handles hold the
        // waker): as many idle ones in a row as a spin's reads yield the CPU, as a spin does. A
        // turn is idle when it read nothing, nothing was due, the caller let it wait (the
        // threaded runtime passes a zero timeout when it has handled a command) and no backlog
        // was sent.
        let idle_turn = self.config.busy_poll && idle && !writable && self.stats.datagrams_in == seen;
        self.empty_turns = if idle_turn { self.empty_turns + 1 } else { 0 };
        let result = self.end_turn(fresh);
        if self.empty_turns >= BUSY_SPIN_READS {
            self.empty_turns = 0;
            self.busy_yield();
        }
        result
    }

    /// Gives the CPU up once (see the spin in [`EventLoop::poll`]).
    fn busy_yield(&mut self) {
        self.stats.busy_yields += 1;
        std::thread::yield_now();
    }

    /// The end of a turn of [`EventLoop::poll`]: due alarms, DNS, migrations, then what they
    /// produced. `now`: the time, if it was read since the wait ended.
    fn end_turn(&mut self, now: Option<motet_core::Instant>) -> Result<(), Error> {
        // Due alarms only (with the deadlines of delayed processing): full batches wait for the
        // next turn, after the application has had this turn's events (unless an alarm is due:
        // `Node::handle_timeout` settles first).
        let now = now.unwrap_or_else(|| self.clock.now());
        if self.node.poll_alarm().is_some_and(|at| at <= now) {
            self.node.handle_timeout(now);
        }
        self.reresolve(now);
        self.tend_migrations();
        self.flush();
        Ok(())
    }
}
