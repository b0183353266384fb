//! [`Runtime`]: the event loop on a thread of its own, and [`Member`] handles for the
//! application's threads.
//!
//! Actions go to the loop through one bounded channel (`action_queue`): `cast` blocks when it is
//! full, which is the application's back-pressure. Events come back through one bounded channel
//! per member (`event_queue` events, `event_queue_bytes` of payload). When a member's
//! application lags and its channel is full, its
//! events wait in a bounded overflow of its own while the loop goes on serving the others, and
//! the member's group is told (`EventLoop::set_lagging`): its senders wait for credit. Once the
//! application has taken the overflow, the lag ends. Only a member whose overflow is full too
//! (a stack without flow control) holds up the loop, which then stops reading the socket.

use crate::config::{GroupConfig, RuntimeConfig};
use crate::event_loop::{EventLoop, Op, RuntimeStats, PARKED_BYTES_MAX, PARKED_MAX};
use crate::{Error, Event};
use bytes::Bytes;
use motet_core::{EndpointId, ViewId};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TryRecvError, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long a stopping runtime waits for the leaves its members asked for (as `motet member`
/// does on SIGTERM).
const LEAVE_GRACE: Duration = Duration::from_secs(5);

/// The least a member's overflow holds before the loop's last resort (it stops reading): a
/// lagging member still receives the windows in flight when it began to lag (256 casts and 64
/// sends per sender by default), and then `lag_trickle` casts and as many sends (64 each) per
/// sender every `lag_report_interval`. In a 100-member group that is about 32,000 events at once
/// and 12,800 per half second: 65,536 holds about 1.3 s of such a lag, a longer one meets the
/// last resort, which loses nothing (the senders retransmit).
const OVERFLOW_MIN: usize = 65_536;

mod overflow;
use overflow::Overflow;

/// What the application's threads ask of the loop.
enum Command {
    Join {
        config: Box<GroupConfig>,
        sink: Sink,
        reply: SyncSender<Result<Joined, Error>>,
    },
    Act {
        endpoint: EndpointId,
        op: Op,
    },
    Stats {
        reply: SyncSender<(RuntimeStats, motet_core::layer::Stats)>,
    },
    Migrate {
        bind: SocketAddr,
        advertise: Option<SocketAddr>,
        reply: SyncSender<Result<Addresses, Error>>,
    },
    /// Stop, after the leaves under way have run for at most this long.
    Stop(Duration),
}

struct Joined {
    endpoint: EndpointId,
    member: Arc<MemberShared>,
}

/// Where the loop puts a member's events: a bounded channel for a blocking or an async reader.
enum Sink {
    Blocking(SyncSender<Event>),
    #[cfg(feature = "tokio")]
    Async(tokio::sync::mpsc::Sender<Event>),
}

enum Refused {
    Full(Box<Event>),
    Gone,
}

impl Sink {
    fn try_send(&self, event: Event) -> Result<(), Refused> {
        match self {
            Sink::Blocking(sender) => sender.try_send(event).map_err(|e| match e {
                TrySendError::Full(event) => Refused::Full(Box::new(event)),
                TrySendError::Disconnected(_) => Refused::Gone,
            }),
            #[cfg(feature = "tokio")]
            Sink::Async(sender) => sender.try_send(event).map_err(|e| match e {
                tokio::sync::mpsc::error::TrySendError::Full(event) => Refused::Full(Box::new(event)),
                tokio::sync::mpsc::error::TrySendError::Closed(_) => Refused::Gone,
            }),
        }
    }
}

/// State shared by the loop and the application's handles.
struct Shared {
    commands: SyncSender<Command>,
    waker: Arc<mio::Waker>,
    /// The loop is about to sleep (or sleeps): a command must wake it.
    sleeping: AtomicBool,
    /// The loop has stopped (its thread's state was dropped): nothing parked will go.
    stopped: AtomicBool,
}

impl Shared {
    fn command(&self, command: Command) -> Result<(), Error> {
        self.commands.send(command).map_err(|_| Error::Stopped)?;
        if self.sleeping.swap(false, Ordering::SeqCst) {
            let _ = self.waker.wake();
        }
        Ok(())
    }
}

/// What the loop and one member's handle share.
#[derive(Default)]
struct MemberShared {
    /// Members of the latest view handed to the application.
    view: Mutex<Option<Arc<[EndpointId]>>>,
    left: AtomicBool,
    /// The loop holds events this member's full channel refused: wake it after a receive.
    want_wake: AtomicBool,
    /// The largest message the member's current view takes (`appl.message_size_max` of the
    /// view's parameters), checked before an action is queued to the loop.
    message_size_max: AtomicUsize,
    /// Payload bytes in the member's channel: added by the loop before it sends an event,
    /// taken off by the application when it takes one (`event_queue_bytes` bounds them).
    channel_bytes: AtomicUsize,
    /// The member's messages on their way to the loop (in the command channel or being handled),
    /// and their payload bytes: added by the handle before it sends one, taken off by the loop
    /// once it has handled it and said how many are parked.
    in_flight: AtomicUsize,
    in_flight_bytes: AtomicUsize,
    /// The member's actions parked at the loop, and their payload bytes, as the loop last said
    /// (after each of the member's actions, and after each turn while any are parked).
    parked: AtomicUsize,
    parked_bytes: AtomicUsize,
    /// The loop forgot the member (nobody listens to it any more): its counts above are no longer
    /// kept.
    forgotten: AtomicBool,
}

/// A running event loop on its own thread. Dropping it stops the loop once the leaves its
/// members asked for ([`Member::leave`], or dropping the `Member`) have run, for at most 5 s: a
/// program that drops its members and then its runtime leaves its groups gracefully. Members that
/// did not ask to leave are not told: to the others they have failed. [`Runtime::shutdown`] sets
/// the wait; in async code, drop the runtime where blocking is allowed (`spawn_blocking`).
pub struct Runtime {
    shared: Arc<Shared>,
    event_queue: usize,
    thread: Option<JoinHandle<()>>,
    /// Where the socket is bound and advertised (they change when the process migrates).
    addresses: Mutex<Addresses>,
}

/// A socket's bound and advertised addresses.
#[derive(Clone, Copy, Debug)]
struct Addresses {
    local: SocketAddr,
    advertise: SocketAddr,
}

impl Runtime {
    /// Binds the socket and starts the loop thread.
    pub fn start(config: RuntimeConfig) -> Result<Runtime, Error> {
        let event_loop = EventLoop::new(config.clone())?;
        let addresses = Addresses { local: event_loop.local_addr(), advertise: event_loop.advertised_addr() };
        let (commands, receiver) = mpsc::sync_channel(config.action_queue);
        let shared = Arc::new(Shared {
            commands,
            waker: event_loop.waker(),
            sleeping: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
        });
        let loop_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("motet-loop".into())
            .spawn(move || {
                // Every report of the loop and of the stacks it drives names the process by its
                // address (several runtimes may share one log).
                let _span = tracing::info_span!("motet", address = %addresses.advertise).entered();
                let overflow_max = config.event_queue.max(OVERFLOW_MIN);
                LoopThread::new(event_loop, receiver, loop_shared, overflow_max, config.event_queue_bytes).run()
            })
            .map_err(|e| Error::io("starting the event-loop thread", e))?;
        Ok(Runtime { shared, event_queue: config.event_queue, thread: Some(thread), addresses: Mutex::new(addresses) })
    }

    /// Joins a group. The endpoint starts alone and merges with the members it finds through the
    /// configured seeds; its first [`Event::View`] is of itself alone.
    pub fn join(&self, config: GroupConfig) -> Result<Member, Error> {
        let (sink, events) = mpsc::sync_channel(self.event_queue);
        let handle = self.join_with(config, Sink::Blocking(sink))?;
        let unlistened = Unlistened(handle.clone());
        Ok(Member { handle, events, exited: AtomicBool::new(false), _unlistened: unlistened })
    }

    /// Like [`Runtime::join`], for async code: the member's events are a [`futures_core::Stream`]
    /// (and [`crate::AsyncMember::recv`]), and nothing blocks a runtime thread.
    #[cfg(feature = "tokio")]
    pub fn join_async(&self, config: GroupConfig) -> Result<crate::AsyncMember, Error> {
        let (sink, events) = tokio::sync::mpsc::channel(self.event_queue);
        let handle = self.join_with(config, Sink::Async(sink))?;
        Ok(crate::AsyncMember::new(handle, events))
    }

    fn join_with(&self, config: GroupConfig, sink: Sink) -> Result<Handle, Error> {
        let (reply, answer) = mpsc::sync_channel(1);
        self.shared.command(Command::Join { config: Box::new(config), sink, reply })?;
        let joined = answer.recv().map_err(|_| Error::Stopped)??;
        Ok(Handle { endpoint: joined.endpoint, shared: Arc::clone(&self.shared), member: joined.member })
    }

    /// The runtime's and the protocol's counters.
    pub fn stats(&self) -> Result<(RuntimeStats, motet_core::layer::Stats), Error> {
        self.stats_handle().get()
    }

    /// A handle that reads the counters from another thread (for exporters).
    pub fn stats_handle(&self) -> StatsHandle {
        StatsHandle { shared: Arc::clone(&self.shared) }
    }

    /// The bound socket address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addresses().local
    }

    /// The address other members reach this process at.
    pub fn advertised_addr(&self) -> SocketAddr {
        self.addresses().advertise
    }

    fn addresses(&self) -> Addresses {
        *self.addresses.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Moves this process to a new socket (endpoint migration): binds `bind` and asks every
    /// group it is in for a view with the new address (`advertise`, or the bound address), with
    /// no message lost on the way (the old socket is read until the views have the new address,
    /// and `migrate_grace_ms` more). Every joined stack needs the `Migrate` property. Returns the
    /// new advertised address; watch `View::addresses` for the change.
    pub fn migrate(&self, bind: SocketAddr, advertise: Option<SocketAddr>) -> Result<SocketAddr, Error> {
        let (reply, answer) = mpsc::sync_channel(1);
        self.shared.command(Command::Migrate { bind, advertise, reply })?;
        let moved = answer.recv().map_err(|_| Error::Stopped)??;
        *self.addresses.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = moved;
        Ok(moved.advertise)
    }
}

impl Runtime {
    /// Stops the loop once the leaves its members asked for have run, waiting at most `grace`
    /// for them (dropping the `Runtime` waits up to 5 s). `Duration::ZERO` stops at once: the
    /// others then suspect those members, as if the process had failed.
    pub fn shutdown(mut self, grace: Duration) {
        self.stop(grace);
    }

    fn stop(&mut self, grace: Duration) {
        let _ = self.shared.command(Command::Stop(grace));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.stop(LEAVE_GRACE);
    }
}

/// Reads a runtime's counters from any thread.
#[derive(Clone)]
pub struct StatsHandle {
    shared: Arc<Shared>,
}

impl StatsHandle {
    /// The runtime's and the protocol's counters now.
    pub fn get(&self) -> Result<(RuntimeStats, motet_core::layer::Stats), Error> {
        let (reply, answer) = mpsc::sync_channel(1);
        self.shared.command(Command::Stats { reply })?;
        answer.recv().map_err(|_| Error::Stopped)
    }
}

/// One endpoint in one group: receive its events here; act through it or through [`Handle`]s
/// (cloneable, for other threads). Dropping the member leaves the group.
///
/// Read its events, even when only casting (its own casts are delivered to it too, unless it
/// joined with `GroupConfig::loopback(false)`): a member
/// whose channel is full lags, its own casts are refused (parked) and its group's senders wait
/// for it until it reads again (docs/runtime.md, "Back-pressure, end to end").
pub struct Member {
    handle: Handle,
    events: Receiver<Event>,
    exited: AtomicBool,
    /// Last, so that it drops after `events` ([`Unlistened`]).
    _unlistened: Unlistened,
}

/// Dropped after a member's receiver: tells the loop that nobody listens any more, so that it
/// tries the member's channel once more, finds it closed, and forgets the member. (The loop does
/// not retry a full channel on its own: it waits for the application to take an event, which
/// wakes it, and a dropped receiver takes none.)
pub(crate) struct Unlistened(pub(crate) Handle);

impl Drop for Unlistened {
    fn drop(&mut self) {
        let _ = self.0.member.want_wake.swap(false, Ordering::SeqCst);
        let _ = self.0.shared.waker.wake();
    }
}

/// A cloneable, thread-safe handle to act as a member (cast, send, leave) from any thread.
#[derive(Clone)]
pub struct Handle {
    endpoint: EndpointId,
    shared: Arc<Shared>,
    member: Arc<MemberShared>,
}

impl Handle {
    /// This endpoint's id (as it appears in views).
    pub fn id(&self) -> EndpointId {
        self.endpoint
    }

    /// Multicasts `data` to the current view. Returns once the loop has queued it; the message
    /// goes out as soon as flow control and view changes allow (FIFO with this member's other
    /// casts). Blocks while `action_queue` actions wait for the loop (back-pressure). Refuses with
    /// `Error::QueueFull` while this member's messages parked at the loop are at their bound
    /// (65,536, or 64 MiB): take events (a member that lags holds its own casts back) and retry.
    pub fn cast(&self, data: impl Into<Bytes>) -> Result<(), Error> {
        let data = data.into();
        self.check(data.len())?;
        self.act_bounded(Op::Cast(data))
    }

    /// Sends `data` to member `to` of the current view.
    pub fn send(&self, to: EndpointId, data: impl Into<Bytes>) -> Result<(), Error> {
        let data = data.into();
        self.check(data.len())?;
        let view = self.member.view.lock().map_err(|_| Error::Stopped)?.clone().ok_or(Error::NoView)?;
        if !view.contains(&to) {
            return Err(Error::NotMember(to));
        }
        self.act_bounded(Op::Send(to, data))
    }

    /// Leaves the group gracefully: the others install a view without this endpoint, and the
    /// member then receives [`Event::Exit`].
    pub fn leave(&self) -> Result<(), Error> {
        if self.member.left.load(Ordering::SeqCst) {
            return Err(Error::Left);
        }
        self.shared.command(Command::Act { endpoint: self.endpoint, op: Op::Leave })
    }

    /// Casts `data` to the members `to` of the current view only (a subcast): ordered with the
    /// stack's guarantee among all casts, delivered as a cast at those members. Members that
    /// have left the view by then are skipped.
    pub fn subcast(&self, to: &[EndpointId], data: impl Into<Bytes>) -> Result<(), Error> {
        let data = data.into();
        self.check(data.len())?;
        self.act_bounded(Op::Subcast(to.to_vec(), data))
    }

    /// Casts `data` to the servers of the view only (client/server groups: members that joined
    /// with `GroupConfig::client(true)` do not get it), ordered like every cast.
    pub fn cast_to_servers(&self, data: impl Into<Bytes>) -> Result<(), Error> {
        let data = data.into();
        self.check(data.len())?;
        self.act_bounded(Op::RoleCast(false, data))
    }

    /// Casts `data` to the clients of the view only, ordered like every cast.
    pub fn cast_to_clients(&self, data: impl Into<Bytes>) -> Result<(), Error> {
        let data = data.into();
        self.check(data.len())?;
        self.act_bounded(Op::RoleCast(true, data))
    }

    /// Asks the whole group to run stack `spec` from its next view on (protocol switching; both
    /// the current and the new stack need the `Switch` property). Watch `View::stack` for the
    /// change; a request made during a view change waits for it to end.
    pub fn switch(&self, spec: &str) -> Result<(), Error> {
        let spec = crate::switch_target(spec)?;
        if self.member.left.load(Ordering::SeqCst) {
            return Err(Error::Left);
        }
        self.shared.command(Command::Act { endpoint: self.endpoint, op: Op::Switch(spec) })
    }

    /// In a state-transfer view, at the provider (after `Event::XferProvide`): the next chunk of
    /// the application's state (at most `appl.message_size_max`; 64 KiB is a good size); mark
    /// the last one. Blocks like `cast` under back-pressure; held while flow control blocks.
    pub fn xfer_chunk(&self, view: ViewId, data: impl Into<Bytes>, last: bool) -> Result<(), Error> {
        let data = data.into();
        self.check(data.len())?;
        self.shared.command(Command::Act { endpoint: self.endpoint, op: Op::XferChunk(view, data, last) })
    }

    /// This member is done with the current view's state transfer (the provider after its last
    /// chunk, a receiver after installing the state): when every member is, the group moves to a
    /// normal view and held casts go.
    pub fn xfer_done(&self, view: ViewId) -> Result<(), Error> {
        self.check(0)?;
        self.shared.command(Command::Act { endpoint: self.endpoint, op: Op::XferDone(view) })
    }

    /// The members of the latest view handed to the application, if any.
    pub fn view(&self) -> Option<Vec<EndpointId>> {
        self.member.view.lock().ok()?.as_ref().map(|v| v.to_vec())
    }

    /// After the application took `event`: notes an exit, and wakes the loop if it waits for room.
    pub(crate) fn taken(&self, event: &Event) {
        if *event == Event::Exit {
            self.member.left.store(true, Ordering::SeqCst);
        }
        // Before the swap: a loop whose channel was full by its bytes either sees them gone on
        // its retry after its own swap, or is woken here.
        let size = event.payload_len();
        // Saturating: an event that reached the channel some other way than `offer` (none does)
        // must not wrap the count and leave the channel full for good.
        if size > 0 {
            let before = self
                .member
                .channel_bytes
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| Some(b.saturating_sub(size)));
            debug_assert!(before.is_ok_and(|b| b >= size), "an event taken that `offer` did not count");
        }
        if self.member.want_wake.swap(false, Ordering::SeqCst) {
            let _ = self.shared.waker.wake();
        }
    }

    /// Queues a message for the loop, unless this member's messages waiting there (parked for
    /// flow control or a view change, and those on their way) are at the loop's bound:
    /// `Error::QueueFull("parked actions")`, which the application answers by taking its events
    /// (a member that lags holds its own casts back) and trying again. Refused here, the
    /// application knows; past the bound the loop would refuse the message after `cast` had
    /// returned, and it would be lost. Not blocking: an application that casts and reads its
    /// events on one thread would wait for itself.
    fn act_bounded(&self, op: Op) -> Result<(), Error> {
        let member = &self.member;
        let size = op.payload_len();
        // Reserved first, so that handles on several threads cannot pass the bound together.
        let count = member.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        let bytes = member.in_flight_bytes.fetch_add(size, Ordering::SeqCst);
        // Empty messages too: the loop refuses any message once the bytes are at their bound.
        let over = count + member.parked.load(Ordering::SeqCst) > PARKED_MAX
            || bytes + member.parked_bytes.load(Ordering::SeqCst) >= PARKED_BYTES_MAX;
        let result = if over && self.shared.stopped.load(Ordering::SeqCst) {
            Err(Error::Stopped)
        } else if over && member.forgotten.load(Ordering::SeqCst) {
            Err(Error::Left)
        } else if over {
            Err(Error::QueueFull("parked actions"))
        } else {
            self.shared.command(Command::Act { endpoint: self.endpoint, op })
        };
        if result.is_err() {
            member.in_flight.fetch_sub(1, Ordering::SeqCst);
            member.in_flight_bytes.fetch_sub(size, Ordering::SeqCst);
        }
        result
    }

    pub(crate) fn has_left(&self) -> bool {
        self.member.left.load(Ordering::SeqCst)
    }

    fn check(&self, size: usize) -> Result<(), Error> {
        if self.member.left.load(Ordering::SeqCst) {
            return Err(Error::Left);
        }
        let max = self.member.message_size_max.load(Ordering::Relaxed);
        if size > max {
            return Err(Error::Api(motet_core::ApiError::TooLarge { size, max }));
        }
        Ok(())
    }
}

