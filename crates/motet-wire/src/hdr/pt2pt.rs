//! Header of the `pt2pt` layer: reliable FIFO point-to-point (thesis §2.3.3, §5.6).

use super::{bad_variant, LayerHeader};
use crate::codec::{Reader, Writer};
use crate::{Seqno, WireError};

/// `pt2pt` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// A multicast passing through untouched (`Pt2pt.NoHdr`).
    NoHdr,
    /// A point-to-point message with the sender's per-destination sequence number.
    Data {
        /// Sequence number, from 0, per (sender, destination).
        seqno: Seqno,
    },
    /// A retransmission of `Data { seqno }`. Its own variant so that it never matches the send
    /// trace's template, and so leaves in the full form, whose 64-bit connection id reaches its
    /// stack even where a compressed datagram's 32-bit key is shared and dropped (`ConnId`).
    Retrans {
        /// Sequence number, as in `Data`.
        seqno: Seqno,
    },
    /// Cumulative acknowledgement: every message below `next` was received.
    Ack {
        /// The next sequence number the receiver expects.
        next: Seqno,
    },
    /// A request to retransmit `lo..=hi` (inclusive).
    Nak {
        /// First missing sequence number.
        lo: Seqno,
        /// Last missing sequence number (inclusive).
        hi: Seqno,
    },
}

impl LayerHeader for Header {
    const LAYER: u8 = 3;
    const ZERO: Self = Header::NoHdr;
    fn variant(&self) -> u8 {
        match self {
            Header::NoHdr => 0,
            Header::Data { .. } => 1,
            Header::Ack { .. } => 2,
            Header::Nak { .. } => 3,
            Header::Retrans { .. } => 4,
        }
    }
    fn encode_fields(&self, w: &mut Writer<'_>) {
        match *self {
            Header::NoHdr => {}
            Header::Data { seqno } | Header::Retrans { seqno } => w.varint(seqno),
            Header::Ack { next } => w.varint(next),
            Header::Nak { lo, hi } => {
                w.varint(lo);
                w.varint(hi);
            }
        }
    }
    fn decode_fields(variant: u8, r: &mut Reader<'_>) -> Result<Self, WireError> {
        Ok(match variant {
            1 => Header::Data { seqno: r.varint()? },
            2 => Header::Ack { next: r.varint()? },
            3 => Header::Nak { lo: r.varint()?, hi: r.varint()? },
            4 => Header::Retrans { seqno: r.varint()? },
            _ => return Err(bad_variant::<Self>(variant, r)),
        })
    }
}
