//! Header of the `causal` layer: causal order by vector timestamps, sent as the entries that
//! changed since the sender's previous cast (digest Appendix A.2 `Causal`).

use super::{bad_variant, LayerHeader};
use crate::codec::{Reader, Writer};
use crate::{WireError, WireErrorKind};
use std::sync::Arc;

/// `causal` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Header {
    /// Not causally ordered: membership traffic from above `appl`, or a point-to-point message.
    NoHdr,
    /// An application cast. Its vector timestamp is the sender's previous one with these
    /// (rank, casts delivered) entries replaced; the sender's own entry is implicit (one more
    /// than in its previous cast), so a sender that delivered nothing new sends no entry at all.
    Data(Arc<[(u16, u64)]>),
}

impl LayerHeader for Header {
    const LAYER: u8 = 21;
    const ZERO: Self = Header::NoHdr;
    fn variant(&self) -> u8 {
        match self {
            Header::NoHdr => 0,
            Header::Data(_) => 1,
        }
    }
    fn encode_fields(&self, w: &mut Writer<'_>) {
        if let Header::Data(entries) = self {
            w.varint(entries.len() as u64);
            for &(rank, count) in entries.iter() {
                w.varint(rank.into());
                w.varint(count);
            }
        }
    }
    fn decode_fields(variant: u8, r: &mut Reader<'_>) -> Result<Self, WireError> {
        match variant {
            1 => {
                let offset = r.position();
                let len = r.varint()?;
                // Each entry takes at least two bytes: a longer list than the bytes left can hold
                // is rejected before allocating.
                if len > (r.remaining() / 2) as u64 {
                    return Err(WireError { kind: WireErrorKind::VectorLength(len), offset });
                }
                let entries = (0..len).map(|_| Ok((r.rank()?, r.varint()?))).collect::<Result<Vec<_>, WireError>>()?;
                Ok(Header::Data(entries.into()))
            }
            _ => Err(bad_variant::<Self>(variant, r)),
        }
    }
}
