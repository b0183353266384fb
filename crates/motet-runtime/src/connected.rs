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
//! destinations of the other address family, use the shared socket. At most
//! [`CONNECTED_MAX`] destinations have one at a time (the least recently used is closed for a
//! new one), so a process's descriptors stay bounded however many peers come and go.

use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;

/// Destinations with a connected socket at one time.
pub(crate) const CONNECTED_MAX: usize = 256;

/// The connected send sockets of one shared socket.
pub(crate) struct Connected {
    /// What they bind: the shared socket's IP, a port of their own.
    local: SocketAddr,
    /// Their send buffer size.
    buffer: usize,
    /// Per destination: its socket (`None` when making it failed: the shared socket sends), and
    /// when it was last used.
    sockets: BTreeMap<SocketAddr, (Option<Socket>, u64)>,
    /// Sends so far: the recency of the entries.
    uses: u64,
    /// [`CONNECTED_MAX`], or less in tests.
    limit: usize,
}

impl Connected {
    /// Connected sockets for the shared socket bound to `local`, with send buffers of `buffer`.
    pub(crate) fn new(local: SocketAddr, buffer: usize) -> Connected {
        Connected { local, buffer, sockets: BTreeMap::new(), uses: 0, limit: CONNECTED_MAX }
    }

    /// The socket connected to `to`, made on first use; `None` when `to` gets none (multicast,
    /// the other address family, or the socket could not be made: the shared socket sends).
    pub(crate) fn get(&mut self, to: SocketAddr) -> Option<&Socket> {
        if to.ip().is_multicast() || to.is_ipv4() != self.local.is_ipv4() {
            return None;
        }
        self.uses += 1;
        if !self.sockets.contains_key(&to) {
            if self.sockets.len() >= self.limit {
                let oldest = self.sockets.iter().min_by_key(|(_, (_, used))| *used).map(|(&a, _)| a);
                oldest.map(|a| self.sockets.remove(&a));
            }
            let socket = connect(self.local, to, self.buffer)
                .inspect_err(|e| tracing::debug!(%to, error = %e, "no connected socket; sending from the shared one"))
                .ok();
            self.sockets.insert(to, (socket, 0));
        }
        let (socket, used) = self.sockets.get_mut(&to).expect("made above");
        *used = self.uses;
        socket.as_ref()
    }

    /// Destinations that have a socket (open or failed).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.sockets.len()
    }

    #[cfg(test)]
    pub(crate) fn set_limit(&mut self, limit: usize) {
        self.limit = limit;
    }
}

/// A non-blocking UDP socket bound to `local`'s IP and connected to `to`.
fn connect(local: SocketAddr, to: SocketAddr, buffer: usize) -> io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(to), Type::DGRAM, Some(Protocol::UDP))?;
    socket.set_nonblocking(true)?;
    // Failing to size the buffers is not fatal. Nothing is read: its receive buffer stays small.
    let _ = socket.set_send_buffer_size(buffer);
    let _ = socket.set_recv_buffer_size(0);
    socket.bind(&SockAddr::from(SocketAddr::new(local.ip(), 0)))?;
    socket.connect(&SockAddr::from(to))?;
    Ok(socket)
}

/// Whether a send on a connected socket failed only to report an ICMP error an earlier datagram
/// to that destination caused (a member that stopped, a host that was unreachable for a while):
/// the datagram was not sent, and a second try sends it. Unconnected sockets never report these.
pub(crate) fn is_reported_icmp(error: &io::Error) -> bool {
    use nix::errno::Errno;
    matches!(
        error.raw_os_error().map(Errno::from_raw),
        Some(Errno::ECONNREFUSED | Errno::EHOSTUNREACH | Errno::ENETUNREACH)
    )
}
