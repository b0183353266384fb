//! Header of the `intra` layer: view installation within a partition (Ensemble `intra`).

use super::{bad_variant, LayerHeader};
use crate::codec::{Reader, Writer};
use crate::WireError;

/// `intra` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Header {
    /// A message from above passing through.
    NoHdr,
    /// Coordinator → all: the next view, after round `round`, has these ranks of the current
    /// view, in this order.
    View {
        /// The flush round this view concludes.
        round: u64,
        /// Surviving ranks of the current view.
        survivors: Vec<u64>,
    },
}

impl LayerHeader for Header {
    const LAYER: u8 = 14;
    const ZERO: Self = Header::NoHdr;
    fn variant(&self) -> u8 {
        match self {
            Header::NoHdr => 0,
            Header::View { .. } => 1,
        }
    }
    fn encode_fields(&self, w: &mut Writer<'_>) {
        if let Header::View { round, survivors } = self {
            w.varint(*round);
            w.varint_vec(survivors);
        }
    }
    fn decode_fields(variant: u8, r: &mut Reader<'_>) -> Result<Self, WireError> {
        match variant {
            1 => Ok(Header::View { round: r.varint()?, survivors: r.varint_vec()? }),
            _ => Err(bad_variant::<Self>(variant, r)),
        }
    }
}
