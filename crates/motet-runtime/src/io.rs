//! The UDP socket: set up with `socket2`, registered with `mio`, received with `recvmmsg` and
//! single reads (`recvmsg` with UDP receive offload on, where a run of equal segments arrives in
//! one read; a plain `recv` with it off), and sent scatter-gather with `sendmsg`, so a large
//! payload is never copied into a send buffer (thesis §4.4.2: iovecs all the way to the kernel).
//! A datagram of up to 1,536 bytes is the exception: its head and payload are copied into one
//! buffer and sent with `send`, which costs less than the kernel's work on a second iovec
//! ([`UdpIo::send`]).
//!
//! The socket itself stays in blocking mode, and every call that must not wait says so with
//! `MSG_DONTWAIT`. That lets a quiet loop wait *in* the receive call ([`UdpIo::recv_wait`],
//! bounded by the socket's receive timeout) instead of in `epoll_wait` followed by a read: one
//! system call per datagram received instead of two, which on one vCPU was 2 µs of a 13.5 µs
//! round trip (the x-kernel lesson: count the boundary crossings; docs/runtime.md, "Waiting").
//!
//! Linux only (`recvmmsg`, `UDP_SEGMENT`, `UDP_GRO`), as the runtime has always been.

use crate::connected::Connected;
use bytes::Bytes;
use motet_core::Payload;
use nix::sys::socket::{self as sock, ControlMessage, ControlMessageOwned, MsgFlags, MultiHeaders, SockaddrStorage};
use smallvec::SmallVec;
use socket2::{Domain, Protocol, SockAddr, SockRef, Socket, Type};
use std::io::{self, IoSlice, IoSliceMut};
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::time::Duration;

/// Largest datagram the runtime receives in one slot.
const SLOT: usize = 64 * 1024;

/// Slots offered to one `recvmmsg` once the socket is busy.
pub(crate) const BATCH_SIZE: usize = 32;

/// Datagrams one segmented send may carry (the kernel's limit for `UDP_SEGMENT`).
const GSO_SEGMENTS: usize = 64;

/// What one [`UdpIo::recv_batch`] or [`UdpIo::recv_wait`] got.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Batch {
    /// Datagrams handed over.
    pub(crate) datagrams: usize,
    /// The batch was not full: the socket's queue was empty when the call returned (`recvmmsg`
    /// stops early only then). Edge-triggered readiness reports any datagram that arrives later,
    /// so no second call is needed to learn that the socket is drained (a `recvmmsg` that would
    /// only return `EWOULDBLOCK`).
    pub(crate) drained: bool,
    /// Buffers dropped because the kernel cut their control message short (`MSG_CTRUNC`): a
    /// coalesced run whose segment size is lost cannot be split, and taken whole it would be one
    /// message with its neighbours' bytes in it.
    pub(crate) truncated: usize,
}

/// Slots offered to a `recvmmsg` after one that did not fill its batch: the call works per slot
/// (after the last datagram it tries the next slot and finds the queue empty), so a quiet socket
/// (one datagram per turn, as in a round trip) is read with a small batch, and a busy one, once a
/// batch fills, with the whole [`BATCH_SIZE`].
const QUIET_BATCH: usize = 4;

/// Busy reads in a row that turn wanted receive offload on ([`UdpIo::count_read`]).
const OFFLOAD_AFTER: u32 = 16;

pub(crate) use motet_wire::chunks::{Chunks, MEDIUM, SMALL};

/// A segment up to this size that the kernel refuses means it refuses offload, not the size:
/// every path takes packets of 576 bytes (IPv4's minimum reassembly size; IPv6's minimum MTU is
/// 1280), so 512 bytes of UDP payload fit. A larger one may be refused by the path alone: an
/// MTU below Ethernet's 1500 (VXLAN's 1450, WireGuard's 1420, or one learned from ICMP) refuses
/// segments that an Ethernet path takes.
const SEGMENT_FLOOR: usize = 512;

