//! Header of the `bottom` layer: always trivial (thesis §5.6 p.88, `Bottom.NoHdr`).

use super::{bad_variant, LayerHeader};
use crate::codec::{Reader, Writer};
use crate::WireError;

/// `bottom` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// The only variant: bottom adds no information.
    NoHdr,
}

impl LayerHeader for Header {
    const LAYER: u8 = 1;
    const ZERO: Self = Header::NoHdr;
    fn variant(&self) -> u8 {
        0
    }
    fn encode_fields(&self, _w: &mut Writer<'_>) {}
    fn decode_fields(variant: u8, r: &mut Reader<'_>) -> Result<Self, WireError> {
        Err(bad_variant::<Self>(variant, r))
    }
}