impl Member {
    /// A handle for acting from other threads.
    pub fn handle(&self) -> Handle {
        self.handle.clone()
    }

    /// This endpoint's id (as it appears in views).
    pub fn id(&self) -> EndpointId {
        self.handle.endpoint
    }

    /// See [`Handle::cast`].
    pub fn cast(&self, data: impl Into<Bytes>) -> Result<(), Error> {
        self.handle.cast(data)
    }

    /// See [`Handle::send`].
    pub fn send(&self, to: EndpointId, data: impl Into<Bytes>) -> Result<(), Error> {
        self.handle.send(to, data)
    }

    /// See [`Handle::switch`].
    pub fn switch(&self, spec: &str) -> Result<(), Error> {
        self.handle.switch(spec)
    }

    /// See [`Handle::cast_to_servers`].
    pub fn cast_to_servers(&self, data: impl Into<Bytes>) -> Result<(), Error> {
        self.handle.cast_to_servers(data)
    }

    /// See [`Handle::cast_to_clients`].
    pub fn cast_to_clients(&self, data: impl Into<Bytes>) -> Result<(), Error> {
        self.handle.cast_to_clients(data)
    }

    /// See [`Handle::subcast`].
    pub fn subcast(&self, to: &[EndpointId], data: impl Into<Bytes>) -> Result<(), Error> {
        self.handle.subcast(to, data)
    }

