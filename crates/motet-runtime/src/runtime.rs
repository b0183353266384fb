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
use crate::event_loop::{EventLoop, Lot, Op, RuntimeStats, PARKED_BYTES_MAX, PARKED_MAX};
use crate::{Error, Event};
use bytes::Bytes;
use motet_core::{EndpointId, ViewId};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long a stopping runtime waits for the leaves its members asked for (as `motet member`
/// does on SIGTERM).
const LEAVE_GRACE: Duration = Duration::from_secs(5);

/// The least a member's overflow holds before the loop's last resort (it stops reading): a
/// lagging member still receives the windows in flight when it began to lag (512 KiB of casts
/// and 64 KiB of sends per sender by default, each message counted as its bytes and 64: 4,096
/// casts of 64 B, or 481 fragments of 1 KiB), and then `lag_trickle_bytes` of casts and as much
/// of sends (64 KiB each) per sender every `lag_report_interval`. In a 100-member group of 64 B
/// messages that is about 410,000 events at once and 51,000 per half second: 2^19 holds the
/// windows and about a second of trickles. Of 1 KiB messages the windows are 48,000 events and
/// 50 MiB, and the overflow's byte bound (`overflow::OVERFLOW_BYTES_MAX`, 64 MiB) holds them and
/// about a second of trickles too. A longer lag meets the last resort, which loses nothing (the
/// senders retransmit). The count was 65,536 while windows counted 256 messages (until the
/// twenty-sixth session; docs/PERFORMANCE.md, "Windows in bytes"). An overflow is empty until
/// its member lags.
const OVERFLOW_MIN: usize = 1 << 19;

mod handle;
mod loop_thread;
mod overflow;
pub use handle::Handle;
use handle::Latest;
use loop_thread::LoopThread;

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
    /// Tests: the loop panics, as a bug in it would.
    #[cfg(test)]
    Panic,
}

struct Joined {
    endpoint: EndpointId,
    member: Arc<MemberShared>,
}

/// Where the loop puts a member's events: a bounded channel for a blocking or an async reader.
enum Sink {
    Blocking(EventSender),
    #[cfg(feature = "tokio")]
    Async(tokio::sync::mpsc::Sender<Event>),
}

#[derive(Debug)]
enum Refused {
    Full(Box<Event>),
    Gone,
}

impl Sink {
    /// The reader is gone (its receiver dropped).
    fn is_closed(&self) -> bool {
        match self {
            Sink::Blocking(sender) => sender.queued.closed.load(Ordering::Acquire),
            #[cfg(feature = "tokio")]
            Sink::Async(sender) => sender.is_closed(),
        }
    }

    fn try_send(&self, event: Event) -> Result<(), Refused> {
        match self {
            Sink::Blocking(sender) => sender.try_send(event),
            #[cfg(feature = "tokio")]
            Sink::Async(sender) => sender.try_send(event).map_err(|e| match e {
                tokio::sync::mpsc::error::TrySendError::Full(event) => Refused::Full(Box::new(event)),
                tokio::sync::mpsc::error::TrySendError::Closed(_) => Refused::Gone,
            }),
        }
    }
}

/// A member's event queue for a blocking reader: an unbounded channel, which allocates in small
/// blocks as events come, kept within `capacity` by a count the loop and the reader share.
/// `sync_channel(event_queue)` allocated and initialised every one of its slots at the join:
/// about 1 MiB a member at the default 16,384, so 10 GiB for 10^4 groups in a process (a
/// review's finding). The async reader's tokio channel allocates as it fills already.
fn event_queue(capacity: usize) -> (EventSender, EventReceiver) {
    let (sender, receiver) = mpsc::channel();
    let queued = Arc::new(Queued::default());
    (EventSender { sender, queued: Arc::clone(&queued), capacity }, EventReceiver { receiver, queued })
}

/// What [`event_queue`]'s two ends share: the events in it, and whether the reader is gone (a
/// full queue must still say `Gone` once it is: the loop then forgets a member that was dropped
/// while it lagged).
#[derive(Default)]
struct Queued {
    events: AtomicUsize,
    closed: AtomicBool,
}

/// The loop's end of [`event_queue`] (the only sender, so checking the count and then adding
/// to it cannot pass the bound).
struct EventSender {
    sender: mpsc::Sender<Event>,
    queued: Arc<Queued>,
    capacity: usize,
}

