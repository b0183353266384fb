//! Header of the `local` layer: trivial (the layer only loops casts back to their sender).

use super::{bad_variant, LayerHeader};
use crate::codec::{Reader, Writer};
use crate::WireError;

/// `local` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// The only variant.
    NoHdr,
}

impl LayerHeader for Header {
    const LAYER: u8 = 8;
    const ZERO: Self = Header::NoHdr;
    fn variant(&self) -> u8 {
        0
    }
    fn encode_fields(&self, _w: &mut Writer<'_>) {}
    fn decode_fields(variant: u8, r: &mut Reader<'_>) -> Result<Self, WireError> {
        Err(bad_variant::<Self>(variant, r))
    }
}
