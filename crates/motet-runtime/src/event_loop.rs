//! The event loop: one per process, serving all its endpoints. It owns the sans-IO [`Node`] and
//! the UDP socket, and does only I/O: datagrams in, due timers, application actions; datagrams
//! out, application events. No protocol logic lives here (the core decides everything).
//!
//! Use it directly on your own thread ([`EventLoop::poll`] then [`EventLoop::next_event`]) for the
//! lowest latency, or through [`crate::Runtime`], which runs it on a thread of its own.
//!
//! Back-pressure, end to end: when the application does not consume events and `event_queue` of
//! them are waiting, the loop stops reading the socket; the kernel buffer fills, datagrams are
//! lost, and the senders' flow control and retransmission hold their messages (nothing is lost
//! for good). Actions the protocol cannot take now (flow control is blocking, or a view change is
//! in progress) are parked in order and taken when the stack allows; the parking lot is bounded.

use crate::clock::Clock;
use crate::config::{GroupConfig, RuntimeConfig};
use crate::io::{Chunks, UdpIo};
use crate::{Error, Event, View};
use bytes::Bytes;
use motet_core::DatagramHead;
use motet_core::{
    Action, Address, ApiError, AppEvent, Destination, EndpointId, GroupName, LayerKind, Node, Payload, Rank, StackId,
    ViewId, ViewState,
};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

mod send;
use send::Packing;

const SOCKET: mio::Token = mio::Token(0);
const WAKER: mio::Token = mio::Token(1);
const MULTICAST: mio::Token = mio::Token(2);
/// Tokens of sockets retired by migrations count up from here.
const RETIRED_FIRST: usize = 3;

/// Receive batches handled per [`EventLoop::poll`] before timers and actions get a turn.
const BATCHES_PER_POLL: usize = 16;
/// With busy-polling, the turns on which the loop still asks `epoll` for readiness (one in this
/// many; every turn while a send backlog waits for the socket to become writable).
const BUSY_POLL_EPOLL_EVERY: u64 = 64;
/// Actions parked per endpoint (waiting for flow control or a view change) before more are
/// refused with [`Error::QueueFull`].
const PARKED_MAX: usize = 65_536;
/// Views installed without this process's new address after which it stops asking again (a
/// group that keeps losing the request would otherwise change views for ever; the old socket then
/// stays open, so the endpoint is still reached).
const MIGRATE_TRIES: u32 = 8;

/// An application action, by endpoint id (translated to ranks of the current view when taken).
#[derive(Clone, Debug)]
pub(crate) enum Op {
    Cast(Bytes),
    Send(EndpointId, Bytes),
    Leave,
    Switch(motet_core::StackSpec),
    /// State-transfer actions name the transfer view they belong to: one for an earlier view
    /// (the application had not yet seen the view change) is void and dropped.
    Subcast(Vec<EndpointId>, Bytes),
    /// A cast to the servers only (`false`) or the clients only (`true`) of the view it is taken in.
    RoleCast(bool, Bytes),
    XferChunk(motet_core::ViewId, Bytes, bool),
    XferDone(motet_core::ViewId),
    /// Move this endpoint to the process's new address (endpoint migration).
    Migrate(SocketAddr),
}

impl Op {
    /// Copies the operation's small data into a shared chunk, once, when it comes in (a parked
    /// operation is not copied again when it is retried): the stack keeps a reference for
    /// retransmission, and the first clone of a vector-backed `Bytes` would allocate its shared
    /// count. A copy of up to 256 bytes costs less than that allocation.
    fn copy_small(&mut self, chunks: &mut Chunks) {
        if let Op::Cast(data) | Op::Send(_, data) | Op::Subcast(_, data) | Op::RoleCast(_, data) = self {
            if (1..=crate::io::SMALL).contains(&data.len()) {
                *data = chunks.copy(data);
            }
        }
    }
}

