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
    /// Part of the sender's next timestamp, ahead of it, carrying no application data: a sender
    /// whose changed entries would not fit in one header (hundreds of members, large counts)
    /// sends them in parts of at most [`ENTRIES_BYTES_MAX`], each replacing its entries in the
    /// sender's previous timestamp, and the rest with its cast (`Data`). They travel in order
    /// with its casts (reliable FIFO below), and do not count as a cast of the sender.
    Stamp(Arc<[(u16, u64)]>),
}

/// The most bytes one header's entries take (half of `appl::HEAD_ROOM`, the room every stack
/// keeps for headers within a datagram, as for a subcast's list): a timestamp whose changes are
/// longer is sent in parts (`Stamp`). Without them, a header of about 850 changed entries with
/// counts past 2^14 passed the room, and the cast was too large to send, at every
/// retransmission: its sender's stream stopped.
pub const ENTRIES_BYTES_MAX: usize = 2048;

/// The bytes `entries` take encoded (with their count).
pub fn entries_len(entries: &[(u16, u64)]) -> usize {
    let varint = |v: u64| (64 - (v | 1).leading_zeros() as usize).div_ceil(7);
    varint(entries.len() as u64)
        + entries.iter().map(|&(rank, count)| varint(rank.into()) + varint(count)).sum::<usize>()
}

impl LayerHeader for Header {
    const LAYER: u8 = 21;
    const ZERO: Self = Header::NoHdr;
    fn variant(&self) -> u8 {
        match self {
            Header::NoHdr => 0,
            Header::Data(_) => 1,
            Header::Stamp(_) => 2,
        }
    }
    fn encode_fields(&self, w: &mut Writer<'_>) {
        if let Header::Data(entries) | Header::Stamp(entries) = self {
            w.varint(entries.len() as u64);
            for &(rank, count) in entries.iter() {
                w.varint(rank.into());
                w.varint(count);
            }
        }
    }
    fn decode_fields(variant: u8, r: &mut Reader<'_>) -> Result<Self, WireError> {
        match variant {
            1 | 2 => {
                let offset = r.position();
                let len = r.varint()?;
                // Each entry takes at least two bytes: a longer list than the bytes left can hold
                // is rejected before allocating.
                if len > (r.remaining() / 2) as u64 {
                    return Err(WireError { kind: WireErrorKind::VectorLength(len), offset });
                }
                let entries = (0..len).map(|_| Ok((r.rank()?, r.varint()?))).collect::<Result<Vec<_>, WireError>>()?;
                Ok(match variant {
                    1 => Header::Data(entries.into()),
                    _ => Header::Stamp(entries.into()),
                })
            }
            _ => Err(bad_variant::<Self>(variant, r)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_len_is_what_they_encode_to() {
        let samples: [&[(u16, u64)]; 4] =
            [&[], &[(0, 0)], &[(127, 127), (128, 128)], &[(4095, u64::MAX), (3, 1 << 35), (16383, 1 << 14)]];
        for entries in samples {
            let mut buf = Vec::new();
            Header::Stamp(entries.into()).encode_fields(&mut Writer::new(&mut buf));
            assert_eq!(entries_len(entries), buf.len(), "{entries:?}");
        }
    }
}
