//! Header of the `appl` layer (thesis §2.3.3: Appl's `Send` header is a constant header).

use super::{bad_variant, LayerHeader};
use crate::codec::{Reader, Writer};
use crate::{WireError, WireErrorKind};
use std::sync::Arc;

/// `appl` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Header {
    /// An application message (variant 0: the common case is one byte).
    Data,
    /// A protocol message from a layer above `appl` passing through.
    NoHdr,
    /// A subcast: an application cast for these ranks only (Ensemble's `subcast`). It travels,
    /// and is ordered, like any cast; the other members skip it.
    Subset(Arc<[u16]>),
}

impl LayerHeader for Header {
    const LAYER: u8 = 9;
    const ZERO: Self = Header::Data;
    fn variant(&self) -> u8 {
        match self {
            Header::Data => 0,
            Header::NoHdr => 1,
            Header::Subset(_) => 2,
        }
    }
    fn encode_fields(&self, w: &mut Writer<'_>) {
        if let Header::Subset(ranks) = self {
            w.varint(ranks.len() as u64);
            for &rank in ranks.iter() {
                w.varint(rank.into());
            }
        }
    }
    fn decode_fields(variant: u8, r: &mut Reader<'_>) -> Result<Self, WireError> {
        match variant {
            1 => Ok(Header::NoHdr),
            2 => {
                let offset = r.position();
                let len = r.varint()?;
                if len > r.remaining() as u64 {
                    return Err(WireError { kind: WireErrorKind::VectorLength(len), offset });
                }
                let ranks = (0..len).map(|_| r.rank()).collect::<Result<Vec<_>, _>>()?;
                Ok(Header::Subset(ranks.into()))
            }
            _ => Err(bad_variant::<Self>(variant, r)),
        }
    }
}
