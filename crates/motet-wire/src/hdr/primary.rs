//! Header of the `primary` layer: trivial (the layer marks views primary; the flag travels in the
//! view itself).

use super::{bad_variant, LayerHeader};
use crate::codec::{Reader, Writer};
use crate::WireError;

/// `primary` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// The only variant.
    NoHdr,
}

impl LayerHeader for Header {
    const LAYER: u8 = 19;
    const ZERO: Self = Header::NoHdr;
    fn variant(&self) -> u8 {
        0
    }
    fn encode_fields(&self, _w: &mut Writer<'_>) {}
    fn decode_fields(variant: u8, r: &mut Reader<'_>) -> Result<Self, WireError> {
        Err(bad_variant::<Self>(variant, r))
    }
}