    /// See [`Handle::xfer_chunk`].
    pub fn xfer_chunk(&self, view: ViewId, data: impl Into<Bytes>, last: bool) -> Result<(), Error> {
        self.handle.xfer_chunk(view, data, last)
    }

    /// See [`Handle::xfer_done`].
    pub fn xfer_done(&self, view: ViewId) -> Result<(), Error> {
        self.handle.xfer_done(view)
    }

    /// See [`Handle::leave`].
    pub fn leave(&self) -> Result<(), Error> {
        self.handle.leave()
    }

    /// The members of the latest view received, if any.
    pub fn view(&self) -> Option<Vec<EndpointId>> {
        self.handle.view()
    }

    /// The next event, waiting for it. `Err(Error::Left)` after [`Event::Exit`].
    pub fn recv(&self) -> Result<Event, Error> {
        let event = self.events.recv().map_err(|_| self.gone())?;
        self.received(&event);
        Ok(event)
    }

    /// The next event, waiting at most `timeout`.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Option<Event>, Error> {
        match self.events.recv_timeout(timeout) {
            Ok(event) => {
                self.received(&event);
                Ok(Some(event))
            }
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => Err(self.gone()),
        }
    }

    /// The next event if one is waiting.
    pub fn try_recv(&self) -> Result<Option<Event>, Error> {
        match self.events.try_recv() {
            Ok(event) => {
                self.received(&event);
                Ok(Some(event))
            }
            Err(TryRecvError::Empty) => Ok(None),
            Err(TryRecvError::Disconnected) => Err(self.gone()),
        }
    }

    /// A blocking iterator over events, ending after [`Event::Exit`] (or when the runtime stops).
    pub fn events(&self) -> impl Iterator<Item = Event> + '_ {
        std::iter::from_fn(move || self.recv().ok())
    }

    fn received(&self, event: &Event) {
        if *event == Event::Exit {
            self.exited.store(true, Ordering::SeqCst);
        }
        self.handle.taken(event);
    }

    fn gone(&self) -> Error {
        if self.exited.load(Ordering::SeqCst) {
            Error::Left
        } else {
            Error::Stopped
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        if !self.handle.has_left() {
            let _ = self.handle.leave();
        }
    }
}