impl EventSender {
    fn try_send(&self, event: Event) -> Result<(), Refused> {
        if self.queued.closed.load(Ordering::Acquire) {
            return Err(Refused::Gone);
        }
        if self.queued.events.load(Ordering::Acquire) >= self.capacity {
            return Err(Refused::Full(Box::new(event)));
        }
        self.queued.events.fetch_add(1, Ordering::AcqRel);
        self.sender.send(event).map_err(|_| Refused::Gone)
    }
}

/// The reader's end of [`event_queue`].
struct EventReceiver {
    receiver: Receiver<Event>,
    queued: Arc<Queued>,
}

impl Drop for EventReceiver {
    fn drop(&mut self) {
        self.queued.closed.store(true, Ordering::Release);
    }
}

impl EventReceiver {
    fn taken<E>(&self, received: Result<Event, E>) -> Result<Event, E> {
        if received.is_ok() {
            self.queued.events.fetch_sub(1, Ordering::AcqRel);
        }
        received
    }

    fn recv(&self) -> Result<Event, mpsc::RecvError> {
        self.taken(self.receiver.recv())
    }

    fn recv_timeout(&self, timeout: Duration) -> Result<Event, RecvTimeoutError> {
        self.taken(self.receiver.recv_timeout(timeout))
    }

    fn try_recv(&self) -> Result<Event, TryRecvError> {
        self.taken(self.receiver.try_recv())
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
    /// The loop is stopping (its members' leaves are running out): it takes no more actions.
    stopping: AtomicBool,
    /// Why the loop stopped, when it failed rather than being stopped.
    failure: Mutex<Option<String>>,
    /// Async callers waiting for room in the action queue (`AsyncMember::cast`): told each time
    /// the loop took commands, and when it stops.
    #[cfg(feature = "tokio")]
    room: tokio::sync::Notify,
    /// Someone waits on `room`: the loop notifies only then (one atomic swap a turn otherwise).
    #[cfg(feature = "tokio")]
    room_wanted: AtomicBool,
}

impl Shared {
    fn new(commands: SyncSender<Command>, waker: Arc<mio::Waker>) -> Shared {
        Shared {
            commands,
            waker,
            sleeping: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            failure: Mutex::new(None),
            #[cfg(feature = "tokio")]
            room: tokio::sync::Notify::new(),
            #[cfg(feature = "tokio")]
            room_wanted: AtomicBool::new(false),
        }
    }

    /// The error for a call that finds the loop gone: `Failed` with its cause, or `Stopped`.
    fn gone(&self) -> Error {
        match self.failure.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone() {
            Some(cause) => Error::Failed(cause),
            None => Error::Stopped,
        }
    }

    /// Records why the loop failed (the first cause only).
    fn failed(&self, cause: String) {
        self.failure.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get_or_insert(cause);
    }

    /// Replaces the cause with a fuller account of it (a panic's message, once caught).
    fn failed_with(&self, cause: String) {
        *self.failure.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(cause);
    }

    fn command(&self, command: Command) -> Result<(), Error> {
        self.refuse_when_stopping(&command)?;
        self.commands.send(command).map_err(|_| self.gone())?;
        self.wake();
        Ok(())
    }

    /// [`Shared::command`] without waiting for room: `QueueFull` while `action_queue` commands
    /// wait for the loop.
    fn try_command(&self, command: Command) -> Result<(), Error> {
        self.refuse_when_stopping(&command)?;
        self.commands.try_send(command).map_err(|e| match e {
            mpsc::TrySendError::Full(_) => Error::QueueFull(crate::Queue::Action),
            mpsc::TrySendError::Disconnected(_) => self.gone(),
        })?;
        self.wake();
        Ok(())
    }

    /// An action while the runtime stops would go in no group: `Stopped` at once, rather than an
    /// `Ok` for a message that is then dropped. (One that slips in as the loop takes the stop is
    /// refused there, and counted.)
    fn refuse_when_stopping(&self, command: &Command) -> Result<(), Error> {
        match command {
            Command::Act { .. } if self.stopping.load(Ordering::SeqCst) => Err(self.gone()),
            _ => Ok(()),
        }
    }

    fn wake(&self) {
        if self.sleeping.swap(false, Ordering::SeqCst) {
            let _ = self.waker.wake();
        }
    }

