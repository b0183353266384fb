//! The loop thread: the event loop driven on a thread of its own, the application's commands
//! taken in, and each member's events handed to its channel, or to its overflow while the
//! application lags (see the parent module).

use super::overflow::Overflow;
use super::{Addresses, Command, Joined, MemberShared, Refused, Shared, Sink, LEAVE_GRACE};
use crate::event_loop::{EventLoop, Lot, Op};
use crate::Error;
use crate::Event;
use motet_core::EndpointId;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;
use std::time::Duration;

/// The loop thread's state.
pub(super) struct LoopThread {
    event_loop: EventLoop,
    commands: Receiver<Command>,
    shared: Arc<Shared>,
    members: BTreeMap<EndpointId, Listener>,
    /// Members with events in their overflow, visited every turn.
    behind: BTreeSet<EndpointId>,
    /// Members with parked actions, whose handles are told after every turn how many are left.
    parking: BTreeSet<EndpointId>,
    /// The bound of each member's overflow in events (`event_queue`, at least [`super::OVERFLOW_MIN`]);
    /// its bytes are bounded by [`super::overflow::OVERFLOW_BYTES_MAX`].
    overflow_max: usize,
    /// The bound of each member's channel in payload bytes (`event_queue_bytes`; its capacity in
    /// events is `event_queue`).
    channel_bytes_max: usize,
    /// An event whose member's overflow is full, held (with everything after it) until it has
    /// room: the loop's last resort, which stops it reading the socket.
    held: Option<(EndpointId, Event)>,
}

/// Where one member's events go.
struct Listener {
    sink: Sink,
    shared: Arc<MemberShared>,
    /// Events its full channel refused, in order, waiting for room (at most `overflow_max` events
    /// or [`super::overflow::OVERFLOW_BYTES_MAX`] bytes, and one more message).
    overflow: Overflow,
}

impl Drop for LoopThread {
    /// However the loop ends: a handle refused for its parked actions then says the runtime
    /// stopped, since nothing parked will go.
    fn drop(&mut self) {
        // A panic unwinding through the loop: said before anything sees the loop gone (the
        // thread's handler adds the panic's message once the unwinding has reached it).
        if std::thread::panicking() {
            self.shared.failed("the event loop panicked (see the log)".into());
        }
        self.shared.stopped.store(true, Ordering::SeqCst);
        // Async callers waiting for room hear that none will come.
        self.shared.room_made(true);
    }
}

impl LoopThread {
    pub(super) fn new(
        event_loop: EventLoop,
        commands: Receiver<Command>,
        shared: Arc<Shared>,
        overflow_max: usize,
        channel_bytes_max: usize,
    ) -> LoopThread {
        LoopThread {
            event_loop,
            commands,
            shared,
            members: BTreeMap::new(),
            behind: BTreeSet::new(),
            parking: BTreeSet::new(),
            overflow_max,
            channel_bytes_max,
            held: None,
        }
    }

    pub(super) fn run(mut self) {
        loop {
            // Commands first, a bounded number per turn so the network is not starved.
            for _ in 0..1024 {
                match self.commands.try_recv() {
                    Ok(Command::Stop(grace)) => return self.finish_leaves(grace),
                    Err(TryRecvError::Disconnected) => return self.finish_leaves(LEAVE_GRACE),
                    Ok(command) => self.handle(command),
                    Err(TryRecvError::Empty) => break,
                }
            }
            self.dispatch();
            // Commands taken make room in the action queue, before the loop may sleep.
            self.shared.room_made(false);
            self.shared.sleeping.store(true, Ordering::SeqCst);
            // A command that came meanwhile is taken, and the loop turns without waiting: it
            // does not go back to the commands first, or senders that keep the queue full would
            // keep it from the network (no receives, no heartbeats: suspected after a second).
            let wait = match self.commands.try_recv() {
                Ok(Command::Stop(grace)) => return self.finish_leaves(grace),
                Err(TryRecvError::Disconnected) => return self.finish_leaves(LEAVE_GRACE),
                Ok(command) => {
                    self.shared.sleeping.store(false, Ordering::SeqCst);
                    self.handle(command);
                    Some(Duration::ZERO)
                }
                Err(TryRecvError::Empty) => None,
            };
            let result = self.event_loop.poll(wait);
            self.shared.sleeping.store(false, Ordering::SeqCst);
            if let Err(error) = result {
                tracing::error!(%error, "event loop failed; stopping");
                self.shared.failed(error.to_string());
                return;
            }
            // Parked actions that went this turn make room for the member's next messages.
            if !self.parking.is_empty() {
                for endpoint in std::mem::take(&mut self.parking) {
                    self.publish_parked(endpoint, None);
                }
            }
        }
    }

