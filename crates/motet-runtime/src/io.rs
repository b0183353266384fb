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
use bytes::{Bytes, BytesMut};
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
}

/// Slots offered to a `recvmmsg` after one that did not fill its batch: the call works per slot
/// (after the last datagram it tries the next slot and finds the queue empty), so a quiet socket
/// (one datagram per turn, as in a round trip) is read with a small batch, and a busy one, once a
/// batch fills, with the whole [`BATCH_SIZE`].
const QUIET_BATCH: usize = 4;

/// Busy reads in a row that turn wanted receive offload on ([`UdpIo::count_read`]).
const OFFLOAD_AFTER: u32 = 16;

/// Buffers up to this size are copied into a shared chunk of [`CHUNK`] bytes instead of a buffer
/// of their own: one allocation (and one reference count) serves several small datagrams or
/// payloads, where a buffer of its own costs two (the copy, and the shared count the first clone
/// of a vector-backed `Bytes` allocates).
pub(crate) const SMALL: usize = 256;
/// A chunk stays allocated while any buffer copied into it is held (a retransmission buffer, an
/// application's `Bytes`): at worst one small buffer pins this much.
const CHUNK: usize = 1024;
/// Buffers up to this size (one Ethernet packet's payload), and larger than [`SMALL`], are copied
/// into shared chunks of [`MEDIUM_CHUNK`] bytes likewise: at 1 KiB, the allocation of a buffer of
/// its own and of its shared count took glibc's slower size classes, about 2,000 instructions per
/// round trip at each end of `motet perf latency --size 1024`, where a copy takes a few dozen.
pub(crate) const MEDIUM: usize = 1536;
/// At worst one medium buffer held alone pins this much.
const MEDIUM_CHUNK: usize = 8192;

/// The UDP payload of one packet on an Ethernet path (MTU 1500, IPv4: 1500 - 20 - 8): a
/// segment up to this size that the kernel refuses means it refuses offload, not the size.
const ETHERNET_PAYLOAD: usize = 1472;

/// Copies small and medium buffers side by side into shared chunks ([`SMALL`], [`MEDIUM`]).
#[derive(Default)]
pub(crate) struct Chunks {
    small: BytesMut,
    medium: BytesMut,
}

