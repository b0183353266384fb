//! The datagram: `version ‖ connection id ‖ multiplexing index ‖ addressing ‖ headers ‖ payload`.
//!
//! Layout (integers are LEB128 varints unless noted):
//!
//! | field | bytes | meaning |
//! |---|---|---|
//! | version | 1 | [`VERSION`] |
//! | conn | 8, little-endian | hash of (group, view id, stack) naming the destination stack(s) (thesis §2.3.1, §3.4.2) |
//! | mux | 1 | multiplexing index: 0 cast, 1 send, 2 group gossip |
//! | origin | varint | the sender's rank in the view |
//! | dest | varint, sends only | the destination's rank |
//! | count | 1 | number of headers, at most [`HEADER_COUNT_MAX`] |
//! | headers | variable | bottom layer's header first (the order they are popped) |
//! | payload | the rest | application bytes, never copied by the decoder |

use crate::codec::{Reader, Writer};
use crate::hdr::{Header, HeaderStack};
use crate::{Payload, Rank, WireError, WireErrorKind};
use bytes::{Buf, Bytes};

/// The wire version this build speaks. 2 (2026-11-25): a whole view (`intra::FullView`, in
/// membership and merge messages) carries its protocol parameters. 3 (2026-11-25): `heal`
/// answers a smaller partition's hello with an `answer` hello, and a coordinator asks to merge
/// only once answered (a member of version 2 would never answer, and its partition would never be
/// asked). 4 (2026-11-27): `suspect`'s `Beat` and `Ping` (a failure detector through the
/// coordinator; a member of version 3 would drop them as malformed and suspect everyone). 5
/// (2026-11-27): `mflow`'s `Credit` and `pt2ptw`'s `Ack` count bytes, not messages (a member of
/// version 4 would read a report of bytes as one of messages, and its window, or ours, would
/// never reopen). 6 (2026-11-28): `suspect`'s `Excluded` gossip, and `sync`'s `FlushOk` carries
/// the ranks its member failed (a member of version 5 would misread the header stack after it,
/// and never tell the coordinator whom it cannot hear). 7 (2026-11-28): `causal`'s `Stamp` (a
/// member of version 6 would drop it as malformed, then read its sender's next timestamp without
/// it). 8 (2026-11-28): the full form's connection id has 64 bits, not 32 (two views' ids
/// coincided at one node about once in 2^32 / 9S per stack among S; [`ConnId`]), `pt2pt`
/// retransmits under `Retrans`, never compressed, and `bottom`'s `Full` asks a view's members for
/// the full form. 9 (2026-11-29): `heal`'s `Hello` carries its partition's size (a member of
/// version 8 would misread it). 10 (2026-11-29): it carries what of a merge's concern its stack
/// has (`keeps`; a member of version 9 would misread the headers after it). A datagram of another version
/// does not decode (`WireErrorKind::Version`; the node counts it as `OtherVersion`), so members
/// of different versions never form a view together.
pub const VERSION: u8 = 10;
/// The largest datagram accepted (the UDP/IPv4 payload limit).
pub const DATAGRAM_SIZE_MAX: usize = 65_507;
/// The largest number of headers in one datagram.
pub const HEADER_COUNT_MAX: usize = 32;

/// The multiplexing index: which virtual channel of a connection a datagram travels on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mux {
    /// A multicast to the whole view.
    Cast,
    /// A point-to-point message to one rank.
    Send {
        /// The destination's rank.
        dest: Rank,
    },
    /// Group-level gossip between partitions (discovery and merging); the connection id names the
    /// group, not a view, and the origin is not a rank (always 0).
    Gossip,
}

/// A connection identifier: names the protocol stack(s) a datagram is for. The full form carries
/// all 64 bits, so it reaches exactly its stack: two of the ids live at a node coincide about once
/// in 2^64 / S^2. A compressed datagram carries only the low 32 bits ([`ConnId::key`]), which
/// two views at a node share about once in 2^32 / 9S per stack built among S (likely from
/// about 30,000 stacks a process); the receiving node drops a compressed datagram under a key
/// that stacks of two ids share, and the layers' repair brings it in full (docs/bypass.md,
/// "Connection ids").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId(pub u64);

