//! Configuration of a runtime (one per process) and of a group membership (one per joined group):
//! builders for code, and TOML for files.
//!
//! ```toml
//! [runtime]
//! bind = "0.0.0.0:7001"
//! advertise = "10.0.0.5:7001"   # what other members use to reach us (NAT, containers)
//!
//! [group]
//! name = "inventory"
//! stack = "vsync"
//! peers = ["10.0.0.6:7001", "inventory-1.inventory.svc:7001"]
//!
//! # Protocol parameters, per layer (optional; a member merging into a group runs the group's,
//! # so configure every member alike).
//! [group.params.suspect]
//! timeout_ms = 3000             # suspect a member silent for 3 s (default 1 s)
//! [group.params.mflow]
//! window_bytes = 1048576        # bytes a sender may run ahead of its slowest receiver (default 512 KiB)
//! ```

use crate::Error;
use motet_core::{GroupName, StackConfig, StackSpec};
use serde::Deserialize;
use std::net::SocketAddr;
use std::time::Duration;

/// How a process reaches the network. Defaults: bind `127.0.0.1:0` (loopback, any port),
/// advertise the bound address, block in `epoll` when idle.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RuntimeConfig {
    /// The UDP address to bind. Port 0 picks a free port.
    pub bind: SocketAddr,
    /// The address other members use to reach this process, when it differs from `bind` (NAT,
    /// containers, or binding `0.0.0.0`). Required when `bind` is a wildcard address.
    pub advertise: Option<SocketAddr>,
    /// Spin on the socket instead of sleeping in `epoll` (lowest latency; burns a CPU).
    pub busy_poll: bool,
    /// Events held for the application, per process, before the runtime stops reading the
    /// network (back-pressure: the senders' flow control then holds their messages) and parks
    /// the process's own actions (a member's own casts come back to it as events) until the
    /// application catches up.
    pub event_queue: usize,
    /// The same bound in payload bytes: events held for the application, per process and in each
    /// member's channel of the threaded runtime, stop at whichever of `event_queue` and this comes
    /// first. It is checked before each message of a member's channel and before each batch read
    /// from the socket, so one message (in the loop's queue, one batch) may pass it: a message
    /// larger than the bound still goes through.
    /// Default 64 MiB: with the default `event_queue` of 16,384, messages of up to 4 KiB are
    /// bounded by their count, larger ones (up to `message_size_max`, 1 MiB) by their bytes.
    pub event_queue_bytes: usize,
    /// Actions (casts, sends) the application may queue to the event-loop thread before `cast`
    /// blocks.
    pub action_queue: usize,
    /// Datagrams held when the socket's send buffer is full, before the oldest are dropped (the
    /// protocol retransmits them) and counted.
    pub send_backlog: usize,
    /// Socket send and receive buffer sizes in bytes (the kernel may cap them). Default 4 MiB,
    /// from 64 KiB to 1 GiB (`SOCKET_BUFFER_MIN`, `SOCKET_BUFFER_MAX`).
    pub socket_buffer: usize,
    /// Message packing: datagrams for one destination produced in one turn of the loop are
    /// packed into bundles of at most this many bytes (one system call and one packet for many
    /// small messages). 0 turns packing off. Default 1452: one packet on an Ethernet path, even
    /// over IPv6.
    pub pack_max: usize,
    /// Batched sends: consecutive datagrams of one size for one destination in one turn (messages
    /// too large to pack, or full bundles) leave in one system call with UDP segmentation offload,
    /// where the kernel has it (Linux 4.18+). Default on; falls back to one call per datagram by
    /// itself when the kernel refuses.
    pub segment_offload: bool,
    /// Receive offload (`UDP_GRO`): a run of datagrams another member sent with segmentation
    /// offload arrives as one buffer, in one read. Off, the kernel splits the run on arrival, and
    /// a single read is a plain `recv` instead of the `recvmsg` that asks for the run's segment
    /// size: less work in the kernel on every read and every busy-polling spin, at the price of
    /// bulk throughput of large messages (docs/runtime.md, "Receive offload"). On means wanted:
    /// the socket starts without it and turns it on, for good, once its reads keep finding
    /// several datagrams queued (a request answered by one peer never does). `None` (the
    /// default): on, except with `busy_poll`, which asks for the lowest latency.
    pub receive_offload: Option<bool>,
    /// Connected sends: unicast datagrams leave through a socket connected to their destination
    /// (one per destination, at most 256 at a time), so the kernel keeps each route instead of
    /// looking it up on every send: about 0.75 µs less per round trip on one vCPU (docs/runtime.md,
    /// "Connected sends"). Datagrams then come from a port other than `bind`'s; nothing in Motet
    /// reads it, but turn this off where a firewall admits datagrams by their source port or only
    /// as replies to this member's own (stateful rules on the address pair). Default on.
    pub connected_sends: bool,
    /// IP multicast: casts go to this group address as one datagram, and discovery gossip goes
    /// there too (members on one LAN find each other without seeds). Every member of a group must
    /// use the same setting. `None` (the default): casts are unicast to each member.
    pub multicast: Option<MulticastConfig>,
    /// Testing aid: drop this fraction of received datagrams at random (0 by default), to
    /// exercise loss where the kernel has no `tc netem`. Counted in `RuntimeStats::injected_loss`.
    pub inject_loss: f64,
    /// How late, in milliseconds, an idle loop may fire a protocol timer (stability and failure
    /// detection sweeps every 100 ms, retransmission sweeps, the delay before a gap is NAKed).
    /// The slack lets a loop that watches one socket wait in the receive call, whose timeout the
    /// kernel keeps in whole jiffies, rather than in `epoll` then a read: one system call per
    /// datagram instead of two (docs/runtime.md, "Waiting"). A timer due now is never delayed, and
    /// a loop that receives datagrams checks its timers on every one. While they flow (one within
    /// the last millisecond), it waits in the receive call even closer to a periodic sweep's
    /// deadline (not one that an arrival or an action brought nearer, such as a gap's NAK): a
    /// sweep is then late beyond the slack only if the flow stops just before it, by at most the
    /// shortest receive timeout and the kernel's overshoot, counted from the deadline (about 8 ms
    /// at 250 Hz, 20 ms at 100 Hz; docs/runtime.md, "Timers"). 0: timers fire on time and the
    /// loop waits in `epoll` near them. Default 5, at most [`TIMER_SLACK_MAX_MS`].
    pub timer_slack_ms: u64,
    /// After a migration ([`crate::Runtime::migrate`]), how long the old socket is still read once
    /// every endpoint's view has the new address, in milliseconds: datagrams peers sent to the
    /// old address just before they installed that view (and their retransmissions) still
    /// arrive. Default 2000, at most 600,000 (ten minutes).
    pub migrate_grace_ms: u64,
}