impl Chunks {
    /// `bytes` in a shared chunk if it is small or medium, else in a buffer of its own.
    pub(crate) fn copy(&mut self, bytes: &[u8]) -> Bytes {
        let (chunk, size) = match bytes.len() {
            n if n <= SMALL => (&mut self.small, CHUNK),
            n if n <= MEDIUM => (&mut self.medium, MEDIUM_CHUNK),
            _ => return Bytes::copy_from_slice(bytes),
        };
        if chunk.capacity() < bytes.len() {
            *chunk = BytesMut::with_capacity(size);
        }
        chunk.extend_from_slice(bytes);
        chunk.split().freeze()
    }
}

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
            max_segments: if gso_supported(&socket) { GSO_SEGMENTS } else { 1 },
            segment_max: usize::from(u16::MAX),
            socket,
            slots: (0..BATCH_SIZE).map(|_| vec![0; SLOT]).collect(),
            batch: BATCH_SIZE,
            chunks: Chunks::default(),
            timeout: None,
            control: nix::cmsg_space!(i32),
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
            return self.recv_batch(each);
        }
        let got = self.recv_one(MsgFlags::MSG_DONTWAIT, &mut each);
        if got.is_ok() && self.spin_found {
            self.batch = BATCH_SIZE;
        }
        self.spin_found = got.is_ok();
        Ok(Batch { datagrams: got?, drained: true })
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
        let datagrams = self.recv_one(MsgFlags::empty(), &mut each)?;
        // A later batch read is not the rest of a full one (`UdpIo::count_read`).
        self.batch = QUIET_BATCH;
        Ok(Batch { datagrams, drained: true })
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
            (msg.bytes, segment_size(&msg))
        };
        Ok(deliver(&mut self.chunks, &self.slots[0][..len], stride, each))
    }

    fn recv(&mut self, flags: MsgFlags, mut each: impl FnMut(Bytes)) -> io::Result<Batch> {
        let offered = self.batch.min(self.slots.len());
        let fd = self.socket.as_raw_fd();
        let mut got: SmallVec<[(usize, usize); BATCH_SIZE]> = SmallVec::new();
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
                *stale = recv_many(fd, headers, &mut self.slots[..offered], flags, &mut got)? && self.offload;
                Ok::<(), io::Error>(())
            })
            .inspect_err(|e| {
                if e.kind() == io::ErrorKind::WouldBlock {
                    self.count_read(0);
                }
                self.batch = QUIET_BATCH;
            })?;
        let n = got.len();
        self.count_read(n);
        self.batch = if n == offered { BATCH_SIZE } else { QUIET_BATCH };
        let mut datagrams = 0;
        for (&(len, stride), slot) in got.iter().zip(&self.slots) {
            datagrams += deliver(&mut self.chunks, &slot[..len], stride, &mut each);
        }
        Ok(Batch { datagrams, drained: n < offered })
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
            if self.batch != BATCH_SIZE {
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
    /// the buffer into packets. A device or kernel that refuses it (`EIO`, or `EINVAL` for a
    /// segment that fits an Ethernet packet) turns it off for this socket
    /// ([`UdpIo::max_segments`] becomes 1); a segment larger than the path takes (`EMSGSIZE`,
    /// `EINVAL`) lowers [`UdpIo::segment_max`] below its size. Either way the error is returned
    /// and the caller sends the datagrams one per call.
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
            // IPv4): offload stays on for segments that fit.
            Err(errno @ (nix::errno::Errno::EMSGSIZE | nix::errno::Errno::EINVAL))
                if segment_len > ETHERNET_PAYLOAD =>
            {
                self.segment_max = segment_len - 1;
                Err(io::Error::from(errno))
            }
            Err(errno @ (nix::errno::Errno::EIO | nix::errno::Errno::EINVAL)) => {
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
    got: &mut SmallVec<[(usize, usize); BATCH_SIZE]>,
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
        let run = run_size(&msg);
        stale |= run.is_none();
        (msg.bytes, run.unwrap_or(msg.bytes))
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
/// A truncated control area (which the buffers given here never cause) would leave a run
/// unsplit, and it would then be decoded as one datagram: rejected or taken whole, never cut
/// at a wrong place.
fn segment_size<S>(msg: &sock::RecvMsg<'_, '_, S>) -> usize {
    run_size(msg).unwrap_or(msg.bytes)
}

/// Hands each datagram of a received buffer (one, or the segments of a coalesced run) to
/// `each`, copied out of the slot; returns how many.
fn deliver(chunks: &mut Chunks, buffer: &[u8], stride: usize, each: &mut impl FnMut(Bytes)) -> usize {
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
mod tests {
    use super::*;

    /// Receives until `n` datagrams came (bounded: the sender is on loopback).
    fn receive(io: &mut UdpIo, n: usize) -> (Vec<Bytes>, Vec<Batch>) {
        let (mut got, mut batches) = (Vec::new(), Vec::new());
        for _ in 0..2_000 {
            match io.recv_batch(|datagram| got.push(datagram)) {
                Ok(batch) => batches.push(batch),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::thread::sleep(std::time::Duration::from_millis(1))
                }
                Err(e) => panic!("receive: {e}"),
            }
            if got.len() >= n {
                break;
            }
        }
        (got, batches)
    }

    #[test]
    fn small_and_medium_datagrams_share_chunks_and_stay_intact_and_large_ones_are_whole() {
        let localhost = SocketAddr::from(([127, 0, 0, 1], 0));
        let (mut a, mut b) =
            (UdpIo::bind(localhost, 1 << 20, true).unwrap(), UdpIo::bind(localhost, 1 << 20, true).unwrap());
        let to = b.local_addr().unwrap();
        // 300 datagrams: enough small and medium ones to fill several chunks, and some larger.
        let size = |k: usize| match k {
            k if k % 7 == 0 => MEDIUM + 100,
            k if k % 3 == 0 => SMALL + 100 + k,
            k => 20 + k % 200,
        };
        let sent: Vec<Vec<u8>> = (0..300usize).map(|k| vec![k as u8; size(k)]).collect();
        let mut got = Vec::new();
        for (k, datagram) in sent.iter().enumerate() {
            a.send(to, &[], &Payload::from(datagram.clone())).unwrap();
            if k % 50 == 49 {
                // Receive as we go (the socket buffer is bounded), keeping every datagram.
                got.extend(receive(&mut b, 50).0);
            }
        }
        assert_eq!(got.len(), sent.len());
        for (k, (got, sent)) in got.iter().zip(&sent).enumerate() {
            assert_eq!(&got[..], &sent[..], "datagram {k} intact after later receives");
        }
        // Datagrams of one tier sit side by side in their tier's chunks (no allocation each): the
        // small ones consecutively, the medium ones one after another across the small ones in
        // between. A large one has a buffer of its own.
        let adjacent = |a: &Bytes, b: &Bytes| a.as_ptr().wrapping_add(a.len()) == b.as_ptr();
        let small_pairs: Vec<&[Bytes]> =
            got.windows(2).filter(|w| w[0].len() <= SMALL && w[1].len() <= SMALL).collect();
        let shared = small_pairs.iter().filter(|w| adjacent(&w[0], &w[1])).count();
        assert!(shared > small_pairs.len() / 2, "small datagrams share chunks: {shared} of {}", small_pairs.len());
        let medium: Vec<&Bytes> = got.iter().filter(|d| (SMALL + 1..=MEDIUM).contains(&d.len())).collect();
        let next_to = medium.windows(2).filter(|w| adjacent(w[0], w[1])).count();
        assert!(next_to > medium.len() / 2, "medium datagrams share chunks: {next_to} of {}", medium.len());
        for (k, d) in got.iter().enumerate().filter(|(_, d)| d.len() > MEDIUM) {
            assert!(
                got.iter().all(|other| !adjacent(other, d) && !adjacent(d, other)),
                "datagram {k} has its own buffer"
            );
        }
    }

    /// Receives one datagram on a plain socket, with the address it came from.
    fn receive_from(socket: &std::net::UdpSocket) -> (Vec<u8>, SocketAddr) {
        socket.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = vec![0; 2048];
        let (n, from) = socket.recv_from(&mut buf).expect("a datagram within 5 s");
        (buf[..n].to_vec(), from)
    }

    #[test]
    fn connected_sends_leave_from_a_socket_per_destination_and_a_full_table_uses_the_shared_one() {
        let localhost = SocketAddr::from(([127, 0, 0, 1], 0));
        let mut a = UdpIo::bind(localhost, 1 << 20, true).unwrap();
        a.connect_sends(a.local_addr().unwrap(), 1 << 20);
        a.connected().unwrap().set_limit(2);
        let own = a.local_addr().unwrap();
        let peers: Vec<std::net::UdpSocket> = (0..3).map(|_| std::net::UdpSocket::bind(localhost).unwrap()).collect();
        let send = |a: &mut UdpIo, k: usize, tag: u8| {
            a.send(peers[k].local_addr().unwrap(), &[tag, k as u8], &Payload::from(vec![7u8; 10])).unwrap();
            let (data, from) = receive_from(&peers[k]);
            assert_eq!((data[..2].to_vec(), data.len()), (vec![tag, k as u8], 12), "head and payload, whole");
            assert_eq!(from.ip(), own.ip());
            from.port()
        };
        // Two destinations fill the table: each gets a socket of its own, on another port.
        let (p0, p1) = (send(&mut a, 0, 1), send(&mut a, 1, 1));
        assert!(p0 != own.port() && p1 != own.port() && p0 != p1);
        assert_eq!((send(&mut a, 0, 2), send(&mut a, 1, 2)), (p0, p1), "and keeps it");
        // A third, while both are in use, sends from the shared socket (no thrashing).
        assert_eq!(a.connected_stats(), (2, 0));
        assert_eq!(send(&mut a, 2, 3), own.port());
        assert_eq!(a.connected().unwrap().len(), 2);
        assert_eq!(a.connected_stats(), (2, 1), "counted as a fallback");
        // Once one has been idle long enough, the third takes its place.
        for _ in 0..crate::connected::IDLE_EVICT {
            a.send(peers[0].local_addr().unwrap(), b"busy", &Payload::new()).unwrap();
        }
        let p2 = send(&mut a, 2, 4);
        assert!(p2 != own.port() && p2 != p0, "a socket of its own: {p2}");
        assert_eq!(a.connected().unwrap().len(), 2);
        // A large payload goes scatter-gather, through the connected socket too.
        let big = Payload::from(vec![9u8; MEDIUM + 10]);
        a.send(peers[2].local_addr().unwrap(), b"h", &big).unwrap();
        let (data, from) = receive_from(&peers[2]);
        assert_eq!((data.len(), from.port()), (1 + MEDIUM + 10, p2));
    }

    #[test]
    fn a_failed_connected_send_closes_the_socket_unless_it_reported_an_icmp_error() {
        let localhost = SocketAddr::from(([127, 0, 0, 1], 0));
        let mut connected = Connected::new(localhost, 1 << 16);
        let to = SocketAddr::from(([127, 0, 0, 1], 9));
        assert!(connected.get(to).is_some());
        let refused = io::Error::from_raw_os_error(nix::errno::Errno::ECONNREFUSED as i32);
        connected.failed(to, &refused);
        assert_eq!(connected.len(), 1, "an ICMP report is consumed; the socket stays");
        let gone = io::Error::from_raw_os_error(nix::errno::Errno::EADDRNOTAVAIL as i32);
        connected.failed(to, &gone);
        assert_eq!(connected.len(), 0, "anything else closes it");
        assert!(connected.get(to).is_some(), "and the next send makes a new one");
    }

    #[test]
    fn a_connected_send_to_a_member_that_stopped_and_came_back_gets_through() {
        let localhost = SocketAddr::from(([127, 0, 0, 1], 0));
        let mut a = UdpIo::bind(localhost, 1 << 20, true).unwrap();
        a.connect_sends(a.local_addr().unwrap(), 1 << 20);
        let peer = std::net::UdpSocket::bind(localhost).unwrap();
        let to = peer.local_addr().unwrap();
        a.send(to, b"1", &Payload::new()).unwrap();
        assert_eq!(receive_from(&peer).0, b"1");
        drop(peer);
        // The port is closed: each datagram draws an ICMP refusal, which the connected socket
        // reports on the next send, failing it; the shared socket sends that one instead.
        let plain = std::net::UdpSocket::bind(localhost).unwrap();
        plain.connect(to).unwrap();
        let refused = (0..3).any(|_| plain.send(b"lost").is_err_and(|e| crate::connected::is_reported_icmp(&e)));
        assert!(refused, "a plain connected socket reports the refusal (what the fallback is for)");
        for _ in 0..5 {
            a.send(to, b"lost", &Payload::new()).unwrap();
        }
        // Each refusal the connected socket reported sent that datagram from the shared socket.
        let (open, fallbacks) = a.connected_stats();
        assert_eq!(open, 1, "an ICMP report keeps the socket");
        assert!((1..=5).contains(&fallbacks), "fell back {fallbacks} times");
        // The member restarts on the same port: the next datagram arrives.
        let Ok(peer) = std::net::UdpSocket::bind(to) else {
            eprintln!("io test: port {} was taken meanwhile; the restart is not tested", to.port());
            return;
        };
        a.send(to, b"2", &Payload::new()).unwrap();
        assert_eq!(receive_from(&peer).0, b"2");
    }

    #[test]
    fn multicast_destinations_use_the_shared_socket() {
        let mut a = UdpIo::bind(SocketAddr::from(([127, 0, 0, 1], 0)), 1 << 20, true).unwrap();
        a.connect_sends(a.local_addr().unwrap(), 1 << 20);
        let connected = a.connected().unwrap();
        assert!(connected.get(SocketAddr::from(([239, 255, 77, 1], 7000))).is_none());
        assert!(connected.get("[::1]:7000".parse().unwrap()).is_none(), "the other address family");
        assert!(connected.get(SocketAddr::from(([127, 0, 0, 1], 7000))).is_some());
    }

    #[test]
    fn a_batch_that_is_not_full_says_the_socket_is_drained() {
        let localhost = SocketAddr::from(([127, 0, 0, 1], 0));
        let (mut a, mut b) =
            (UdpIo::bind(localhost, 1 << 20, true).unwrap(), UdpIo::bind(localhost, 1 << 20, true).unwrap());
        let to = b.local_addr().unwrap();
        a.send(to, b"x", &Payload::new()).unwrap();
        let (got, batches) = receive(&mut b, 1);
        assert_eq!(got.len(), 1);
        assert!(batches.last().is_some_and(|batch| batch.drained && batch.datagrams == 1), "{batches:?}");
        // Quiet now: the next call offers a small batch; a full one makes the one after offer all.
        assert_eq!(b.batch, QUIET_BATCH);
        // Growing sizes: receive offload (GRO) never merges them into one slot.
        for k in 1..=QUIET_BATCH {
            a.send(to, &vec![b'y'; k], &Payload::new()).unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        let batch = b.recv_batch(|_| {}).unwrap();
        assert_eq!((batch.datagrams, batch.drained), (QUIET_BATCH, false), "full: maybe more waiting");
        assert_eq!(b.batch, BATCH_SIZE);
    }

    /// A run sent with segmentation offload arrives as one coalesced buffer and is split at its
    /// segment size, also when the same headers just took datagrams that were not runs (the
    /// kernel then shortened their control-buffer lengths: a reused header would have lost the
    /// segment size and handed the run over as one datagram).
    #[test]
    fn coalesced_runs_are_split_after_single_datagrams_in_batches_and_waits() {
        let localhost = SocketAddr::from(([127, 0, 0, 1], 0));
        let (mut a, mut b) =
            (UdpIo::bind(localhost, 1 << 20, true).unwrap(), UdpIo::bind(localhost, 1 << 20, true).unwrap());
        if a.max_segments() == 1 || !gro_supported() {
            eprintln!("io test: this kernel has no UDP segmentation or receive offload; runs are not tested");
            return;
        }
        let to = b.local_addr().unwrap();
        make_busy(&mut a, &mut b);
        let run = |round: u8| -> Vec<u8> { (0..5).flat_map(|k| vec![round * 10 + k; 100]).collect() };
        for round in 0..4u8 {
            // Single datagrams first, in every slot the batch offers.
            for k in 0..BATCH_SIZE {
                a.send(to, &[round, k as u8], &Payload::new()).unwrap();
            }
            let (singles, _) = receive(&mut b, BATCH_SIZE);
            assert!(singles.iter().all(|d| d.len() == 2), "round {round}");
            // Then a run of five 100-byte datagrams, as one send.
            let contents = run(round);
            if a.send_segments(to, &contents, 100).is_err() {
                assert_eq!(a.max_segments(), 1, "a refusal turns offload off");
                return;
            }
            let got = if round % 2 == 0 {
                receive(&mut b, 5).0
            } else {
                let mut got = Vec::new();
                b.recv_wait(Some(Duration::from_secs(5)), |d| got.push(d)).unwrap();
                got
            };
            let expected: Vec<Vec<u8>> = contents.chunks(100).map(<[u8]>::to_vec).collect();
            assert_eq!(got.iter().map(|d| d.to_vec()).collect::<Vec<_>>(), expected, "round {round}");
        }
    }

    /// On a path whose packets are smaller than the segments (an MTU of 1500, segments of 2000
    /// bytes), the kernel refuses the segmented send (`EMSGSIZE` here); the caller then sends the
    /// datagrams one per call, and offload stays on for segments that fit. Before, the refusal
    /// dropped the run (or, as `EINVAL`, turned offload off for good). It needs a network
    /// namespace of its own, where the loopback device gets that MTU: root.
    #[test]
    #[allow(clippy::disallowed_methods)] // a thread of its own moves to a network namespace
    fn segments_larger_than_the_path_fall_back_without_turning_offload_off() {
        let tried = std::thread::spawn(|| {
            // This thread alone moves to a namespace of its own, and the `ip` it runs with it.
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).ok()?;
            let up = std::process::Command::new("ip").args(["link", "set", "lo", "up", "mtu", "1500"]).status();
            if !up.is_ok_and(|s| s.success()) {
                return None;
            }
            let localhost = SocketAddr::from(([127, 0, 0, 1], 0));
            let (mut a, b) =
                (UdpIo::bind(localhost, 1 << 20, false).unwrap(), UdpIo::bind(localhost, 1 << 20, false).unwrap());
            if a.max_segments() == 1 {
                return None;
            }
            let to = b.local_addr().unwrap();
            let refused = a.send_segments(to, &[1u8; 4000], 2000).expect_err("segments over the MTU");
            assert_eq!((a.max_segments(), a.segment_max()), (GSO_SEGMENTS, 1999), "{refused}");
            assert_eq!(
                a.send_segments(to, &[1u8; 4000], 2000).unwrap_err().kind(),
                io::ErrorKind::InvalidInput,
                "not tried again"
            );
            a.send_segments(to, &[2u8; 2800], 1400).expect("segments that fit still go in one call");
            Some(refused)
        });
        match tried.join().unwrap() {
            None => eprintln!(
                "io test: skipped: a network namespace of its own needs root (and `ip`, and a kernel with UDP_SEGMENT)"
            ),
            Some(refused) => assert!(
                matches!(refused.raw_os_error(), Some(e) if e == nix::errno::Errno::EMSGSIZE as i32 || e == nix::errno::Errno::EINVAL as i32),
                "{refused}"
            ),
        }
    }

    /// Whether this kernel has receive offload (`UDP_GRO`, Linux 5.0 on): set on a throwaway
    /// socket.
    fn gro_supported() -> bool {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        sock::setsockopt(&socket.as_fd(), sock::sockopt::UdpGroSegment, &true).is_ok()
    }

    /// Sends `b` five datagrams at a time from `a`, [`OFFLOAD_AFTER`] times, each time reading
    /// until the socket is drained: a full quiet batch of four, then a read of one that goes on
    /// with the same drain (no reason to start the count again). That turns on the receive
    /// offload `b` wants.
    fn make_busy(a: &mut UdpIo, b: &mut UdpIo) {
        let to = b.local_addr().unwrap();
        for round in 0..OFFLOAD_AFTER {
            assert!(!b.offload_on(), "on after {round} busy drains");
            b.batch = QUIET_BATCH;
            for k in 0..=QUIET_BATCH {
                a.send(to, &[k as u8], &Payload::new()).unwrap();
            }
            std::thread::sleep(Duration::from_millis(5));
            let (first, second) = (b.recv_batch(|_| {}).unwrap(), b.recv_batch(|_| {}).unwrap());
            assert_eq!((first.datagrams, second.datagrams), (QUIET_BATCH, 1), "the datagrams sent are queued");
        }
        assert!(b.offload_on(), "busy drains in a row turn wanted offload on");
    }

    /// Wanted receive offload stays off while the socket is quiet, so that single reads are the
    /// cheaper `recv`: a run that arrives meanwhile is split by the kernel, and reads whole.
    /// Busy reads that are not in a row leave it off; enough in a row turn it on, for good.
    #[test]
    fn wanted_receive_offload_goes_on_when_reads_keep_finding_more_queued() {
        if !gro_supported() {
            eprintln!("io test: this kernel has no UDP receive offload (UDP_GRO); not tested");
            return;
        }
        let localhost = SocketAddr::from(([127, 0, 0, 1], 0));
        let (mut a, mut b) =
            (UdpIo::bind(localhost, 1 << 20, true).unwrap(), UdpIo::bind(localhost, 1 << 20, true).unwrap());
        let to = b.local_addr().unwrap();
        assert!(!b.offload_on(), "off until the socket is busy");
        let contents: Vec<u8> = (0..5).flat_map(|k| vec![k; 100]).collect();
        if a.max_segments() == 1 || a.send_segments(to, &contents, 100).is_err() {
            contents.chunks(100).for_each(|d| a.send(to, d, &Payload::new()).unwrap());
        }
        let mut got = Vec::new();
        for _ in 0..5 {
            b.recv_wait(Some(Duration::from_secs(5)), |d| got.push(d.to_vec())).unwrap();
        }
        assert_eq!(got, contents.chunks(100).map(<[u8]>::to_vec).collect::<Vec<_>>(), "split on arrival");
        // A batch of one that starts a drain starts the count again.
        for _ in 0..2 * OFFLOAD_AFTER {
            b.count_read(2);
            assert_eq!(receive_after(&mut a, &mut b, 1).0, 1);
        }
        assert!(!b.offload_on(), "a read of one starts the count again");
        // So does an empty read.
        for _ in 0..2 * OFFLOAD_AFTER {
            b.count_read(2);
            b.batch = QUIET_BATCH;
            let empty = b.recv_batch(|_| panic!("nothing was sent"));
            assert_eq!(empty.map(|_| ()).unwrap_err().kind(), io::ErrorKind::WouldBlock);
        }
        assert!(!b.offload_on(), "an empty read starts the count again");
        make_busy(&mut a, &mut b);
        let (_, batches) = receive_after(&mut a, &mut b, 1);
        assert!(batches.iter().all(|batch| batch.drained), "{batches:?}");
        assert!(b.offload_on(), "it stays on when the socket is quiet again");
    }

    /// Sends `n` one-byte datagrams from `a` to `b` and reads them, starting a drain with a quiet
    /// batch: how many it read, and the batches.
    fn receive_after(a: &mut UdpIo, b: &mut UdpIo, n: usize) -> (usize, Vec<Batch>) {
        let to = b.local_addr().unwrap();
        b.batch = QUIET_BATCH;
        for k in 0..n {
            a.send(to, &[k as u8], &Payload::new()).unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
        let (got, batches) = receive(b, n);
        (got.len(), batches)
    }

    /// Without receive offload the kernel splits a run on arrival, and the single reads (`recv`,
    /// not `recvmsg`) of a busy-polling spin and of a wait, and a batch, each get its datagrams
    /// whole and in order.
    #[test]
    fn without_receive_offload_runs_arrive_as_their_datagrams_in_spins_waits_and_batches() {
        let localhost = SocketAddr::from(([127, 0, 0, 1], 0));
        let (mut a, mut b) =
            (UdpIo::bind(localhost, 1 << 20, true).unwrap(), UdpIo::bind(localhost, 1 << 20, false).unwrap());
        assert!(!b.offload);
        let to = b.local_addr().unwrap();
        for round in 0..3u8 {
            let contents: Vec<u8> = (0..5).flat_map(|k| vec![round * 10 + k; 100]).collect();
            if a.max_segments() == 1 || a.send_segments(to, &contents, 100).is_err() {
                // No segmentation offload here: the same datagrams one by one.
                contents.chunks(100).for_each(|d| a.send(to, d, &Payload::new()).unwrap());
            }
            a.send(to, b"single", &Payload::new()).unwrap();
            let mut got: Vec<Bytes> = Vec::new();
            for _ in 0..2_000 {
                let each = |d| got.push(d);
                let read = match round {
                    0 => b.recv_spin(each),
                    1 => b.recv_wait(Some(Duration::from_secs(5)), each),
                    _ => b.recv_batch(each),
                };
                match read {
                    Ok(batch) => assert!(round != 1 || batch.datagrams == 1, "a wait reads one datagram"),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(1)),
                    Err(e) => panic!("receive: {e}"),
                }
                if got.len() >= 6 {
                    break;
                }
            }
            let mut expected: Vec<Vec<u8>> = contents.chunks(100).map(<[u8]>::to_vec).collect();
            expected.push(b"single".to_vec());
            assert_eq!(got.iter().map(|d| d.to_vec()).collect::<Vec<_>>(), expected, "round {round}");
        }
    }

    #[test]
    fn a_wait_in_the_receive_call_returns_a_datagram_or_runs_out() {
        let localhost = SocketAddr::from(([127, 0, 0, 1], 0));
        let (mut a, mut b) =
            (UdpIo::bind(localhost, 1 << 20, true).unwrap(), UdpIo::bind(localhost, 1 << 20, true).unwrap());
        let to = b.local_addr().unwrap();
        let clock = crate::clock::Clock::new();
        let started = clock.now();
        let ran_out = b.recv_wait(Some(Duration::from_millis(20)), |_| panic!("nothing was sent"));
        assert_eq!(ran_out.map(|_| ()).unwrap_err().kind(), io::ErrorKind::WouldBlock);
        assert!(crate::clock::between(started, clock.now()) >= Duration::from_millis(20), "it waited");
        a.send(to, b"hello", &Payload::new()).unwrap();
        let mut got = Vec::new();
        let batch = b.recv_wait(Some(Duration::from_secs(5)), |d| got.push(d)).unwrap();
        assert_eq!((batch.datagrams, got), (1, vec![Bytes::from_static(b"hello")]));
        // Reads that must not wait still do not, whatever the timeout: the socket is drained.
        let empty = b.recv_batch(|_| panic!("nothing left"));
        assert_eq!(empty.map(|_| ()).unwrap_err().kind(), io::ErrorKind::WouldBlock);
    }
}