impl ConnId {
    /// The 32 bits a compressed cast carries: the key its receivers route by.
    pub fn key(self) -> u32 {
        self.0 as u32
    }

    /// What a compressed datagram's sequence number is shifted by on the wire: 24 bits of the id
    /// that the key leaves out. A stale datagram of another view whose key a stack here has (one
    /// that has gone, or one not yet built here) then reads, at that stack, as a sequence number
    /// at random, which it refuses unless it falls in the 2^15 its window takes (one in 512),
    /// instead of as the small numbers every view's streams begin with.
    fn seqno_shift(self) -> u32 {
        (self.0 >> 40) as u32
    }
}

/// Everything in a datagram before the headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    /// Which stack.
    pub conn: ConnId,
    /// Cast or send (and to whom).
    pub mux: Mux,
    /// The sender's rank.
    pub origin: Rank,
}

/// A decoded datagram.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    /// Addressing.
    pub head: Head,
    /// Headers in push order (the top layer's first), ready to be popped from the end.
    pub hdrs: HeaderStack,
    /// The payload, sharing the datagram's buffer.
    pub payload: Payload,
}

/// Appends the encoding of `head` and `hdrs` (given in push order, top layer first) to `out`. The
/// payload follows on the wire; the caller sends it from its own buffers (scatter-gather).
pub fn encode_head<I>(head: &Head, hdrs: I, out: &mut Vec<u8>)
where
    I: IntoIterator,
    I::Item: std::borrow::Borrow<Header>,
    I::IntoIter: DoubleEndedIterator + ExactSizeIterator,
{
    let hdrs = hdrs.into_iter();
    assert!(hdrs.len() <= HEADER_COUNT_MAX, "a stack pushed {} headers", hdrs.len());
    let mut w = Writer::new(out);
    w.u8(VERSION);
    w.u64_le(head.conn.0);
    match head.mux {
        Mux::Cast => {
            w.u8(0);
            w.varint(head.origin.into());
        }
        Mux::Send { dest } => {
            w.u8(1);
            w.varint(head.origin.into());
            w.varint(dest.into());
        }
        Mux::Gossip => {
            w.u8(2);
            w.varint(head.origin.into());
        }
    }
    w.u8(hdrs.len() as u8);
    for header in hdrs.rev() {
        std::borrow::Borrow::<Header>::borrow(&header).encode(&mut w);
    }
}

/// Encodes a whole datagram into one contiguous buffer (copies the payload; for simulators and
/// tests, where scatter-gather does not apply).
pub fn encode<I>(head: &Head, hdrs: I, payload: &Payload) -> Bytes
where
    I: IntoIterator,
    I::Item: std::borrow::Borrow<Header>,
    I::IntoIter: DoubleEndedIterator + ExactSizeIterator,
{
    let hdrs = hdrs.into_iter();
    let mut out = Vec::with_capacity(16 + hdrs.len() * 3 + payload.len());
    encode_head(head, hdrs, &mut out);
    for chunk in payload.chunks() {
        out.extend_from_slice(chunk);
    }
    Bytes::from(out)
}