/// The largest `event_queue`, `action_queue` and `send_backlog` a configuration may give (2^20,
/// 64 times the defaults): the threaded runtime's action channel allocates every slot up front,
/// and a member's events may fill its queue to the bound when it lags.
pub const QUEUE_MAX: usize = 1 << 20;

/// The largest `event_queue_bytes`: 1 GiB.
pub const EVENT_QUEUE_BYTES_MAX: usize = 1 << 30;

/// The smallest and largest [`RuntimeConfig::socket_buffer`] a configuration may give.
pub const SOCKET_BUFFER_MIN: usize = 64 << 10;
/// See `SOCKET_BUFFER_MIN`.
pub const SOCKET_BUFFER_MAX: usize = 1 << 30;

/// The largest [`RuntimeConfig::migrate_grace_ms`] (ten minutes).
pub const MIGRATE_GRACE_MAX_MS: u64 = 600_000;

/// The largest [`RuntimeConfig::timer_slack_ms`] a configuration may give: a tenth of the failure
/// detector's default timeout. More is no longer slack but a delay of every protocol timer.
pub const TIMER_SLACK_MAX_MS: u64 = 100;

impl Default for RuntimeConfig {
    fn default() -> RuntimeConfig {
        RuntimeConfig {
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            advertise: None,
            busy_poll: false,
            event_queue: 16_384,
            event_queue_bytes: 64 << 20,
            action_queue: 4_096,
            send_backlog: 16_384,
            socket_buffer: 4 << 20,
            inject_loss: 0.0,
            pack_max: 1452,
            segment_offload: true,
            receive_offload: None,
            connected_sends: true,
            multicast: None,
            migrate_grace_ms: 2000,
            timer_slack_ms: 5,
        }
    }
}

impl RuntimeConfig {
    /// The default configuration bound to `bind`.
    pub fn bind(bind: SocketAddr) -> RuntimeConfig {
        RuntimeConfig { bind, ..RuntimeConfig::default() }
    }

    /// Sets the advertised address.
    pub fn advertise(mut self, address: SocketAddr) -> RuntimeConfig {
        self.advertise = Some(address);
        self
    }

    /// Turns receive offload on or off (see [`RuntimeConfig::receive_offload`]).
    pub fn receive_offload(mut self, on: bool) -> RuntimeConfig {
        self.receive_offload = Some(on);
        self
    }

    /// Whether the sockets ask for receive offload: as set, or on unless busy-polling.
    pub fn receive_offload_on(&self) -> bool {
        self.receive_offload.unwrap_or(!self.busy_poll)
    }

    /// Turns busy-polling on or off.
    pub fn busy_poll(mut self, on: bool) -> RuntimeConfig {
        self.busy_poll = on;
        self
    }

    /// Sets how late an idle loop may fire a protocol timer ([`RuntimeConfig::timer_slack_ms`]).
    pub fn timer_slack(mut self, slack: Duration) -> RuntimeConfig {
        self.timer_slack_ms = u64::try_from(slack.as_millis()).unwrap_or(u64::MAX);
        self
    }

