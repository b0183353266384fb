//! The UDP socket: set up with `socket2`, polled with `mio`, received in batches with `recvmmsg`
//! (through `quinn-udp`, which also takes GRO-coalesced segments), and sent scatter-gather with
//! `sendmsg` so a payload is never copied into a send buffer (thesis §4.4.2: iovecs all the way
//! to the kernel).

use bytes::{Bytes, BytesMut};
use motet_core::Payload;
use quinn_udp::{RecvMeta, Transmit, UdpSockRef, UdpSocketState, BATCH_SIZE};
use smallvec::SmallVec;
use socket2::{Domain, Protocol, SockAddr, SockRef, Socket, Type};
use std::io::{self, IoSlice, IoSliceMut};
use std::net::SocketAddr;

/// Largest datagram the runtime receives in one slot: with GRO the kernel may hand over several
/// segments of one sender coalesced into one buffer of up to 64 KiB.
const SLOT: usize = 64 * 1024;

/// What one [`UdpIo::recv_batch`] got.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Batch {
    /// Datagrams handed over (a slot may hold several, with GRO).
    pub(crate) datagrams: usize,
    /// The batch was not full: the socket's queue was empty when the call returned (on Linux, where
    /// `recvmmsg` stops early only then). Edge-triggered readiness reports any datagram that
    /// arrives later, so no second call is needed to learn that the socket is drained (a
    /// `recvmmsg` that would only return `EWOULDBLOCK`).
    pub(crate) drained: bool,
}

/// Slots offered to a `recvmmsg` after one that did not fill its batch: the call prepares a
/// header per slot, so a quiet socket (one datagram per turn, as in a round trip) is read with a
/// small batch, and a busy one, once a batch fills, with the whole [`BATCH_SIZE`].
const QUIET_BATCH: usize = 4;

/// Buffers up to this size are copied into a shared chunk of [`CHUNK`] bytes instead of a buffer
/// of their own: one allocation (and one reference count) serves several small datagrams or
/// payloads, where a buffer of its own costs two (the copy, and the shared count the first clone
/// of a vector-backed `Bytes` allocates).
pub(crate) const SMALL: usize = 256;
/// A chunk stays allocated while any buffer copied into it is held (a retransmission buffer, an
/// application's `Bytes`): at worst one small buffer pins this much.
const CHUNK: usize = 1024;

/// Copies small buffers side by side into shared chunks ([`SMALL`], [`CHUNK`]).
#[derive(Default)]
pub(crate) struct Chunks(BytesMut);

impl Chunks {
    /// `bytes` in a shared chunk if it is small, else in a buffer of its own.
    pub(crate) fn copy(&mut self, bytes: &[u8]) -> Bytes {
        if bytes.len() > SMALL {
            return Bytes::copy_from_slice(bytes);
        }
        if self.0.capacity() < bytes.len() {
            self.0 = BytesMut::with_capacity(CHUNK);
        }
        self.0.extend_from_slice(bytes);
        self.0.split().freeze()
    }
}

/// One process's UDP socket.
pub(crate) struct UdpIo {
    socket: mio::net::UdpSocket,
    state: UdpSocketState,
    slots: Vec<Vec<u8>>,
    meta: Vec<RecvMeta>,
    /// Slots the next `recvmmsg` offers ([`QUIET_BATCH`] or all).
    batch: usize,
    /// Where small datagrams are copied.
    chunks: Chunks,
}

