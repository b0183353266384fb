//! Header of the `xfer` layer: state transfer (Ensemble property `Xfer`, digest item 43).

use super::{bad_variant, LayerHeader};
use crate::codec::{Reader, Writer};
use crate::WireError;

/// `xfer` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// A message from above passing through.
    NoHdr,
    /// A chunk of the application's state, from the provider.
    Chunk,
    /// The provider's last chunk.
    Last,
    /// The sender is done with this view's transfer.
    Done,
}

impl LayerHeader for Header {
    const LAYER: u8 = 24;
    const ZERO: Self = Header::NoHdr;
    fn variant(&self) -> u8 {
        match self {
            Header::NoHdr => 0,
            Header::Chunk => 1,
            Header::Last => 2,
            Header::Done => 3,
        }
    }
    fn encode_fields(&self, _w: &mut Writer<'_>) {}
    fn decode_fields(variant: u8, r: &mut Reader<'_>) -> Result<Self, WireError> {
        match variant {
            1 => Ok(Header::Chunk),
            2 => Ok(Header::Last),
            3 => Ok(Header::Done),
            _ => Err(bad_variant::<Self>(variant, r)),
        }
    }
}
