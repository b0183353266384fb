//! Header of the `stable` layer: stability gossip (thesis Table 2.2 fields `Stability`, `NumCasts`).

use super::{bad_variant, LayerHeader};
use crate::codec::{Reader, Writer};
use crate::WireError;
use std::sync::Arc;

/// What one member tells the others about stability.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gossip {
    /// Per origin rank, how many of its casts the sender has received (contiguously).
    pub received: Vec<u64>,
    /// Per origin rank, the sender's current stability vector (casts received by every live
    /// member, as far as the sender knows).
    pub stable: Vec<u64>,
}

/// `stable` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Header {
    /// A message from above passing through.
    NoHdr,
    /// A stability gossip message (shared, so buffering it never copies the vectors).
    Gossip(Arc<Gossip>),
}

impl LayerHeader for Header {
    const LAYER: u8 = 4;
    const ZERO: Self = Header::NoHdr;
    fn variant(&self) -> u8 {
        match self {
            Header::NoHdr => 0,
            Header::Gossip(_) => 1,
        }
    }
    fn encode_fields(&self, w: &mut Writer<'_>) {
        if let Header::Gossip(gossip) = self {
            w.varint_vec(&gossip.received);
            w.varint_vec(&gossip.stable);
        }
    }
    fn decode_fields(variant: u8, r: &mut Reader<'_>) -> Result<Self, WireError> {
        match variant {
            1 => {
                let received = r.varint_vec()?;
                let stable = r.varint_vec()?;
                Ok(Header::Gossip(Arc::new(Gossip { received, stable })))
            }
            _ => Err(bad_variant::<Self>(variant, r)),
        }
    }
}