/// Decodes a datagram. Total: every input gives a value or an error, never a panic; allocation is
/// bounded by [`HEADER_COUNT_MAX`] and the input length.
pub fn decode(datagram: Bytes) -> Result<Decoded, WireError> {
    if datagram.len() > DATAGRAM_SIZE_MAX {
        return Err(WireError { kind: WireErrorKind::Oversized, offset: DATAGRAM_SIZE_MAX });
    }
    let mut r = Reader::new(&datagram);
    let version = r.u8()?;
    if version != VERSION {
        return Err(WireError { kind: WireErrorKind::Version(version), offset: 0 });
    }
    let conn = ConnId(r.u64_le()?);
    let mux_offset = r.position();
    let mux = r.u8()?;
    if mux > 2 {
        return Err(WireError { kind: WireErrorKind::Mux(mux), offset: mux_offset });
    }
    let origin = r.rank()?;
    let mux = match mux {
        0 => Mux::Cast,
        1 => Mux::Send { dest: r.rank()? },
        _ => Mux::Gossip,
    };
    let count_offset = r.position();
    let count = usize::from(r.u8()?);
    if count > HEADER_COUNT_MAX {
        return Err(WireError { kind: WireErrorKind::HeaderCount(count), offset: count_offset });
    }
    let mut hdrs = Vec::with_capacity(count.max(1));
    for _ in 0..count {
        hdrs.push(Header::decode(&mut r)?);
    }
    hdrs.reverse();
    let hdrs = HeaderStack::from(hdrs);
    let start = r.position();
    // The payload is the rest of the datagram's own buffer: advancing it costs no reference count
    // (a slice would take one and the datagram's drop give it back).
    let mut datagram = datagram;
    datagram.advance(start);
    let payload = Payload::from(datagram);
    Ok(Decoded { head: Head { conn, mux, origin }, hdrs, payload })
}

/// A compressed datagram (thesis §3.4.2, SOSP'99 §4.3: the headers of a common trace are constant
/// but for one sequence number, so they fold into the connection id; what is left on the wire is
/// that number). Layout, 8 bytes for a cast and for a send:
///
/// | field | bytes | meaning |
/// |---|---|---|
/// | kind and origin | 1 | `0b11oo_oooo` a cast, `0b01oo_oooo` a send, from rank `o` (< 64) |
/// | key | 4, little-endian | a cast's: the low 32 bits of the connection id ([`ConnId::key`]); a send's: its destination's ([`send_conn`]) |
/// | seqno | 3, little-endian | the low 24 bits of the trace's sequence number, plus 24 bits of the connection id ([`Arrived::seqno`]) |
/// | payload | the rest | |
///
/// The first byte never equals [`VERSION`] nor the bundle tag, so the three forms are told apart
/// by it. The receiver rebuilds the headers from its stack's template of the trace (every member
/// runs the same stack) and the full sequence number from the one it expects next
/// ([`expand_seqno`]). A send's destination is in its connection id, as Ensemble folds addressing
/// headers into it: each member is reached under one of its own, so the destination costs no
/// byte, and the 24 bits of sequence number fit in 8 bytes. (Until the thirty-first session the
/// number had 16 bits and the destination its own byte: a copy of a datagram that the network
/// delivered 2^15 messages late was read as a message ahead and delivered in place of the
/// genuine one.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compressed {
    /// Which stack: the connection id of its view (a send's destination is folded in when the
    /// head is encoded).
    pub conn: ConnId,
    /// Cast or send (and to whom); never gossip.
    pub mux: Mux,
    /// The sender's rank, below [`COMPRESSED_ORIGIN_MAX`].
    pub origin: Rank,
    /// The sequence number (its low [`SEQNO_BITS`] bits go on the wire).
    pub seqno: u64,
}

/// A compressed datagram's head as it arrives: a send's destination is not on the wire, but in
/// `key`, which names the destination's stack ([`send_conn`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrived {
    /// The key on the wire: a cast's view's ([`ConnId::key`]), or a send's destination's.
    pub key: u32,
    /// A cast (or else a send).
    pub cast: bool,
    /// The sender's rank.
    pub origin: Rank,
    /// The low [`SEQNO_BITS`] bits of the sequence number, shifted ([`Arrived::seqno`]).
    pub shifted: u32,
}

impl Arrived {
    /// The low [`SEQNO_BITS`] bits of the sequence number, for the stack of connection `conn`
    /// (the key it came under is `conn`'s, or the send key of one of its ranks).
    pub fn seqno(&self, conn: ConnId) -> u32 {
        self.shifted.wrapping_sub(conn.seqno_shift()) & SEQNO_MASK
    }
}

const SEQNO_MASK: u32 = (1 << SEQNO_BITS) - 1;

/// Ranks from here on send the full form.
pub const COMPRESSED_ORIGIN_MAX: Rank = 64;