/// Counters of the runtime itself (the protocol's are in [`motet_core::layer::Stats`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuntimeStats {
    /// Datagrams received.
    pub datagrams_in: u64,
    /// Datagrams sent (one per destination address).
    pub datagrams_out: u64,
    /// `recvmmsg` calls that returned data.
    pub recv_batches: u64,
    /// Sends that failed for a reason other than a full buffer (counted, then dropped).
    pub send_errors: u64,
    /// Datagrams held because the socket's send buffer was full.
    pub send_backlogged: u64,
    /// Backlogged datagrams dropped because the backlog was full (the protocol retransmits).
    pub send_backlog_dropped: u64,
    /// Times the loop stopped reading the socket because the application lagged.
    pub app_backpressure: u64,
    /// Parked sends dropped because their destination left the view before they could go.
    pub sends_to_departed: u64,
    /// Datagrams dropped on purpose by `RuntimeConfig::inject_loss` (a testing aid).
    pub injected_loss: u64,
    /// Views installed by this process's endpoints.
    pub views_installed: u64,
    /// Bundles sent (each carries two or more datagrams, counted in `datagrams_packed`).
    pub bundles_sent: u64,
    /// Datagrams sent inside bundles.
    pub datagrams_packed: u64,
    /// System calls that sent several datagrams at once (segmentation offload).
    pub segmented_sends: u64,
    /// Datagrams sent by those calls.
    pub datagrams_segmented: u64,
    /// Received bundles that did not unpack (dropped).
    pub malformed_bundles: u64,
    /// State-transfer actions for a view that had already ended (dropped: the transfer starts
    /// over in the next view).
    pub stale_xfer: u64,
    /// Turns of the loop (`poll` calls). An idle loop sleeps, so this grows with traffic and
    /// timers, not with time.
    pub turns: u64,
    /// Migrations of this process to a new socket ([`EventLoop::migrate`]).
    pub migrations: u64,
    /// Datagrams that still arrived at a socket given up by a migration (before it closed).
    pub datagrams_in_retired: u64,
    /// Sockets given up by migrations and closed since.
    pub retired_closed: u64,
}

/// A socket given up by a migration. Peers that have not installed the view with the new address
/// still send here, so it is read until every endpoint's view has the new address, then for
/// `migrate_grace` more (retransmissions in flight), then closed.
struct Retired {
    io: UdpIo,
    token: mio::Token,
    readable: bool,
    close_at: Option<crate::clock::Deadline>,
}

/// One joined endpoint.
#[derive(Debug)]
struct MemberState {
    current: StackId,
    view: Option<Arc<ViewState>>,
    parked: VecDeque<Op>,
    /// State-transfer actions waiting for flow control: apart from `parked`, where the
    /// application's casts wait for the end of the transfer view.
    xfer_parked: VecDeque<Op>,
    /// A view change is in progress (between `Block` and the next view).
    blocked: bool,
    casts_blocked: bool,
    sends_blocked: BTreeSet<Rank>,
    /// Something that may unblock parked actions happened.
    retry: bool,
    left: bool,
    /// Migration: the view in which this endpoint last asked for its new address, and how many
    /// views it has asked in since it moved (at most `MIGRATE_TRIES`).
    migrate_asked: Option<ViewId>,
    migrate_tries: u32,
}

/// DNS names among a group's peers, re-resolved periodically.
#[derive(Debug)]
struct Seeds {
    group: GroupName,
    peers: Vec<String>,
    interval: Duration,
    next: crate::clock::Deadline,
}

/// The event loop of one process. See the module documentation.
pub struct EventLoop {
    config: RuntimeConfig,
    clock: Clock,
    node: Node,
    io: UdpIo,
    poll: mio::Poll,
    mio_events: mio::Events,
    waker: Arc<mio::Waker>,
    advertise: SocketAddr,
    members: BTreeMap<EndpointId, MemberState>,
    /// Which endpoint each stack serves, and its view (events of a stack that has just exited
    /// are still translated with it).
    owners: BTreeMap<StackId, (EndpointId, Arc<ViewState>)>,
    ready: VecDeque<(EndpointId, Event)>,
    backlog: VecDeque<(SocketAddr, DatagramHead, Payload)>,
    /// Per destination, what this turn has produced so far (sent at the end of the turn).
    packing: BTreeMap<SocketAddr, Packing>,
    /// Scratch for [`EventLoop::send_packed`] (no allocation per turn).
    destinations: Vec<SocketAddr>,
    /// Where the application's small payloads are copied ([`Op::copy_small`]).
    chunks: Chunks,
    writable_interest: bool,
    /// The socket may have more datagrams (mio is edge-triggered: read until `WouldBlock`).
    readable: bool,
    /// The multicast receive socket and the group address casts and gossip go to.
    multicast: Option<(UdpIo, SocketAddr)>,
    multicast_readable: bool,
    seeds: Vec<Seeds>,
    /// Sockets given up by migrations, still read for a while.
    retired: Vec<Retired>,
    next_token: usize,
    stats: RuntimeStats,
}

/// Where [`EventLoop::receive`] reads.
#[derive(Clone, Copy, Debug)]
enum Source {
    Unicast,
    Multicast,
    Retired(usize),
}