    pub(crate) fn validate(&self) -> Result<(), Error> {
        if self.event_queue == 0 || self.event_queue_bytes == 0 || self.action_queue == 0 || self.send_backlog == 0 {
            return Err(Error::Config(
                "event_queue, event_queue_bytes, action_queue and send_backlog must be at least 1".into(),
            ));
        }
        // The threaded runtime's action channel (`action_queue`) allocates every slot when it is
        // made, and a lagging member's events fill its queue to `event_queue`: a mistyped bound
        // would take gigabytes, or abort the process, rather than be refused here.
        for (name, value) in [
            ("event_queue", self.event_queue),
            ("action_queue", self.action_queue),
            ("send_backlog", self.send_backlog),
        ] {
            if value > QUEUE_MAX {
                return Err(Error::Config(format!(
                    "{name} {value} is above {QUEUE_MAX}: a queue may fill to its bound; give at most that"
                )));
            }
        }
        // The bytes of events held for a member that does not read bound its memory: beyond a
        // gigabyte the count (`event_queue`) alone does, up to 16,384 messages of 1 MiB.
        if self.event_queue_bytes > EVENT_QUEUE_BYTES_MAX {
            return Err(Error::Config(format!(
                "event_queue_bytes {} is above {EVENT_QUEUE_BYTES_MAX} (1 GiB): it bounds the memory of events a member has not read yet; give at most that",
                self.event_queue_bytes
            )));
        }
        // A bundle is one datagram: one larger than UDP carries fails every send (EMSGSIZE).
        if self.pack_max > motet_wire::DATAGRAM_SIZE_MAX {
            return Err(Error::Config(format!(
                "pack_max {} is above {}, the largest UDP datagram; 1452 (one Ethernet packet) is the default",
                self.pack_max,
                motet_wire::DATAGRAM_SIZE_MAX
            )));
        }
        // Timers this late are protocol delays, not slack: a failure detector's sweep 500 ms late
        // reads as this member's own stall (`suspect`), and NAKs and credit wait as long.
        if self.timer_slack_ms > TIMER_SLACK_MAX_MS {
            return Err(Error::Config(format!(
                "timer_slack_ms {} is above {TIMER_SLACK_MAX_MS}: it lets protocol timers fire that late; the default is 5",
                self.timer_slack_ms
            )));
        }
        if !(0.0..1.0).contains(&self.inject_loss) {
            return Err(Error::Config(format!("inject_loss {} must be in [0, 1)", self.inject_loss)));
        }
        if let Some(multicast) = &self.multicast {
            if !multicast.group.is_multicast() || multicast.port == 0 || !(1..=255).contains(&multicast.ttl) {
                return Err(Error::Config(format!(
                    "multicast {}:{} ttl {}: give a multicast group (224.0.0.0/4, e.g. 239.255.77.1), a port other than 0 and a ttl from 1 to 255",
                    multicast.group, multicast.port, multicast.ttl
                )));
            }
        }
        if let Some(advertise) = self.advertise {
            if advertise.ip().is_unspecified() || advertise.port() == 0 {
                return Err(Error::Config(format!(
                    "advertise address {advertise} must be a concrete IP and port other members can reach"
                )));
            }
            loopback_reaches(self.bind, advertise)?;
        }
        // The kernel takes the size as a C int (and doubles it); 0 shrinks the buffers to a few
        // KiB, which drops any burst.
        if !(SOCKET_BUFFER_MIN..=SOCKET_BUFFER_MAX).contains(&self.socket_buffer) {
            return Err(Error::Config(format!(
                "socket_buffer {} must be from {SOCKET_BUFFER_MIN} to {SOCKET_BUFFER_MAX} bytes; the default is 4194304",
                self.socket_buffer
            )));
        }
        // Retired sockets are read this long after a migration: for ever, they pile up.
        if self.migrate_grace_ms > MIGRATE_GRACE_MAX_MS {
            return Err(Error::Config(format!(
                "migrate_grace_ms {} is above {MIGRATE_GRACE_MAX_MS}: an old socket is kept that long after each migration; the default is 2000",
                self.migrate_grace_ms
            )));
        }
        Ok(())
    }
}

/// Refuses a socket bound to loopback that advertises another address: it cannot send to
/// another host (the kernel refuses with EINVAL, which the loop only logs), and the member would
/// sit alone. At the start and at a migration.
pub(crate) fn loopback_reaches(bind: SocketAddr, advertise: SocketAddr) -> Result<(), Error> {
    if bind.ip().is_loopback() && !advertise.ip().is_loopback() {
        return Err(Error::Config(format!(
            "bind address {bind} is a loopback address, from which nothing reaches {advertise}: bind the address to advertise, or 0.0.0.0:{}",
            advertise.port()
        )));
    }
    Ok(())
}

/// IP multicast settings (see [`RuntimeConfig::multicast`]).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct MulticastConfig {
    /// The IPv4 multicast group, e.g. 239.255.77.1 (administratively scoped).
    pub group: std::net::Ipv4Addr,
    /// The UDP port every member listens on for the group.
    pub port: u16,
    /// The interface to send and join on, by its address (default: the advertised address).
    #[serde(default)]
    pub interface: Option<std::net::Ipv4Addr>,
    /// Hops a multicast datagram may take (1: this subnet only).
    #[serde(default = "one")]
    pub ttl: u32,
}

fn one() -> u32 {
    1
}

/// One group to join. The stack is a preset, a property set or a layer list (see
/// `motet stack explain`); peers are `host:port` seeds where other members may be found (IP
/// literals or DNS names, re-resolved every `resolve_interval`, at least a second).
#[derive(Clone, Debug, PartialEq)]
pub struct GroupConfig {
    /// The group's name.
    pub name: String,
    /// The stack specification.
    pub stack: String,
    /// Protocol parameters, per layer: those of the member's first view, when it starts alone.
    /// A view carries its parameters, every member of the view runs them, and each view passes
    /// them on to the next; a merged view takes the granting (larger) partition's. So a member
    /// that joins a running group runs the group's parameters, whatever its own. Configure every
    /// member alike: one whose view runs other parameters logs a warning and counts it in
    /// [`crate::RuntimeStats::views_with_other_params`] (docs/runtime.md, "Protocol parameters").
    pub params: StackConfig,
    /// Seed addresses of other members.
    pub peers: Vec<String>,
    /// How often DNS names among the peers are resolved again (container platforms move
    /// members). Default 30 s.
    pub resolve_interval: Duration,
    /// This member joins as a client (client/server groups, Ensemble's `Cltsvr`): casts to the
    /// servers only (`cast_to_servers`) do not reach it. Default false (a server).
    pub client: bool,
    /// This member's application gets its own casts back (the default), or not: RMP's Message
    /// Bus `loop-back` flag (JGroups' `discardOwnMessages`, Spread's `SELF_DISCARD`). Off, its
    /// casts still take their place in the group's order and the other members see no
    /// difference; it only saves this member the delivery of what it sent.
    pub loopback: bool,
}