/// Bits of the sequence number a compressed datagram carries.
pub const SEQNO_BITS: u32 = 24;

/// How far ahead of the expected sequence number a compressed one may be: twice what flow
/// control lets a sender run ahead of its slowest receiver (2^14 messages; the core's
/// `StackConfig::validate`). Anything else with those low bits is behind: a duplicate.
pub const SEQNO_AHEAD_MAX: u64 = 1 << 15;

/// The key under which the member at rank `dest` of the view whose connection id is `conn`
/// receives compressed sends: distinct for every rank of a view, and from the view's own key.
pub fn send_conn(conn: ConnId, dest: Rank) -> u32 {
    // An odd multiplier: rank + 1 maps to distinct nonzero values, so no rank's key is the
    // view's, nor another rank's.
    conn.key() ^ (u32::from(dest) + 1).wrapping_mul(0x9E37_79B9)
}

/// Whether a datagram is in the compressed form.
pub fn is_compressed(datagram: &[u8]) -> bool {
    datagram.first().is_some_and(|b| b & 0x40 != 0)
}

/// The length of a compressed head.
pub const COMPRESSED_HEAD_MAX: usize = 8;

/// Appends a compressed head; `None` (nothing written) when it does not apply (gossip, or an
/// origin too large).
pub fn encode_compressed(head: &Compressed, out: &mut Vec<u8>) -> Option<()> {
    let (bytes, len) = compressed_head(head)?;
    out.extend_from_slice(&bytes[..len]);
    Some(())
}

/// A compressed head in a fixed array, and its length ([`encode_compressed`] without a buffer to
/// grow: a sender builds one per datagram of the common path).
pub fn compressed_head(head: &Compressed) -> Option<([u8; COMPRESSED_HEAD_MAX], usize)> {
    if head.origin >= COMPRESSED_ORIGIN_MAX {
        return None;
    }
    let (kind, key) = match head.mux {
        Mux::Cast => (0xc0, head.conn.key()),
        Mux::Send { dest } => (0x40, send_conn(head.conn, dest)),
        Mux::Gossip => return None,
    };
    let mut out = [0u8; COMPRESSED_HEAD_MAX];
    out[0] = kind | head.origin as u8;
    out[1..5].copy_from_slice(&key.to_le_bytes());
    let shifted = (head.seqno as u32).wrapping_add(head.conn.seqno_shift());
    out[5..8].copy_from_slice(&shifted.to_le_bytes()[..3]);
    Some((out, COMPRESSED_HEAD_MAX))
}

/// Decodes a compressed datagram: its head and its payload (sharing the buffer).
pub fn decode_compressed(datagram: Bytes) -> Result<(Arrived, Payload), WireError> {
    if datagram.len() > DATAGRAM_SIZE_MAX {
        return Err(WireError { kind: WireErrorKind::Oversized, offset: DATAGRAM_SIZE_MAX });
    }
    let mut r = Reader::new(&datagram);
    let first = r.u8()?;
    if !is_compressed(&[first]) {
        return Err(WireError { kind: WireErrorKind::Version(first), offset: 0 });
    }
    let origin = Rank::from(first & 0x3f);
    let key = r.u32_le()?;
    let shifted = u32::from(r.u8()?) | u32::from(r.u8()?) << 8 | u32::from(r.u8()?) << 16;
    let start = r.position();
    let mut datagram = datagram;
    datagram.advance(start);
    let payload = Payload::from(datagram);
    Ok((Arrived { key, cast: first & 0x80 != 0, origin, shifted }, payload))
}

/// The sequence number whose low [`SEQNO_BITS`] bits are `low`, given the one the receiver
/// expects next from that origin: ahead of it by less than [`SEQNO_AHEAD_MAX`] (what flow control
/// allows), else behind it (a duplicate, up to 2^24 - 2^15 messages late; one later still reads
/// as ahead). A number that would be behind the first one is taken as far ahead, which the
/// layers' windows refuse.
pub fn expand_seqno(low: u32, expected: u64) -> u64 {
    const SPAN: u64 = 1 << SEQNO_BITS;
    let ahead = u64::from(low).wrapping_sub(expected) & (SPAN - 1);
    if ahead < SEQNO_AHEAD_MAX {
        return expected + ahead;
    }
    expected.checked_sub(SPAN - ahead).unwrap_or(expected + ahead)
}

