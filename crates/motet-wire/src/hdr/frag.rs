//! Header of the `frag` layer: fragmentation and reassembly (Ensemble `frag`; thesis Fig 2.3).

use super::{bad_variant, LayerHeader};
use crate::codec::{Reader, Writer};
use crate::WireError;

/// `frag` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// The message fits in one datagram and was not fragmented.
    Whole,
    /// Fragment `index` of `count` (`index < count`, `count >= 2`).
    Part {
        /// This fragment's position, from 0.
        index: u32,
        /// How many fragments the message has.
        count: u32,
    },
}

impl LayerHeader for Header {
    const LAYER: u8 = 5;
    const ZERO: Self = Header::Whole;
    fn variant(&self) -> u8 {
        match self {
            Header::Whole => 0,
            Header::Part { .. } => 1,
        }
    }
    fn encode_fields(&self, w: &mut Writer<'_>) {
        if let Header::Part { index, count } = *self {
            w.varint(index.into());
            w.varint(count.into());
        }
    }
    fn decode_fields(variant: u8, r: &mut Reader<'_>) -> Result<Self, WireError> {
        match variant {
            1 => Ok(Header::Part { index: r.varint_u32()?, count: r.varint_u32()? }),
            _ => Err(bad_variant::<Self>(variant, r)),
        }
    }
}
