//! Endpoint migration (Ensemble's `Migrate`): moving the process to a new socket, reading the
//! old one until every view has the new address, and binding sockets.

use super::{EventLoop, Op, SOCKET};
use crate::config::RuntimeConfig;
use crate::io::UdpIo;
use crate::Error;
use motet_core::{Address, ApiError, EndpointId, LayerKind};
use std::net::SocketAddr;
use std::time::Duration;

/// Views installed without this process's new address after which it stops asking again (a
/// group that keeps losing the request would otherwise change views for ever; the old socket then
/// stays open, so the endpoint is still reached).
const MIGRATE_TRIES: u32 = 8;

/// Old sockets at most that migrations keep open at once: one more migration closes the oldest
/// first. Each is kept until every view has the new address, which may be never (a view that
/// never takes the request stops being asked after `MIGRATE_TRIES`), so calls in a loop piled
/// sockets up to the process's file-descriptor limit (a review's finding). A peer that still
/// sends to the closed address is no longer heard: this member suspects it, the two partitions
/// merge again, and the merged view has the new address.
pub(crate) const RETIRED_MAX: usize = 8;

/// A socket given up by a migration. Peers that have not installed the view with the new address
/// still send here, so it is read until every endpoint's view has the new address, then for
/// `migrate_grace` more (retransmissions in flight), then closed.
pub(super) struct Retired {
    pub(super) io: UdpIo,
    pub(super) token: mio::Token,
    pub(super) readable: bool,
    pub(super) close_at: Option<crate::clock::Deadline>,
    /// The interface whose membership of the multicast group is left when this socket closes
    /// (the one the process moved from).
    pub(super) multicast_left: Option<std::net::Ipv4Addr>,
}

impl EventLoop {
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
            let stack = self.owners.get(member.current).map(|(_, view)| &view.stack);
            if let Some(stack) = stack.filter(|s| !s.layers().contains(&LayerKind::Migrate)) {
                return Err(Error::Api(ApiError::NoMigrate(stack.to_string())));
            }
        }
        let (mut io, address) = bind_socket(&self.config, bind, advertise)?;
        let mut interface = None;
        if let Some(m) = &self.config.multicast {
            let local = io.local_addr().map_err(|e| Error::io("reading the bound address", e))?;
            interface = Some(multicast_interface(m, local, address)?);
            multicast_sender(&mut io, interface.expect("just set"), m.ttl)?;
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
        let mut old = std::mem::replace(&mut self.io, io);
        // Its count stays the process's: the exported counter must not go down.
        self.stats.connected_fallbacks += old.connected_stats().1;
        // It is only read from now: its connected sockets are closed at once.
        old.stop_connected_sends();
        tracing::info!(from = %self.advertise, to = %address, "migrating");
        let multicast_left = interface.and_then(|interface| self.move_multicast(interface));
        if self.retired.len() >= RETIRED_MAX {
            let mut oldest = self.retired.remove(0);
            tracing::warn!(
                open = RETIRED_MAX,
                "closing the oldest socket a migration left open before its time: too many migrations are not complete"
            );
            self.close_retired(&mut oldest);
            self.stats.retired_closed += 1;
        }
        self.retired.push(Retired { io: old, token, readable: true, close_at: None, multicast_left });
        self.migration_walk = true;
        self.readable = true;
        self.advertise = address;
        self.stats.migrations += 1;
        let endpoints: Vec<EndpointId> = self.members.iter().filter(|(_, m)| !m.left).map(|(&e, _)| e).collect();
        for endpoint in endpoints {
            if let Some(member) = self.members.get_mut(&endpoint) {
                member.migrate_asked = member.view.as_ref().map(|v| v.view_id);
                member.migrate_tries = 0;
            }
            // The socket has moved whatever happens now: an endpoint whose request is refused
            // (its parked actions full) is asked again at the end of this turn
            // (`tend_migrations` parks the request first in line), and the caller learns the
            // new address.
            if let Err(error) = self.act(endpoint, Op::Migrate(address)) {
                tracing::warn!(%endpoint, %error, "migration request refused; asking again");
                if let Some(member) = self.members.get_mut(&endpoint) {
                    member.migrate_asked = None;
                }
            }
        }
        Ok(address)
    }

    /// After the sockets switched: the multicast group is received on the new `interface` too
    /// (the old one may be going away). Returns the interface to leave once the old socket is
    /// closed: until then, casts peers still multicast on the old network arrive there (nothing
    /// is lost, as on the old unicast socket). A join that fails is logged, and the group stays
    /// on the old interface alone. Two addresses of one interface are one membership, kept under
    /// the address it was joined with (the kernel knows it by that).
    fn move_multicast(&mut self, interface: std::net::Ipv4Addr) -> Option<std::net::Ipv4Addr> {
        let group = self.config.multicast.as_ref()?.group;
        let (receiver, _, joined) = self.multicast.as_mut()?;
        if *joined == interface {
            return None;
        }
        // Back to an interface an earlier migration is still to leave: it stays joined.
        let pending = self.retired.iter_mut().find(|r| r.multicast_left == Some(interface));
        match receiver.join_multicast(group, interface) {
            Ok(joined_now) if joined_now || pending.is_some() => {
                if let Some(retired) = pending {
                    retired.multicast_left = None;
                }
                Some(std::mem::replace(joined, interface))
            }
            Ok(_) => None, // the same interface as `joined`, by another of its addresses
            Err(error) => {
                tracing::warn!(%group, %interface, %error, "cannot join the multicast group on the new interface: it is received on the old one only, while that lasts");
                None
            }
        }
    }

    /// After a migration: re-asks for the new address where a view was installed without it (the
    /// request raced with a merge or was made by an earlier stack), starts the grace period of a
    /// retired socket once every endpoint's view has the new address, and closes retired sockets
    /// whose grace has passed.
    pub(super) fn tend_migrations(&mut self) {
        if self.retired.is_empty() {
            return;
        }
        if std::mem::take(&mut self.migration_walk) {
            self.migrated_everywhere = self.walk_migrations();
        }
        self.tend_retired(self.migrated_everywhere);
    }

    /// Whether every endpoint's view has the new address; re-asks for it where a view was
    /// installed without it.
    fn walk_migrations(&mut self) -> bool {
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
                    super::app::flag_retry(&mut self.retrying, endpoint, member);
                }
            }
        }
        everywhere
    }

    /// The rest of [`EventLoop::tend_migrations`]: the retired sockets' grace and close.
    fn tend_retired(&mut self, everywhere: bool) {
        let grace = Duration::from_millis(self.config.migrate_grace_ms);
        let clock = self.clock;
        for retired in &mut self.retired {
            if everywhere && retired.close_at.is_none() {
                retired.close_at = Some(crate::clock::Deadline::after(&clock, grace));
            }
        }
        // In place, without a vector a turn: this runs on every turn while a migration is pending.
        let due = |retired: &Retired| retired.close_at.is_some_and(|at| at.until(&clock) == Duration::ZERO);
        while let Some(at) = self.retired.iter().position(due) {
            let mut retired = self.retired.remove(at);
            self.close_retired(&mut retired);
            self.stats.retired_closed += 1;
        }
    }

    /// Stops reading an old socket (it closes when dropped), and leaves the multicast group on the
    /// interface this process moved from with it (that interface may be gone already, and its
    /// membership with it).
    fn close_retired(&self, retired: &mut Retired) {
        let _ = self.poll.registry().deregister(retired.io.source());
        let group = self.config.multicast.as_ref().map(|m| m.group);
        let receiver = self.multicast.as_ref().map(|(receiver, _, _)| receiver);
        if let (Some(old), Some(group), Some(receiver)) = (retired.multicast_left, group, receiver) {
            receiver.leave_multicast(group, old);
        }
    }
}