impl EventLoop {
    /// Binds the socket and sets up polling.
    pub fn new(config: RuntimeConfig) -> Result<EventLoop, Error> {
        config.validate()?;
        let (mut io, advertise) = bind_socket(&config, config.bind, config.advertise)?;
        let poll = mio::Poll::new().map_err(|e| Error::io("creating the poller", e))?;
        poll.registry()
            .register(io.source(), SOCKET, mio::Interest::READABLE)
            .map_err(|e| Error::io("registering the socket", e))?;
        let waker = Arc::new(mio::Waker::new(poll.registry(), WAKER).map_err(|e| Error::io("creating the waker", e))?);
        let multicast = match &config.multicast {
            Some(m) => {
                let interface = multicast_interface(m, advertise)?;
                io.set_multicast_sender(interface, m.ttl).map_err(|e| Error::io("setting up multicast sends", e))?;
                let mut receiver = UdpIo::bind_multicast(m.group, m.port, interface, config.socket_buffer)
                    .map_err(|e| Error::io(format!("joining multicast group {}:{}", m.group, m.port), e))?;
                poll.registry()
                    .register(receiver.source(), MULTICAST, mio::Interest::READABLE)
                    .map_err(|e| Error::io("registering the multicast socket", e))?;
                Some((receiver, SocketAddr::from((m.group, m.port))))
            }
            None => None,
        };
        Ok(EventLoop {
            config,
            clock: Clock::new(),
            node: Node::new(),
            io,
            poll,
            mio_events: mio::Events::with_capacity(64),
            waker,
            advertise,
            members: BTreeMap::new(),
            owners: BTreeMap::new(),
            ready: VecDeque::new(),
            backlog: VecDeque::new(),
            packing: BTreeMap::new(),
            destinations: Vec::new(),
            chunks: Chunks::default(),
            writable_interest: false,
            readable: true,
            multicast_readable: multicast.is_some(),
            multicast,
            seeds: Vec::new(),
            retired: Vec::new(),
            next_token: RETIRED_FIRST,
            stats: RuntimeStats::default(),
        })
    }

    /// The bound socket address.
    pub fn local_addr(&self) -> SocketAddr {
        self.io.local_addr().unwrap_or(self.config.bind)
    }

    /// The address other members reach this process at.
    pub fn advertised_addr(&self) -> SocketAddr {
        self.advertise
    }

    /// A handle that interrupts a blocking [`EventLoop::poll`] from another thread.
    pub fn waker(&self) -> Arc<mio::Waker> {
        Arc::clone(&self.waker)
    }

    /// Joins a group: the new endpoint starts alone in a view of its own (thesis §2.1.5: a new
    /// endpoint is a singleton partition, not primary) and merges with the members it finds
    /// through the seeds (`heal` gossips to them).
    pub fn join(&mut self, group: &GroupConfig) -> Result<EndpointId, Error> {
        let _span = tracing::info_span!("join", group = %group.name, stack = %group.stack).entered();
        let (name, spec) = group.resolve_spec()?;
        if !spec.layers().contains(&LayerKind::Heal) || !spec.layers().contains(&LayerKind::Intra) {
            return Err(Error::Config(format!(
                "stack `{}` has no membership: a member started by the runtime begins alone and must merge, so it needs the Gmp and Heal properties (use `vsync`)",
                group.stack
            )));
        }
        let endpoint = EndpointId(rand::random());
        let mut view = ViewState::initial(
            name.clone(),
            spec,
            group.params.clone(),
            vec![endpoint],
            vec![Address::Inet(self.advertise)],
        );
        view.primary = false;
        view.clients = vec![group.client];
        let view = Arc::new(view);
        let peers = self.resolve(&group.peers);
        self.node.set_peers(name.clone(), peers);
        if group.peers.iter().any(|p| p.parse::<SocketAddr>().is_err()) {
            let next = crate::clock::Deadline::after(&self.clock, group.resolve_interval);
            self.seeds.push(Seeds { group: name, peers: group.peers.clone(), interval: group.resolve_interval, next });
        }
        let now = self.clock.now();
        let stack = self.node.join(now, Arc::clone(&view), 0)?;
        self.owners.insert(stack, (endpoint, view));
        self.members.insert(
            endpoint,
            MemberState {
                current: stack,
                view: None,
                parked: VecDeque::new(),
                xfer_parked: VecDeque::new(),
                blocked: false,
                casts_blocked: false,
                sends_blocked: BTreeSet::new(),
                retry: false,
                left: false,
                migrate_asked: None,
                migrate_tries: 0,
            },
        );
        tracing::info!(group = %group.name, %endpoint, address = %self.advertise, "joined alone; merging with seeds");
        self.flush();
        Ok(endpoint)
    }

    /// Resolves seed addresses (IP literals at once, names through DNS), leaving out our own.
    /// Names that do not resolve now are tried again later.
    fn resolve(&self, peers: &[String]) -> Vec<Address> {
        let mut out = BTreeSet::new();
        for peer in peers {
            match peer.to_socket_addrs() {
                Ok(addresses) => out.extend(addresses.filter(|&a| a != self.advertise)),
                Err(error) => tracing::warn!(%peer, %error, "seed address does not resolve (yet)"),
            }
        }
        out.into_iter().map(Address::Inet).collect()
    }

