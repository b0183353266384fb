//! Header of the `migrate` layer: endpoint migration (Ensemble `migrate`, digest §1.15 and
//! item 35).

use super::{bad_variant, LayerHeader};
use crate::codec::{Reader, WireAddress, Writer};
use crate::WireError;

/// `migrate` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// A message from above passing through.
    NoHdr,
    /// The sender's endpoint moves to this address from the next view on.
    Request(WireAddress),
}

impl LayerHeader for Header {
    const LAYER: u8 = 26;
    const ZERO: Self = Header::NoHdr;
    fn variant(&self) -> u8 {
        match self {
            Header::NoHdr => 0,
            Header::Request(_) => 1,
        }
    }
    fn encode_fields(&self, w: &mut Writer<'_>) {
        if let Header::Request(address) = self {
            w.address(address);
        }
    }
    fn decode_fields(variant: u8, r: &mut Reader<'_>) -> Result<Self, WireError> {
        match variant {
            1 => Ok(Header::Request(r.address()?)),
            _ => Err(bad_variant::<Self>(variant, r)),
        }
    }
}