#[cfg(test)]
mod compressed_tests {
    use super::*;

    #[test]
    fn compressed_heads_are_8_bytes_and_round_trip() {
        let conn = ConnId(0x0123_4567_dead_beef);
        for mux in [Mux::Cast, Mux::Send { dest: 5 }, Mux::Send { dest: 200 }, Mux::Send { dest: Rank::MAX }] {
            let head = Compressed { conn, mux, origin: 63, seqno: 0x0123_4567_89ab };
            let mut out = Vec::new();
            encode_compressed(&head, &mut out).unwrap();
            assert_eq!(out.len(), 8, "{mux:?}");
            assert!(is_compressed(&out) && out[0] != VERSION && !crate::bundle::is_bundle(&out));
            out.extend_from_slice(b"payload");
            let (back, payload) = decode_compressed(Bytes::from(out)).unwrap();
            let (cast, on_wire) = match mux {
                Mux::Send { dest } => (false, send_conn(conn, dest)),
                _ => (true, 0xdead_beef),
            };
            assert_eq!((back.key, back.cast, back.origin), (on_wire, cast, 63));
            assert_eq!(back.seqno(conn), 0x67_89ab);
            assert_ne!(back.seqno(ConnId(conn.0 ^ 1 << 41)), 0x67_89ab, "another view's stack reads another number");
            assert_eq!(payload.to_bytes(), Bytes::from_static(b"payload"));
        }
        let mut out = Vec::new();
        assert!(encode_compressed(&Compressed { conn: ConnId(1), mux: Mux::Cast, origin: 64, seqno: 0 }, &mut out)
            .is_none());
        assert!(out.is_empty());
        assert!(!is_compressed(&[VERSION]) && !is_compressed(&[crate::bundle::BUNDLE_TAG]));
        assert!(decode_compressed(Bytes::from_static(&[0xc1, 1, 2, 3, 4, 5, 6])).is_err(), "truncated");
    }

    /// Every rank of a view receives sends under its own connection id, none the view's.
    #[test]
    fn each_rank_has_its_own_send_connection() {
        for conn in [ConnId(0), ConnId(0xdead_beef), ConnId(u64::MAX)] {
            let ids: std::collections::BTreeSet<u32> = (0..=Rank::MAX).map(|r| send_conn(conn, r)).collect();
            assert_eq!(ids.len(), usize::from(Rank::MAX) + 1);
            assert!(!ids.contains(&conn.key()));
        }
    }

    #[test]
    fn sequence_numbers_expand_ahead_within_the_window_and_behind_otherwise() {
        const SPAN: i64 = 1 << SEQNO_BITS;
        let ahead_max = SEQNO_AHEAD_MAX as i64;
        for expected in [0u64, 5, 0xfff0, 0x1_0005, 0x12_3456, 0xffff_ff00, 0x1234_5678_9abc] {
            for delta in [-(SPAN - ahead_max), -3_000_000, -65_536, -50_000, -3000, -1, 0, 1, 4096, ahead_max - 1] {
                let seqno = expected as i64 + delta;
                if seqno < 0 {
                    continue;
                }
                let seqno = seqno as u64;
                let low = (seqno & (SPAN as u64 - 1)) as u32;
                assert_eq!(expand_seqno(low, expected), seqno, "expected {expected} delta {delta}");
            }
        }
        // A copy 65,536 casts late, which 16 bits took for the one expected (a review's finding).
        assert_eq!(expand_seqno(4_464, 70_000), 4_464);
        // Behind the first number: far ahead, for the windows to refuse.
        assert_eq!(expand_seqno((SPAN - 1) as u32, 3), SPAN as u64 - 1);
    }
}