    /// Tells `endpoint`'s handles how many of its messages and state-transfer chunks are parked
    /// (and their bytes), then takes the action of `handled` (its lot and bytes), if one was just
    /// handled, off its way (in that order, so that the handles' sum of the two never falls
    /// short). A member with any parked is told again after each turn until they have gone.
    fn publish_parked(&mut self, endpoint: EndpointId, handled: Option<(Lot, usize)>) {
        let Some(listener) = self.members.get(&endpoint) else { return };
        let [messages, xfer] = self.event_loop.parked_counted(endpoint);
        let shared = &listener.shared;
        shared.messages.publish(messages);
        shared.xfer.publish(xfer);
        if let Some((lot, size)) = handled {
            shared.lot(lot).handled(size);
        }
        if messages.0 + xfer.0 > 0 {
            self.parking.insert(endpoint);
        }
    }

    /// The runtime is stopping: every member still in a group leaves, and the leaves run to their
    /// end, for at most `grace`, so the others see the members leave instead of suspecting them a
    /// second later. Those whose `Member` was dropped first (the usual order) had asked already;
    /// the others (a `Runtime` dropped before its `Member`s, as a struct whose fields are declared
    /// in that order does) are asked now: a process shutting down leaves its groups.
    /// Events still coming go to members that still listen, in order: a member whose channel is
    /// full gets nothing more (a gap in its events would be worse than their end).
    fn finish_leaves(&mut self, grace: Duration) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        let clock = crate::clock::Clock::new();
        let deadline = crate::clock::Deadline::after(&clock, grace);
        // Members behind on their events get nothing more (a gap would be worse than the end),
        // and are no longer said to lag: their leaves go at the others' pace.
        let mut cut_off = self.behind.clone();
        if let Some((endpoint, _)) = &self.held {
            cut_off.insert(*endpoint);
        }
        for &endpoint in &cut_off {
            let _ = self.event_loop.set_lagging(endpoint, false);
        }
        let staying: Vec<EndpointId> = self.members.keys().copied().collect();
        for endpoint in staying {
            // Refused for a member that asked already or has left: nothing more to do for it.
            let _ = self.event_loop.leave(endpoint);
        }
        while self.event_loop.leaving() > 0 {
            let left = deadline.until(&clock);
            if left.is_zero() {
                // Asked to stop at once (`shutdown(Duration::ZERO)`): no news to the caller.
                if !grace.is_zero() {
                    tracing::warn!(
                        leaving = self.event_loop.leaving(),
                        "stopping before every leave was confirmed: the others will suspect those members"
                    );
                }
                return;
            }
            self.commands_while_stopping();
            if let Err(error) = self.event_loop.poll(Some(left.min(Duration::from_millis(50)))) {
                tracing::error!(%error, "event loop failed while leaving; stopping");
                return;
            }
            while let Some((endpoint, event)) = self.event_loop.next_event() {
                let Some(listener) = self.members.get(&endpoint).filter(|_| !cut_off.contains(&endpoint)) else {
                    continue;
                };
                let exit = matches!(event, Event::Exit);
                match offer(listener, event, self.channel_bytes_max) {
                    // Its last: the channel ends with it, as `hand` ends it while running, so
                    // that `recv`, the iterator and the stream end now, not once every other
                    // member's leave has run out (a review's finding).
                    Ok(()) if exit => {
                        self.members.remove(&endpoint);
                    }
                    Ok(()) => {}
                    Err(_) => {
                        cut_off.insert(endpoint);
                    }
                }
            }
        }
        // The leaves' last datagrams may still wait in the send backlog (a full socket buffer):
        // they go before the socket closes, within what is left of the grace. Before, the loop
        // ended with the last leave and they were dropped, unsent and uncounted.
        while self.event_loop.unsent() > 0 {
            let left = deadline.until(&clock);
            if left.is_zero() {
                tracing::warn!(unsent = self.event_loop.unsent(), "stopping with datagrams the socket had no room for");
                return;
            }
            self.commands_while_stopping();
            if let Err(error) = self.event_loop.poll(Some(left.min(Duration::from_millis(50)))) {
                tracing::error!(%error, "event loop failed while sending its last datagrams; stopping");
                return;
            }
        }
    }

    /// While the leaves run out: statistics are answered; an action that came as the stop was
    /// taken (the handles refuse them since) is refused and counted, a leave being under way
    /// already; a join or a migration is refused.
    fn commands_while_stopping(&mut self) {
        while let Ok(command) = self.commands.try_recv() {
            match command {
                Command::Stats { reply } => {
                    let _ = reply.send((self.event_loop.runtime_stats(), self.event_loop.protocol_stats()));
                }
                Command::Act { endpoint, op } => {
                    let counted = op.counted().map(|lot| (lot, op.weight()));
                    if !matches!(op, Op::Leave) {
                        self.event_loop.refused(&Error::Stopped);
                    }
                    self.publish_parked(endpoint, counted);
                }
                Command::Join { reply, .. } => drop(reply.send(Err(Error::Stopped))),
                Command::Migrate { reply, .. } => drop(reply.send(Err(Error::Stopped))),
                Command::Stop(_) => {}
                #[cfg(test)]
                Command::Panic => panic!("a test asked the loop to panic"),
            }
        }
    }

    fn handle(&mut self, command: Command) {
        match command {
            #[cfg(test)]
            Command::Panic => panic!("a test asked the loop to panic"),
            Command::Join { config, sink, reply } => {
                let result = self.event_loop.join(&config).map(|endpoint| {
                    let member = Arc::new(MemberShared::default());
                    // Until its first view, the member's own limit (its view, alone, has it).
                    // (`join` has parsed the stack: it cannot fail here.)
                    let max = motet_core::StackSpec::parse(&config.stack)
                        .map_or(config.params.appl.message_size_max, |spec| {
                            config.params.appl.message_size_max_of(&spec)
                        });
                    member.message_size_max.store(max, Ordering::Relaxed);
                    let listener = Listener { sink, shared: Arc::clone(&member), overflow: Overflow::default() };
                    self.members.insert(endpoint, listener);
                    Joined { endpoint, member }
                });
                let _ = reply.send(result);
            }
            Command::Act { endpoint, op } => {
                let counted = op.counted().map(|lot| (lot, op.weight()));
                if let Err(error) = self.event_loop.act(endpoint, op) {
                    self.event_loop.refused(&error);
                }
                self.publish_parked(endpoint, counted);
            }
            Command::Stats { reply } => {
                let _ = reply.send((self.event_loop.runtime_stats(), self.event_loop.protocol_stats()));
            }
            Command::Migrate { bind, advertise, reply } => {
                let event_loop = &mut self.event_loop;
                let result = event_loop
                    .migrate(bind, advertise)
                    .map(|advertise| Addresses { local: event_loop.local_addr(), advertise });
                let _ = reply.send(result);
            }
            Command::Stop(_) => {}
        }
    }

    /// Hands events to the members' channels, in order: first the overflows of members that
    /// were behind, as far as their channels now take them, then the loop's new events. A member
    /// whose channel is full has its events wait in its overflow and its group told that it lags
    /// (its senders wait for credit), while the others' events go on.
    fn dispatch(&mut self) {
        self.catch_up();
        loop {
            let Some((endpoint, event)) = self.held.take().or_else(|| self.event_loop.next_event()) else { return };
            let Some(listener) = self.members.get_mut(&endpoint) else { continue };
            if !listener.overflow.is_empty() {
                if listener.overflow.is_full(self.overflow_max) {
                    // Its senders did not wait (a stack without flow control, or a lag long
                    // enough for what trickles to fill the overflow), or its messages are large
                    // (`OVERFLOW_BYTES_MAX`): the last resort.
                    self.held = Some((endpoint, event));
                    return;
                }
                listener.overflow.push_back(event);
                continue;
            }
            match hand(listener, event, self.channel_bytes_max) {
                Handed::All => {}
                Handed::Full => {
                    self.behind.insert(endpoint);
                    tracing::debug!(%endpoint, "the application lags its events: its senders wait for it");
                    // A member that has left has nothing to say it to.
                    let _ = self.event_loop.set_lagging(endpoint, true);
                }
                Handed::Gone => self.forget(endpoint),
            }
        }
    }

    /// A member nobody listens to any more: its group is no longer told it lags (its leave, if
    /// it asked for one, then goes at the pace of the others).
    fn forget(&mut self, endpoint: EndpointId) {
        if let Some(listener) = self.members.remove(&endpoint) {
            listener.shared.forgotten.store(true, Ordering::SeqCst);
        }
        let _ = self.event_loop.set_lagging(endpoint, false);
    }

    /// Moves the overflows of members that were behind into their channels, as far as they now
    /// take them; a member that has caught up is no longer said to lag.
    fn catch_up(&mut self) {
        if self.behind.is_empty() {
            return;
        }
        for endpoint in std::mem::take(&mut self.behind) {
            let Some(listener) = self.members.get_mut(&endpoint) else { continue };
            // The application has taken nothing since its channel refused an event: trying again
            // would fail (and box the event twice). It wakes the loop when it takes one, and so
            // does dropping its receiver (`Unlistened`).
            if listener.shared.want_wake.load(Ordering::SeqCst) {
                self.behind.insert(endpoint);
                continue;
            }
            let mut handed = Handed::All;
            while let Some(event) = listener.overflow.pop_front() {
                handed = hand(listener, event, self.channel_bytes_max);
                if !matches!(handed, Handed::All) {
                    break;
                }
            }
            match handed {
                Handed::Full => drop(self.behind.insert(endpoint)),
                Handed::Gone => self.forget(endpoint),
                Handed::All => {
                    let _ = self.event_loop.set_lagging(endpoint, false);
                }
            }
        }
    }
}

