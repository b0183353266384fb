//! Header of the `safe` layer: safe (agreed, stable) delivery by acknowledgement (Ensemble
//! property `Agree`, digest §2.1 and item 40).

use super::{bad_variant, LayerHeader};
use crate::codec::{Reader, Writer};
use crate::WireError;
use std::sync::Arc;

/// `safe` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Header {
    /// Not subject to safe delivery: membership traffic from above `appl`, or a send.
    NoHdr,
    /// An application cast, held until every member of the view holds it.
    Data,
    /// Per origin rank, how many application casts the sender holds.
    Ack(Arc<[u64]>),
}

impl LayerHeader for Header {
    const LAYER: u8 = 22;
    const ZERO: Self = Header::NoHdr;
    fn variant(&self) -> u8 {
        match self {
            Header::NoHdr => 0,
            Header::Data => 1,
            Header::Ack(_) => 2,
        }
    }
    fn encode_fields(&self, w: &mut Writer<'_>) {
        if let Header::Ack(counts) = self {
            w.varint_vec(counts);
        }
    }
    fn decode_fields(variant: u8, r: &mut Reader<'_>) -> Result<Self, WireError> {
        match variant {
            1 => Ok(Header::Data),
            2 => Ok(Header::Ack(r.varint_vec()?.into())),
            _ => Err(bad_variant::<Self>(variant, r)),
        }
    }
}
