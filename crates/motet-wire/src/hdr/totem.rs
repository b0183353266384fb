//! Header of the `totem` layer: total order by a rotating token (digest §2.3 `Total`, the
//! Horus/Ensemble token protocol's `TokenRequest`/`Token`/`Data`/`Unordered`, thesis Figs 4.1-4.3).

use super::{bad_variant, LayerHeader};
use crate::codec::{Reader, Writer};
use crate::WireError;

/// `totem` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// Not totally ordered (membership traffic, sends).
    NoHdr,
    /// An application cast with its place in the total order.
    Data {
        /// Global sequence number in this view.
        seq: u64,
    },
    /// An application cast the sender could not order before the view change began (it never got
    /// the token): placed after the ordered ones when the view ends.
    Unordered,
    /// The token, sent point-to-point: its holder orders its casts from `seq` on.
    Token {
        /// The next global sequence number.
        seq: u64,
    },
    /// The sender has casts waiting for the token.
    Request,
}

impl LayerHeader for Header {
    const LAYER: u8 = 25;
    const ZERO: Self = Header::NoHdr;
    fn variant(&self) -> u8 {
        match self {
            Header::NoHdr => 0,
            Header::Data { .. } => 1,
            Header::Unordered => 2,
            Header::Token { .. } => 3,
            Header::Request => 4,
        }
    }
    fn encode_fields(&self, w: &mut Writer<'_>) {
        match *self {
            Header::Data { seq } | Header::Token { seq } => w.varint(seq),
            Header::NoHdr | Header::Unordered | Header::Request => {}
        }
    }
    fn decode_fields(variant: u8, r: &mut Reader<'_>) -> Result<Self, WireError> {
        match variant {
            1 => Ok(Header::Data { seq: r.varint()? }),
            2 => Ok(Header::Unordered),
            3 => Ok(Header::Token { seq: r.varint()? }),
            4 => Ok(Header::Request),
            _ => Err(bad_variant::<Self>(variant, r)),
        }
    }
}