impl GroupConfig {
    /// A group called `name` on the `vsync` stack with no seeds.
    pub fn new(name: &str) -> GroupConfig {
        GroupConfig {
            name: name.to_string(),
            stack: "vsync".to_string(),
            params: StackConfig::default(),
            peers: Vec::new(),
            resolve_interval: Duration::from_secs(30),
            client: false,
            loopback: true,
        }
    }

    /// Joins as a client (or a server, the default).
    pub fn client(mut self, client: bool) -> GroupConfig {
        self.client = client;
        self
    }

    /// Whether the application gets its own casts back (default true).
    pub fn loopback(mut self, loopback: bool) -> GroupConfig {
        self.loopback = loopback;
        self
    }

    /// Sets the stack specification.
    pub fn stack(mut self, spec: &str) -> GroupConfig {
        self.stack = spec.to_string();
        self
    }

    /// Adds seed addresses.
    pub fn peers<I: IntoIterator<Item = S>, S: Into<String>>(mut self, peers: I) -> GroupConfig {
        // Trimmed: `"a:1, b:2"` split at the comma gives ` b:2`, which is no IP literal and was
        // looked up as a DNS name for ever.
        self.peers.extend(peers.into_iter().map(|p| p.into().trim().to_string()));
        self
    }

    /// Sets the protocol parameters.
    pub fn params(mut self, params: StackConfig) -> GroupConfig {
        self.params = params;
        self
    }

    /// The parsed and validated stack and group name.
    pub(crate) fn resolve_spec(&self) -> Result<(GroupName, StackSpec), Error> {
        if self.name.is_empty() {
            return Err(Error::Config("the group name is empty".into()));
        }
        let spec = StackSpec::parse(&self.stack)?;
        self.params.validate()?;
        // Each re-resolution is a DNS query from every member (on the lookup thread): a zero
        // interval would ask the servers again as soon as they answer.
        // One too long turns re-resolution off unnoticed (a day at most).
        if !(Duration::from_secs(1)..=Duration::from_secs(86_400)).contains(&self.resolve_interval) {
            return Err(Error::Config(format!(
                "resolve_interval ({} ms; `resolve_interval_ms` in a file) must be from 1000 to 86400000 ms: seed names are resolved again at most once a second, and at least once a day",
                self.resolve_interval.as_millis()
            )));
        }
        // A seed is `host:port`: without a port (or with port 0) it was taken for a DNS name
        // that never resolves, and reported every interval as a lookup failure.
        for peer in &self.peers {
            if peer.trim() != peer {
                return Err(Error::Config(format!(
                    "peer `{peer}` has spaces around it: give `{}` (a name with spaces is looked up in DNS, and never found)",
                    peer.trim()
                )));
            }
            // An IPv6 host is bracketed (`[fe80::1]:7001`): bare, `fe80::1` read as host `fe80:`
            // and port 1.
            let port = peer.rsplit_once(':').and_then(|(host, port)| {
                let bracketed = host.starts_with('[') && host.ends_with(']');
                (!host.is_empty() && (bracketed || !host.contains(':'))).then_some(port)
            });
            // A port of digits outside 1..=65535 is a port mistyped, not a missing one: say so.
            let digits = port.filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
            match (digits, port.and_then(|p| p.parse::<u16>().ok())) {
                (_, Some(p)) if p != 0 => {}
                (Some(digits), _) => {
                    return Err(Error::Config(format!(
                        "peer `{peer}`: port {digits} is out of range: give a port from 1 to 65535"
                    )))
                }
                _ => {
                    return Err(Error::Config(format!(
                        "peer `{peer}` needs a host and a port, as in `10.0.0.6:7001` or `motet-0.motet:7001`"
                    )))
                }
            }
        }
        Ok((GroupName::new(&self.name), spec))
    }

    /// Checks the group's settings as [`crate::Runtime::join`] does (the name, the stack and
    /// that the runtime can run it, the protocol parameters, the seeds), for a tool that wants
    /// its configuration errors before it starts anything. The checks that need the member's
    /// own address (a seed it cannot reach) come with [`FileConfig::validate`] and at the join.
    pub fn validate(&self) -> Result<(), Error> {
        let (_, spec) = self.resolve_spec()?;
        crate::merges(&spec, &self.stack)
    }
}

/// Refuses IP-literal seeds that a member at `own` can never reach: another host's from a
/// loopback address (the kernel refuses every send from a loopback socket to another host, and
/// the loop only logs it), and a list whose every seed is an IP literal of the other family (an
/// IPv4 socket cannot send to an IPv6 address: the member sat alone for good). A list that mixes
/// families keeps working, those of the other family left out with a warning
/// (`event_loop::resolve`): one file may serve IPv4 and IPv6 hosts alike. DNS names are looked
/// up later, and warned about then. At the join, and in [`FileConfig::validate`] with the
/// address the file gives.
pub(crate) fn seeds_reachable(own: SocketAddr, peers: &[String]) -> Result<(), Error> {
    let literals: Vec<(&String, SocketAddr)> =
        peers.iter().filter_map(|peer| Some((peer, peer.parse::<SocketAddr>().ok()?))).collect();
    for &(peer, address) in &literals {
        if address.is_ipv4() == own.is_ipv4() && own.ip().is_loopback() && !address.ip().is_loopback() {
            return Err(Error::Config(format!(
                "this member's address {own} is a loopback address, which seed {peer} on another host cannot reach: bind a reachable address (`--bind 0.0.0.0:PORT --advertise IP:PORT`, or `bind` and `advertise` in [runtime])"
            )));
        }
    }
    let names = peers.len() - literals.len();
    let usable = literals.iter().filter(|(_, address)| address.is_ipv4() == own.is_ipv4()).count();
    if let (0, 0, Some((peer, _))) = (names, usable, literals.first()) {
        let (theirs, ours) = if own.is_ipv4() { ("IPv6", "IPv4") } else { ("IPv4", "IPv6") };
        return Err(Error::Config(format!(
            "seed {peer} is {theirs} and this member's address {own} is {ours}, as every seed is: its socket cannot send to any of them; give {ours} seeds, or bind an {theirs} address (`--bind`, or `bind` in [runtime])"
        )));
    }
    Ok(())
}