/// The loop thread's state.
struct LoopThread {
    event_loop: EventLoop,
    commands: Receiver<Command>,
    shared: Arc<Shared>,
    members: BTreeMap<EndpointId, Listener>,
    /// Members with events in their overflow, visited every turn.
    behind: BTreeSet<EndpointId>,
    /// Members with parked actions, whose handles are told after every turn how many are left.
    parking: BTreeSet<EndpointId>,
    /// The bound of each member's overflow in events (`event_queue`, at least [`OVERFLOW_MIN`]);
    /// its bytes are bounded by [`overflow::OVERFLOW_BYTES_MAX`].
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
    /// or [`overflow::OVERFLOW_BYTES_MAX`] bytes, and one more message).
    overflow: Overflow,
}

impl Drop for LoopThread {
    /// However the loop ends: a handle refused for its parked actions then says the runtime
    /// stopped, since nothing parked will go.
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
    }
}

impl LoopThread {
    fn new(
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

    fn run(mut self) {
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
                return;
            }
            // Parked actions that went this turn make room for the member's next messages.
            if !self.parking.is_empty() {
                for endpoint in std::mem::take(&mut self.parking) {
                    self.publish_parked(endpoint);
                }
            }
        }
    }

    /// Tells `endpoint`'s handles how many of its actions are parked (and their bytes); a member
    /// with some is told again after each turn until they have gone.
    fn publish_parked(&mut self, endpoint: EndpointId) {
        let Some(listener) = self.members.get(&endpoint) else { return };
        let (parked, bytes) = (self.event_loop.parked_messages(endpoint), self.event_loop.parked_bytes(endpoint));
        listener.shared.parked.store(parked, Ordering::SeqCst);
        listener.shared.parked_bytes.store(bytes, Ordering::SeqCst);
        if parked > 0 {
            self.parking.insert(endpoint);
        }
    }

    /// The runtime is stopping: leaves the application asked for (a `Member` dropped just before
    /// the `Runtime`, the usual order at the end of a program) run to their end, for at most
    /// `grace`, so the others see the members leave instead of suspecting them a second later.
    /// Events still coming go to members that still listen, in order: a member whose channel is
    /// full gets nothing more (a gap in its events would be worse than their end).
    fn finish_leaves(&mut self, grace: Duration) {
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
        while self.event_loop.leaving() > 0 {
            let left = deadline.until(&clock);
            if left.is_zero() {
                tracing::warn!(
                    leaving = self.event_loop.leaving(),
                    "stopping before every leave was confirmed: the others will suspect those members"
                );
                return;
            }
            if let Err(error) = self.event_loop.poll(Some(left.min(Duration::from_millis(50)))) {
                tracing::error!(%error, "event loop failed while leaving; stopping");
                return;
            }
            while let Some((endpoint, event)) = self.event_loop.next_event() {
                let Some(listener) = self.members.get(&endpoint).filter(|_| !cut_off.contains(&endpoint)) else {
                    continue;
                };
                if offer(listener, event, self.channel_bytes_max).is_err() {
                    cut_off.insert(endpoint);
                }
            }
        }
    }

    fn handle(&mut self, command: Command) {
        match command {
            Command::Join { config, sink, reply } => {
                let result = self.event_loop.join(&config).map(|endpoint| {
                    let member = Arc::new(MemberShared::default());
                    // Until its first view, the member's own limit (its view, alone, has it).
                    member.message_size_max.store(config.params.appl.message_size_max, Ordering::Relaxed);
                    let listener = Listener { sink, shared: Arc::clone(&member), overflow: Overflow::default() };
                    self.members.insert(endpoint, listener);
                    Joined { endpoint, member }
                });
                let _ = reply.send(result);
            }
            Command::Act { endpoint, op } => {
                let counted = op.is_message().then(|| op.payload_len());
                if let Err(error) = self.event_loop.act(endpoint, op) {
                    self.event_loop.refused(&error);
                }
                // What is parked now, then the message off the way (so that the handle's sum of
                // the two never falls short).
                self.publish_parked(endpoint);
                if let (Some(size), Some(listener)) = (counted, self.members.get(&endpoint)) {
                    listener.shared.in_flight.fetch_sub(1, Ordering::SeqCst);
                    listener.shared.in_flight_bytes.fetch_sub(size, Ordering::SeqCst);
                }
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
    // What the handle checks actions against changes when the application gets the view.
    let view = match &event {
        Event::View(view) => Some((Arc::<[EndpointId]>::from(&view.members[..]), view.params.appl.message_size_max)),
        _ => None,
    };
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
    if let (Ok(()), Some((members, size_max))) = (&sent, view) {
        if let Ok(mut current) = listener.shared.view.lock() {
            *current = Some(members);
        }
        // The view's limit, not the member's own: a view runs its parameters.
        listener.shared.message_size_max.store(size_max, Ordering::Relaxed);
    }
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
    use super::*;

    /// A loop thread with one member whose channel holds one event, and the member's handle and
    /// receiver.
    fn one_member() -> (LoopThread, Handle, Receiver<Event>) {
        member_with(1)
    }

    /// The same with a channel that holds `capacity` events.
    fn member_with(capacity: usize) -> (LoopThread, Handle, Receiver<Event>) {
        let event_loop = EventLoop::new(RuntimeConfig::default()).unwrap();
        let (commands, receiver) = mpsc::sync_channel(16);
        let shared = Arc::new(Shared {
            commands,
            waker: event_loop.waker(),
            sleeping: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
        });
        let mut thread = LoopThread::new(event_loop, receiver, Arc::clone(&shared), 64, usize::MAX);
        let (sink, events) = mpsc::sync_channel(capacity);
        let member = Arc::new(MemberShared::default());
        let endpoint = EndpointId(7);
        let listener =
            Listener { sink: Sink::Blocking(sink), shared: Arc::clone(&member), overflow: Overflow::default() };
        thread.members.insert(endpoint, listener);
        (thread, Handle { endpoint, shared, member }, events)
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
        assert_eq!(listener.overflow.events.len(), 1);
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
        assert_eq!(thread.members[&handle.endpoint].overflow.events.len(), 1, "not tried: nobody woke the loop");
        assert!(thread.behind.contains(&handle.endpoint));
        settle(&mut thread);
        handle.taken(&Event::Block);
        assert!(woken(&mut thread, Duration::from_secs(2)), "taking an event wakes the loop");
        thread.catch_up();
        assert!(thread.members[&handle.endpoint].overflow.is_empty(), "tried once woken");
        assert!(thread.behind.is_empty(), "caught up");
        assert_eq!(events.try_recv().unwrap(), Event::Block);
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
        // Its leave goes into the command channel, which this test does not read.
        let member = Member {
            handle: handle.clone(),
            events,
            exited: AtomicBool::new(false),
            _unlistened: Unlistened(handle.clone()),
        };
        settle(&mut thread);
        drop(member);
        assert!(woken(&mut thread, Duration::from_secs(2)), "dropping the member wakes the loop");
        thread.catch_up();
        assert!(!thread.members.contains_key(&handle.endpoint), "forgotten");
        assert!(thread.behind.is_empty());
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
}