/// What became of an event handed to a member's channel.
enum Handed {
    /// Taken (for a member that exited, its last).
    All,
    /// The channel is full: the event waits at the front of the member's overflow.
    Full,
    /// Nobody listens any more (the handle was dropped, or the member exited).
    Gone,
}

/// Hands `event` to the member's channel, or, when it is full (`event_queue` events, or
/// `bytes_max` of payload: one message may pass it), to the front of its overflow.
fn hand(listener: &mut Listener, event: Event, bytes_max: usize) -> Handed {
    let exit = matches!(event, Event::Exit);
    // What the handle checks actions against changes before the application can take the view:
    // set after the offer, a thread already waiting in `recv` could take it and act on it (a
    // send to a member it names) while the handle still checked against the view before, and be
    // refused (`NotMember`) for doing what the error says to do (a review's finding). The handle
    // may be ahead of the events taken, never behind: a view waiting in the overflow has
    // replaced the one before at the loop already.
    if let Event::View(view) = &event {
        if let Ok(mut current) = listener.shared.view.lock() {
            *current = Some(Arc::new(super::Latest::of(view)));
        }
        // The view's limit, not the member's own: a view runs its parameters.
        listener.shared.message_size_max.store(view.message_size_max, Ordering::Relaxed);
    }
    let sent = match offer(listener, event, bytes_max) {
        // Full: the application is asked to wake the loop when it takes an event. It may have
        // taken one between the refusal and the request, and would not wake it: so one more try
        // after the request.
        Err(Refused::Full(event)) => {
            // A swap, not a store: with the application's swap in `taken` (or the guard's store
            // after its receiver is gone), one side sees the other's write, so either this retry
            // sees the room (or the closed channel) or the application wakes the loop.
            let _ = listener.shared.want_wake.swap(true, Ordering::SeqCst);
            offer(listener, *event, bytes_max)
        }
        other => other,
    };
    match sent {
        Ok(()) if exit => Handed::Gone,
        Ok(()) => Handed::All,
        Err(Refused::Full(event)) => {
            listener.overflow.push_front(*event);
            Handed::Full
        }
        Err(Refused::Gone) => Handed::Gone,
    }
}

