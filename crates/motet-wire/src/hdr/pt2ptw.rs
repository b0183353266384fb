//! Header of the `pt2ptw` layer: window flow control for point-to-point messages (Ensemble `pt2ptw`; thesis Fig 2.3).

use super::{bad_variant, LayerHeader};
use crate::codec::{Reader, Writer};
use crate::WireError;

/// `pt2ptw` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// A message from above passing through.
    NoHdr,
    /// Flow-control feedback, sent point-to-point to the sender.
    Ack {
        /// How many bytes of point-to-point messages from the destination's peer the receiver has
        /// consumed (cumulative; each message counted as its payload and 64, as `pt2ptw`'s window
        /// counts it).
        count: u64,
    },
}

impl LayerHeader for Header {
    const LAYER: u8 = 6;
    const ZERO: Self = Header::NoHdr;
    fn variant(&self) -> u8 {
        match self {
            Header::NoHdr => 0,
            Header::Ack { .. } => 1,
        }
    }
    fn encode_fields(&self, w: &mut Writer<'_>) {
        if let Header::Ack { count } = *self {
            w.varint(count);
        }
    }
    fn decode_fields(variant: u8, r: &mut Reader<'_>) -> Result<Self, WireError> {
        match variant {
            1 => Ok(Header::Ack { count: r.varint()? }),
            _ => Err(bad_variant::<Self>(variant, r)),
        }
    }
}
