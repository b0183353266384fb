//! Header of the `bottom` layer: always trivial (thesis §5.6 p.88, `Bottom.NoHdr`).

use super::{bad_variant, LayerHeader};
use crate::codec::{Reader, Writer};
use crate::WireError;

/// `bottom` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// On every message: bottom adds no information.
    NoHdr,
    /// A cast of its own: the sender's node shares this view's key with a stack of another view
    /// (`ConnId::key`), and drops what comes compressed under it; send this view's traffic in
    /// the full form.
    Full,
}

impl LayerHeader for Header {
    const LAYER: u8 = 1;
    const ZERO: Self = Header::NoHdr;
    fn variant(&self) -> u8 {
        match self {
            Header::NoHdr => 0,
            Header::Full => 1,
        }
    }
    fn encode_fields(&self, _w: &mut Writer<'_>) {}
    fn decode_fields(variant: u8, r: &mut Reader<'_>) -> Result<Self, WireError> {
        match variant {
            1 => Ok(Header::Full),
            _ => Err(bad_variant::<Self>(variant, r)),
        }
    }
}
