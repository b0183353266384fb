//! Header of the `mflow` layer: credit flow control for multicasts (Ensemble `mflow`; thesis Fig 2.3).

use super::{bad_variant, LayerHeader};
use crate::codec::{Reader, Writer};
use crate::WireError;

/// `mflow` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// A message from above passing through.
    NoHdr,
    /// Flow-control feedback, sent point-to-point to the sender.
    Credit {
        /// How many bytes of the origin's casts the receiver has consumed (cumulative; each cast
        /// counted as its payload and 64, as `mflow`'s window counts it).
        count: u64,
    },
}

impl LayerHeader for Header {
    const LAYER: u8 = 7;
    const ZERO: Self = Header::NoHdr;
    fn variant(&self) -> u8 {
        match self {
            Header::NoHdr => 0,
            Header::Credit { .. } => 1,
        }
    }
    fn encode_fields(&self, w: &mut Writer<'_>) {
        if let Header::Credit { count } = *self {
            w.varint(count);
        }
    }
    fn decode_fields(variant: u8, r: &mut Reader<'_>) -> Result<Self, WireError> {
        match variant {
            1 => Ok(Header::Credit { count: r.varint()? }),
            _ => Err(bad_variant::<Self>(variant, r)),
        }
    }
}
