//! The datagram: `version ‖ connection id ‖ multiplexing index ‖ addressing ‖ headers ‖ payload`.
//!
//! Layout (integers are LEB128 varints unless noted):
//!
//! | field | bytes | meaning |
//! |---|---|---|
//! | version | 1 | [`VERSION`] |
//! | conn | 4, little-endian | hash of (group, view id, stack) naming the destination stack(s) (thesis §2.3.1, §3.4.2) |
//! | mux | 1 | multiplexing index: 0 cast, 1 send, 2 group gossip |
//! | origin | varint | the sender's rank in the view |
//! | dest | varint, sends only | the destination's rank |
//! | count | 1 | number of headers, at most [`HEADER_COUNT_MAX`] |
//! | headers | variable | bottom layer's header first (the order they are popped) |
//! | payload | the rest | application bytes, never copied by the decoder |

use crate::codec::{Reader, Writer};
use crate::hdr::{Header, HeaderStack};
use crate::{Payload, Rank, WireError, WireErrorKind};
use bytes::Bytes;

/// The wire version this build speaks.
pub const VERSION: u8 = 1;
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

/// A connection identifier: names the protocol stack(s) a datagram is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId(pub u32);

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
pub fn encode_head(head: &Head, hdrs: &[Header], out: &mut Vec<u8>) {
    assert!(hdrs.len() <= HEADER_COUNT_MAX, "a stack pushed {} headers", hdrs.len());
    let mut w = Writer::new(out);
    w.u8(VERSION);
    w.u32_le(head.conn.0);
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
    for header in hdrs.iter().rev() {
        header.encode(&mut w);
    }
}

/// Encodes a whole datagram into one contiguous buffer (copies the payload; for simulators and
/// tests, where scatter-gather does not apply).
pub fn encode(head: &Head, hdrs: &[Header], payload: &Payload) -> Bytes {
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
    let conn = ConnId(r.u32_le()?);
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
    let mut hdrs = HeaderStack::with_capacity(count.max(1));
    for _ in 0..count {
        hdrs.push(Header::decode(&mut r)?);
    }
    hdrs.reverse();
    let start = r.position();
    let payload = Payload::from(datagram.slice(start..));
    Ok(Decoded { head: Head { conn, mux, origin }, hdrs, payload })
}
