//! Connected send sockets: unicast datagrams leave through a UDP socket connected to their
//! destination, one per destination, instead of through the shared socket with an address on
//! each send (docs/runtime.md, "Connected sends").
//!
//! Why: the kernel looks up the route of every datagram sent from an unconnected socket, and keeps
//! it with the socket once it is connected. A loopback ping-pong of 64-byte datagrams on one vCPU
//! took 11.13 µs per round trip sending from unconnected sockets and 10.37 µs sending through
//! sockets connected to the peer, receiving on the unconnected one in both cases as the runtime
//! does (`examples/udp_pingpong.rs`): about 0.75 µs per round trip, a fifth of what Motet added to
//! raw UDP there. Aeron sends through a connected socket per destination for the same reason.
//!
//! The sockets only send: they bind the shared socket's IP with a port of their own, and nothing
//! is read from them. Nothing in Motet reads a datagram's source address (a datagram says who sent
//! it), so peers answer at the advertised address as before. Multicast destinations, and
//! destinations of the other address family, use the shared socket.
//!
//! The shared socket stays the fallback, so no datagram is lost that it would have sent:
//! - a send that fails on a connected socket goes out through the shared one. A connected socket
//!   reports on its next send the ICMP errors earlier datagrams drew (a member that stopped, a
//!   smaller path MTU), failing that send; any other error (its source address went away, a
//!   firewall refuses the destination) closes the socket, and a new one is tried after
//!   [`RETRY_AFTER`] sends, as for one that could not be made;
//! - a connected socket whose buffer is full hands the datagram to the shared one;
//! - at most [`CONNECTED_MAX`] destinations have a socket at a time. A new destination takes the
//!   place of the least recently used only if that one has been idle for [`IDLE_EVICT`] sends;
//!   otherwise it uses the shared socket. A group larger than the table does not thrash (making
//!   and closing a socket per datagram); its extra destinations send as before;
//! - a socket that cannot be made (out of descriptors) is tried again after [`RETRY_AFTER`]
//!   sends to that destination went through the shared one.

use crate::slots::AddrSlots;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io;
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6};

/// Destinations with a connected socket at one time.
pub(crate) const CONNECTED_MAX: usize = 256;

/// Sends (to any destination) a socket must have gone unused before a new destination takes its
/// place in a full table.
pub(crate) const IDLE_EVICT: u64 = 4 * CONNECTED_MAX as u64;

/// Sends to a destination whose socket could not be made before it is tried again.
pub(crate) const RETRY_AFTER: u64 = 4096;

/// One destination's socket: `None` while making it failed (the shared socket sends), with the
/// send count at its last use.
struct Entry {
    socket: Option<Socket>,
    used: u64,
}

/// The connected send sockets of one shared socket.
pub(crate) struct Connected {
    /// What they bind: the shared socket's IP (and IPv6 scope), a port of their own.
    local: SocketAddr,
    /// Their send buffer size.
    buffer: usize,
    /// The destinations' entries (`crate::slots`: `Connected::get` went from 130 to 76
    /// instructions a send, measured on a round trip, against a search of an ordered map).
    slots: AddrSlots<Entry>,
    /// Sends so far: the recency of the entries.
    uses: u64,
    /// [`CONNECTED_MAX`], or less in tests.
    limit: usize,
    /// While the table is full, the send count before which no entry can have been idle for
    /// [`IDLE_EVICT`] sends (the least recent use only grows): a group larger than the table
    /// does not search it on every send to a destination without a socket.
    full_until: u64,
    /// Datagrams for a unicast destination that the shared socket sent instead (a full table, a
    /// failed or full connected socket, a socket that could not be made).
    fallbacks: u64,
}

impl Connected {
    /// Connected sockets for the shared socket bound to `local`, with send buffers of `buffer`.
    pub(crate) fn new(local: SocketAddr, buffer: usize) -> Connected {
        let local = match local {
            SocketAddr::V4(v4) => SocketAddr::V4(SocketAddrV4::new(*v4.ip(), 0)),
            SocketAddr::V6(v6) => SocketAddr::V6(SocketAddrV6::new(*v6.ip(), 0, 0, v6.scope_id())),
        };
        Connected {
            local,
            buffer,
            slots: AddrSlots::default(),
            uses: 0,
            limit: CONNECTED_MAX,
            full_until: 0,
            fallbacks: 0,
        }
    }

    /// The socket connected to `to`, made on first use; `None` when the shared socket sends
    /// instead (multicast, the other address family, a full table, a socket that could not be
    /// made).
    pub(crate) fn get(&mut self, to: SocketAddr) -> Option<&Socket> {
        if to.ip().is_multicast() || to.is_ipv4() != self.local.is_ipv4() {
            return None;
        }
        self.uses += 1;
        let uses = self.uses;
        let slot = match self.slots.find(to) {
            Some(slot) => slot,
            None => self.make(to, uses)?,
        };
        let entry = &mut self.slots[slot].1;
        if entry.socket.is_none() && uses - entry.used >= RETRY_AFTER {
            // Tried again; if it fails again, again after `RETRY_AFTER` sends.
            *entry = Entry { socket: connect_or_say(self.local, to, self.buffer), used: uses };
        }
        match entry.socket {
            Some(_) => entry.used = uses,
            None => self.fallbacks += 1,
        }
        entry.socket.as_ref()
    }

