//! Zero-copy payloads: a chain of reference-counted buffers (thesis §4.4.2, "iovec arrays").

use bytes::{Bytes, BytesMut};

/// An immutable message payload made of reference-counted chunks. Slicing and concatenation never
/// copy bytes: they only adjust the chunk list (thesis §4.4.2 p.64, the `Iovec` operations `sub` and
/// `concat`).
///
/// One chunk is held inline: that is every payload the application or the network hands in, and
/// every message of the common path. Messages move by value between queues, so the inline room is
/// kept to one chunk (40 bytes in all). A payload joined from several chunks (a reassembled
/// message) keeps them in one heap vector.
#[derive(Clone, Default)]
pub struct Payload {
    chunks: Chunks,
    len: usize,
}

/// A payload's chunks: one inline (the common path: cloning it is the reference count alone, with
/// no check of where the chunks live, as `SmallVec` made on every access), or a vector (none, or
/// several). Never `Many` with exactly one chunk, so that equal payloads have equal forms.
#[derive(Clone)]
enum Chunks {
    One(Bytes),
    Many(Vec<Bytes>),
}

impl Default for Chunks {
    fn default() -> Chunks {
        Chunks::Many(Vec::new())
    }
}

impl PartialEq for Payload {
    /// The same chunks, in order (as the chunk list always compared).
    fn eq(&self, other: &Payload) -> bool {
        self.len == other.len && self.chunks() == other.chunks()
    }
}

impl Eq for Payload {}

impl Payload {
    /// The empty payload.
    pub fn new() -> Payload {
        Payload::default()
    }

    /// Total length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the payload has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The chunks, in order, for scatter-gather I/O.
    #[inline]
    pub fn chunks(&self) -> &[Bytes] {
        match &self.chunks {
            Chunks::One(one) => std::slice::from_ref(one),
            Chunks::Many(many) => many,
        }
    }

    /// Appends another payload's chunks (no byte is copied).
    pub fn append(&mut self, other: Payload) {
        if self.is_empty() {
            *self = other;
            return;
        }
        match other.chunks {
            Chunks::One(one) => self.push(one),
            Chunks::Many(many) => many.into_iter().for_each(|chunk| self.push(chunk)),
        }
    }

    /// Appends one chunk (no byte is copied). Empty chunks are skipped.
    pub fn push(&mut self, chunk: Bytes) {
        if chunk.is_empty() {
            return;
        }
        self.len += chunk.len();
        match &mut self.chunks {
            Chunks::Many(many) if many.is_empty() => self.chunks = Chunks::One(chunk),
            Chunks::Many(many) => many.push(chunk),
            Chunks::One(_) => {
                let Chunks::One(first) = std::mem::take(&mut self.chunks) else { unreachable!() };
                self.chunks = Chunks::Many(vec![first, chunk]);
            }
        }
    }

    /// The bytes `[start, start + len)` as a new payload sharing the same buffers.
    ///
    /// # Panics
    /// When the range is outside the payload: callers compute ranges from `len()`.
    pub fn slice(&self, start: usize, len: usize) -> Payload {
        assert!(
            start.checked_add(len).is_some_and(|end| end <= self.len),
            "payload slice {start}+{len} beyond {}",
            self.len
        );
        let mut out = Payload::new();
        let mut skip = start;
        let mut want = len;
        for chunk in self.chunks() {
            if want == 0 {
                break;
            }
            if skip >= chunk.len() {
                skip -= chunk.len();
                continue;
            }
            let take = (chunk.len() - skip).min(want);
            out.push(chunk.slice(skip..skip + take));
            want -= take;
            skip = 0;
        }
        out
    }

    /// Copies the payload into one contiguous buffer. Only for the application boundary and tests;
    /// the protocol path never calls it.
    pub fn to_bytes(&self) -> Bytes {
        match &self.chunks {
            Chunks::One(one) => one.clone(),
            Chunks::Many(many) if many.is_empty() => Bytes::new(),
            Chunks::Many(many) => {
                let mut buf = BytesMut::with_capacity(self.len);
                for chunk in many {
                    buf.extend_from_slice(chunk);
                }
                buf.freeze()
            }
        }
    }

