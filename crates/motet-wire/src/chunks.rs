//! Small and medium buffers copied side by side into shared chunks: one allocation, and one
//! reference count, serve several datagrams or payloads, where a buffer of its own costs two (the
//! buffer, and the shared count that the first clone of a vector-backed `Bytes` allocates) and
//! two releases. The runtime receives datagrams and takes the application's small payloads this
//! way; the benchmark's networks carry datagrams this way too, so that they cost what the
//! runtime's receive path costs.

use crate::Payload;
use bytes::{Bytes, BytesMut};

/// Buffers up to this size are copied into a shared chunk of 4 KiB (`CHUNK`).
pub const SMALL: usize = 256;
/// A chunk stays allocated while any buffer copied into it is held (a retransmission buffer, an
/// application's `Bytes`): at worst one small buffer pins this much. A page: at 1 KiB a round
/// trip of 64 B took a new chunk every seven or so, and glibc's allocation and release of it cost
/// about 150 instructions per round trip at the measuring end of `motet perf latency` (callgrind;
/// 7,083 to 6,932).
const CHUNK: usize = 4096;
/// Buffers up to this size (one Ethernet packet's payload), and larger than [`SMALL`], are copied
/// into shared chunks of `MEDIUM_CHUNK` bytes likewise: at 1 KiB, the allocation of a buffer of
/// its own and of its shared count took glibc's slower size classes, about 2,000 instructions per
/// round trip at each end of `motet perf latency --size 1024`, where a copy takes a few dozen.
pub const MEDIUM: usize = 1536;
/// At worst one medium buffer held alone pins this much.
const MEDIUM_CHUNK: usize = 8192;

/// Copies small and medium buffers side by side into shared chunks ([`SMALL`], [`MEDIUM`]).
#[derive(Default, Debug)]
pub struct Chunks {
    small: BytesMut,
    medium: BytesMut,
}

impl Chunks {
    /// `bytes` in a shared chunk if it is small or medium, else in a buffer of its own.
    pub fn copy(&mut self, bytes: &[u8]) -> Bytes {
        match self.chunk(bytes.len()) {
            Some(chunk) => {
                chunk.extend_from_slice(bytes);
                chunk.split().freeze()
            }
            None => Bytes::copy_from_slice(bytes),
        }
    }

    /// A datagram of `head` then `payload`, in one buffer: in a shared chunk if it is small or
    /// medium, else in a buffer of its own.
    pub fn datagram(&mut self, head: &[u8], payload: &Payload) -> Bytes {
        let Some(chunk) = self.chunk(head.len() + payload.len()) else { return datagram_bytes(head, payload) };
        chunk.extend_from_slice(head);
        for part in payload.chunks() {
            chunk.extend_from_slice(part);
        }
        chunk.split().freeze()
    }

    /// The chunk a buffer of `len` bytes goes into, with room for it, if it is small or medium.
    fn chunk(&mut self, len: usize) -> Option<&mut BytesMut> {
        let (chunk, size) = match len {
            n if n <= SMALL => (&mut self.small, CHUNK),
            n if n <= MEDIUM => (&mut self.medium, MEDIUM_CHUNK),
            _ => return None,
        };
        if chunk.capacity() < len {
            *chunk = BytesMut::with_capacity(size);
        }
        Some(chunk)
    }
}

/// A head and its payload as one contiguous datagram in a buffer of its own (copies; for
/// simulators and tests, and for datagrams too large for a chunk).
pub fn datagram_bytes(head: &[u8], payload: &Payload) -> Bytes {
    let mut buf = Vec::with_capacity(head.len() + payload.len());
    buf.extend_from_slice(head);
    for part in payload.chunks() {
        buf.extend_from_slice(part);
    }
    Bytes::from(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A datagram is put together in the same chunks, after what was copied before it.
    #[test]
    fn datagrams_are_put_together_in_the_chunks() {
        let mut chunks = Chunks::default();
        let a = chunks.copy(&[1; 100]);
        let b = chunks.datagram(&[9, 9], &Payload::from(vec![2u8; 50]));
        assert_eq!(a[..], [1; 100][..]);
        assert_eq!(b[..2], [9, 9]);
        assert_eq!(b[2..], [2; 50][..]);
        // Side by side in one allocation.
        assert_eq!(a.as_ptr().wrapping_add(100), b.as_ptr());
        let large = chunks.datagram(&[7], &Payload::from(vec![3u8; MEDIUM]));
        assert_eq!(large.len(), MEDIUM + 1);
        assert!(large[1..].iter().all(|&x| x == 3));
        let medium = chunks.copy(&[4; MEDIUM]);
        assert_eq!(medium[..], [4; MEDIUM][..]);
    }

    /// Small and medium buffers are copied side by side into shared chunks (a new chunk only when
    /// the current one is full), large ones into buffers of their own; every copy reads as its
    /// original, and a copy held after its chunk filled stays intact.
    #[test]
    fn small_buffers_share_chunks_and_every_copy_reads_as_its_original() {
        let mut chunks = Chunks::default();
        let mut copies = Vec::new();
        for k in 0..200u8 {
            let original = vec![k; 64];
            let copy = chunks.copy(&original);
            assert_eq!(copy[..], original[..]);
            copies.push(copy);
        }
        // 200 copies of 64 B: a run of adjacent copies per chunk.
        let breaks = copies.windows(2).filter(|w| w[0].as_ptr().wrapping_add(64) != w[1].as_ptr()).count();
        assert_eq!(breaks, (200 * 64 - 1) / CHUNK, "a new chunk only when one is full");
        assert!(copies.iter().enumerate().all(|(k, c)| c.iter().all(|&b| b == k as u8)), "held copies stay intact");
        let medium = chunks.copy(&[9; 1000]);
        let next = chunks.copy(&[8; 1000]);
        assert_eq!(medium.as_ptr().wrapping_add(1000), next.as_ptr(), "medium buffers share theirs");
        let large = chunks.copy(&[7; MEDIUM + 1]);
        assert_eq!(large.len(), MEDIUM + 1);
        assert!(large.iter().all(|&b| b == 7));
    }
}
