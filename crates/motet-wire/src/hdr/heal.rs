//! Header of the `heal` layer: partition discovery gossip (Ensemble `heal`; thesis Table 2.2
//! `HealGos`).

use super::{bad_variant, LayerHeader};
use crate::codec::{Reader, WireAddress, Writer};
use crate::WireError;

/// `heal` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Header {
    /// A message from above passing through.
    NoHdr,
    /// A coordinator announces its view to the group's other partitions. Boxed: hellos are
    /// rare (one a gossip interval), and inline they would grow every header past 48 bytes.
    Hello(Box<Hello>),
}

/// A coordinator's announcement of its view to the group's other partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// An answer to a hello from a smaller partition, sent to its coordinator alone: proof
    /// for it that messages get through both ways (variant 2 on the wire; 1 otherwise).
    pub answer: bool,
    /// The view's logical time.
    pub ltime: u64,
    /// The view's coordinator (endpoint id).
    pub coord: u64,
    /// Whether the view is primary.
    pub primary: bool,
    /// Where the coordinator can be reached.
    pub contact: WireAddress,
    /// The view's members (at most `RANKS_MAX`). Each side checks it against its own
    /// `inter.members_max`: two partitions too large to merge then neither ask nor answer (a
    /// merge that would be refused held the smaller one in a flush for up to the merge timeout
    /// at every gossip).
    pub members: u16,
    /// What of a merge's concern its stack has, one bit per layer (`motet_core`'s
    /// `switch::kept`: membership, merging, `Primary`; at most [`KEEPS_MAX`]). A partition asks
    /// to merge only into one whose stack keeps what its own has, and answers only one that
    /// would: otherwise the granter refuses, or the requester refuses the grant, and the
    /// smaller partition was held in a flush for up to the merge timeout at every gossip, for
    /// good.
    pub keeps: u8,
}

/// The largest [`Header::Hello`] `keeps`: five bits.
pub const KEEPS_MAX: u8 = 0x1f;

impl LayerHeader for Header {
    const LAYER: u8 = 16;
    const ZERO: Self = Header::NoHdr;
    fn variant(&self) -> u8 {
        match self {
            Header::NoHdr => 0,
            Header::Hello(hello) => 1 + u8::from(hello.answer),
        }
    }
    fn encode_fields(&self, w: &mut Writer<'_>) {
        if let Header::Hello(hello) = self {
            let Hello { ltime, coord, primary, contact, members, keeps, .. } = &**hello;
            w.varint(*ltime);
            w.varint(*coord);
            w.u8(u8::from(*primary));
            w.address(contact);
            w.varint(u64::from(*members));
            w.u8(*keeps);
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
                let offset = r.position();
                let keeps = match r.u8()? {
                    n if n <= KEEPS_MAX => n,
                    _ => return Err(WireError { kind: crate::WireErrorKind::Range, offset }),
                };
                let answer = variant == 2;
                Ok(Header::Hello(Box::new(Hello { answer, ltime, coord, primary, contact, members, keeps })))
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
            let hello = Hello { answer: true, ltime, coord: 1, primary: false, contact, members: 1, keeps: 0 };
            let hello = Header::Hello(Box::new(hello));
            let mut buf = Vec::new();
            hello.encode_fields(&mut Writer::new(&mut buf));
            Header::decode_fields(hello.variant(), &mut Reader::new(&buf))
        };
        assert!(decode(LTIME_MAX).is_ok());
        assert_eq!(decode(LTIME_MAX + 1).unwrap_err().kind, crate::WireErrorKind::Range);
        assert_eq!(decode(u64::MAX).unwrap_err().kind, crate::WireErrorKind::Range);
    }

    /// A hello with bits past [`KEEPS_MAX`] does not decode: a later version's meaning, which
    /// this one cannot check a merge against.
    #[test]
    fn a_hello_with_unknown_keeps_bits_is_refused() {
        let decode = |keeps| {
            let contact = WireAddress::Sim(1);
            let hello = Hello { answer: false, ltime: 1, coord: 1, primary: true, contact, members: 2, keeps };
            let hello = Header::Hello(Box::new(hello));
            let mut buf = Vec::new();
            hello.encode_fields(&mut Writer::new(&mut buf));
            Header::decode_fields(hello.variant(), &mut Reader::new(&buf))
        };
        let contact = WireAddress::Sim(1);
        let hello = Hello { answer: false, ltime: 1, coord: 1, primary: true, contact, members: 2, keeps: KEEPS_MAX };
        assert_eq!(decode(KEEPS_MAX).unwrap(), Header::Hello(Box::new(hello)));
        assert_eq!(decode(KEEPS_MAX + 1).unwrap_err().kind, crate::WireErrorKind::Range);
    }
}
