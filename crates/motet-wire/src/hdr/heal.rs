//! Header of the `heal` layer: partition discovery gossip (Ensemble `heal`; thesis Table 2.2
//! `HealGos`).

use super::{bad_variant, LayerHeader};
use crate::codec::{Reader, WireAddress, Writer};
use crate::WireError;

/// `heal` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// A message from above passing through.
    NoHdr,
    /// A coordinator announces its view to the group's other partitions.
    Hello {
        /// An answer to a hello from a smaller partition, sent to its coordinator alone: proof
        /// for it that messages get through both ways (variant 2 on the wire; 1 otherwise).
        answer: bool,
        /// The view's logical time.
        ltime: u64,
        /// The view's coordinator (endpoint id).
        coord: u64,
        /// Whether the view is primary.
        primary: bool,
        /// Where the coordinator can be reached.
        contact: WireAddress,
        /// The view's members (at most `RANKS_MAX`; 16 bits keep `Header` at 48 bytes). Each
        /// side checks it against its own `inter.members_max`: two partitions too large to merge
        /// then neither ask nor answer (a merge that would be refused held the smaller one in a
        /// flush for up to the merge timeout at every gossip).
        members: u16,
    },
}

impl LayerHeader for Header {
    const LAYER: u8 = 16;
    const ZERO: Self = Header::NoHdr;
    fn variant(&self) -> u8 {
        match self {
            Header::NoHdr => 0,
            Header::Hello { answer: false, .. } => 1,
            Header::Hello { answer: true, .. } => 2,
        }
    }
    fn encode_fields(&self, w: &mut Writer<'_>) {
        if let Header::Hello { ltime, coord, primary, contact, members, .. } = self {
            w.varint(*ltime);
            w.varint(*coord);
            w.u8(u8::from(*primary));
            w.address(contact);
            w.varint(u64::from(*members));
        }
    }
    fn decode_fields(variant: u8, r: &mut Reader<'_>) -> Result<Self, WireError> {
        match variant {
            1 | 2 => {
                let offset = r.position();
                let ltime = r.varint()?;
                // A logical time past the largest a view may have (`FullView`'s bound) names no
                // view any member can be in: refused here, so that no layer meets it.
                if ltime > super::intra::LTIME_MAX {
                    return Err(WireError { kind: crate::WireErrorKind::Range, offset });
                }
                let coord = r.varint()?;
                let offset = r.position();
                let primary = match r.u8()? {
                    0 => false,
                    1 => true,
                    _ => return Err(WireError { kind: crate::WireErrorKind::Range, offset }),
                };
                let contact = r.address()?;
                let offset = r.position();
                let members = match r.varint()? {
                    n if n <= crate::RANKS_MAX as u64 => n as u16,
                    _ => return Err(WireError { kind: crate::WireErrorKind::Range, offset }),
                };
                Ok(Header::Hello { answer: variant == 2, ltime, coord, primary, contact, members })
            }
            _ => Err(bad_variant::<Self>(variant, r)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hdr::intra::LTIME_MAX;

    /// A hello naming a logical time past any view's does not decode (found by a review: the
    /// `heal` layer added 2 to it, which overflowed).
    #[test]
    fn a_hello_beyond_the_largest_logical_time_is_refused() {
        let decode = |ltime| {
            let contact = WireAddress::Sim(1);
            let hello = Header::Hello { answer: true, ltime, coord: 1, primary: false, contact, members: 1 };
            let mut buf = Vec::new();
            hello.encode_fields(&mut Writer::new(&mut buf));
            Header::decode_fields(hello.variant(), &mut Reader::new(&buf))
        };
        assert!(decode(LTIME_MAX).is_ok());
        assert_eq!(decode(LTIME_MAX + 1).unwrap_err().kind, crate::WireErrorKind::Range);
        assert_eq!(decode(u64::MAX).unwrap_err().kind, crate::WireErrorKind::Range);
    }
}