    /// Casts `data` to the group (or parks it until flow control and view changes allow). The
    /// datagrams leave at the next [`EventLoop::poll`], packed with the others of this turn.
    pub fn cast(&mut self, endpoint: EndpointId, data: Bytes) -> Result<(), Error> {
        self.act(endpoint, Op::Cast(data))
    }

    /// Sends `data` to member `to` of the current view.
    pub fn send(&mut self, endpoint: EndpointId, to: EndpointId, data: Bytes) -> Result<(), Error> {
        let member = self.members.get(&endpoint).ok_or(Error::Left)?;
        let view = member.view.as_ref().ok_or(Error::NoView)?;
        if view.rank_of(to).is_none() {
            return Err(Error::NotMember(to));
        }
        self.act(endpoint, Op::Send(to, data))
    }

    /// Leaves the group: the endpoint is excluded at the next view, then gets [`Event::Exit`].
    pub fn leave(&mut self, endpoint: EndpointId) -> Result<(), Error> {
        self.act(endpoint, Op::Leave)
    }

    /// In a state-transfer view, at the provider (after `Event::XferProvide`): the next chunk of
    /// the application's state; mark the last one. Held while flow control is blocking.
    pub fn xfer_chunk(&mut self, endpoint: EndpointId, view: ViewId, data: Bytes, last: bool) -> Result<(), Error> {
        self.act(endpoint, Op::XferChunk(view, data, last))
    }

    /// Casts `data` to the members `to` of the current view only (a subcast), ordered with the
    /// stack's guarantee among all casts.
    pub fn subcast(&mut self, endpoint: EndpointId, to: Vec<EndpointId>, data: Bytes) -> Result<(), Error> {
        self.act(endpoint, Op::Subcast(to, data))
    }

    /// This member is done with the current view's state transfer.
    pub fn xfer_done(&mut self, endpoint: EndpointId, view: ViewId) -> Result<(), Error> {
        self.act(endpoint, Op::XferDone(view))
    }

    /// Asks the whole group to run stack `spec` from its next view on (protocol switching; both
    /// the current and the new stack need the `Switch` property). Members deliver each message in
    /// the view, and so with the stack, it was sent in; watch `View::stack` for the change.
    pub fn switch(&mut self, endpoint: EndpointId, spec: &str) -> Result<(), Error> {
        let spec = crate::switch_target(spec)?;
        self.act(endpoint, Op::Switch(spec))
    }

    /// Moves this process to a new socket (endpoint migration, Ensemble's `Migrate`): binds
    /// `bind`, sends from it from now on, and asks every group this process is in for a view with
    /// the new address (`advertise`, or the bound address). Nothing is lost on the way: the old
    /// socket is still read until every endpoint's view has the new address, and for
    /// `migrate_grace` more, so datagrams peers send before they install that view still arrive.
    /// Every joined stack needs the `Migrate` property (the presets with membership have it);
    /// otherwise nothing changes and the error says which stack lacks it. Returns the new
    /// advertised address.
    pub fn migrate(&mut self, bind: SocketAddr, advertise: Option<SocketAddr>) -> Result<SocketAddr, Error> {
        for member in self.members.values().filter(|m| !m.left) {
            let stack = self.owners.get(&member.current).map(|(_, view)| &view.stack);
            if let Some(stack) = stack.filter(|s| !s.layers().contains(&LayerKind::Migrate)) {
                return Err(Error::Api(ApiError::NoMigrate(stack.to_string())));
            }
        }
        let (mut io, address) = bind_socket(&self.config, bind, advertise)?;
        if let Some(m) = &self.config.multicast {
            io.set_multicast_sender(multicast_interface(m, address)?, m.ttl)
                .map_err(|e| Error::io("setting up multicast sends", e))?;
        }
        // What earlier actions produced leaves from the old socket; the backlog from the new one.
        self.send_packed();
        let token = mio::Token(self.next_token);
        self.next_token += 1;
        let registry = self.poll.registry();
        registry
            .reregister(self.io.source(), token, mio::Interest::READABLE)
            .map_err(|e| Error::io("re-registering the old socket", e))?;
        let interest = if self.writable_interest {
            mio::Interest::READABLE | mio::Interest::WRITABLE
        } else {
            mio::Interest::READABLE
        };
        if let Err(e) = registry.register(io.source(), SOCKET, interest) {
            let _ = registry.reregister(self.io.source(), SOCKET, interest);
            return Err(Error::io("registering the new socket", e));
        }
        let old = std::mem::replace(&mut self.io, io);
        tracing::info!(from = %self.advertise, to = %address, "migrating");
        self.retired.push(Retired { io: old, token, readable: true, close_at: None });
        self.readable = true;
        self.advertise = address;
        self.stats.migrations += 1;
        let endpoints: Vec<EndpointId> = self.members.iter().filter(|(_, m)| !m.left).map(|(&e, _)| e).collect();
        for endpoint in endpoints {
            if let Some(member) = self.members.get_mut(&endpoint) {
                member.migrate_asked = member.view.as_ref().map(|v| v.view_id);
                member.migrate_tries = 0;
            }
            self.act(endpoint, Op::Migrate(address))?;
        }
        Ok(address)
    }

