//! Header of the `switch` layer: protocol switching on the fly (Ensemble `switch`, digest §1.14
//! and item 36).

use super::{bad_variant, LayerHeader};
use crate::codec::{Reader, Writer};
use crate::WireError;

/// Longest stack specification a request may carry, in bytes.
pub const SPEC_MAX: usize = 1024;

/// `switch` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Header {
    /// A message from above passing through.
    NoHdr,
    /// A member asks the group to run this stack from the next view on (a stack specification:
    /// a preset, properties or a layer list).
    Request(String),
}

impl LayerHeader for Header {
    const LAYER: u8 = 23;
    const ZERO: Self = Header::NoHdr;
    fn variant(&self) -> u8 {
        match self {
            Header::NoHdr => 0,
            Header::Request(_) => 1,
        }
    }
    fn encode_fields(&self, w: &mut Writer<'_>) {
        if let Header::Request(spec) = self {
            w.text(spec);
        }
    }
    fn decode_fields(variant: u8, r: &mut Reader<'_>) -> Result<Self, WireError> {
        match variant {
            1 => Ok(Header::Request(r.text(SPEC_MAX)?)),
            _ => Err(bad_variant::<Self>(variant, r)),
        }
    }
}
