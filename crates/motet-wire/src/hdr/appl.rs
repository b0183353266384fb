//! Header of the `appl` layer (thesis §2.3.3: Appl's `Send` header is a constant header).

use super::{bad_variant, LayerHeader};
use crate::codec::{Reader, Writer};
use crate::WireError;

/// `appl` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// An application message (variant 0: the common case is one byte).
    Data,
    /// A protocol message from a layer above `appl` passing through.
    NoHdr,
}

impl LayerHeader for Header {
    const LAYER: u8 = 9;
    const ZERO: Self = Header::Data;
    fn variant(&self) -> u8 {
        match self {
            Header::Data => 0,
            Header::NoHdr => 1,
        }
    }
    fn encode_fields(&self, _w: &mut Writer<'_>) {}
    fn decode_fields(variant: u8, r: &mut Reader<'_>) -> Result<Self, WireError> {
        match variant {
            1 => Ok(Header::NoHdr),
            _ => Err(bad_variant::<Self>(variant, r)),
        }
    }
}