/// Sends `event` to the member's channel unless the channel is full, in events or in payload
/// bytes. The bytes are counted before the send: the application may take the event at once, and
/// takes its bytes off when it does (`Handle::taken`).
fn offer(listener: &Listener, event: Event, bytes_max: usize) -> Result<(), Refused> {
    // A reader that is gone is told before the bytes are: a channel full by bytes answered `Full`
    // for good, and a member dropped while it lagged was never forgotten (its overflow kept for
    // the runtime's life; a review's finding).
    if listener.sink.is_closed() {
        return Err(Refused::Gone);
    }
    let size = event.payload_len();
    if size == 0 {
        return listener.sink.try_send(event);
    }
    let bytes = &listener.shared.channel_bytes;
    if bytes.load(Ordering::SeqCst) >= bytes_max {
        return Err(Refused::Full(Box::new(event)));
    }
    bytes.fetch_add(size, Ordering::SeqCst);
    let sent = listener.sink.try_send(event);
    if sent.is_err() {
        bytes.fetch_sub(size, Ordering::SeqCst);
    }
    sent
}

#[cfg(test)]
mod tests {
    use super::super::{Handle, Member, Unlistened};
    use super::*;
    use crate::config::RuntimeConfig;
    use bytes::Bytes;
    use std::sync::atomic::AtomicBool;
    use std::sync::mpsc;

