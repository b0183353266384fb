//! Header of the `leave` layer: reliable leave (Ensemble `leave`; thesis Table 2.1 `Leave`).

use super::{bad_variant, LayerHeader};
use crate::codec::{Reader, Writer};
use crate::WireError;

/// `leave` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// A message from above passing through.
    NoHdr,
    /// The sender is leaving the group.
    Leave,
}

impl LayerHeader for Header {
    const LAYER: u8 = 15;
    const ZERO: Self = Header::NoHdr;
    fn variant(&self) -> u8 {
        match self {
            Header::NoHdr => 0,
            Header::Leave => 1,
        }
    }
    fn encode_fields(&self, _w: &mut Writer<'_>) {}
    fn decode_fields(variant: u8, r: &mut Reader<'_>) -> Result<Self, WireError> {
        match variant {
            1 => Ok(Header::Leave),
            _ => Err(bad_variant::<Self>(variant, r)),
        }
    }
}
