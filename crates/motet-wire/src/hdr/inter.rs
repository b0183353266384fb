//! Header of the `inter` layer: trivial (`inter` decides merged views; its messages travel in
//! `merge`'s header and `intra`'s `Full` view).

use super::{bad_variant, LayerHeader};
use crate::codec::{Reader, Writer};
use crate::WireError;

/// `inter` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// The only variant.
    NoHdr,
}

impl LayerHeader for Header {
    const LAYER: u8 = 18;
    const ZERO: Self = Header::NoHdr;
    fn variant(&self) -> u8 {
        0
    }
    fn encode_fields(&self, _w: &mut Writer<'_>) {}
    fn decode_fields(variant: u8, r: &mut Reader<'_>) -> Result<Self, WireError> {
        Err(bad_variant::<Self>(variant, r))
    }
}