    /// The payload as one contiguous buffer, as [`Payload::to_bytes`], consuming it: a payload of
    /// one chunk gives that chunk itself (no reference-count traffic).
    pub fn into_bytes(self) -> Bytes {
        match self.chunks {
            Chunks::One(one) => one,
            Chunks::Many(_) => self.to_bytes(),
        }
    }
}

impl From<Bytes> for Payload {
    /// Every datagram received and every application message comes in this way.
    fn from(chunk: Bytes) -> Payload {
        if chunk.is_empty() {
            return Payload::new();
        }
        let len = chunk.len();
        Payload { chunks: Chunks::One(chunk), len }
    }
}

impl From<&'static [u8]> for Payload {
    fn from(bytes: &'static [u8]) -> Payload {
        Payload::from(Bytes::from_static(bytes))
    }
}

impl From<Vec<u8>> for Payload {
    fn from(bytes: Vec<u8>) -> Payload {
        Payload::from(Bytes::from(bytes))
    }
}

/// Length, chunks and a fingerprint of the bytes: `Bypass::Diff` compares the two paths' outputs
/// by their `Debug` text, so two payloads of one length in another order must read differently.
/// (`DefaultHasher::new` has fixed keys: the same bytes print the same in every run.)
impl core::fmt::Debug for Payload {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        use std::hash::Hasher;
        let mut hasher = std::hash::DefaultHasher::new();
        self.chunks().iter().for_each(|chunk| hasher.write(chunk));
        write!(f, "Payload({} B in {} chunks, #{:016x})", self.len, self.chunks().len(), hasher.finish())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_text_tells_payloads_of_one_length_apart() {
        let text = |bytes: &[u8]| format!("{:?}", Payload::from(bytes.to_vec()));
        assert_eq!(text(b"abcd"), text(b"abcd"));
        assert_ne!(text(b"abcd"), text(b"abce"), "the bypass diff compares outputs by this text");
    }

    /// A range whose end overflows is refused as beyond the payload (it wrapped, and gave an
    /// empty payload in a build without overflow checks).
    #[test]
    #[should_panic(expected = "beyond")]
    fn a_slice_whose_end_overflows_is_refused() {
        let _ = Payload::from(vec![0u8; 5]).slice(usize::MAX, 2);
    }

    #[test]
    fn a_payload_is_40_bytes_with_one_chunk_inline() {
        assert_eq!(std::mem::size_of::<Payload>(), 40);
        let one = Payload::from(vec![1u8; 10]);
        assert_eq!(one.clone(), one);
        assert_eq!(one.chunks().len(), 1);
    }

    #[test]
    fn slice_and_append_share_buffers() {
        let a = Bytes::from_static(b"hello ");
        let b = Bytes::from_static(b"world");
        let mut p = Payload::from(a.clone());
        p.append(Payload::from(b.clone()));
        assert_eq!(p.len(), 11);
        assert_eq!(&p.to_bytes()[..], b"hello world");
        let s = p.slice(4, 4);
        assert_eq!(&s.to_bytes()[..], b"o wo");
        assert_eq!(s.chunks().len(), 2);
        // No copy: the slice points into the original buffers.
        assert_eq!(s.chunks()[0].as_ptr(), a[4..].as_ptr());
        assert_eq!(s.chunks()[1].as_ptr(), b.as_ptr());
        assert!(p.slice(11, 0).is_empty());
        // A payload pushed one chunk at a time equals one built whole, and empty ones are equal.
        let mut q = Payload::new();
        q.push(Bytes::new());
        assert_eq!(q, Payload::new());
        q.push(a.clone());
        assert_eq!(q, Payload::from(a.clone()));
        q.append(Payload::from(b.clone()));
        assert_eq!(q, p);
        assert_eq!(&q.clone().into_bytes()[..], b"hello world");
        // Appended to an empty payload, a payload of several chunks is taken whole.
        let mut e = Payload::new();
        e.append(p.clone());
        assert_eq!(e, p);
        assert_eq!(e.chunks().len(), 2);
        // A slice within one chunk is one chunk, as a payload of that chunk is.
        assert_eq!(p.slice(0, 5), Payload::from(a.slice(0..5)));
    }
}