    /// A loop thread with one member whose channel holds one event, and the member's handle and
    /// receiver.
    fn one_member() -> (LoopThread, Handle, crate::runtime::EventReceiver) {
        member_with(1)
    }

    /// The same with a channel that holds `capacity` events.
    fn member_with(capacity: usize) -> (LoopThread, Handle, crate::runtime::EventReceiver) {
        let event_loop = EventLoop::new(RuntimeConfig::default()).unwrap();
        let (commands, receiver) = mpsc::sync_channel(16);
        let shared = Arc::new(Shared::new(commands, event_loop.waker()));
        let mut thread = LoopThread::new(event_loop, receiver, Arc::clone(&shared), 64, usize::MAX);
        let (sink, events) = crate::runtime::event_queue(capacity);
        let member = Arc::new(MemberShared::default());
        let endpoint = EndpointId(7);
        let listener =
            Listener { sink: Sink::Blocking(sink), shared: Arc::clone(&member), overflow: Overflow::default() };
        thread.members.insert(endpoint, listener);
        (thread, Handle { endpoint, shared, member }, events)
    }

    /// The handle's view is set before the `View` event can be taken: a thread waiting in `recv`
    /// acts on what it takes (a send to a member it names), and the handle must not check that
    /// against the view before. Here the test holds the handle's view locked: the loop waits for
    /// it before it offers the event, so the event cannot be taken meanwhile. Before, it was
    /// offered first (a review's finding).
    #[test]
    fn the_handles_view_is_set_before_the_view_event_can_be_taken() {
        let (mut thread, handle, events) = member_with(4);
        let view = crate::View {
            id: crate::ViewId { ltime: 3, coord: EndpointId(1) },
            members: vec![EndpointId(1), EndpointId(7)],
            addresses: vec!["127.0.0.1:1".parse().unwrap(), "127.0.0.1:2".parse().unwrap()],
            rank: 1,
            primary: true,
            stack: String::new(),
            clients: Vec::new(),
            xfer: false,
            params: Arc::new(motet_core::StackConfig::default()),
            message_size_max: 1000,
        };
        let locked = handle.member.view.lock().unwrap();
        std::thread::scope(|scope| {
            let handing = scope.spawn(|| {
                let listener = thread.members.get_mut(&handle.endpoint).unwrap();
                matches!(hand(listener, Event::View(Box::new(view)), usize::MAX), Handed::All)
            });
            assert!(
                events.recv_timeout(Duration::from_millis(300)).is_err(),
                "offered before the handle's view was set"
            );
            drop(locked);
            assert!(handing.join().unwrap());
        });
        assert!(matches!(events.try_recv(), Ok(Event::View(_))));
        assert_eq!(handle.view(), Some(vec![EndpointId(1), EndpointId(7)]));
    }