    /// After a migration: re-asks for the new address where a view was installed without it (the
    /// request raced with a merge or was made by an earlier stack), starts the grace period of a
    /// retired socket once every endpoint's view has the new address, and closes retired sockets
    /// whose grace has passed.
    fn tend_migrations(&mut self) {
        if self.retired.is_empty() {
            return;
        }
        let here = Address::Inet(self.advertise);
        let mut everywhere = true;
        for (&endpoint, member) in self.members.iter_mut().filter(|(_, m)| !m.left) {
            let Some(view) = &member.view else { continue };
            if view.rank_of(endpoint).is_some_and(|r| view.addresses[usize::from(r)] != here) {
                everywhere = false;
                // Once per view installed without it: the request in flight may still be
                // delivered in this view.
                if member.migrate_asked != Some(view.view_id) && member.migrate_tries < MIGRATE_TRIES {
                    member.migrate_asked = Some(view.view_id);
                    member.migrate_tries += 1;
                    member.parked.push_front(Op::Migrate(self.advertise));
                    member.retry = true;
                }
            }
        }
        let grace = Duration::from_millis(self.config.migrate_grace_ms);
        let clock = self.clock;
        for retired in &mut self.retired {
            if everywhere && retired.close_at.is_none() {
                retired.close_at = Some(crate::clock::Deadline::after(&clock, grace));
            }
        }
        let registry = self.poll.registry();
        let before = self.retired.len();
        self.retired.retain_mut(|retired| {
            let due = retired.close_at.is_some_and(|at| at.until(&clock) == Duration::ZERO);
            if due {
                let _ = registry.deregister(retired.io.source());
            }
            !due
        });
        self.stats.retired_closed += (before - self.retired.len()) as u64;
    }

    pub(crate) fn act(&mut self, endpoint: EndpointId, op: Op) -> Result<(), Error> {
        let mut op = op;
        op.copy_small(&mut self.chunks);
        let member = self.members.get_mut(&endpoint).ok_or(Error::Left)?;
        if member.left {
            return Err(Error::Left);
        }
        if matches!(op, Op::XferChunk(..) | Op::XferDone(_)) {
            // Not behind the application's casts, which wait for the transfer view to end.
            if !member.xfer_parked.is_empty() {
                member.xfer_parked.push_back(op);
                return Ok(());
            }
            let now = self.clock.now();
            let result = match take(&mut self.node, now, member, &op, &mut self.stats) {
                Err(Error::Api(ApiError::FlowBlocked { .. })) => {
                    member.xfer_parked.push_back(op);
                    Ok(())
                }
                other => other,
            };
            self.drain();
            return result;
        }
        if !member.parked.is_empty() {
            if member.parked.len() >= PARKED_MAX {
                return Err(Error::QueueFull("parked actions"));
            }
            member.parked.push_back(op);
            return Ok(());
        }
        let now = self.clock.now();
        let result = take(&mut self.node, now, member, &op, &mut self.stats);
        let result = match result {
            Err(Error::Api(ApiError::FlowBlocked { .. } | ApiError::Blocked | ApiError::NoSuchStack)) => {
                member.parked.push_back(op);
                Ok(())
            }
            other => other,
        };
        // What the action produced waits in the packing buffers until the end of this turn
        // (`poll`), so a burst of casts goes out packed.
        self.drain();
        result
    }