/// Binds a socket for `bind` and works out the address to advertise for it.
pub(super) fn bind_socket(
    config: &RuntimeConfig,
    bind: SocketAddr,
    advertise: Option<SocketAddr>,
) -> Result<(UdpIo, SocketAddr), Error> {
    let mut io = UdpIo::bind(bind, config.socket_buffer, config.receive_offload_on())
        .map_err(|e| Error::io(format!("binding {bind}"), e))?;
    let local = io.local_addr().map_err(|e| Error::io("reading the bound address", e))?;
    if config.connected_sends {
        io.connect_sends(local, config.socket_buffer);
    }
    let advertise = match advertise {
        Some(address) if address.ip().is_unspecified() || address.port() == 0 => {
            return Err(Error::Config(format!(
                "advertise address {address} must be a concrete IP and port other members can reach"
            )))
        }
        // An IPv4 socket cannot receive IPv6 (an IPv6 one bound to `[::]` may take IPv4 too).
        Some(address) if local.is_ipv4() && address.is_ipv6() => {
            return Err(Error::Config(format!(
                "advertise address {address} is IPv6 and the bound address {local} IPv4: other members would send where this socket cannot receive"
            )))
        }
        Some(address) => {
            crate::config::loopback_reaches(local, address)?;
            address
        }
        None if local.ip().is_unspecified() => {
            return Err(Error::Config(format!(
                "bound to the wildcard address {local}: give the address other members reach this one at (`--advertise IP:PORT`, `advertise` in [runtime], or `/migrate`'s second address)"
            )))
        }
        None => local,
    };
    Ok((io, advertise))
}

/// The interface multicast is sent from and joined on: the configured one; else the bound
/// address's, when bound to one (an advertised address may be a NAT's or a container host's,
/// which no local interface has: taking it failed with "Cannot assign requested address"); else,
/// bound to the wildcard, the advertised address's if this host has it, and otherwise none in
/// particular (`0.0.0.0`: the kernel picks by its routes). A container bound to `0.0.0.0` that
/// advertises its host's address failed to start (a review's finding).
pub(super) fn multicast_interface(
    m: &crate::config::MulticastConfig,
    local: SocketAddr,
    advertise: SocketAddr,
) -> Result<std::net::Ipv4Addr, Error> {
    use std::net::IpAddr;
    // An address is this host's if a socket can bind it.
    let here = |ip: std::net::Ipv4Addr| std::net::UdpSocket::bind((ip, 0)).is_ok();
    match (m.interface, local.ip(), advertise.ip()) {
        (Some(interface), _, _) => Ok(interface),
        (None, IpAddr::V4(ip), _) if !ip.is_unspecified() => Ok(ip),
        (None, IpAddr::V4(_), IpAddr::V4(ip)) if here(ip) => Ok(ip),
        (None, IpAddr::V4(_), IpAddr::V4(_)) => Ok(std::net::Ipv4Addr::UNSPECIFIED),
        _ => Err(Error::Config(
            "IP multicast needs an IPv4 interface to send from: bind an IPv4 address or set [runtime.multicast] interface"
                .into(),
        )),
    }
}

/// Sets `io` up to send multicast on `interface`, with an error that names the interface and
/// where to choose another.
pub(super) fn multicast_sender(io: &mut UdpIo, interface: std::net::Ipv4Addr, ttl: u32) -> Result<(), Error> {
    io.set_multicast_sender(interface, ttl).map_err(|e| {
        Error::io(
            format!(
                "setting up multicast sends on interface {interface} (choose one with [runtime.multicast] interface)"
            ),
            e,
        )
    })
}
