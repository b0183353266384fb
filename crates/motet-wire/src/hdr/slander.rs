//! Header of the `slander` layer: shared suspicions (Ensemble `slander`).

use super::{bad_variant, LayerHeader};
use crate::codec::{Reader, Writer};
use crate::WireError;

/// `slander` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Header {
    /// A message from above passing through.
    NoHdr,
    /// The sender suspects these ranks.
    Slander {
        /// Suspected ranks.
        ranks: Vec<u64>,
    },
}

impl LayerHeader for Header {
    const LAYER: u8 = 11;
    const ZERO: Self = Header::NoHdr;
    fn variant(&self) -> u8 {
        match self {
            Header::NoHdr => 0,
            Header::Slander { .. } => 1,
        }
    }
    fn encode_fields(&self, w: &mut Writer<'_>) {
        if let Header::Slander { ranks } = self {
            w.varint_vec(ranks);
        }
    }
    fn decode_fields(variant: u8, r: &mut Reader<'_>) -> Result<Self, WireError> {
        match variant {
            1 => Ok(Header::Slander { ranks: r.varint_vec()? }),
            _ => Err(bad_variant::<Self>(variant, r)),
        }
    }
}