/// One process's UDP socket.
pub(crate) struct UdpIo {
    socket: Socket,
    slots: Vec<Vec<u8>>,
    /// Slots the next `recvmmsg` offers ([`QUIET_BATCH`] or all).
    batch: usize,
    /// Where small datagrams are copied.
    chunks: Chunks,
    /// Datagrams one segmented send may carry: 1 where the kernel has no `UDP_SEGMENT`, or once
    /// it refused it.
    max_segments: usize,
    /// The largest segment the kernel has taken in a segmented send: one it refused as larger
    /// than the path allows (`EMSGSIZE`, `EINVAL`) lowers it to below that size, and larger
    /// segments go one datagram per call from then on (the kernel fragments a single datagram).
    segment_max: usize,
    /// The receive timeout now set on the socket (`SO_RCVTIMEO`; `None`: wait for ever).
    timeout: Option<Duration>,
    /// Room for the receive-offload control message of one datagram ([`UdpIo::recv_wait`]).
    control: Vec<u8>,
    /// Buffers dropped since the last [`Batch`] for a control message cut short.
    truncated: usize,
    /// The last busy-polling spin found a datagram ([`UdpIo::recv_spin`]).
    spin_found: bool,
    /// Receive offload (`UDP_GRO`) is on: a single read must ask for the segment size, with
    /// `recvmsg`. Off, it is a plain `recv` (see [`UdpIo::recv_one`]).
    offload: bool,
    /// Receive offload is wanted (`RuntimeConfig::receive_offload`) and not yet on: it goes on
    /// once the socket is seen busy ([`UdpIo::count_read`]).
    offload_wanted: bool,
    /// Busy batch reads in a row ([`UdpIo::count_read`]).
    busy_reads: u32,
    /// The last read was a batch that took every slot it offered: the next read goes on with
    /// the same drain ([`UdpIo::count_read`]). Not `batch`, which a busy-polling spin also sets
    /// to the full size when it switches to batch reads.
    full_batch: bool,
    /// Where a small datagram's head and payload are put together ([`UdpIo::send`]).
    send_buf: Vec<u8>,
    /// Sockets connected to unicast destinations, which send in place of this one
    /// ([`UdpIo::connect_sends`]).
    connected: Option<Connected>,
}

impl UdpIo {
    /// Binds `addr` with send and receive buffers of `buffer` bytes (as far as the kernel allows).
    /// `offload`: receive offload (`RuntimeConfig::receive_offload`).
    pub(crate) fn bind(addr: SocketAddr, buffer: usize, offload: bool) -> io::Result<UdpIo> {
        let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
        // Failing to enlarge the buffers is not fatal: the kernel caps them at its maximum.
        let _ = socket.set_recv_buffer_size(buffer);
        let _ = socket.set_send_buffer_size(buffer);
        socket.bind(&SockAddr::from(addr))?;
        Ok(UdpIo::new(socket, offload))
    }

    fn new(socket: Socket, offload: bool) -> UdpIo {
        // Receive offload starts off even when wanted: it goes on once the socket is busy
        // ([`UdpIo::count_read`]). Until then every single read is a `recv`.
        UdpIo {
            offload: false,
            offload_wanted: offload,
            busy_reads: 0,
            full_batch: false,
            max_segments: if gso_supported(&socket) { GSO_SEGMENTS } else { 1 },
            segment_max: usize::from(u16::MAX),
            socket,
            slots: (0..BATCH_SIZE).map(|_| vec![0; SLOT]).collect(),
            batch: BATCH_SIZE,
            chunks: Chunks::default(),
            timeout: None,
            control: nix::cmsg_space!(i32),
            truncated: 0,
            spin_found: false,
            send_buf: Vec::with_capacity(MEDIUM),
            connected: None,
        }
    }