    /// The loop may have made room in the action queue (it took commands, or it stopped): async
    /// callers waiting for it try again.
    fn room_made(&self, stopped: bool) {
        #[cfg(feature = "tokio")]
        if self.room_wanted.swap(false, Ordering::SeqCst) || stopped {
            self.room.notify_waiters();
        }
        #[cfg(not(feature = "tokio"))]
        let _ = stopped;
    }

    /// Tries `attempt` until it is not refused for a full action queue, waiting (without blocking
    /// the thread) for the loop to make room between tries: the async form of the bounded
    /// queue's back-pressure. A loop that stops meanwhile ends the wait with its error. A full
    /// parking lot is returned, not waited for, as the blocking calls return it: a member whose
    /// application lags behind its events holds its own casts back, and a task waiting here
    /// could never take them (a review's finding: `recv` needs the member the waiting `cast`
    /// borrows).
    #[cfg(feature = "tokio")]
    async fn when_room(&self, mut attempt: impl FnMut() -> Result<(), Error>) -> Result<(), Error> {
        loop {
            // Registered before the try: room the loop makes after it wakes this wait.
            let notified = self.room.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            self.room_wanted.store(true, Ordering::SeqCst);
            match attempt() {
                Err(Error::QueueFull(crate::Queue::Action)) if self.stopped.load(Ordering::SeqCst) => {
                    return Err(self.gone())
                }
                Err(Error::QueueFull(crate::Queue::Action)) => notified.await,
                other => return other,
            }
        }
    }
}

/// What the loop and one member's handle share.
#[derive(Default)]
struct MemberShared {
    /// The latest view handed to the application.
    view: Mutex<Option<Arc<Latest>>>,
    left: AtomicBool,
    /// The application asked to leave: its later actions are refused with `Error::Left` (the
    /// stack would refuse them inside the loop, where the caller cannot hear of it).
    leaving: AtomicBool,
    /// The loop holds events this member's full channel refused: wake it after a receive.
    want_wake: AtomicBool,
    /// The largest message the member's current view takes (`appl.message_size_max` of the
    /// view's parameters), checked before an action is queued to the loop.
    message_size_max: AtomicUsize,
    /// Payload bytes in the member's channel: added by the loop before it sends an event,
    /// taken off by the application when it takes one (`event_queue_bytes` bounds them).
    channel_bytes: AtomicUsize,
    /// The member's messages, and its state-transfer chunks, on their way to the loop and parked
    /// there: each bounded on its own, as the loop parks them apart (a transfer's chunks go while
    /// the member's casts wait for the transfer's end).
    messages: Counted,
    xfer: Counted,
    /// The loop forgot the member (nobody listens to it any more): its counts above are no longer
    /// kept.
    forgotten: AtomicBool,
}

impl MemberShared {
    fn lot(&self, lot: Lot) -> &Counted {
        match lot {
            Lot::Messages => &self.messages,
            Lot::Xfer => &self.xfer,
        }
    }
}

/// How many times [`Counted::reserve`] reads the figures again before refusing.
const RESERVE_RECHECKS: usize = 2;

/// One lot of a member's counted actions ([`Lot`]): those on their way to the loop, and those
/// parked there, with their payload bytes.
#[derive(Default)]
struct Counted {
    /// On their way (in the command channel or being handled): added by the handle before it
    /// sends one, taken off by the loop once it has handled it and said how many are parked.
    in_flight: AtomicUsize,
    in_flight_bytes: AtomicUsize,
    /// Parked at the loop, as the loop last said (after each of the member's actions, and after
    /// each turn while any are parked).
    parked: AtomicUsize,
    parked_bytes: AtomicUsize,
}

impl Counted {
    /// Reserves room for one more action of `size` bytes; false, and nothing reserved, when the
    /// lot would pass its bound ([`PARKED_MAX`] actions, or [`PARKED_BYTES_MAX`] with this
    /// action's bytes, unless the lot holds no other action, by count: one action of any size
    /// may go alone, but not beside an empty one).
    /// Reserved before the check, so that handles on several threads cannot pass the bound
    /// together. The action's own bytes count because the loop may get the actions in another
    /// order than they were reserved: with every accepted action within the bound, the loop finds
    /// fewer bytes parked than the bound before any of them, and never refuses one.
    fn reserve(&self, size: usize) -> bool {
        let count = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        let others = self.in_flight_bytes.fetch_add(size, Ordering::SeqCst) + self.parked_bytes.load(Ordering::SeqCst);
        let lot = count + self.parked.load(Ordering::SeqCst);
        let over = |lot: usize, others: usize| lot > PARKED_MAX || (lot > 1 && others + size >= PARKED_BYTES_MAX);
        let mut refused = over(lot, others);
        // The in-flight figure was read before the parked one: a thread descheduled between the
        // two reads counts what the loop handled meanwhile twice (still in flight, already
        // parked), and was refused well before the bound (875 chunks of 64 KiB against 64 MiB,
        // once in CI). Before refusing, both are read again, in-flight first: in that order an
        // action is counted once or twice, never missed (the loop publishes the parked figure
        // before it takes an action off its way), so the loop never holds more than the bound.
        for _ in 0..RESERVE_RECHECKS {
            if !refused {
                break;
            }
            let lot = self.in_flight.load(Ordering::SeqCst) + self.parked.load(Ordering::SeqCst);
            let in_flight = self.in_flight_bytes.load(Ordering::SeqCst);
            let others = in_flight.saturating_sub(size) + self.parked_bytes.load(Ordering::SeqCst);
            refused = over(lot, others);
        }
        if refused {
            self.handled(size);
        }
        !refused
    }