/// A whole configuration file: `[runtime]` and one `[group]`.
#[derive(Clone, Debug, PartialEq)]
pub struct FileConfig {
    /// The `[runtime]` table.
    pub runtime: RuntimeConfig,
    /// The `[group]` table.
    pub group: GroupConfig,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileToml {
    #[serde(default)]
    runtime: RuntimeConfig,
    // Optional in the text: `motet member --config` may take the name (or the whole group) from
    // its flags. `from_toml` requires it.
    #[serde(default)]
    group: GroupToml,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GroupToml {
    #[serde(default)]
    name: String,
    #[serde(default = "vsync")]
    stack: String,
    #[serde(default)]
    peers: Vec<String>,
    #[serde(default)]
    resolve_interval_ms: Option<u64>,
    #[serde(default)]
    client: bool,
    #[serde(default = "yes")]
    loopback: bool,
    #[serde(default)]
    params: StackConfig,
}

impl Default for GroupToml {
    fn default() -> GroupToml {
        GroupToml {
            name: String::new(),
            stack: vsync(),
            peers: Vec::new(),
            resolve_interval_ms: None,
            client: false,
            loopback: true,
            params: StackConfig::default(),
        }
    }
}

fn vsync() -> String {
    "vsync".to_string()
}

fn yes() -> bool {
    true
}

impl FileConfig {
    /// Parses and validates a TOML configuration ([`FileConfig::parse_toml`], then
    /// [`FileConfig::validate`]). Unknown keys are errors (a misspelt key must not be ignored),
    /// and so is a file that names no group.
    pub fn from_toml(text: &str) -> Result<FileConfig, Error> {
        let file = FileConfig::parse_toml(text)?;
        if file.group.name.is_empty() {
            return Err(Error::Config("the file names no group: give `name = \"...\"` in its [group] table".into()));
        }
        file.validate()?;
        Ok(file)
    }

    /// Parses a TOML configuration without validating its values, for a tool that lets other
    /// settings override the file's (`motet member`'s flags) and then calls
    /// [`FileConfig::validate`] once on the result: a value the override replaces must not be
    /// refused. Unknown keys and values of the wrong type are still errors. `[group]` and its
    /// `name` may be missing (the name is then empty).
    pub fn parse_toml(text: &str) -> Result<FileConfig, Error> {
        let file: FileToml = toml::from_str(text).map_err(|e| Error::Config(e.to_string()))?;
        let mut group = GroupConfig::new(&file.group.name)
            .stack(&file.group.stack)
            .peers(file.group.peers)
            .client(file.group.client)
            .loopback(file.group.loopback)
            .params(file.group.params);
        if let Some(ms) = file.group.resolve_interval_ms {
            group.resolve_interval = Duration::from_millis(ms);
        }
        Ok(FileConfig { runtime: file.runtime, group })
    }

    /// Checks the whole configuration as [`crate::Runtime::start`] and [`crate::Runtime::join`]
    /// will: the runtime's settings, the group's ([`GroupConfig::validate`]), and that its IP
    /// literal seeds are reachable from the advertised (else the bound) address.
    pub fn validate(&self) -> Result<(), Error> {
        self.runtime.validate()?;
        self.group.validate()?;
        seeds_reachable(self.runtime.advertise.unwrap_or(self.runtime.bind), &self.group.peers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_file_parses_and_rejects_unknown_keys() {
        let text = "[runtime]\nbind = \"127.0.0.1:7001\"\nbusy_poll = true\n\n[group]\nname = \"g\"\npeers = [\"127.0.0.1:7002\"]\n";
        let config = FileConfig::from_toml(text).unwrap();
        assert_eq!(config.runtime.bind, "127.0.0.1:7001".parse().unwrap());
        assert!(config.runtime.busy_poll);
        assert_eq!(config.group.stack, "vsync");
        assert_eq!(config.group.peers, ["127.0.0.1:7002"]);
        assert!(config.group.loopback, "a member gets its own casts back unless it says otherwise");
        let off = FileConfig::from_toml("[group]\nname = \"g\"\nloopback = false\n").unwrap();
        assert!(!off.group.loopback);
        let err = FileConfig::from_toml("[group]\nname = \"g\"\nstak = \"fifo\"\n").unwrap_err();
        assert!(err.to_string().contains("stak"), "{err}");
        let err = FileConfig::from_toml("[group]\nname = \"g\"\nstack = \"nosuch\"\n").unwrap_err();
        assert!(err.to_string().contains("nosuch"), "{err}");
    }

    #[test]
    fn toml_sets_protocol_parameters_per_layer_and_keeps_the_defaults_of_the_rest() {
        let text =
            "[group]\nname = \"g\"\n[group.params.suspect]\ntimeout_ms = 3000\nall_to_all = true\n[group.params.mflow]\nwindow_bytes = 1048576\n";
        let params = FileConfig::from_toml(text).unwrap().group.params;
        assert_eq!(params.suspect.timeout, motet_core::Duration::from_millis(3000));
        assert!(params.suspect.all_to_all);
        assert_eq!(params.mflow.window_bytes, 1 << 20);
        let defaults = StackConfig::default();
        assert_eq!(params.suspect.sweep_interval, defaults.suspect.sweep_interval);
        assert_eq!(params.mflow.pending_max, defaults.mflow.pending_max);
        assert_eq!(params.mnak, defaults.mnak);
        let none = FileConfig::from_toml("[group]\nname = \"g\"\n").unwrap().group.params;
        assert_eq!(none, defaults);
    }

    #[test]
    fn a_peer_without_a_port_and_multicast_settings_out_of_range_are_refused() {
        for peer in ["seed1", "10.0.0.6", "", ":7001", "host:port", "fe80::1", "::1:7001", "h:-1"] {
            let err = GroupConfig::new("g").peers([peer]).resolve_spec().unwrap_err().to_string();
            assert!(err.contains(&format!("peer `{peer}` needs a host and a port")), "{err}");
        }
        // A port given but out of range says so (it said the port was missing).
        for (peer, port) in
            [("127.0.0.1:99999", "99999"), ("10.0.0.6:0", "0"), ("h:123456789012345678901", "123456789012345678901")]
        {
            let err = GroupConfig::new("g").peers([peer]).resolve_spec().unwrap_err().to_string();
            assert!(
                err.contains(&format!("peer `{peer}`: port {port} is out of range: give a port from 1 to 65535")),
                "{err}"
            );
        }
        let good = GroupConfig::new("g").peers(["10.0.0.6:7001", "motet-0.motet:7001", "[::1]:7001"]);
        assert!(good.resolve_spec().is_ok());
        let multicast = |group: &str, port, ttl| RuntimeConfig {
            multicast: Some(MulticastConfig { group: group.parse().unwrap(), port, interface: None, ttl }),
            ..RuntimeConfig::default()
        };
        for config in
            [multicast("10.0.0.1", 7500, 1), multicast("239.255.77.1", 0, 1), multicast("239.255.77.1", 7500, 0)]
        {
            assert!(config.validate().unwrap_err().to_string().contains("give a multicast group"));
        }
        let err = multicast("239.255.77.1", 7500, 256).validate().unwrap_err().to_string();
        assert!(err.contains("ttl 256") && err.contains("from 1 to 255"), "{err}");
        assert!(multicast("239.255.77.1", 7500, 255).validate().is_ok());
    }

    #[test]
    fn a_resolve_interval_under_a_second_or_over_a_day_is_refused() {
        let mut group = GroupConfig::new("g");
        group.resolve_interval = Duration::ZERO;
        let err = group.resolve_spec().unwrap_err().to_string();
        assert!(err.contains("resolve_interval_ms") && err.contains("from 1000"), "{err}");
        group.resolve_interval = Duration::from_secs(1);
        assert!(group.resolve_spec().is_ok());
        group.resolve_interval = Duration::from_secs(86_401);
        assert!(group.resolve_spec().is_err());
    }

    /// Settings that leave a member silently cut off or its memory unbounded are refused, with
    /// what to give instead (a review's findings): a loopback bind advertising another address
    /// (the kernel refuses every send from it), a socket buffer of nothing or past a C int, a
    /// grace after migration that keeps old sockets for ever, and peers with spaces around them
    /// (looked up in DNS for ever), which the builder trims.
    #[test]
    fn settings_that_cut_a_member_off_are_refused() {
        let err = RuntimeConfig::default().advertise("10.0.0.5:7001".parse().unwrap()).validate().unwrap_err();
        assert!(err.to_string().contains("bind the address to advertise"), "{err}");
        assert!(RuntimeConfig::default().advertise("127.0.0.2:7001".parse().unwrap()).validate().is_ok());
        let bound = RuntimeConfig::bind("0.0.0.0:7001".parse().unwrap());
        assert!(bound.advertise("10.0.0.5:7001".parse().unwrap()).validate().is_ok());
        for size in [0, SOCKET_BUFFER_MAX + 1] {
            let err = RuntimeConfig { socket_buffer: size, ..RuntimeConfig::default() }.validate().unwrap_err();
            assert!(err.to_string().contains("socket_buffer"), "{err}");
        }
        let err = RuntimeConfig { migrate_grace_ms: u64::MAX, ..RuntimeConfig::default() }.validate().unwrap_err();
        assert!(err.to_string().contains("migrate_grace_ms"), "{err}");
        assert_eq!(GroupConfig::new("g").peers(["10.0.0.6:7001", " 10.0.0.7:7001"]).peers[1], "10.0.0.7:7001");
        let mut group = GroupConfig::new("g");
        group.peers = vec![" 10.0.0.7:7001".into()];
        assert!(group.resolve_spec().unwrap_err().to_string().contains("give `10.0.0.7:7001`"));
    }

    #[test]
    fn a_misspelt_layer_or_parameter_and_an_invalid_value_are_errors_that_name_them() {
        let err =
            |text: &str| FileConfig::from_toml(&format!("[group]\nname = \"g\"\n{text}")).unwrap_err().to_string();
        assert!(err("[group.params.mnack]\nnak_delay_ms = 5\n").contains("mnack"));
        // A duration without its unit suffix is unknown: the unit is part of the name.
        assert!(err("[group.params.mnak]\nnak_delay = 5\n").contains("nak_delay"));
        assert!(err("[group.params.mnak]\nnak_delay_ms = -1\n").contains("nak_delay_ms"));
        assert!(err("[group.params.mnak]\nnak_delay_ms = 18446744073710\n").contains("longer than Motet's clock"));
        assert!(err("[group.params.mflow]\nwindow_bytes = 127\n").contains("mflow.window_bytes must be at least 128"));
        assert!(err("[group.params.pt2ptw]\nwindow_bytes = 1048577\n")
            .contains("pt2ptw.window_bytes must be at most 1048576"));
        // A receiver must hold what a window lets out ahead of a gap.
        assert!(err("[group.params.mnak]\nrecv_window_max = 100\n")
            .contains("mnak.recv_window_max (100) must hold the messages a mflow window lets out"));
        // Windows counted messages until the twenty-sixth session: the old name is an error, not
        // a window of a few bytes.
        assert!(err("[group.params.mflow]\nwindow = 256\n").contains("unknown field `window`"));
        assert!(err("[group.params.frag]\nfrag_size = 65000\n").contains("frag.frag_size must be between 1 and 61411"));
        assert!(err("[group.params.stable]\nsweep_interval_ms = 0\n")
            .contains("stable.sweep_interval_ms must be at least 1 ms"));
        assert!(
            err("[group.params.suspect]\ntimeout_ms = 100\n").contains("at least 3 times suspect.sweep_interval_ms")
        );
        assert!(err("[group.params.intra]\ncommit_timeout_ms = 3500\n")
            .contains("must be at least 1000 ms longer than merge.merge_timeout_ms (3000 ms)"));
        assert!(err("[group.params.intra]\nflush_timeout_ms = 1000\n")
            .contains("intra.flush_timeout_ms (1000 ms) must be longer than suspect.timeout_ms (1000 ms)"));
        assert!(err("[group.params.safe]\nack_timeout_ms = 500\n")
            .contains("safe.ack_timeout_ms (500 ms) must be longer than suspect.timeout_ms (1000 ms)"));
        assert!(err("[group.params.mnak]\nretransmit_max = 0\n").contains("mnak.retransmit_max must be at least 1"));
        assert!(err("[group.params.mflow]\ncredit_timeout_ms = 800\n")
            .contains("mflow.credit_timeout_ms (800 ms) must be longer than suspect.timeout_ms (1000 ms)"));
        assert!(err("[group.params.pt2ptw]\ncredit_timeout_ms = 1000000\nlag_report_interval_ms = 600000\n")
            .contains("and twice pt2ptw.lag_report_interval_ms (600000 ms)"));
        assert!(err("[group.params.mflow]\nlag_trickle_bytes = 1\n")
            .contains("mflow.lag_trickle_bytes (1) must be at least a fragment's cost"));
        // Maxima (parameters also come with other members' views): a bound turned off by one
        // wrong value is refused.
        assert!(err("[group.params.suspect]\ntimeout_ms = 86400000\n")
            .contains("suspect.timeout_ms must be at most 3600000 ms"));
        assert!(err("[group.params.top]\nlinger_ms = 600000\n").contains("top.linger_ms must be at most 60000 ms"));
        // The failure timeout said to be too long itself, not the flush timeout that must exceed it.
        assert!(err("[group.params.suspect]\ntimeout_ms = 3600000\n").contains("suspect.timeout_ms must be less than"));
        assert!(err("[group.params.mnak]\nretransmit_max = 100000\n")
            .contains("mnak.retransmit_max (100000) must be at most 4096"));
        assert!(err("[group.params.mnak]\nretransmit_rate = 1000\n").contains(
            "mnak.retransmit_rate (1000 a second) must let at least mnak.retransmit_max (256) through each mnak.sweep_interval_ms (50 ms): at least 5120 a second"
        ));
        assert!(err("[group.params.pt2pt]\nretransmit_rate = 0\n").contains("pt2pt.retransmit_rate must be at least 1"));
        assert!(err("[group.params.suspect]\nsweep_interval_ms = 400\n")
            .contains("suspect.timeout_ms (1000 ms) must be at least 3 times suspect.sweep_interval_ms (400 ms)"));
        assert!(err("[group.params.mnak]\nrecv_window_max = 100000000\n")
            .contains("mnak.recv_window_max (100000000) must be at most 65536"));
        assert!(err("[group.params.appl]\nmessage_size_max = 1000000000000\n").contains("appl.message_size_max"));
        // Delays that hold every repair or delivery past the failure timeout (a review's finding:
        // they had no bound at all).
        for key in ["mnak]\nnak_delay_ms", "pt2pt]\nnak_delay_ms", "sequencer]\norder_delay_ms", "safe]\nack_delay_ms"]
        {
            let text = err(&format!("[group.params.{key} = 86400000\n"));
            assert!(text.contains("must be shorter than suspect.timeout_ms (1000 ms)"), "{text}");
        }
    }

    /// A queue bound past `QUEUE_MAX` is refused with the bound named, not taken.
    #[test]
    fn queue_bounds_and_bundles_past_the_maximum_are_refused() {
        let text = "[runtime]\nevent_queue = 4000000000\n[group]\nname = \"g\"\n";
        let err = FileConfig::from_toml(text).unwrap_err().to_string();
        assert!(err.contains("event_queue 4000000000 is above 1048576"), "{err}");
        for config in [
            RuntimeConfig { action_queue: QUEUE_MAX + 1, ..RuntimeConfig::default() },
            RuntimeConfig { send_backlog: QUEUE_MAX + 1, ..RuntimeConfig::default() },
        ] {
            assert!(config.validate().is_err());
        }
        assert!(RuntimeConfig { event_queue: QUEUE_MAX, ..RuntimeConfig::default() }.validate().is_ok());
        let bytes = RuntimeConfig { event_queue_bytes: EVENT_QUEUE_BYTES_MAX + 1, ..RuntimeConfig::default() };
        assert!(bytes.validate().unwrap_err().to_string().contains("event_queue_bytes 1073741825 is above"));
        // Nor may a bundle be larger than a datagram.
        let err = RuntimeConfig { pack_max: 70_000, ..RuntimeConfig::default() }.validate().unwrap_err();
        assert!(err.to_string().contains("pack_max 70000 is above"), "{err}");
        assert!(RuntimeConfig { pack_max: motet_wire::DATAGRAM_SIZE_MAX, ..RuntimeConfig::default() }
            .validate()
            .is_ok());
        // Nor timers allowed to fire so late that a failure detector takes it for a stall.
        let err = RuntimeConfig { timer_slack_ms: 500, ..RuntimeConfig::default() }.validate().unwrap_err();
        assert!(err.to_string().contains("timer_slack_ms 500 is above 100"), "{err}");
        assert!(RuntimeConfig { timer_slack_ms: TIMER_SLACK_MAX_MS, ..RuntimeConfig::default() }.validate().is_ok());
    }

    /// A file is parsed apart from its validation, so that a tool's overrides come first: a
    /// loopback bind under a remote `advertise`, a misspelt stack and a missing group name are
    /// refused by `from_toml` and by `validate`, not by `parse_toml` (`motet member` refused a
    /// file for values its flags replaced: a review's finding).
    #[test]
    fn a_file_is_parsed_apart_from_its_validation() {
        let text = "[runtime]\nadvertise = \"10.1.2.3:47911\"\n[group]\nstack = \"vsnyc\"\n";
        let err = FileConfig::from_toml(text).unwrap_err().to_string();
        assert!(err.contains("names no group"), "{err}");
        let mut file = FileConfig::parse_toml(text).unwrap();
        assert!(file.validate().is_err());
        file.group.name = "g".into();
        assert!(file.validate().unwrap_err().to_string().contains("bind the address to advertise"));
        file.runtime.bind = "0.0.0.0:47911".parse().unwrap();
        assert!(file.validate().unwrap_err().to_string().contains("vsnyc"));
        file.group.stack = "vsync".into();
        file.validate().unwrap();
        // No [group] at all parses too; unknown keys are still refused at once.
        assert_eq!(FileConfig::parse_toml("[runtime]\nbusy_poll = true\n").unwrap().group.name, "");
        assert!(FileConfig::parse_toml("[runtime]\nbusy_pol = true\n").unwrap_err().to_string().contains("busy_pol"));
    }

    /// Seeds that are all IP literals of the other family than the member's address, or one on
    /// another host from a loopback address, are refused: the member could never send to them
    /// (the first were only warned about at run time, and the member sat alone for good).
    #[test]
    fn seeds_a_member_can_never_reach_are_refused() {
        let peers = |p: &[&str]| p.iter().map(|p| p.to_string()).collect::<Vec<_>>();
        let v4: SocketAddr = "10.0.0.5:7001".parse().unwrap();
        let err = seeds_reachable(v4, &peers(&["[fe80::1]:7001", "[fe80::2]:7001"])).unwrap_err().to_string();
        assert!(err.contains("seed [fe80::1]:7001 is IPv6 and this member's address 10.0.0.5:7001 is IPv4"), "{err}");
        // A list that mixes families passes (one file for IPv4 and IPv6 hosts; the other
        // family's are left out with a warning), as does one with a name besides.
        seeds_reachable(v4, &peers(&["10.0.0.6:7001", "[fe80::1]:7001"])).unwrap();
        seeds_reachable(v4, &peers(&["[fe80::1]:7001", "seeds.example:7001"])).unwrap();
        let loopback: SocketAddr = "127.0.0.1:7001".parse().unwrap();
        seeds_reachable(loopback, &peers(&["127.0.0.2:7001", "[fd00::6]:7001"])).unwrap();
        let v6: SocketAddr = "[2001:db8::5]:7001".parse().unwrap();
        let err = seeds_reachable(v6, &peers(&["10.0.0.6:7001"])).unwrap_err().to_string();
        assert!(err.contains("is IPv4 and this member's address [2001:db8::5]:7001 is IPv6"), "{err}");
        assert!(seeds_reachable(loopback, &peers(&["10.0.0.6:7001"])).unwrap_err().to_string().contains("loopback"));
        // Names are looked up later (and warned about then); same-family seeds pass.
        seeds_reachable(loopback, &peers(&["127.0.0.2:7001", "seeds.example:7001"])).unwrap();
        seeds_reachable(v4, &peers(&["10.0.0.6:7001", "seeds.example:7001"])).unwrap();
        // The file's check takes the advertised address, else the bound one.
        let mut file = FileConfig::parse_toml("[group]\nname = \"g\"\npeers = [\"[::1]:7001\"]\n").unwrap();
        assert!(file.validate().unwrap_err().to_string().contains("is IPv6"));
        file.runtime.bind = "[::1]:0".parse().unwrap();
        file.validate().unwrap();
    }

    #[test]
    fn advertise_must_be_reachable() {
        let config = RuntimeConfig::default().advertise("0.0.0.0:7001".parse().unwrap());
        assert!(config.validate().unwrap_err().to_string().contains("concrete"));
    }
}