    /// Sends unicast datagrams through sockets connected to their destinations, bound to this
    /// socket's address `local` (any port), with send buffers of `buffer` bytes
    /// (`crate::connected`).
    pub(crate) fn connect_sends(&mut self, local: SocketAddr, buffer: usize) {
        self.connected = Some(Connected::new(local, buffer));
    }

    /// Connected sockets open, and datagrams the shared socket sent in place of one (0 and 0
    /// without connected sends).
    pub(crate) fn connected_stats(&self) -> (usize, u64) {
        self.connected.as_ref().map_or((0, 0), |c| (c.open(), c.fallbacks()))
    }

    /// Sends through the shared socket only (a socket retired by a migration keeps none).
    pub(crate) fn stop_connected_sends(&mut self) {
        self.connected = None;
    }

    #[cfg(test)]
    pub(crate) fn connected(&mut self) -> Option<&mut Connected> {
        self.connected.as_mut()
    }

    /// Binds `group:port` with address reuse (so several processes on one host can listen) and
    /// joins the IPv4 multicast `group` on the interface with address `interface`.
    pub(crate) fn bind_multicast(
        group: std::net::Ipv4Addr,
        port: u16,
        interface: std::net::Ipv4Addr,
        buffer: usize,
        offload: bool,
    ) -> io::Result<UdpIo> {
        if !group.is_multicast() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{group} is not a multicast address")));
        }
        let socket = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
        socket.set_reuse_address(true)?;
        socket.set_reuse_port(true)?;
        let _ = socket.set_recv_buffer_size(buffer);
        socket.bind(&SockAddr::from(SocketAddr::from((group, port))))?;
        socket.join_multicast_v4(&group, &interface)?;
        Ok(UdpIo::new(socket, offload))
    }

    /// Joins the multicast `group` on the interface with address `interface` too: true if it
    /// was joined now, false if this socket is a member there already (the kernel refuses a
    /// second membership of one group on one interface, by any of its addresses).
    pub(crate) fn join_multicast(&self, group: std::net::Ipv4Addr, interface: std::net::Ipv4Addr) -> io::Result<bool> {
        match self.socket.join_multicast_v4(&group, &interface) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Leaves the multicast `group` on the interface with address `interface` (joined with that
    /// address). Failing is harmless: an interface that is gone took its membership with it.
    pub(crate) fn leave_multicast(&self, group: std::net::Ipv4Addr, interface: std::net::Ipv4Addr) {
        if let Err(error) = self.socket.leave_multicast_v4(&group, &interface) {
            tracing::debug!(%group, %interface, %error, "leaving the multicast group on the old interface");
        }
    }

    /// Sends multicast from `interface` with `ttl` hops, looping back to this host's listeners
    /// (other members may share the host).
    pub(crate) fn set_multicast_sender(&self, interface: std::net::Ipv4Addr, ttl: u32) -> io::Result<()> {
        self.socket.set_multicast_if_v4(&interface)?;
        self.socket.set_multicast_ttl_v4(ttl)?;
        self.socket.set_multicast_loop_v4(true)
    }

    pub(crate) fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket
            .local_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not an IP socket"))
    }

    /// What `mio` registers.
    pub(crate) fn source(&mut self) -> &mut UdpIo {
        self
    }

    /// Receives one batch without waiting (one `recvmmsg`), calling `each` with every datagram
    /// (the segments of a coalesced run one by one). Each datagram is copied once out of the
    /// batch buffer: a small or medium one into a shared chunk, a larger one into a buffer of its own
    /// size, so what the protocol keeps (retransmission buffers) pins its own bytes or at most one
    /// small chunk, never a 64 KiB slot. `Err(WouldBlock)` when none is waiting.
    pub(crate) fn recv_batch(&mut self, each: impl FnMut(Bytes)) -> io::Result<Batch> {
        self.recv(MsgFlags::MSG_DONTWAIT, each)
    }

    /// A busy-polling loop's read: one single read without waiting while the socket is quiet (a spin
    /// that finds nothing costs that one call; a `recvmmsg` prepares a header per slot), a
    /// [`UdpIo::recv_batch`] once two spins in a row found a datagram (a burst) until a batch is
    /// not full. A single read that found a datagram ends the turn's reading (`drained`): the
    /// application gets the datagram now, not after one more read that, in a round trip, finds
    /// nothing (an empty read is most of a spin, about 0.3 µs here); a burst shows on the next
    /// spin.
    pub(crate) fn recv_spin(&mut self, mut each: impl FnMut(Bytes)) -> io::Result<Batch> {
        if self.batch == BATCH_SIZE {
            // The burst goes on while batches are full; after one that is not, two spins in a
            // row must find a datagram again.
            self.spin_found = false;
            return self.recv_batch(each);
        }
        self.full_batch = false;
        let got = self.recv_one(MsgFlags::MSG_DONTWAIT, &mut each);
        if got.is_ok() && self.spin_found {
            self.batch = BATCH_SIZE;
        }
        self.spin_found = got.is_ok();
        Ok(Batch { datagrams: got?, drained: true, truncated: std::mem::take(&mut self.truncated) })
    }

    /// Waits in the receive call for one datagram (or one coalesced run), up to `timeout` (`None`:
    /// for ever), and hands it over as [`UdpIo::recv_batch`] does (one single read).
    /// `Err(WouldBlock)` when the time ran out. Whatever else is queued is left for the next read:
    /// a wait that finds a datagram queued returns at once, so nothing waits longer than one
    /// turn, and a lone datagram (a round trip) costs this one system call, where `recvmmsg` with
    /// `MSG_WAITFORONE` would look for a second one first (0.4 µs per round trip on one vCPU). The
    /// kernel's receive timeout is coarse (jiffies: a 1 ms timeout slept 8 ms here), so a caller
    /// with a deadline closer than that waits in `epoll` instead. `drained` is always true.
    pub(crate) fn recv_wait(&mut self, timeout: Option<Duration>, each: impl FnMut(Bytes)) -> io::Result<Batch> {
        if timeout != self.timeout {
            self.socket.set_read_timeout(timeout)?;
            self.timeout = timeout;
        }
        let mut each = each;
        self.full_batch = false;
        let datagrams = self.recv_one(MsgFlags::empty(), &mut each)?;
        // A later batch read is not the rest of a full one (`UdpIo::count_read`).
        self.batch = QUIET_BATCH;
        Ok(Batch { datagrams, drained: true, truncated: std::mem::take(&mut self.truncated) })
    }

    /// One single read (one datagram, or one coalesced run) handed to `each`; how many datagrams.
    fn recv_one(&mut self, flags: MsgFlags, each: &mut impl FnMut(Bytes)) -> io::Result<usize> {
        let fd = self.socket.as_raw_fd();
        // Without receive offload there is no segment size to ask for, and `recv` costs the
        // kernel about 115 ns less than `recvmsg` (measured on this VM's kernel with no control
        // buffer as well as with one: the message header and vector are copied in and checked).
        // A busy-polling loop pays that on every spin.
        if !self.offload {
            let len = sock::recv(fd, &mut self.slots[0], flags).map_err(io::Error::from)?;
            return Ok(deliver(&mut self.chunks, &self.slots[0][..len], len, each));
        }
        // No source address asked for: nothing downstream uses it (the datagram says who sent it).
        let (len, stride) = {
            let mut iov = [IoSliceMut::new(&mut self.slots[0])];
            let msg = sock::recvmsg::<()>(fd, &mut iov, Some(&mut self.control), flags).map_err(io::Error::from)?;
            if msg.flags.contains(MsgFlags::MSG_CTRUNC) {
                self.truncated += 1;
                return Ok(0);
            }
            (msg.bytes, segment_size(&msg))
        };
        Ok(deliver(&mut self.chunks, &self.slots[0][..len], stride, each))
    }

    fn recv(&mut self, flags: MsgFlags, mut each: impl FnMut(Bytes)) -> io::Result<Batch> {
        let offered = self.batch.min(self.slots.len());
        let fd = self.socket.as_raw_fd();
        let mut got: SmallVec<[Option<(usize, usize)>; BATCH_SIZE]> = SmallVec::new();
        HEADERS
            .with(|headers| {
                let mut headers = headers.borrow_mut();
                // Sockets with and without receive offload (a unicast and a multicast socket in
                // one loop) each use their own kind, so that taking turns remakes neither.
                let Headers { headers, slots, stale } = &mut headers[usize::from(self.offload)];
                // `nix` sets each header's control-buffer length once, and the kernel shortens it to
                // what a message used (nothing, for one that is not a coalesced run): headers that
                // took such a message are made afresh before the next read, or a later run would come
                // without its segment size. As many as the read offers (a quiet socket's few are
                // cheap to make again). Without receive offload there is no segment size to ask
                // for: headers without control buffers never go stale.
                if *stale || headers.is_none() || *slots < offered {
                    let space = self.offload.then(|| nix::cmsg_space!(i32));
                    *headers = Some(MultiHeaders::preallocate(offered, space));
                    *slots = offered;
                }
                let headers = headers.as_mut().expect("just made");
                *stale = recv_many(fd, headers, &mut self.slots[..offered], flags, &mut got, &mut self.truncated)?
                    && self.offload;
                Ok::<(), io::Error>(())
            })
            .inspect_err(|e| {
                if e.kind() == io::ErrorKind::WouldBlock {
                    self.count_read(0);
                }
                self.batch = QUIET_BATCH;
                self.full_batch = false;
            })?;
        let n = got.len();
        self.count_read(n);
        self.batch = if n == offered { BATCH_SIZE } else { QUIET_BATCH };
        self.full_batch = n == offered;
        let mut datagrams = 0;
        // `None`: a buffer `recv_many` dropped (its control message was cut short).
        for (&(len, stride), slot) in got.iter().zip(&self.slots).filter_map(|(got, slot)| Some((got.as_ref()?, slot)))
        {
            datagrams += deliver(&mut self.chunks, &slot[..len], stride, &mut each);
        }
        Ok(Batch { datagrams, drained: n < offered, truncated: std::mem::take(&mut self.truncated) })
    }

    /// Counts a batch read that took `took` datagrams towards turning wanted receive offload
    /// (`UDP_GRO`) on: [`OFFLOAD_AFTER`] busy reads in a row do it. A read is busy when it took
    /// several datagrams. One that took one or none starts the count again, unless it went on
    /// with a drain whose previous batch was full (that drain found several queued, and was
    /// counted). Single reads (a wait in the receive call, a busy-polling spin) cannot tell and
    /// do not count; a blocking loop that keeps waiting in the receive call reads a batch now and
    /// then to find out (`RecvTimeout::returned`).
    ///
    /// Why not on from the start: with it on, a single read must be a `recvmsg` that asks for the
    /// segment size, which costs the kernel about 115 ns more than a `recv` (the message header
    /// and its vector are copied in and checked), at both ends of every round trip. Offload pays
    /// only when runs arrive, and runs come from senders with a backlog, whose datagrams queue up
    /// here first: the kernel splits a run on arrival while offload is off. A request answered by
    /// one peer never finds a second datagram queued, so such a member keeps the cheaper read;
    /// a few datagrams that meet by chance (a view change, or the answers of several peers in a
    /// larger group) seldom make 16 busy reads in a row, and turning offload on costs only the
    /// dearer read.
    ///
    /// Why it never goes off again: the kernel decides whether to split a run when it queues it,
    /// so a run coalesced just before offload went off could still be in the queue, and a `recv`
    /// would hand it over as one datagram. Turning it on has no such window: a `recvmsg` reads a
    /// single datagram as well as a run. The choice costs only speed, never correctness.
    fn count_read(&mut self, took: usize) {
        if !self.offload_wanted {
            return;
        }
        if took <= 1 {
            if !self.full_batch {
                self.busy_reads = 0;
            }
            return;
        }
        self.busy_reads += 1;
        if self.busy_reads < OFFLOAD_AFTER {
            return;
        }
        self.offload_wanted = false;
        // Not fatal where missing: the kernel then keeps splitting runs on arrival.
        self.offload = sock::setsockopt(&self.socket.as_fd(), sock::sockopt::UdpGroSegment, &true).is_ok();
        tracing::debug!(on = self.offload, "receive offload: the socket is busy");
    }

    /// Receive offload is on ([`UdpIo::count_read`]).
    pub(crate) fn offload_on(&self) -> bool {
        self.offload
    }

    /// Receive offload is wanted and not on yet: batch reads are counted ([`UdpIo::count_read`]).
    pub(crate) fn offload_pending(&self) -> bool {
        self.offload_wanted
    }

    /// How many datagrams one [`UdpIo::send_segments`] may carry (1 where the kernel has no UDP
    /// segmentation offload, or after it refused it once).
    pub(crate) fn max_segments(&self) -> usize {
        self.max_segments
    }

    /// Sends `contents` to `to` as datagrams of `segment` bytes each (the last may be shorter) in
    /// one system call, with UDP generic segmentation offload (`UDP_SEGMENT`): the kernel cuts
    /// the buffer into packets. A segment larger than the path takes (`EMSGSIZE` on recent
    /// kernels, `EINVAL` on older ones, above [`SEGMENT_FLOOR`]) lowers [`UdpIo::segment_max`]
    /// below its size, so each size is refused at most once; a device or kernel that refuses
    /// offload itself (`EIO`, or a refusal at a size every path takes) turns it off for this
    /// socket ([`UdpIo::max_segments`] becomes 1). Either way the error is returned and the
    /// caller sends the datagrams one per call.
    pub(crate) fn send_segments(&mut self, to: SocketAddr, contents: &[u8], segment_len: usize) -> io::Result<()> {
        if segment_len > self.segment_max {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        let segment = u16::try_from(segment_len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let cmsgs = [ControlMessage::UdpGsoSegments(&segment)];
        let iov = [IoSlice::new(contents)];
        if let Some(connected) = self.connected.as_mut() {
            let flags = MsgFlags::MSG_DONTWAIT;
            let sent =
                connected.get(to).map(|s| sock::sendmsg::<SockaddrStorage>(s.as_raw_fd(), &iov, &cmsgs, flags, None));
            match sent {
                Some(Ok(_)) => return Ok(()),
                // As in `send`: a full buffer or a failure, and the shared socket sends the run.
                Some(Err(nix::errno::Errno::EAGAIN)) => connected.full(),
                Some(Err(errno)) => connected.failed(to, &io::Error::from(errno)),
                None => {}
            }
        }
        let address = SockaddrStorage::from(to);
        let sent = sock::sendmsg(self.socket.as_raw_fd(), &iov, &cmsgs, MsgFlags::MSG_DONTWAIT, Some(&address));
        match sent {
            Ok(_) => Ok(()),
            // Larger than the path's packets (an MTU of 1500 takes 1472 bytes of UDP payload over
            // IPv4, one of 1450 takes 1422): offload stays on for segments that fit. Before, a
            // refusal at 1472 bytes or less was taken for no offload, and as `EMSGSIZE` (recent
            // kernels) for neither: every run of full bundles on a path under 1500 was dropped.
            Err(errno @ (nix::errno::Errno::EMSGSIZE | nix::errno::Errno::EINVAL)) if segment_len > SEGMENT_FLOOR => {
                self.segment_max = segment_len - 1;
                Err(io::Error::from(errno))
            }
            Err(errno @ (nix::errno::Errno::EIO | nix::errno::Errno::EINVAL | nix::errno::Errno::EMSGSIZE)) => {
                self.max_segments = 1;
                Err(io::Error::from(errno))
            }
            Err(errno) => Err(io::Error::from(errno)),
        }
    }

    /// The largest segment [`UdpIo::send_segments`] still tries.
    pub(crate) fn segment_max(&self) -> usize {
        self.segment_max
    }

    /// Sends `head` then `payload` as one datagram to `to`, without waiting (`WouldBlock` when the
    /// send buffer is full). A datagram of up to [`MEDIUM`] bytes is copied into one buffer first:
    /// the kernel takes a second iovec for about 0.17 µs per send (measured with a ping-pong of
    /// 64 and 768 bytes, 0.35 µs per round trip), more than the copy costs. A larger one goes
    /// scatter-gather, its payload never copied.
    ///
    /// With connected sends, the datagram leaves through the socket connected to `to`, and
    /// through the shared one if that socket's buffer is full or the send fails.
    pub(crate) fn send(&mut self, to: SocketAddr, head: &[u8], payload: &Payload) -> io::Result<()> {
        let flags = MsgFlags::MSG_DONTWAIT.bits();
        let copied = head.len() + payload.len() <= MEDIUM && !payload.is_empty();
        if copied {
            self.send_buf.clear();
            self.send_buf.extend_from_slice(head);
            payload.chunks().iter().for_each(|chunk| self.send_buf.extend_from_slice(chunk));
        }
        let mut slices: SmallVec<[IoSlice<'_>; 4]> = SmallVec::new();
        if !copied {
            slices.push(IoSlice::new(head));
            slices.extend(payload.chunks().iter().map(|chunk| IoSlice::new(chunk)));
        }
        if let Some(connected) = self.connected.as_mut() {
            let sent = connected.get(to).map(|socket| match copied {
                true => socket.send_with_flags(&self.send_buf, flags),
                false => socket.send_vectored_with_flags(&slices, flags),
            });
            match sent {
                Some(Ok(_)) => return Ok(()),
                // A full buffer: the shared socket's may have room.
                Some(Err(e)) if e.kind() == io::ErrorKind::WouldBlock => connected.full(),
                // Anything else: the shared socket sends it, as it did before (`connected.rs`).
                Some(Err(e)) => connected.failed(to, &e),
                None => {}
            }
        }
        let to = SockAddr::from(to);
        match copied {
            true => SockRef::from(&self.socket).send_to_with_flags(&self.send_buf, &to, flags).map(|_| ()),
            false => SockRef::from(&self.socket).send_to_vectored_with_flags(&slices, &to, flags).map(|_| ()),
        }
    }
}

thread_local! {
    /// The message headers `recvmmsg` fills. `nix` keeps raw pointers in them, so they cannot
    /// move between threads with an event loop: each thread that reads sockets has its own,
    /// shared by its loop's sockets, which are read one at a time.
    static HEADERS: std::cell::RefCell<[Headers; 2]> = const {
        std::cell::RefCell::new([const { Headers { headers: None, slots: 0, stale: false } }; 2])
    };
}

/// [`HEADERS`]: the headers, and whether the last read shortened a control-buffer length. There
/// are two sets: without control buffers (for sockets without receive offload), and with.
struct Headers {
    headers: Option<MultiHeaders<()>>,
    /// How many `headers` holds.
    slots: usize,
    stale: bool,
}

/// One `recvmmsg` into `slots`: per message received, its length, its segment size (its length
/// unless it is a coalesced run) and its source. True if some message came without a segment
/// size (its header's control length is now shortened).
fn recv_many(
    fd: RawFd,
    headers: &mut MultiHeaders<()>,
    slots: &mut [Vec<u8>],
    flags: MsgFlags,
    got: &mut SmallVec<[Option<(usize, usize)>; BATCH_SIZE]>,
    truncated: &mut usize,
) -> io::Result<bool> {
    // An array, not a vector: `nix` ties the slices' lifetime to their own borrow, which a
    // container with a destructor would outlive.
    let offered = slots.len();
    let mut slots = slots.iter_mut();
    let mut bufs: [[IoSliceMut<'_>; 1]; BATCH_SIZE] =
        std::array::from_fn(|_| [IoSliceMut::new(slots.next().map_or(&mut [][..], |slot| &mut slot[..]))]);
    let received = sock::recvmmsg(fd, headers, bufs[..offered].iter_mut(), flags, None).map_err(io::Error::from)?;
    let mut stale = false;
    got.extend(received.map(|msg| {
        if msg.flags.contains(MsgFlags::MSG_CTRUNC) {
            // Dropped (nothing of the buffer is handed over), counted.
            *truncated += 1;
            stale = true;
            return None;
        }
        let run = run_size(&msg);
        stale |= run.is_none();
        Some((msg.bytes, run.unwrap_or(msg.bytes)))
    }));
    Ok(stale)
}

/// The segment size of a received buffer that is a coalesced run (its receive-offload control
/// message), or `None` for a single datagram.
fn run_size<S>(msg: &sock::RecvMsg<'_, '_, S>) -> Option<usize> {
    let cmsgs = msg.cmsgs().into_iter().flatten();
    cmsgs
        .filter_map(|c| match c {
            ControlMessageOwned::UdpGroSegments(size) => usize::try_from(size).ok().filter(|&s| s > 0),
            _ => None,
        })
        .next()
}

/// The segment size of a received buffer: a run's, or its whole length (a single datagram).
/// A truncated control area (which the buffers given here, room for the one control message
/// asked for, should never cause) would leave a run unsplit: a run of plain datagrams would be
/// taken as one message with the others' bytes in it. So a buffer that comes with `MSG_CTRUNC`
/// is dropped and counted ([`Batch::truncated`]), never handed over. (`MSG_TRUNC` cannot happen:
/// a slot is larger than any UDP payload.)
fn segment_size<S>(msg: &sock::RecvMsg<'_, '_, S>) -> usize {
    run_size(msg).unwrap_or(msg.bytes)
}

/// Hands each datagram of a received buffer (one, or the segments of a coalesced run) to
/// `each`, copied out of the slot; returns how many.
fn deliver(chunks: &mut Chunks, buffer: &[u8], stride: usize, each: &mut impl FnMut(Bytes)) -> usize {
    // An empty datagram is a datagram too: handed over, so that the node counts it as malformed
    // like any other it cannot decode (splitting an empty buffer yields nothing).
    if buffer.is_empty() {
        each(Bytes::new());
        return 1;
    }
    let mut n = 0;
    for segment in buffer.chunks(stride.max(1)) {
        each(chunks.copy(segment));
        n += 1;
    }
    n
}

/// Whether the kernel takes `UDP_SEGMENT` (Linux 4.18 on): set on a throwaway socket, since on
/// the real one it would become the default segment size of every send.
fn gso_supported(socket: &Socket) -> bool {
    let domain = match socket.local_addr().ok().and_then(|a| a.as_socket()) {
        Some(SocketAddr::V6(_)) => Domain::IPV6,
        _ => Domain::IPV4,
    };
    Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))
        .is_ok_and(|probe| sock::setsockopt(&probe.as_fd(), sock::sockopt::UdpGsoSegment, &1500).is_ok())
}

impl mio::event::Source for UdpIo {
    fn register(&mut self, registry: &mio::Registry, token: mio::Token, interests: mio::Interest) -> io::Result<()> {
        mio::unix::SourceFd(&self.socket.as_raw_fd()).register(registry, token, interests)
    }

    fn reregister(&mut self, registry: &mio::Registry, token: mio::Token, interests: mio::Interest) -> io::Result<()> {
        mio::unix::SourceFd(&self.socket.as_raw_fd()).reregister(registry, token, interests)
    }

    fn deregister(&mut self, registry: &mio::Registry) -> io::Result<()> {
        mio::unix::SourceFd(&self.socket.as_raw_fd()).deregister(registry)
    }
}

#[cfg(test)]
mod tests;
