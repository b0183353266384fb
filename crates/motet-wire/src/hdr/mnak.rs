//! Header of the `mnak` layer: reliable FIFO multicast by negative acknowledgement (thesis §5.6,
//! Figs 5.2 and 5.4; Ensemble `mnak` header set).

use super::{bad_variant, LayerHeader};
use crate::codec::{Reader, Writer};
use crate::{Rank, Seqno, WireError};

/// `mnak` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// A point-to-point message passing through (mnak handles casts only).
    NoHdr,
    /// A multicast with the origin's sequence number.
    Data {
        /// Per-origin sequence number, from 0.
        seqno: Seqno,
    },
    /// An unreliable multicast: not sequenced, not buffered, not retransmitted (gossip).
    Unrel,
    /// A request to retransmit casts `lo..=hi` (inclusive) of `origin`.
    Nak {
        /// Whose casts are missing.
        origin: Rank,
        /// First missing sequence number.
        lo: Seqno,
        /// Last missing sequence number (inclusive).
        hi: Seqno,
    },
    /// A retransmission, sent point-to-point to the member that asked, of `origin`'s cast `seqno`.
    Retrans {
        /// The original sender.
        origin: Rank,
        /// Its sequence number.
        seqno: Seqno,
    },
}

impl LayerHeader for Header {
    const LAYER: u8 = 2;
    const ZERO: Self = Header::NoHdr;
    fn variant(&self) -> u8 {
        match self {
            Header::NoHdr => 0,
            Header::Data { .. } => 1,
            Header::Unrel => 2,
            Header::Nak { .. } => 3,
            Header::Retrans { .. } => 4,
        }
    }
    fn encode_fields(&self, w: &mut Writer<'_>) {
        match *self {
            Header::NoHdr | Header::Unrel => {}
            Header::Data { seqno } => w.varint(seqno),
            Header::Nak { origin, lo, hi } => {
                w.varint(origin.into());
                w.varint(lo);
                w.varint(hi);
            }
            Header::Retrans { origin, seqno } => {
                w.varint(origin.into());
                w.varint(seqno);
            }
        }
    }
    fn decode_fields(variant: u8, r: &mut Reader<'_>) -> Result<Self, WireError> {
        Ok(match variant {
            1 => Header::Data { seqno: r.varint()? },
            2 => Header::Unrel,
            3 => Header::Nak { origin: r.rank()?, lo: r.varint()?, hi: r.varint()? },
            4 => Header::Retrans { origin: r.rank()?, seqno: r.varint()? },
            _ => return Err(bad_variant::<Self>(variant, r)),
        })
    }
}
