//! The event loop: one per process, serving all its endpoints. It owns the sans-IO [`Node`] and
//! the UDP socket, and does only I/O: datagrams in, due timers, application actions; datagrams
//! out, application events. No protocol logic lives here (the core decides everything).
//!
//! Use it directly on your own thread ([`EventLoop::poll`] then [`EventLoop::next_event`]) for the
//! lowest latency, or through [`crate::Runtime`], which runs it on a thread of its own.
//!
//! Back-pressure, end to end: when the application does not consume events and `event_queue` of
//! them (or `event_queue_bytes` of payload) are waiting, the loop stops reading the socket; the
//! kernel buffer fills, datagrams are lost, and the senders' flow control and retransmission hold
//! their messages (nothing is lost for good). Actions the protocol cannot take now (flow control
//! is blocking, or a view change is in progress) are parked in order and taken when the stack
//! allows; the parking lot is bounded.

use crate::clock::Clock;
use crate::config::{GroupConfig, RuntimeConfig};
use crate::io::{Chunks, UdpIo};
use crate::{Error, Event};
use bytes::Bytes;
use motet_core::DatagramHead;
use motet_core::{Address, Destination, EndpointId, GroupName, Node, Payload, ViewId, ViewState};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;

mod app;
mod migrate;
mod owners;
mod ready;
mod receive;
mod resolve;
mod seeds;
mod send;
mod turn;
use app::MemberState;
pub(crate) use app::{Lot, Op, PARKED_BYTES_MAX, PARKED_MAX};
use migrate::{bind_socket, multicast_interface, Retired};
use send::Packings;

const SOCKET: mio::Token = mio::Token(0);
const WAKER: mio::Token = mio::Token(1);
const MULTICAST: mio::Token = mio::Token(2);
/// Tokens of sockets retired by migrations count up from here.
const RETIRED_FIRST: usize = 3;

