//! Header of the `sync` layer: the view-change flush (Ensemble `sync`; thesis Table 2.1 `Block`,
//! `BlockOk`). Rounds are numbered per coordinator; vectors are per-origin cast counts or ranks.

use super::{bad_variant, LayerHeader};
use crate::codec::{Reader, Writer};
use crate::WireError;

/// `sync` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Header {
    /// A message from above passing through.
    NoHdr,
    /// Coordinator → all: flush round `round`, excluding `failed`.
    Flush {
        /// Round number.
        round: u64,
        /// Ranks being excluded.
        failed: Vec<u64>,
    },
    /// Member → coordinator: flushed for `round`; per origin, casts received. (Boxed slices, not
    /// vectors: this variant would otherwise be the largest and make every header, kept by every
    /// stack's trace templates, 8 bytes larger.)
    FlushOk {
        /// Round number.
        round: u64,
        /// Per-origin cast counts.
        counts: Box<[u64]>,
        /// Ranks the member failed in the rounds it followed in this view (it hears nothing from
        /// them): the coordinator must fail them too, or the member can never finish its part.
        failed: Box<[u64]>,
    },
    /// Coordinator → all: deliver casts up to `cut` in this view.
    Cut {
        /// Round number.
        round: u64,
        /// Per-origin counts every survivor delivers.
        cut: Vec<u64>,
    },
    /// Member → coordinator: the cut of `round` is delivered.
    CutOk {
        /// Round number.
        round: u64,
    },
}

impl LayerHeader for Header {
    const LAYER: u8 = 13;
    const ZERO: Self = Header::NoHdr;
    fn variant(&self) -> u8 {
        match self {
            Header::NoHdr => 0,
            Header::Flush { .. } => 1,
            Header::FlushOk { .. } => 2,
            Header::Cut { .. } => 3,
            Header::CutOk { .. } => 4,
        }
    }
    fn encode_fields(&self, w: &mut Writer<'_>) {
        match self {
            Header::NoHdr => {}
            Header::Flush { round, failed: v } | Header::Cut { round, cut: v } => {
                w.varint(*round);
                w.varint_vec(v);
            }
            Header::FlushOk { round, counts, failed } => {
                w.varint(*round);
                w.varint_vec(counts);
                w.varint_vec(failed);
            }
            Header::CutOk { round } => w.varint(*round),
        }
    }
    fn decode_fields(variant: u8, r: &mut Reader<'_>) -> Result<Self, WireError> {
        Ok(match variant {
            1 => Header::Flush { round: r.varint()?, failed: r.varint_vec()? },
            2 => Header::FlushOk {
                round: r.varint()?,
                counts: r.varint_vec()?.into_boxed_slice(),
                failed: r.varint_vec()?.into_boxed_slice(),
            },
            3 => Header::Cut { round: r.varint()?, cut: r.varint_vec()? },
            4 => Header::CutOk { round: r.varint()? },
            _ => return Err(bad_variant::<Self>(variant, r)),
        })
    }
}