    /// At the bound of parked messages, a stopping runtime answers `Stopped`, not `QueueFull`,
    /// which the application would retry for the whole grace period (a review's finding).
    #[test]
    fn a_stopping_runtime_at_the_parked_bound_says_stopped() {
        let (_thread, handle, _events) = member_with(16);
        handle.member.message_size_max.store(1 << 20, Ordering::Relaxed);
        handle.member.lot(Lot::Messages).parked.store(crate::event_loop::PARKED_MAX, Ordering::SeqCst);
        assert!(matches!(handle.cast(Bytes::from_static(b"x")), Err(crate::Error::QueueFull(_))));
        handle.shared.stopping.store(true, Ordering::SeqCst);
        assert!(matches!(handle.cast(Bytes::from_static(b"x")), Err(crate::Error::Stopped)));
    }

    /// `try_cast` never waits for room in the command channel (`action_queue`, 16 here, with no
    /// loop taking commands): the 17th is `QueueFull(Queue::Action)` and its message is not counted
    /// as parked; `cast` would have blocked.
    #[test]
    fn try_cast_refuses_instead_of_waiting_for_room() {
        let (_thread, handle, _events) = member_with(16);
        handle.member.message_size_max.store(1 << 20, Ordering::Relaxed);
        for _ in 0..16 {
            handle.try_cast(Bytes::from_static(b"x")).unwrap();
        }
        assert!(matches!(
            handle.try_cast(Bytes::from_static(b"x")),
            Err(crate::Error::QueueFull(crate::Queue::Action))
        ));
        assert_eq!(
            handle.member.lot(Lot::Messages).in_flight.load(Ordering::SeqCst),
            16,
            "the refused one is not counted"
        );
    }

    /// A member's channel is full at `event_queue_bytes` of payload too, with room for more
    /// events: the next message waits in the member's overflow until the application has taken
    /// some. One message may pass the bound (one larger than it still goes through).
    #[test]
    fn a_members_channel_is_full_at_its_bytes_too() {
        let (mut thread, handle, events) = member_with(16);
        let cast = |n| Event::Cast { from: EndpointId(1), data: Bytes::from(vec![0u8; n]) };
        let listener = thread.members.get_mut(&handle.endpoint).unwrap();
        assert!(matches!(hand(listener, cast(80), 100), Handed::All));
        assert!(matches!(hand(listener, cast(80), 100), Handed::All), "80 bytes held: one more passes");
        assert!(matches!(hand(listener, cast(1), 100), Handed::Full), "160 bytes held, 2 events of 16");
        assert_eq!(listener.overflow.len(), 1);
        thread.behind.insert(handle.endpoint);
        let first = events.try_recv().unwrap();
        handle.taken(&first);
        thread.catch_up();
        assert!(thread.members[&handle.endpoint].overflow.is_empty(), "80 bytes held: it went");
        assert!(thread.behind.is_empty());
        assert_eq!(handle.member.channel_bytes.load(Ordering::SeqCst), 81);
        while let Ok(event) = events.try_recv() {
            handle.taken(&event);
        }
        assert_eq!(handle.member.channel_bytes.load(Ordering::SeqCst), 0, "what the application took is off");
    }