impl UdpIo {
    /// Binds `addr` with send and receive buffers of `buffer` bytes (as far as the kernel allows).
    pub(crate) fn bind(addr: SocketAddr, buffer: usize) -> io::Result<UdpIo> {
        let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
        // Failing to enlarge the buffers is not fatal: the kernel caps them at its maximum.
        let _ = socket.set_recv_buffer_size(buffer);
        let _ = socket.set_send_buffer_size(buffer);
        socket.set_nonblocking(true)?;
        socket.bind(&SockAddr::from(addr))?;
        let std_socket: std::net::UdpSocket = socket.into();
        let socket = mio::net::UdpSocket::from_std(std_socket);
        let state = UdpSocketState::new(UdpSockRef::from(&socket))?;
        Ok(UdpIo {
            socket,
            state,
            slots: (0..BATCH_SIZE).map(|_| vec![0; SLOT]).collect(),
            meta: vec![RecvMeta::default(); BATCH_SIZE],
            batch: BATCH_SIZE,
            chunks: Chunks::default(),
        })
    }

    /// Binds `group:port` with address reuse (so several processes on one host can listen) and
    /// joins the IPv4 multicast `group` on the interface with address `interface`.
    pub(crate) fn bind_multicast(
        group: std::net::Ipv4Addr,
        port: u16,
        interface: std::net::Ipv4Addr,
        buffer: usize,
    ) -> io::Result<UdpIo> {
        if !group.is_multicast() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{group} is not a multicast address")));
        }
        let socket = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
        socket.set_reuse_address(true)?;
        socket.set_reuse_port(true)?;
        let _ = socket.set_recv_buffer_size(buffer);
        socket.set_nonblocking(true)?;
        socket.bind(&SockAddr::from(SocketAddr::from((group, port))))?;
        socket.join_multicast_v4(&group, &interface)?;
        let socket = mio::net::UdpSocket::from_std(socket.into());
        let state = UdpSocketState::new(UdpSockRef::from(&socket))?;
        Ok(UdpIo {
            socket,
            state,
            slots: (0..BATCH_SIZE).map(|_| vec![0; SLOT]).collect(),
            meta: vec![RecvMeta::default(); BATCH_SIZE],
            batch: BATCH_SIZE,
            chunks: Chunks::default(),
        })
    }

    /// Sends multicast from `interface` with `ttl` hops, looping back to this host's listeners
    /// (other members may share the host).
    pub(crate) fn set_multicast_sender(&self, interface: std::net::Ipv4Addr, ttl: u32) -> io::Result<()> {
        let socket = SockRef::from(&self.socket);
        socket.set_multicast_if_v4(&interface)?;
        socket.set_multicast_ttl_v4(ttl)?;
        socket.set_multicast_loop_v4(true)
    }

    pub(crate) fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    pub(crate) fn source(&mut self) -> &mut mio::net::UdpSocket {
        &mut self.socket
    }

    /// Receives one batch (one `recvmmsg`), calling `each` with every datagram. Each datagram is
    /// copied once out of the batch buffer: a small one into a shared [`CHUNK`], a larger one into
    /// a buffer of its own size, so what the protocol keeps (retransmission buffers) pins its own
    /// bytes or at most one small chunk, never a 64 KiB slot. `Err(WouldBlock)` when none is
    /// waiting.
    pub(crate) fn recv_batch(&mut self, mut each: impl FnMut(SocketAddr, Bytes)) -> io::Result<Batch> {
        let offered = self.batch.min(self.slots.len());
        let n = {
            let mut bufs: SmallVec<[IoSliceMut<'_>; BATCH_SIZE]> =
                self.slots[..offered].iter_mut().map(|slot| IoSliceMut::new(slot)).collect();
            self.state.recv(UdpSockRef::from(&self.socket), &mut bufs, &mut self.meta)?
        };
        self.batch = if n == offered { BATCH_SIZE } else { QUIET_BATCH };
        let mut datagrams = 0;
        for (meta, slot) in self.meta.iter().zip(&self.slots).take(n) {
            let stride = meta.stride.max(1);
            for segment in slot[..meta.len].chunks(stride) {
                each(meta.addr, self.chunks.copy(segment));
                datagrams += 1;
            }
        }
        // Linux's non-blocking `recvmmsg` stops early only when the queue is empty. Elsewhere
        // `quinn-udp` may read one datagram per call whatever the batch: only `WouldBlock` says so.
        let drained = cfg!(any(target_os = "linux", target_os = "android")) && n < offered;
        Ok(Batch { datagrams, drained })
    }

    /// How many datagrams one [`UdpIo::send_segments`] may carry (1 where the kernel has no UDP
    /// segmentation offload, or after it refused it once).
    pub(crate) fn max_segments(&self) -> usize {
        self.state.max_gso_segments()
    }

    /// Sends `contents` to `to` as datagrams of `segment` bytes each (the last may be shorter) in
    /// one system call, with UDP generic segmentation offload (`UDP_SEGMENT`): the kernel cuts
    /// the buffer into packets, and a receiver with GRO may get them back in one slot.
    pub(crate) fn send_segments(&self, to: SocketAddr, contents: &[u8], segment: usize) -> io::Result<()> {
        let transmit = Transmit { destination: to, ecn: None, contents, segment_size: Some(segment), src_ip: None };
        self.state.try_send(UdpSockRef::from(&self.socket), &transmit)
    }

    /// Sends `head` then `payload` as one datagram to `to`, without copying either.
    pub(crate) fn send(&self, to: SocketAddr, head: &[u8], payload: &Payload) -> io::Result<()> {
        let mut slices: SmallVec<[IoSlice<'_>; 4]> = SmallVec::with_capacity(1 + payload.chunks().len());
        slices.push(IoSlice::new(head));
        slices.extend(payload.chunks().iter().map(|chunk| IoSlice::new(chunk)));
        SockRef::from(&self.socket).send_to_vectored(&slices, &SockAddr::from(to)).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Receives until `n` datagrams came (bounded: the sender is on loopback).
    fn receive(io: &mut UdpIo, n: usize) -> (Vec<Bytes>, Vec<Batch>) {
        let (mut got, mut batches) = (Vec::new(), Vec::new());
        for _ in 0..2_000 {
            match io.recv_batch(|_, datagram| got.push(datagram)) {
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
    fn small_datagrams_share_chunks_and_stay_intact_and_large_ones_are_whole() {
        let localhost = SocketAddr::from(([127, 0, 0, 1], 0));
        let (a, mut b) = (UdpIo::bind(localhost, 1 << 20).unwrap(), UdpIo::bind(localhost, 1 << 20).unwrap());
        let to = b.local_addr().unwrap();
        // 300 datagrams: enough small ones to fill several chunks, and some larger than SMALL.
        let sent: Vec<Vec<u8>> = (0..300u32)
            .map(|k| vec![k as u8; if k % 7 == 0 { SMALL + 100 } else { 20 + (k as usize % 200) }])
            .collect();
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
        // Consecutive small datagrams sit side by side in one chunk (no allocation each); a large
        // one has a buffer of its own.
        let adjacent = |a: &Bytes, b: &Bytes| a.as_ptr().wrapping_add(a.len()) == b.as_ptr();
        let shared = got.windows(2).filter(|w| w[0].len() <= SMALL && w[1].len() <= SMALL && adjacent(&w[0], &w[1]));
        assert!(shared.count() > got.len() / 4, "small datagrams share chunks");
        for pair in got.windows(2).filter(|w| w[1].len() > SMALL) {
            assert!(!adjacent(&pair[0], &pair[1]), "a large datagram is not in a chunk");
        }
    }

    #[test]
    fn a_batch_that_is_not_full_says_the_socket_is_drained() {
        let localhost = SocketAddr::from(([127, 0, 0, 1], 0));
        let (a, mut b) = (UdpIo::bind(localhost, 1 << 20).unwrap(), UdpIo::bind(localhost, 1 << 20).unwrap());
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
        let batch = b.recv_batch(|_, _| {}).unwrap();
        assert_eq!((batch.datagrams, batch.drained), (QUIET_BATCH, false), "full: maybe more waiting");
        assert_eq!(b.batch, BATCH_SIZE);
    }
}
