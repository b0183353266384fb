//! Header of the `suspect` layer: heartbeats of the failure detector (Ensemble `suspect`).

use super::{bad_variant, LayerHeader};
use crate::codec::{Reader, Writer};
use crate::WireError;

/// `suspect` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// A message from above passing through.
    NoHdr,
    /// "I am alive", cast unreliably every sweep.
    Heartbeat,
}

impl LayerHeader for Header {
    const LAYER: u8 = 10;
    const ZERO: Self = Header::NoHdr;
    fn variant(&self) -> u8 {
        match self {
            Header::NoHdr => 0,
            Header::Heartbeat => 1,
        }
    }
    fn encode_fields(&self, _w: &mut Writer<'_>) {}
    fn decode_fields(variant: u8, r: &mut Reader<'_>) -> Result<Self, WireError> {
        match variant {
            1 => Ok(Header::Heartbeat),
            _ => Err(bad_variant::<Self>(variant, r)),
        }
    }
}