    /// Fills the member's channel and one more: the member is behind, with one event in its
    /// overflow.
    fn fall_behind(thread: &mut LoopThread, endpoint: EndpointId) {
        let listener = thread.members.get_mut(&endpoint).unwrap();
        assert!(matches!(hand(listener, Event::Block, usize::MAX), Handed::All));
        assert!(matches!(hand(listener, Event::Block, usize::MAX), Handed::Full));
        thread.behind.insert(endpoint);
    }

    /// Lets a fresh loop take what its first turns report (the socket's readiness), so that its
    /// next wait lasts until it is woken.
    fn settle(thread: &mut LoopThread) {
        for _ in 0..3 {
            thread.event_loop.poll(Some(Duration::from_millis(20))).unwrap();
        }
    }

    /// The loop wakes within `limit` (it was woken), where it would otherwise wait 5 s.
    fn woken(thread: &mut LoopThread, limit: Duration) -> bool {
        let clock = crate::clock::Clock::new();
        let started = clock.now();
        thread.event_loop.poll(Some(Duration::from_secs(5))).unwrap();
        crate::clock::between(started, clock.now()) < limit
    }

    /// A member whose application has taken nothing since its channel refused an event is not
    /// tried again (that would fail, and box the event twice) until the application takes one,
    /// which wakes the loop.
    #[test]
    fn a_lagging_member_is_tried_again_only_once_its_application_took_an_event() {
        let (mut thread, handle, events) = one_member();
        fall_behind(&mut thread, handle.endpoint);
        // Room in the channel, but the application did not say so (a raw receive, not `taken`).
        assert_eq!(events.try_recv().unwrap(), Event::Block);
        thread.catch_up();
        assert_eq!(thread.members[&handle.endpoint].overflow.len(), 1, "not tried: nobody woke the loop");
        assert!(thread.behind.contains(&handle.endpoint));
        settle(&mut thread);
        handle.taken(&Event::Block);
        assert!(woken(&mut thread, Duration::from_secs(2)), "taking an event wakes the loop");
        thread.catch_up();
        assert!(thread.members[&handle.endpoint].overflow.is_empty(), "tried once woken");
        assert!(thread.behind.is_empty(), "caught up");
        assert_eq!(events.try_recv().unwrap(), Event::Block);
    }

    /// The member of `handle` (behind, its channel full) is dropped: that wakes the loop, whose
    /// next `catch_up` forgets it.
    fn dropped_and_forgotten(thread: &mut LoopThread, handle: &Handle, events: crate::runtime::EventReceiver) {
        // Its leave goes into the command channel, which these tests do not read.
        let member = Member {
            handle: handle.clone(),
            events,
            exited: AtomicBool::new(false),
            _unlistened: Unlistened(handle.clone()),
        };
        settle(thread);
        drop(member);
        assert!(woken(thread, Duration::from_secs(2)), "dropping the member wakes the loop");
        thread.catch_up();
        assert!(!thread.members.contains_key(&handle.endpoint), "forgotten");
        assert!(thread.behind.is_empty());
    }

