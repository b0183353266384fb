//! Header of the `sequencer` layer: total order by a sequencer (Ensemble `sequencer`, digest
//! §2.3 `Total` and Appendix A.2).

use super::{bad_variant, LayerHeader};
use crate::codec::{Reader, Writer};
use crate::{WireError, WireErrorKind};
use std::sync::Arc;

/// `sequencer` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Header {
    /// Not totally ordered: a message of the layers above `appl` (membership, Ensemble's
    /// `NoTotal`) or a point-to-point message.
    NoHdr,
    /// An application cast waiting for its place in the total order.
    Data,
    /// From the sequencer: the next casts in the total order, as runs of (origin rank, count):
    /// "the next `count` casts of `origin`" (each origin's casts arrive in FIFO order, so runs
    /// name them without sequence numbers).
    Order(Arc<[(u16, u32)]>),
}

impl LayerHeader for Header {
    const LAYER: u8 = 20;
    const ZERO: Self = Header::NoHdr;
    fn variant(&self) -> u8 {
        match self {
            Header::NoHdr => 0,
            Header::Data => 1,
            Header::Order(_) => 2,
        }
    }
    fn encode_fields(&self, w: &mut Writer<'_>) {
        if let Header::Order(runs) = self {
            w.varint(runs.len() as u64);
            for &(origin, count) in runs.iter() {
                w.varint(origin.into());
                w.varint(count.into());
            }
        }
    }
    fn decode_fields(variant: u8, r: &mut Reader<'_>) -> Result<Self, WireError> {
        match variant {
            1 => Ok(Header::Data),
            2 => {
                let offset = r.position();
                let len = r.varint()?;
                // Each run takes at least two bytes: a longer list than the bytes left can hold is
                // rejected before allocating.
                if len > (r.remaining() / 2) as u64 {
                    return Err(WireError { kind: WireErrorKind::VectorLength(len), offset });
                }
                let runs = (0..len).map(|_| Ok((r.rank()?, r.varint_u32()?))).collect::<Result<Vec<_>, WireError>>()?;
                Ok(Header::Order(runs.into()))
            }
            _ => Err(bad_variant::<Self>(variant, r)),
        }
    }
}