    /// Waits up to `timeout` (forever with `None`) for datagrams, due timers or a wake-up, and
    /// handles what came. Events for the application are then available from
    /// [`EventLoop::next_event`].
    pub fn poll(&mut self, timeout: Option<Duration>) -> Result<(), Error> {
        // What earlier actions produced goes out before we wait.
        self.send_packed();
        // Then the bookkeeping the bypass delayed (thesis §3.4.3): off the path from the last
        // receive, through the application, to this send.
        self.node.settle();
        self.stats.turns += 1;
        let lagging = self.ready.len() >= self.config.event_queue;
        // One clock read serves every deadline of the wait (each read costs about as much as a
        // protocol layer's work on a message).
        let before = self.clock.now();
        let mut wait = self.node.poll_timeout().map(|at| crate::clock::between(before, at));
        if let Some(timeout) = timeout {
            wait = Some(wait.map_or(timeout, |w| w.min(timeout)));
        }
        let retired_readable = self.retired.iter().any(|r| r.readable);
        if self.config.busy_poll || ((self.readable || self.multicast_readable || retired_readable) && !lagging) {
            wait = Some(Duration::ZERO);
        }
        let closing = self.retired.iter().filter_map(|r| r.close_at);
        if let Some(next) = self.seeds.iter().map(|s| s.next).chain(closing).min() {
            let next = next.from(before);
            wait = Some(wait.map_or(next, |w| w.min(next)));
        }
        // Busy-polling tries every socket each turn anyway, and the threaded runtime checks its
        // command channel without a system call, so readiness is only needed for a send backlog
        // (writable) and, now and then, the rest. Skipping `epoll_wait` on the other turns halves
        // the system calls per spin: a datagram is seen sooner.
        if self.config.busy_poll && self.backlog.is_empty() && !self.stats.turns.is_multiple_of(BUSY_POLL_EPOLL_EVERY) {
            self.mio_events.clear();
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
        if lagging {
            self.stats.app_backpressure += 1;
        } else {
            if self.readable || self.config.busy_poll {
                self.receive(Source::Unicast);
            }
            if self.multicast.is_some() && (self.multicast_readable || self.config.busy_poll) {
                self.receive(Source::Multicast);
            }
            for index in 0..self.retired.len() {
                if self.retired[index].readable || self.config.busy_poll {
                    self.receive(Source::Retired(index));
                }
            }
        }
        // Due alarms only: delayed processing waits for the next turn, after the application has
        // had this turn's events (unless an alarm is due: `Node::handle_timeout` settles first).
        let now = self.clock.now();
        if self.node.poll_alarm().is_some_and(|at| at <= now) {
            self.node.handle_timeout(now);
        }
        self.reresolve(now);
        self.tend_migrations();
        self.flush();
        Ok(())
    }

    /// The next event for the application, with the endpoint it is for.
    pub fn next_event(&mut self) -> Option<(EndpointId, Event)> {
        self.ready.pop_front()
    }

    /// Events waiting for the application.
    pub fn pending_events(&self) -> usize {
        self.ready.len()
    }

    /// The runtime's counters.
    pub fn runtime_stats(&self) -> RuntimeStats {
        self.stats.clone()
    }

    /// The protocol's counters, summed over every stack of the process.
    pub fn protocol_stats(&self) -> motet_core::layer::Stats {
        self.node.stats()
    }

    /// Actions of `endpoint` parked until flow control or a view change lets them go (a sender
    /// that wants to stay just ahead of the protocol casts while this is small).
    pub fn parked(&self, endpoint: EndpointId) -> usize {
        self.members.get(&endpoint).map_or(0, |m| m.parked.len())
    }

    /// The current view of `endpoint`, if it has one.
    pub fn view(&self, endpoint: EndpointId) -> Option<&Arc<ViewState>> {
        self.members.get(&endpoint)?.view.as_ref()
    }

    /// Reads batches from one socket until it is empty or the application lags.
    fn receive(&mut self, source: Source) {
        for _ in 0..BATCHES_PER_POLL {
            if self.ready.len() >= self.config.event_queue {
                return;
            }
            // Read per batch: the node's time never goes back, whatever ran in between.
            let now = self.clock.now();
            let io = match (source, self.multicast.as_mut()) {
                (Source::Unicast, _) => &mut self.io,
                (Source::Multicast, Some((io, _))) => io,
                (Source::Multicast, None) => {
                    self.multicast_readable = false;
                    return;
                }
                (Source::Retired(index), _) => &mut self.retired[index].io,
            };
            let result = receive_batch(io, &mut self.node, &mut self.stats, now, self.config.inject_loss);
            let drained = match result {
                Ok(batch) => {
                    let n = batch.datagrams as u64;
                    self.stats.datagrams_in += n;
                    self.stats.recv_batches += 1;
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
                    self.stats.send_errors += 1;
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

    fn reresolve(&mut self, now: motet_core::Instant) {
        for index in 0..self.seeds.len() {
            if self.seeds[index].next.from(now) > Duration::ZERO {
                continue;
            }
            let peers = self.resolve(&self.seeds[index].peers);
            let seeds = &mut self.seeds[index];
            seeds.next = crate::clock::Deadline::after(&self.clock, seeds.interval);
            self.node.set_peers(seeds.group.clone(), peers);
        }
    }

    /// [`EventLoop::drain`], then sends everything packed.
    fn flush(&mut self) {
        self.drain();
        self.send_packed();
    }

    /// Moves what the node has for the network into the packing buffers (a buffer that fills is
    /// sent at once), turns its events into application events, and takes parked actions that
    /// may now go.
    fn drain(&mut self) {
        loop {
            while let Some(out) = self.node.poll_transmit() {
                let group = self.multicast.as_ref().map(|(_, group)| *group);
                // Where it goes: with IP multicast, a cast is one datagram to the group address,
                // and gossip to other partitions goes there too (discovery on the LAN without
                // seeds), then also to the known peers.
                let first = match (&out.to, group) {
                    (Destination::Cast { .. }, Some(group)) => {
                        self.send_one(group, out.head, out.payload);
                        continue;
                    }
                    (Destination::Peers(_), Some(group)) => Some(group),
                    _ => None,
                };
                let mut simulated = 0;
                let inet = |address| match address {
                    Address::Inet(address) => Some(address),
                    Address::Sim(_) => {
                        simulated += 1;
                        None
                    }
                };
                // The last destination takes the head and payload themselves (no copy of the
                // head, no reference-count traffic on the payload).
                let mut to = first.into_iter().chain(out.to.addresses().filter_map(inet)).peekable();
                while let Some(address) = to.next() {
                    if to.peek().is_none() {
                        self.send_one(address, out.head, out.payload);
                        break;
                    }
                    self.send_one(address, out.head.clone(), out.payload.clone());
                }
                drop(to);
                self.stats.send_errors += simulated;
            }
            self.collect_events();
            if !self.retry_parked() {
                break;
            }
        }
    }

    fn collect_events(&mut self) {
        // Stacks come and go with views: the owners' map is pruned when one does.
        let mut views_changed = false;
        while let Some((stack, event)) = self.node.poll_event() {
            if let AppEvent::View { view, rank } = &event {
                let endpoint = view.members[usize::from(*rank)];
                self.owners.insert(stack, (endpoint, Arc::clone(view)));
            }
            views_changed |= matches!(event, AppEvent::View { .. } | AppEvent::Exit);
            let Some((endpoint, view)) = self.owners.get(&stack) else { continue };
            let endpoint = *endpoint;
            let Some(member) = self.members.get_mut(&endpoint) else { continue };
            let current = stack == member.current;
            let event = match event {
                AppEvent::View { view, rank } => {
                    self.stats.views_installed += 1;
                    tracing::info!(%endpoint, view = ?view.view_id, members = view.members.len(), "view installed");
                    member.current = stack;
                    member.view = Some(Arc::clone(&view));
                    member.blocked = false;
                    member.casts_blocked = false;
                    member.sends_blocked.clear();
                    member.retry = true;
                    Event::View(View::new(&view, rank))
                }
                AppEvent::Cast { origin, payload } => {
                    Event::Cast { from: view.members[usize::from(origin)], data: payload.to_bytes() }
                }
                AppEvent::Send { origin, payload } => {
                    Event::Send { from: view.members[usize::from(origin)], data: payload.to_bytes() }
                }
                AppEvent::Block => {
                    if current {
                        member.blocked = true;
                    }
                    Event::Block
                }
                AppEvent::FlowBlock { dest, blocked } => {
                    if current {
                        match dest {
                            None => member.casts_blocked = blocked,
                            Some(rank) if blocked => drop(member.sends_blocked.insert(rank)),
                            Some(rank) => drop(member.sends_blocked.remove(&rank)),
                        }
                        member.retry |= !blocked;
                    }
                    continue;
                }
                AppEvent::Exit => {
                    member.left = true;
                    member.parked.clear();
                    member.xfer_parked.clear();
                    Event::Exit
                }
                AppEvent::XferProvide if current => Event::XferProvide { view: view.view_id },
                AppEvent::XferChunk { payload, last } if current => {
                    Event::XferChunk { view: view.view_id, data: payload.to_bytes(), last }
                }
                // A transfer of a view this member has already left.
                AppEvent::XferProvide | AppEvent::XferChunk { .. } => continue,
            };
            self.ready.push_back((endpoint, event));
        }
        if views_changed {
            let node = &self.node;
            self.owners.retain(|&stack, _| node.stack(stack).is_some());
        }
    }

    /// Takes parked actions of endpoints that may have been unblocked. True if any was taken.
    fn retry_parked(&mut self) -> bool {
        let mut progress = false;
        // Read only when some member has parked actions to retry (rarely).
        let mut now = None;
        for member in self.members.values_mut() {
            if !std::mem::take(&mut member.retry) || member.blocked {
                continue;
            }
            let now = *now.get_or_insert_with(|| self.clock.now());
            while let Some(op) = member.xfer_parked.pop_front() {
                match take(&mut self.node, now, member, &op, &mut self.stats) {
                    Err(Error::Api(ApiError::FlowBlocked { .. })) => {
                        member.xfer_parked.push_front(op);
                        break;
                    }
                    Err(e) => tracing::debug!(error = %e, "state-transfer action refused"),
                    Ok(()) => progress = true,
                }
            }
            while let Some(op) = member.parked.pop_front() {
                match take(&mut self.node, now, member, &op, &mut self.stats) {
                    Err(Error::Api(ApiError::FlowBlocked { .. } | ApiError::Blocked | ApiError::NoSuchStack)) => {
                        member.parked.push_front(op);
                        break;
                    }
                    Err(e) => tracing::debug!(error = %e, "parked action refused"),
                    Ok(()) => progress = true,
                }
            }
        }
        progress
    }
}

/// Binds a socket for `bind` and works out the address to advertise for it.
fn bind_socket(
    config: &RuntimeConfig,
    bind: SocketAddr,
    advertise: Option<SocketAddr>,
) -> Result<(UdpIo, SocketAddr), Error> {
    let io = UdpIo::bind(bind, config.socket_buffer).map_err(|e| Error::io(format!("binding {bind}"), e))?;
    let local = io.local_addr().map_err(|e| Error::io("reading the bound address", e))?;
    let advertise = match advertise {
        Some(address) if address.ip().is_unspecified() || address.port() == 0 => {
            return Err(Error::Config(format!(
                "advertise address {address} must be a concrete IP and port other members can reach"
            )))
        }
        Some(address) => address,
        None if local.ip().is_unspecified() => {
            return Err(Error::Config(format!(
                "bound to the wildcard address {local}: set `advertise` to the address other members use"
            )))
        }
        None => local,
    };
    Ok((io, advertise))
}

/// The interface multicast is sent from: the configured one, or the advertised address's.
fn multicast_interface(m: &crate::config::MulticastConfig, advertise: SocketAddr) -> Result<std::net::Ipv4Addr, Error> {
    match advertise.ip() {
        std::net::IpAddr::V4(ip) => Ok(m.interface.unwrap_or(ip)),
        std::net::IpAddr::V6(_) => Err(Error::Config("IP multicast needs an IPv4 address to send from".into())),
    }
}

/// One `recvmmsg` batch into the node: bundles unpacked, injected loss applied.
fn receive_batch(
    io: &mut UdpIo,
    node: &mut Node,
    stats: &mut RuntimeStats,
    now: motet_core::Instant,
    loss: f64,
) -> io::Result<crate::io::Batch> {
    io.recv_batch(|_, datagram| {
        if loss > 0.0 && rand::random::<f64>() < loss {
            stats.injected_loss += 1;
        } else if motet_wire::bundle::is_bundle(&datagram) {
            match motet_wire::bundle::decode(&datagram) {
                Ok(parts) => parts.into_iter().for_each(|part| node.handle_datagram(now, part)),
                Err(_) => stats.malformed_bundles += 1,
            }
        } else {
            node.handle_datagram(now, datagram);
        }
    })
}

/// Hands one action to the endpoint's current stack.
fn take(
    node: &mut Node,
    now: motet_core::Instant,
    member: &MemberState,
    op: &Op,
    stats: &mut RuntimeStats,
) -> Result<(), Error> {
    let action = match op {
        Op::Cast(data) => Action::Cast(payload(data)),
        Op::Send(to, data) => {
            let view = member.view.as_ref().ok_or(Error::Api(ApiError::Blocked))?;
            let Some(rank) = view.rank_of(*to) else {
                stats.sends_to_departed += 1;
                return Ok(());
            };
            Action::send(rank, payload(data))
        }
        Op::Subcast(to, data) => {
            let view = member.view.as_ref().ok_or(Error::Api(ApiError::Blocked))?;
            let ranks: Vec<Rank> = to.iter().filter_map(|&e| view.rank_of(e)).collect();
            stats.sends_to_departed += (to.len() - ranks.len()) as u64;
            Action::Subcast(ranks, payload(data))
        }
        Op::RoleCast(clients, data) => {
            let view = member.view.as_ref().ok_or(Error::Api(ApiError::Blocked))?;
            Action::Subcast(view.ranks_where(*clients), payload(data))
        }
        Op::Leave => Action::Leave,
        Op::Switch(spec) => Action::Switch(spec.clone()),
        Op::XferChunk(view, ..) | Op::XferDone(view) if member.view.as_ref().is_none_or(|v| v.view_id != *view) => {
            stats.stale_xfer += 1;
            return Ok(());
        }
        Op::XferChunk(_, data, last) => Action::XferChunk { payload: payload(data), last: *last },
        Op::XferDone(_) => Action::XferDone,
        Op::Migrate(to) => Action::Migrate(Address::Inet(*to)),
    };
    node.handle_action(now, member.current, action).map_err(Error::from)
}

fn payload(data: &Bytes) -> Payload {
    let mut payload = Payload::new();
    payload.push(data.clone());
    payload
}