    /// An action of `size` bytes is off its way (handled by the loop, or never sent).
    fn handled(&self, size: usize) {
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.in_flight_bytes.fetch_sub(size, Ordering::SeqCst);
    }

    /// What the loop has parked in this lot now.
    fn publish(&self, (parked, bytes): (usize, usize)) {
        self.parked.store(parked, Ordering::SeqCst);
        self.parked_bytes.store(bytes, Ordering::SeqCst);
    }
}

/// A running event loop on its own thread. Dropping it makes every member still in a group leave
/// (those that asked, with [`Member::leave`] or by dropping the `Member`, and the others) and
/// stops the loop once the leaves have run, for at most 5 s: a program leaves its groups
/// gracefully whichever it drops first. A `Member` that outlives its runtime gets
/// [`Error::Stopped`] ([`Error::Left`] once it has taken its `Exit`, [`Error::Failed`] if the
/// loop failed). [`Runtime::shutdown`] sets the wait; in async code, drop the runtime where
/// blocking is allowed (`spawn_blocking`).
pub struct Runtime {
    shared: Arc<Shared>,
    event_queue: usize,
    thread: Option<JoinHandle<()>>,
    /// Where the socket is bound and advertised (they change when the process migrates).
    addresses: Mutex<Addresses>,
    /// Held by a migration from its request to its answer, so that migrations from two threads
    /// run one after the other and the addresses kept are the last one's; apart from
    /// `addresses`, so that reading them never waits for a migration (on a full action queue).
    migrating: Mutex<()>,
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
        let shared = Arc::new(Shared::new(commands, event_loop.waker()));
        let loop_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("motet-loop".into())
            .spawn(move || {
                // Every report of the loop and of the stacks it drives names the process by its
                // address (several runtimes may share one log).
                let _span = tracing::info_span!("motet", address = %addresses.advertise).entered();
                let overflow_max = config.event_queue.max(OVERFLOW_MIN);
                let failure = Arc::clone(&loop_shared);
                let state = LoopThread::new(event_loop, receiver, loop_shared, overflow_max, config.event_queue_bytes);
                // A panic (a bug) ends the loop; every later call says so, with the message.
                if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| state.run())) {
                    let message = panic
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_else(|| "a panic without a message".into());
                    tracing::error!(%message, "the event loop panicked; stopping");
                    failure.failed_with(format!("the event loop panicked: {message}"));
                }
            })
            .map_err(|e| Error::io("starting the event-loop thread", e))?;
        Ok(Runtime {
            shared,
            event_queue: config.event_queue,
            thread: Some(thread),
            addresses: Mutex::new(addresses),
            migrating: Mutex::new(()),
        })
    }

    /// Joins a group. The endpoint starts alone and merges with the members it finds through the
    /// configured seeds; its first [`Event::View`] is of itself alone.
    pub fn join(&self, config: GroupConfig) -> Result<Member, Error> {
        let (sink, events) = event_queue(self.event_queue);
        let handle = self.join_with(config, Sink::Blocking(sink))?;
        let unlistened = Unlistened(handle.clone());
        Ok(Member { handle, events, exited: AtomicBool::new(false), _unlistened: unlistened })
    }

    /// Like [`Runtime::join`], for async code: the member's events are a [`futures_core::Stream`]
    /// (and [`crate::AsyncMember::recv`]), and waiting for them blocks no thread; nor do its
    /// `cast`, `send`, `leave` and `switch`, which await room in the loop's action queue. This
    /// call (waiting for the loop's answer) and dropping the `Runtime` (for the leaves' grace)
    /// block their thread briefly, as `std` channels do: from a tokio runtime, join where
    /// blocking is allowed (a multi-threaded runtime), and stop the runtime with
    /// [`Runtime::shutdown_async`].
    #[cfg(feature = "tokio")]
    pub fn join_async(&self, config: GroupConfig) -> Result<crate::AsyncMember, Error> {
        let (sink, events) = tokio::sync::mpsc::channel(self.event_queue);
        let handle = self.join_with(config, Sink::Async(sink))?;
        Ok(crate::AsyncMember::new(handle, events))
    }

    fn join_with(&self, config: GroupConfig, sink: Sink) -> Result<Handle, Error> {
        let (reply, answer) = mpsc::sync_channel(1);
        self.shared.command(Command::Join { config: Box::new(config), sink, reply })?;
        let joined = answer.recv().map_err(|_| self.shared.gone())??;
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
        // From the request to its answer: migrations from two threads are taken one after the
        // other, and the addresses kept are the last one's (without it, an earlier migration's
        // could be stored last). Not `addresses` itself: `local_addr` and `Debug` (a metrics or
        // logging thread) would wait meanwhile, on a full action queue for long (a review's
        // finding).
        let _migrating = self.migrating.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (reply, answer) = mpsc::sync_channel(1);
        self.shared.command(Command::Migrate { bind, advertise, reply })?;
        let moved = answer.recv().map_err(|_| self.shared.gone())??;
        *self.addresses.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = moved;
        Ok(moved.advertise)
    }
}