/// Counters of the runtime itself (the protocol's are in [`motet_core::layer::Stats`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuntimeStats {
    /// Datagrams received.
    pub datagrams_in: u64,
    /// Turns that waited in the receive call (a quiet loop with one socket to watch) rather than
    /// in `epoll`.
    pub recv_waits: u64,
    /// Datagrams sent (one per destination address).
    pub datagrams_out: u64,
    /// Receive calls that returned (`recvmmsg` batches, and the single reads of a busy-polling
    /// spin or of a wait in the receive call), including those whose datagrams were all dropped
    /// as cut short (`control_truncated`): `datagrams_in / recv_batches` is the batching a
    /// blocking loop gets, and about 1 for a busy-polling one.
    pub recv_batches: u64,
    /// Sends that failed for a reason other than a full buffer (counted, then dropped).
    pub send_errors: u64,
    /// Receive calls that failed for a reason other than no data or a signal (ICMP errors some
    /// systems report there, such as a refused port). Until 2026-11-28 counted in `send_errors`.
    pub receive_errors: u64,
    /// Datagrams held because the socket's send buffer was full.
    pub send_backlogged: u64,
    /// Backlogged datagrams dropped because the backlog was full (the protocol retransmits).
    pub send_backlog_dropped: u64,
    /// Times the loop stopped reading the socket because the application lagged (the last
    /// resort: a member whose events wait beyond its bound, in a stack without flow control).
    /// Each stop counts once, however many turns it lasts (until the thirty-second session, each
    /// turn counted).
    pub app_backpressure: u64,
    /// Times a member's application fell behind on its events ([`EventLoop::set_lagging`]): its
    /// group's senders waited for it.
    pub lags: u64,
    /// Parked sends dropped because their destination left the view before they could go.
    pub sends_to_departed: u64,
    /// Datagrams dropped on purpose by `RuntimeConfig::inject_loss` (a testing aid).
    pub injected_loss: u64,
    /// Views installed by this process's endpoints.
    pub views_installed: u64,
    /// Views installed whose protocol parameters (the group's, run by every member of the view)
    /// differ from this member's own configuration: the group's members are configured
    /// differently (logged once per endpoint).
    pub views_with_other_params: u64,
    /// Merged views installed whose stack differs from the one this member ran before: it merged
    /// into a partition running another stack (the merged view runs the larger partition's).
    /// Logged once per stack, with what the member's stack provided that the view's lacks. A
    /// switch, which the group agrees to, is not counted.
    pub merges_changing_stack: u64,
    /// Application actions taken from the queue and then refused (a parked action that no longer
    /// fits the view, or a state-transfer action the stack refuses outright), behind the threaded
    /// [`crate::Runtime`]'s handles, which had already returned (driving an `EventLoop` directly,
    /// the caller gets the error instead; the handles refuse actions at a full parking lot
    /// themselves): logged, the first and every 1,024th.
    pub actions_refused: u64,
    /// Endpoints joined and not yet exited (a gauge).
    pub endpoints: u64,
    /// Messages the endpoints' stacks hold for retransmission (a gauge, [`EventLoop::buffered`]
    /// summed): back to 0 once a quiet group is stable.
    pub buffered: u64,
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
    /// Received buffers dropped because the kernel cut their control message short
    /// (`MSG_CTRUNC`): a coalesced run whose segment size was lost cannot be split.
    pub control_truncated: u64,
    /// State-transfer actions for a view that had already ended (dropped: the transfer starts
    /// over in the next view).
    pub stale_xfer: u64,
    /// Turns of the loop (`poll` calls). An idle loop sleeps, so this grows with traffic and
    /// timers, not with time.
    pub turns: u64,
    /// Times a busy-polling loop that found nothing to read yielded its CPU
    /// (`RuntimeConfig::busy_poll`).
    pub busy_yields: u64,
    /// Migrations of this process to a new socket ([`EventLoop::migrate`]).
    pub migrations: u64,
    /// Datagrams that still arrived at a socket given up by a migration (before it closed).
    pub datagrams_in_retired: u64,
    /// Sockets given up by migrations and closed since.
    pub retired_closed: u64,
    /// Lookups of seed names that failed (a name that does not resolve, yet or any more; each
    /// name of a group's lookup counts once per lookup).
    pub seed_lookups_failed: u64,
    /// Seed addresses known now, summed over the process's endpoints (a gauge): IP literals and
    /// the addresses names resolved to, of the socket's IP family. 0 with seeds configured says
    /// discovery has nothing to gossip to.
    pub seed_addresses: u64,
    /// Sockets open for connected sends (`RuntimeConfig::connected_sends`), one per unicast
    /// destination, at most 256.
    pub connected_sockets: u64,
    /// Unicast sends handed to the shared socket because their connected socket could not take
    /// them: the table was full, the socket could not be made, its buffer was full, or its send
    /// failed (an ICMP report of an earlier datagram's fate, such as a member that stopped).
    /// Counted when handed over, whether the shared socket then sends or refuses (a datagram that
    /// then waits in the send backlog and is tried again counts again), so under back-pressure it
    /// can grow faster than `datagrams_out`. Over every socket the process has had: a
    /// migration's new socket adds to its predecessors' count.
    pub connected_fallbacks: u64,
    /// Receive offload (`UDP_GRO`) is on at the process's unicast socket: it was wanted
    /// (`RuntimeConfig::receive_offload`) and the socket has been busy (docs/runtime.md,
    /// "Receive offload"). A socket bound by a migration starts without it again.
    pub receive_offload: bool,
    /// Application messages (casts and sends, going down or arriving) that took the bypass, over
    /// every stack the process has run ([`EventLoop::bypass_stats`] says more).
    pub bypass_hits: u64,
    /// Application messages that took the layered path because a layer's fast-path condition
    /// did not hold (a window full, a message out of order, a view change).
    pub bypass_misses: u64,
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
    /// The endpoints of each group here (a process may be in 10^5 groups: finding a group's
    /// members must not scan them all).
    groups: BTreeMap<GroupName, smallvec::SmallVec<[EndpointId; 1]>>,
    /// Which endpoint each stack serves, and its view (events of a stack that has just exited
    /// are still translated with it).
    owners: owners::Owners,
    /// Events for the application ([`EventLoop::next_event`]).
    ready: ready::Ready,
    backlog: VecDeque<(SocketAddr, DatagramHead, Payload)>,
    /// Per destination, what this turn has produced so far (sent at the end of the turn).
    packing: Packings,
    /// Endpoints whose parked actions may go now (each once: its `retry` flag), visited by
    /// `retry_parked` alone. A flag for all members, which that walk then visited every member
    /// for, cost O(endpoints) at every credit report or view of any one (a review's finding).
    retrying: Vec<EndpointId>,
    /// What `retry_parked` walks (`retrying`'s last contents), kept for its capacity.
    retrying_spare: Vec<EndpointId>,
    /// An action was parked because `ready` was full (`event_queue` events or `event_queue_bytes`
    /// of payload): the application is behind on its events, and the actions of this process
    /// (whose own casts come back as events) wait until it catches up, as the network's do.
    parked_for_events: bool,
    /// Where the application's small payloads are copied ([`Op::copy_small`]).
    chunks: Chunks,
    writable_interest: bool,
    /// The socket may have more datagrams (mio is edge-triggered: read until `WouldBlock`).
    readable: bool,
    /// The last turn did not read, the application's events being at their bound (the last
    /// resort): `app_backpressure` counts such stops, not the turns they last.
    stopped_reading: bool,
    /// The multicast receive socket, the group address casts and gossip go to, and the
    /// interface the group is joined on (a migration may move it).
    multicast: Option<(UdpIo, SocketAddr, std::net::Ipv4Addr)>,
    multicast_readable: bool,
    /// Each endpoint's seed names, by the id their lookups answer with; their endpoints' ids,
    /// and when each is next due (for a lookup, or for the warning that one in flight is slow).
    /// Indexed so that a loop turn costs nothing per group, and an answer or an exit is a lookup:
    /// with 10^5 groups seeded by names, a vector walked every turn and searched per answer
    /// cost seconds a burst of answers (a review's finding).
    seeds: seeds::SeedsIndex,
    /// Looks seed names up on a thread of its own.
    resolver: resolve::Resolver,
    /// The id of the next group's seeds.
    next_seeds: u64,
    /// Sockets given up by migrations, still read for a while.
    retired: Vec<Retired>,
    /// A view changed or a member came or went since `tend_migrations` last walked the members
    /// (it walks them only then: a walk of every member at every turn of a migration's grace cost
    /// O(groups) a turn, a review's finding); and whether every endpoint's view had the new
    /// address at that walk.
    migration_walk: bool,
    migrated_everywhere: bool,
    next_token: usize,
    /// How long a wait in the receive call may be asked to last ([`receive::RecvTimeout`]).
    recv_timeout: receive::RecvTimeout,
    /// A waker has been lent out (by [`EventLoop::waker`], or to a DNS lookup) since a turn last
    /// asked `epoll`: a wake-up its holder made before dropping it waits there, unseen by a wait
    /// in the receive call.
    waker_lent: std::cell::Cell<bool>,
    /// Busy-polling turns in a row, outside a spin, that were idle (read nothing, nothing due).
    empty_turns: usize,
    stats: RuntimeStats,
    /// Tests: every turn starts with a timer due (a process whose alarms outlast their gaps).
    #[cfg(test)]
    timers_always_due: bool,
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
                let local = io.local_addr().map_err(|e| Error::io("reading the bound address", e))?;
                let interface = multicast_interface(m, local, advertise)?;
                // The default bind is loopback: `--multicast` alone joined the group there, where
                // no other host hears it, and the member sat alone with no word of why.
                if interface.is_loopback() {
                    tracing::warn!(%interface, group = %m.group, "IP multicast is joined on the loopback interface: members on other hosts never hear it, nor this member them; bind the LAN interface's address (or 0.0.0.0:PORT with advertise), or set [runtime.multicast] interface");
                }
                migrate::multicast_sender(&mut io, interface, m.ttl)?;
                let mut receiver = UdpIo::bind_multicast(
                    m.group,
                    m.port,
                    interface,
                    config.socket_buffer,
                    config.receive_offload_on(),
                )
                .map_err(|e| Error::io(format!("joining multicast group {}:{}", m.group, m.port), e))?;
                poll.registry()
                    .register(receiver.source(), MULTICAST, mio::Interest::READABLE)
                    .map_err(|e| Error::io("registering the multicast socket", e))?;
                Some((receiver, SocketAddr::from((m.group, m.port)), interface))
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
            groups: BTreeMap::new(),
            owners: owners::Owners::default(),
            ready: ready::Ready::default(),
            backlog: VecDeque::new(),
            packing: Packings::default(),
            retrying: Vec::new(),
            retrying_spare: Vec::new(),
            parked_for_events: false,
            chunks: Chunks::default(),
            writable_interest: false,
            readable: true,
            stopped_reading: false,
            multicast_readable: multicast.is_some(),
            multicast,
            seeds: seeds::SeedsIndex::default(),
            resolver: resolve::Resolver::default(),
            next_seeds: 0,
            retired: Vec::new(),
            migration_walk: false,
            migrated_everywhere: false,
            next_token: RETIRED_FIRST,
            recv_timeout: receive::RecvTimeout::default(),
            waker_lent: std::cell::Cell::new(false),
            empty_turns: 0,
            stats: RuntimeStats::default(),
            #[cfg(test)]
            timers_always_due: false,
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
        self.waker_lent.set(true);
        Arc::clone(&self.waker)
    }

    /// Joins a group: the new endpoint starts alone in a view of its own (thesis §2.1.5: a new
    /// endpoint is a singleton partition, not primary) and merges with the members it finds
    /// through the seeds (`heal` gossips to them).
    pub fn join(&mut self, group: &GroupConfig) -> Result<EndpointId, Error> {
        let _span = tracing::info_span!("join", group = %group.name, stack = %group.stack).entered();
        let (name, spec) = group.resolve_spec()?;
        crate::merges(&spec, &group.stack)?;
        // The slack lets an idle loop fire the failure detector's sweep late; a tenth of the
        // timeout at most (as `TIMER_SLACK_MAX_MS` is of the default one), or beats go out late
        // enough for a healthy member to be suspected.
        let timeout = group.params.suspect.timeout.as_millis();
        if self.config.timer_slack_ms.saturating_mul(10) > timeout {
            return Err(Error::Config(format!(
                "timer_slack_ms ({}) is more than a tenth of the group's suspect.timeout_ms ({timeout}): its beats could go out late enough to be suspected; lower timer_slack_ms or raise suspect.timeout_ms",
                self.config.timer_slack_ms
            )));
        }
        // A member on a loopback address cannot reach a seed on another host, nor be reached
        // from it (the kernel refuses those sends; the loop only logs them), nor can a socket
        // send to a seed of the other IP family: it would sit alone.
        crate::config::seeds_reachable(self.advertise, &group.peers)?;
        let endpoint = unused(&self.members, || crate::clock::new_endpoint_id(rand::random()));
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
        let configured = Arc::clone(&view.params);
        let configured_stack = view.stack.clone();
        let seeds = self.ask_seeds(endpoint, &name, group);
        let now = self.clock.now();
        let stack = match self.node.join(now, Arc::clone(&view), 0) {
            Ok(stack) => stack,
            Err(error) => {
                // No endpoint: the group's seeds are its other endpoints' again, and this one's
                // lookups stop.
                self.publish_peers(&name);
                self.forget_seeds(endpoint);
                return Err(error.into());
            }
        };
        if !group.loopback {
            // The node carries it to the stacks of the later views. A fresh stack takes it.
            let set = self.node.handle_action(now, stack, motet_core::Action::Loopback(false));
            set.expect("a new stack takes the loop-back setting");
        }
        self.owners.insert(stack, endpoint, view);
        self.members.insert(
            endpoint,
            MemberState {
                current: stack,
                group: name.clone(),
                seeds,
                view: None,
                parked: app::Parked::default(),
                xfer_parked: app::Parked::default(),
                blocked: false,
                casts_blocked: false,
                sends_blocked: BTreeSet::new(),
                retry: false,
                left: false,
                leave_asked: false,
                migrate_asked: None,
                migrate_tries: 0,
                configured,
                params_warned: false,
                configured_stack,
                stack_warned: None,
                lagging: false,
            },
        );
        self.groups.entry(name).or_default().push(endpoint);
        tracing::info!(group = %group.name, %endpoint, address = %self.advertise, "joined alone; merging with seeds");
        self.flush();
        Ok(endpoint)
    }

    /// Casts `data` to the group (or parks it until flow control and view changes allow). The
    /// datagrams leave at the next [`EventLoop::poll`], packed with the others of this turn.
    pub fn cast(&mut self, endpoint: EndpointId, data: Bytes) -> Result<(), Error> {
        self.act(endpoint, Op::Cast(data))
    }

    /// Sends `data` to member `to` of the current view.
    pub fn send(&mut self, endpoint: EndpointId, to: EndpointId, data: Bytes) -> Result<(), Error> {
        let Some(member) = self.members.get(&endpoint) else { return Err(Error::Left) };
        let Some(view) = member.view.as_ref() else { return Err(Error::NoView) };
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
        // As `send`: the view is known here, so a name outside it is the caller's to hear of
        // (it was counted in `sends_to_departed` and dropped).
        let Some(member) = self.members.get(&endpoint) else { return Err(Error::Left) };
        let Some(view) = member.view.as_ref() else { return Err(Error::NoView) };
        if let Some(&stranger) = to.iter().find(|&&e| view.rank_of(e).is_none()) {
            return Err(Error::NotMember(stranger));
        }
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

    /// The next event for the application, with the endpoint it is for.
    pub fn next_event(&mut self) -> Option<(EndpointId, Event)> {
        let next = self.ready.pop_front();
        if self.parked_for_events && self.ready.half_free(&self.config) {
            self.resume_parked_for_events();
        }
        next
    }

    /// The application has caught up on its events: actions parked because it was behind are
    /// taken at the next turn (half the queue's room first, so they go in bursts, not one by one).
    #[cold]
    fn resume_parked_for_events(&mut self) {
        self.parked_for_events = false;
        for (&endpoint, member) in self.members.iter_mut().filter(|(_, m)| !m.parked.is_empty()) {
            app::flag_retry(&mut self.retrying, endpoint, member);
        }
    }

    /// Says that the application of `endpoint` is behind on its events (`true`: its queue is
    /// full) or has caught up (`false`). Meanwhile the group's flow control holds the other
    /// members' casts and sends to it at their senders instead of piling events up here, and its
    /// own casts are refused (parked) until it catches up. A view change lifts the withheld credit
    /// for the rest of that view, and `lag_trickle_bytes` per sender trickle through every
    /// `lag_report_interval` (docs/runtime.md, "Back-pressure, end to end"). The threaded
    /// [`crate::Runtime`] says it for each member whose event channel is full; a driver that
    /// keeps per-member event queues of its own may say it likewise.
    pub fn set_lagging(&mut self, endpoint: EndpointId, lagging: bool) -> Result<(), Error> {
        let member = self.members.get_mut(&endpoint).ok_or(Error::Left)?;
        if member.left {
            return Err(Error::Left);
        }
        if std::mem::replace(&mut member.lagging, lagging) != lagging {
            self.stats.lags += u64::from(lagging);
            let now = self.clock.now();
            // A stack that is gone (between views) takes it with its successor's view, below.
            let _ = self.node.handle_action(now, member.current, motet_core::Action::Lagging(lagging));
            self.drain();
        }
        Ok(())
    }

    /// Datagrams waiting for room in the socket's send buffer (the send backlog). A driver that
    /// stops should poll until none are left, or its last datagrams (a leave's) are lost.
    pub fn unsent(&self) -> usize {
        self.backlog.len()
    }

    /// Endpoints that asked to leave and have not exited yet (their leave is still running).
    pub fn leaving(&self) -> usize {
        self.members.values().filter(|m| m.leave_asked).count()
    }

    /// Events waiting for the application.
    pub fn pending_events(&self) -> usize {
        self.ready.len()
    }

    /// Counts an action the threaded runtime queued and the loop then refused
    /// ([`RuntimeStats::actions_refused`]).
    pub(crate) fn refused(&mut self, error: &Error) {
        app::refused(&mut self.stats, error);
    }

    /// The runtime's counters.
    pub fn runtime_stats(&self) -> RuntimeStats {
        let (open, fallbacks) = self.io.connected_stats();
        let bypass = self.node.bypass_stats();
        RuntimeStats {
            bypass_hits: bypass.hits,
            bypass_misses: bypass.misses,
            connected_sockets: open as u64,
            // The sockets' before a migration (kept in `stats`), and the current one's.
            connected_fallbacks: self.stats.connected_fallbacks + fallbacks,
            receive_offload: self.io.offload_on(),
            endpoints: self.members.len() as u64,
            buffered: self.members.keys().map(|&e| self.buffered(e) as u64).sum(),
            seed_addresses: self.members.values().map(|m| m.seeds.len() as u64).sum(),
            ..self.stats.clone()
        }
    }

    /// The protocol's counters, summed over every stack of the process.
    pub fn protocol_stats(&self) -> motet_core::layer::Stats {
        self.node.stats()
    }

    /// How the process's messages took the bypass (docs/bypass.md): hits, misses and, per layer,
    /// the misses it caused, summed over every stack it has run.
    pub fn bypass_stats(&self) -> motet_core::BypassStats {
        self.node.bypass_stats()
    }

    /// Actions of `endpoint` parked until flow control or a view change lets them go (a sender
    /// that wants to stay just ahead of the protocol casts while this is small).
    pub fn parked(&self, endpoint: EndpointId) -> usize {
        self.members.get(&endpoint).map_or(0, |m| m.parked.len())
    }

    /// How many of `endpoint`'s parked actions are counted, and their payload bytes, in each lot:
    /// messages (casts, sends, subcasts), then state-transfer chunks. What their bounds count
    /// ([`EventLoop::parked`] counts every action).
    pub(crate) fn parked_counted(&self, endpoint: EndpointId) -> [(usize, usize); 2] {
        self.members.get(&endpoint).map_or([(0, 0); 2], |m| {
            [(m.parked.messages(), m.parked.bytes()), (m.xfer_parked.messages(), m.xfer_parked.bytes())]
        })
    }

    /// The payload bytes of `endpoint`'s parked actions.
    pub fn parked_bytes(&self, endpoint: EndpointId) -> usize {
        self.members.get(&endpoint).map_or(0, |m| m.parked.bytes())
    }

    /// Messages the protocol stack of `endpoint` holds for retransmission: the casts and sends
    /// kept until stability or an acknowledgement frees them, those held out of order, and the
    /// copies delayed processing has not filed yet. What an operator watches to see that
    /// stability keeps up; it comes back to 0 once a quiet group is stable.
    pub fn buffered(&self, endpoint: EndpointId) -> usize {
        self.members.get(&endpoint).and_then(|m| self.node.stack(m.current)).map_or(0, |s| s.buffered())
    }

    /// The current view of `endpoint`, if it has one.
    pub fn view(&self, endpoint: EndpointId) -> Option<&Arc<ViewState>> {
        self.members.get(&endpoint)?.view.as_ref()
    }

    /// [`EventLoop::drain`], then sends everything packed.
    fn flush(&mut self) {
        self.drain();
        self.send_packed();
    }

    /// Moves what the node has for the network into the packing buffers (a buffer that fills is
    /// sent at once), turns its events into application events, and takes parked actions that
    /// may now go. Most turns have nothing left by their end: that costs one test here, not the
    /// set-up of the whole loop.
    #[inline]
    fn drain(&mut self) {
        if self.node.has_output() || !self.retrying.is_empty() {
            self.drain_all();
        }
    }

    /// A cast's datagram to every address of `addresses` but `except`'s, in rank order; the last
    /// takes the head and payload themselves. Simulated addresses count as send errors, as in
    /// [`EventLoop::drain_all`]'s general path.
    fn send_cast(&mut self, addresses: &[Address], except: usize, head: DatagramHead, payload: Payload) {
        let mut simulated = 0;
        let mut last = None;
        for (i, address) in addresses.iter().enumerate().rev() {
            match address {
                _ if i == except => {}
                &Address::Inet(to) => {
                    last = Some((i, to));
                    break;
                }
                Address::Sim(_) => simulated += 1,
            }
        }
        if let Some((last, last_to)) = last {
            for (i, address) in addresses[..last].iter().enumerate() {
                match address {
                    _ if i == except => {}
                    &Address::Inet(to) => self.send_one(to, head.clone(), payload.clone()),
                    Address::Sim(_) => simulated += 1,
                }
            }
            self.send_one(last_to, head, payload);
        }
        self.stats.send_errors += simulated;
    }

    #[inline(never)]
    fn drain_all(&mut self) {
        loop {
            while let Some(out) = self.node.poll_transmit() {
                let group = self.multicast.as_ref().map(|(_, group, _)| *group);
                // Where it goes: with IP multicast, a cast is one datagram to the group address,
                // and gossip to other partitions goes there too (discovery on the LAN without
                // seeds), then also to the known peers.
                let first = match (&out.to, group) {
                    (Destination::Cast { .. }, Some(group)) => {
                        self.send_one(group, out.head, out.payload);
                        continue;
                    }
                    (Destination::Peers(_), Some(group)) => Some(group),
                    // The common cases without the iterator chain below (about 60 instructions
                    // of a round trip less, measured): a cast to the view's other members, and a
                    // send.
                    (Destination::Cast { view, except }, None) => {
                        self.send_cast(&view.addresses, usize::from(*except), out.head, out.payload);
                        continue;
                    }
                    (&Destination::Send(Address::Inet(to)), None) => {
                        self.send_one(to, out.head, out.payload);
                        continue;
                    }
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
}

/// An endpoint id from `draw` that none of this process's `members` has: drawn again while it is
/// one of them. Two endpoints made in the same tenth of a second share an id with odds of 2^-28,
/// and a process may join many groups at once; the second one's state replaced the first one's
/// here (a review's finding).
fn unused(members: &BTreeMap<EndpointId, MemberState>, mut draw: impl FnMut() -> EndpointId) -> EndpointId {
    loop {
        let endpoint = draw();
        if !members.contains_key(&endpoint) {
            return endpoint;
        }
    }
}

#[cfg(test)]
mod tests;
