//! Header of the `elect` layer: trivial (election is computed locally from shared suspicions).

use super::{bad_variant, LayerHeader};
use crate::codec::{Reader, Writer};
use crate::WireError;

/// `elect` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// The only variant.
    NoHdr,
}

impl LayerHeader for Header {
    const LAYER: u8 = 12;
    const ZERO: Self = Header::NoHdr;
    fn variant(&self) -> u8 {
        0
    }
    fn encode_fields(&self, _w: &mut Writer<'_>) {}
    fn decode_fields(variant: u8, r: &mut Reader<'_>) -> Result<Self, WireError> {
        Err(bad_variant::<Self>(variant, r))
    }
}