impl Runtime {
    /// Makes every member still in a group leave and stops the loop once the leaves have run,
    /// waiting at most `grace` for them (dropping the `Runtime` waits up to 5 s).
    /// `Duration::ZERO` stops at once: the others then suspect those members, as if the process
    /// had failed.
    pub fn shutdown(mut self, grace: Duration) {
        self.stop(grace);
    }

    /// [`Runtime::shutdown`] for async code: the same leaves and stop, waited for without
    /// blocking the thread (the wait runs on a thread of its own). Dropping a `Runtime` in a task
    /// blocks its thread for up to 5 s instead.
    #[cfg(feature = "tokio")]
    pub async fn shutdown_async(self, grace: Duration) {
        let (done, finished) = tokio::sync::oneshot::channel();
        // Should the thread not start, the closure (and the runtime in it) is dropped here: the
        // stop then blocks this thread, as a drop would.
        let waiter = std::thread::Builder::new().name("motet-shutdown".into()).spawn(move || {
            self.shutdown(grace);
            let _ = done.send(());
        });
        if waiter.is_ok() {
            let _ = finished.await;
        }
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
        answer.recv().map_err(|_| self.shared.gone())
    }

    /// The runtime has stopped: [`StatsHandle::get`] will fail.
    pub(crate) fn stopped(&self) -> bool {
        self.shared.stopped.load(Ordering::SeqCst)
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
    events: EventReceiver,
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

impl Member {
    /// A handle for acting from other threads.
    pub fn handle(&self) -> Handle {
        self.handle.clone()
    }

    /// This endpoint's id (as it appears in views).
    pub fn id(&self) -> EndpointId {
        self.handle.endpoint
    }

    /// See [`Handle::try_cast`].
    pub fn try_cast(&self, data: impl Into<Bytes>) -> Result<(), Error> {
        self.handle.try_cast(data)
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
            self.handle.shared.gone()
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

// Debug: what identifies each (its endpoint, its addresses), not its queues and channels.

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("local", &self.local_addr())
            .field("advertised", &self.advertised_addr())
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Member").field("endpoint", &self.handle.endpoint).finish_non_exhaustive()
    }
}

impl std::fmt::Debug for StatsHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatsHandle").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A member's event queue holds at most its capacity (the loop is refused `Full` beyond it,
    /// and parks the rest: `overflow`), takes more as the reader takes events, and says `Gone`
    /// once the reader is dropped. It allocates as events come, not all its slots at the join.
    #[test]
    fn the_event_queue_keeps_its_bound_without_allocating_it() {
        let (sender, receiver) = event_queue(2);
        sender.try_send(Event::Block).unwrap();
        sender.try_send(Event::Block).unwrap();
        assert!(matches!(sender.try_send(Event::Block), Err(Refused::Full(_))));
        assert_eq!(receiver.try_recv().unwrap(), Event::Block);
        sender.try_send(Event::Exit).unwrap();
        assert!(matches!(sender.try_send(Event::Block), Err(Refused::Full(_))));
        assert_eq!(receiver.recv_timeout(Duration::from_millis(10)).unwrap(), Event::Block);
        assert_eq!(receiver.recv().unwrap(), Event::Exit);
        assert!(matches!(receiver.try_recv(), Err(TryRecvError::Empty)));
        sender.try_send(Event::Block).unwrap();
        sender.try_send(Event::Block).unwrap();
        drop(receiver);
        assert!(matches!(sender.try_send(Event::Block), Err(Refused::Gone)), "full, and the reader gone");
        // A queue of the largest capacity a configuration may give is cheap to make.
        let queues: Vec<_> = (0..10_000).map(|_| event_queue(crate::config::QUEUE_MAX)).collect();
        assert_eq!(queues.len(), 10_000);
    }

    /// What applications rely on, checked by the compiler: handles and the runtime cross and are
    /// shared between threads, a member moves to the thread that reads it; and each prints what
    /// identifies it.
    #[test]
    fn api_types_are_send_sync_and_debug() {
        fn send_sync<T: Send + Sync + std::fmt::Debug>() {}
        fn send<T: Send + std::fmt::Debug>() {}
        send_sync::<Runtime>();
        send_sync::<Handle>();
        send_sync::<StatsHandle>();
        send::<Member>();
        // An async member moves into a spawned task and ends as a fused stream.
        #[cfg(feature = "tokio")]
        {
            fn fused<T: futures_core::FusedStream>() {}
            send_sync::<crate::AsyncMember>();
            fused::<crate::AsyncMember>();
        }
        let runtime = Runtime::start(RuntimeConfig::default()).unwrap();
        let member = runtime.join(GroupConfig::new("debug")).unwrap();
        assert!(format!("{runtime:?}").contains(&runtime.local_addr().to_string()));
        assert!(format!("{member:?}").contains(&format!("{:?}", member.id())));
    }

    /// A loop that failed says why in every later call, not only that it stopped: from the moment
    /// anything can see the loop gone, that it panicked (`Failed`, never `Stopped`), and once its
    /// thread has caught the panic, with the panic's message. (The test once checked the message
    /// at the first error and failed in CI: the message comes a moment later.)
    #[test]
    fn calls_after_the_loop_failed_say_why() {
        let runtime = Runtime::start(RuntimeConfig::default()).unwrap();
        let member = runtime.join(GroupConfig::new("failing")).unwrap();
        runtime.shared.command(Command::Panic).unwrap();
        let deadline = std::time::Duration::from_secs(10);
        let mut waited = std::time::Duration::ZERO;
        loop {
            match runtime.stats() {
                Err(Error::Failed(cause)) if cause.contains("a test asked the loop to panic") => break,
                Err(Error::Failed(cause)) => assert!(cause.contains("panicked"), "{cause}"),
                Err(other) => panic!("a loop that panicked is not merely stopped: {other}"),
                Ok(_) => {}
            }
            assert!(waited < deadline, "the loop never stopped, or never said why");
            std::thread::sleep(std::time::Duration::from_millis(10));
            waited += std::time::Duration::from_millis(10);
        }
        for error in [runtime.stats().unwrap_err(), member.cast(bytes::Bytes::from_static(b"x")).unwrap_err()] {
            assert!(
                matches!(&error, Error::Failed(cause) if cause.contains("a test asked the loop to panic")),
                "{error}"
            );
        }
        // A runtime stopped on purpose is `Stopped`, as before.
        let runtime = Runtime::start(RuntimeConfig::default()).unwrap();
        let member = runtime.join(GroupConfig::new("stopped")).unwrap();
        drop(runtime);
        assert!(matches!(member.cast(bytes::Bytes::from_static(b"x")), Err(Error::Stopped)));
    }
}