    /// A slot for `to`, which has none, with its socket made; `None` when the table is full and
    /// no entry has been idle long enough to make room (the shared socket sends).
    fn make(&mut self, to: SocketAddr, uses: u64) -> Option<usize> {
        if self.slots.len() >= self.limit && !self.evict_idle(uses) {
            self.fallbacks += 1;
            return None;
        }
        Some(self.slots.insert(to, Entry { socket: connect_or_say(self.local, to, self.buffer), used: uses }))
    }

    /// Makes room in a full table: closes the least recently used socket if it has been idle for
    /// [`IDLE_EVICT`] sends. False if none has; then none can have been before `full_until`, and
    /// the table is not searched again until then.
    fn evict_idle(&mut self, uses: u64) -> bool {
        if uses < self.full_until {
            return false;
        }
        let Some(&(oldest, Entry { used, .. })) = self.slots.iter().min_by_key(|(_, e)| e.used) else { return true };
        if uses - used < IDLE_EVICT {
            self.full_until = used + IDLE_EVICT;
            return false;
        }
        self.slots.remove(oldest);
        true
    }

    /// A send through `to`'s socket failed with `error` (the shared socket sends the datagram).
    /// An ICMP report leaves the socket as it is (the report is consumed); anything else closes
    /// it, and the shared socket sends to `to` until a new one is tried, [`RETRY_AFTER`] sends
    /// later, as for a socket that could not be made. (Until the thirty-second session the next
    /// datagram made a new one: an error that lasts, such as a firewall's `EPERM` for one
    /// destination, cost a socket made, connected and closed, about eight system calls, on every
    /// datagram to it.)
    pub(crate) fn failed(&mut self, to: SocketAddr, error: &io::Error) {
        self.fallbacks += 1;
        if is_reported_icmp(error) {
            return;
        }
        tracing::debug!(%to, %error, "connected send failed; the shared socket sends for a while");
        if let Some(slot) = self.slots.find(to) {
            self.slots[slot].1 = Entry { socket: None, used: self.uses };
        }
    }

    /// A connected socket's buffer was full: the shared socket sends the datagram.
    pub(crate) fn full(&mut self) {
        self.fallbacks += 1;
    }

    /// Sends handed to the shared socket in place of a connected one (tries; see `RuntimeStats`).
    pub(crate) fn fallbacks(&self) -> u64 {
        self.fallbacks
    }

    /// Destinations with an open connected socket.
    pub(crate) fn open(&self) -> usize {
        self.slots.iter().filter(|(_, e)| e.socket.is_some()).count()
    }

    /// Destinations that have an entry (a socket, or one that could not be made).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    #[cfg(test)]
    pub(crate) fn set_limit(&mut self, limit: usize) {
        self.limit = limit;
    }
}

/// [`connect`], or `None` (said at debug level): the shared socket sends instead.
fn connect_or_say(local: SocketAddr, to: SocketAddr, buffer: usize) -> Option<Socket> {
    connect(local, to, buffer)
        .inspect_err(|e| tracing::debug!(%to, error = %e, "no connected socket; sending from the shared one"))
        .ok()
}

/// A non-blocking UDP socket bound to `local` and connected to `to`.
fn connect(local: SocketAddr, to: SocketAddr, buffer: usize) -> io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(to), Type::DGRAM, Some(Protocol::UDP))?;
    socket.set_nonblocking(true)?;
    // Failing to size the buffers is not fatal. Nothing is read: its receive buffer stays small.
    let _ = socket.set_send_buffer_size(buffer);
    let _ = socket.set_recv_buffer_size(0);
    socket.bind(&SockAddr::from(local))?;
    socket.connect(&SockAddr::from(to))?;
    Ok(socket)
}

/// Whether a send on a connected socket failed only to report an ICMP error an earlier datagram
/// to that destination drew (a member that stopped, a host or network unreachable for a while,
/// a smaller path MTU, a prohibited destination). Unconnected sockets never report these.
pub(crate) fn is_reported_icmp(error: &io::Error) -> bool {
    use nix::errno::Errno;
    matches!(
        error.raw_os_error().map(Errno::from_raw),
        Some(
            Errno::ECONNREFUSED
                | Errno::EHOSTUNREACH
                | Errno::ENETUNREACH
                | Errno::EHOSTDOWN
                | Errno::EMSGSIZE
                | Errno::EPROTO
                | Errno::ENOPROTOOPT
                | Errno::EACCES
        )
    )
}