    /// A lagging member that is dropped is forgotten: its guard, dropped after its receiver
    /// (`Unlistened`, the last field), wakes the loop, which tries once more and finds the channel
    /// closed. Without it the member's overflow would stay for the runtime's life; with the guard
    /// dropped before the receiver, the loop could find the channel full once more and never be
    /// woken again.
    #[test]
    fn a_lagging_member_that_is_dropped_is_forgotten() {
        let (mut thread, handle, events) = one_member();
        fall_behind(&mut thread, handle.endpoint);
        thread.catch_up();
        assert!(thread.members.contains_key(&handle.endpoint), "still behind");
        dropped_and_forgotten(&mut thread, &handle, events);
    }

    /// The same for a member whose channel is full by its payload's bytes, not its count: the
    /// byte bound was checked first, so the closed channel was never seen.
    #[test]
    fn a_member_dropped_while_full_by_bytes_is_forgotten() {
        let (mut thread, handle, events) = member_with(64);
        thread.channel_bytes_max = 10;
        let listener = thread.members.get_mut(&handle.endpoint).unwrap();
        let cast = || Event::Cast { from: EndpointId(1), data: Bytes::from_static(b"twelve bytes") };
        assert!(matches!(hand(listener, cast(), 10), Handed::All), "one message may pass the bound");
        assert!(matches!(hand(listener, cast(), 10), Handed::Full), "full by bytes");
        thread.behind.insert(handle.endpoint);
        dropped_and_forgotten(&mut thread, &handle, events);
    }

    /// The same for an async member.
    #[cfg(feature = "tokio")]
    #[test]
    fn a_lagging_async_member_that_is_dropped_is_forgotten() {
        let (mut thread, handle, _) = one_member();
        let (sink, events) = tokio::sync::mpsc::channel(1);
        thread.members.get_mut(&handle.endpoint).unwrap().sink = Sink::Async(sink);
        fall_behind(&mut thread, handle.endpoint);
        thread.catch_up();
        let member = crate::AsyncMember::new(handle.clone(), events);
        settle(&mut thread);
        drop(member);
        assert!(woken(&mut thread, Duration::from_secs(2)), "dropping the member wakes the loop");
        thread.catch_up();
        assert!(!thread.members.contains_key(&handle.endpoint), "forgotten");
    }

    /// A lot's reservations count each action's own bytes: every accepted action keeps the
    /// lot's bytes below the bound, so the loop, which refuses a message once the bound is
    /// parked, takes them in whatever order they reach it (a small cast reserved on one thread
    /// before a large one on another, which reaches the loop first). Before, the check left
    /// out the action's own bytes: both were accepted, and the loop refused the small one.
    #[test]
    fn a_lots_reservations_keep_the_bytes_below_the_bound_in_any_order() {
        use crate::event_loop::PARKED_BYTES_MAX;
        let lot = super::super::Counted::default();
        assert!(lot.reserve(PARKED_BYTES_MAX + 10), "an action of any size goes alone");
        lot.handled(PARKED_BYTES_MAX + 10);
        assert!(lot.reserve(100));
        assert!(!lot.reserve(PARKED_BYTES_MAX - 100), "with the small one, it would reach the bound");
        assert!(lot.reserve(PARKED_BYTES_MAX - 101));
        assert!(!lot.reserve(1), "at the bound");
        // Parked at the loop instead of on their way: the same.
        lot.handled(PARKED_BYTES_MAX - 101);
        lot.publish((1, PARKED_BYTES_MAX - 101));
        assert!(!lot.reserve(1), "at the bound, parked");
        lot.publish((0, 0));
        lot.handled(100);
        assert!(lot.reserve(PARKED_BYTES_MAX - 1), "room again");
        lot.handled(PARKED_BYTES_MAX - 1);
        // Alone is by count: an empty action first, then one at the bound, which the loop could
        // get first (it would then refuse the empty one).
        assert!(lot.reserve(0));
        assert!(!lot.reserve(PARKED_BYTES_MAX), "not alone beside an empty action");
    }
}
