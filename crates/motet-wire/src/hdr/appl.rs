//! Header of the `appl` layer (thesis §2.3.3: Appl's `Send` header is a constant header).

use super::{bad_variant, LayerHeader};
use crate::codec::{Reader, Writer};
use crate::{WireError, WireErrorKind};
use std::sync::Arc;

/// The most members a subcast may name: their ranks take at most 1,922 bytes of header (one byte
/// each below 128, two above), under half of the room a datagram leaves for headers. Larger groups
/// cast to all.
pub const SUBSET_MAX: usize = 1024;

/// `appl` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Header {
    /// An application message (variant 0: the common case is one byte).
    Data,
    /// A protocol message from a layer above `appl` passing through.
    NoHdr,
    /// A subcast: an application cast for these ranks only (Ensemble's `subcast`), in rising
    /// order, at most [`SUBSET_MAX`] of them. It travels, and is ordered, like any cast; the other
    /// members skip it.
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
                // What a sender builds: each rank once, in rising order, at most `SUBSET_MAX`.
                if len > r.remaining() as u64 || len > SUBSET_MAX as u64 {
                    return Err(WireError { kind: WireErrorKind::VectorLength(len), offset });
                }
                let ranks = (0..len).map(|_| r.rank()).collect::<Result<Vec<_>, _>>()?;
                if ranks.windows(2).any(|pair| pair[0] >= pair[1]) {
                    return Err(WireError { kind: WireErrorKind::Range, offset });
                }
                Ok(Header::Subset(ranks.into()))
            }
            _ => Err(bad_variant::<Self>(variant, r)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(ranks: &[u16]) -> Result<Header, WireError> {
        let mut buf = Vec::new();
        Header::Subset(ranks.into()).encode_fields(&mut Writer::new(&mut buf));
        Header::decode_fields(2, &mut Reader::new(&buf))
    }

    /// A subcast's ranks decode only as a sender builds them: each once, rising, at most
    /// `SUBSET_MAX` (found by a review: any list decoded, and each delivery searched it whole).
    #[test]
    fn a_subcast_decodes_only_as_a_sender_builds_it() {
        let most: Vec<u16> = (0..SUBSET_MAX as u16).collect();
        assert_eq!(decode(&most).unwrap(), Header::Subset(most.clone().into()));
        let too_many: Vec<u16> = (0..=SUBSET_MAX as u16).collect();
        assert!(matches!(decode(&too_many).unwrap_err().kind, WireErrorKind::VectorLength(_)));
        assert_eq!(decode(&[3, 1]).unwrap_err().kind, WireErrorKind::Range);
        assert_eq!(decode(&[1, 1]).unwrap_err().kind, WireErrorKind::Range);
        assert!(decode(&[]).is_ok());
    }
}
