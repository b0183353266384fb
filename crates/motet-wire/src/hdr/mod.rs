//! Typed per-layer headers, one file per layer (mirroring `motet-core/src/layers/`), and the
//! central [`Header`] enum that the codec marshals.
//!
//! Each layer pushes exactly one header on every message it passes down and its peer pops it on
//! the way up, in the opposite order (header locality, thesis §2.1.5 and Fig 2.2). The stack's
//! header is *not* a byte concatenation defined by the layers: layers only see typed values and
//! this module decides the bytes (thesis §2.1.5 p.12: "one string of bytes defines all the headers").
//!
//! Encoding of one header: variant 0 of every layer carries no fields and is one byte,
//! `0x80 | layer_tag`; any other variant is `layer_tag, variant, fields...`.

use crate::codec::{Reader, Writer};
use crate::{WireError, WireErrorKind};

pub mod appl;
pub mod bottom;
pub mod causal;
pub mod elect;
pub mod frag;
pub mod heal;
pub mod inter;
pub mod intra;
pub mod leave;
pub mod local;
pub mod merge;
pub mod mflow;
pub mod migrate;
pub mod mnak;
pub mod primary;
pub mod pt2pt;
pub mod pt2ptw;
pub mod safe;
pub mod sequencer;
pub mod slander;
pub mod stable;
pub mod suspect;
pub mod switch;
pub mod sync;
pub mod totem;
pub mod xfer;

/// The header of one layer: a closed enum whose variant 0 has no fields.
pub trait LayerHeader: Sized + Clone + core::fmt::Debug + PartialEq {
    /// The layer's tag on the wire, in `1..=127`, unique per layer.
    const LAYER: u8;
    /// The field-less variant 0, encoded as the single byte `0x80 | LAYER`.
    const ZERO: Self;
    /// This value's variant number; 0 only for [`LayerHeader::ZERO`].
    fn variant(&self) -> u8;
    /// Writes the fields of a non-zero variant.
    fn encode_fields(&self, w: &mut Writer<'_>);
    /// Reads the fields of `variant`.
    fn decode_fields(variant: u8, r: &mut Reader<'_>) -> Result<Self, WireError>;
}

/// The header stack of a message (see [`crate::header_stack`]).
///
/// Not an inline array: events carrying messages move between layer queues by value, and an
/// inline stack of a dozen headers made each move a 500-byte copy (measured: 58% of the
/// instructions per message went to `memcpy`). The layered path allocates one vector per message;
/// the bypass keeps messages in the compact form, which allocates nothing.
pub use crate::header_stack::HeaderStack;

/// Headers a message is allocated room for: the deepest preset stack, so pushes never reallocate.
pub const HEADER_CAPACITY: usize = 12;

macro_rules! headers {
    ($($variant:ident($module:ident)),* $(,)?) => {
        /// One layer's header, tagged by layer. This is the only type the codec marshals.
        #[derive(Debug, Clone, PartialEq)]
        pub enum Header {
            $(
                #[doc = concat!("A header of the `", stringify!($module), "` layer.")]
                $variant($module::Header),
            )*
        }

        $(
            impl From<$module::Header> for Header {
                fn from(header: $module::Header) -> Header {
                    Header::$variant(header)
                }
            }

            /// Compares with one layer's header without building a [`Header`] (the fast path's
            /// conditions check their header this way on every message).
            impl PartialEq<$module::Header> for Header {
                fn eq(&self, other: &$module::Header) -> bool {
                    matches!(self, Header::$variant(h) if h == other)
                }
            }

            impl TryFrom<Header> for $module::Header {
                type Error = Header;
                fn try_from(header: Header) -> Result<$module::Header, Header> {
                    match header {
                        Header::$variant(h) => Ok(h),
                        other => Err(other),
                    }
                }
            }
        )*

        impl Header {
            /// Appends this header's encoding.
            pub fn encode(&self, w: &mut Writer<'_>) {
                match self {
                    $(Header::$variant(h) => encode_one(h, w),)*
                }
            }

            /// Reads one header.
            pub fn decode(r: &mut Reader<'_>) -> Result<Header, WireError> {
                let offset = r.position();
                let tag = r.u8()?;
                let (layer, variant) = if tag & 0x80 != 0 { (tag & 0x7f, 0) } else { (tag, r.u8()?) };
                if tag & 0x80 == 0 && variant == 0 {
                    // Variant 0 has exactly one encoding, so that bytes and values are in bijection.
                    return Err(WireError { kind: WireErrorKind::Variant { layer, variant }, offset });
                }
                $(
                    if layer == $module::Header::LAYER {
                        if variant == 0 {
                            return Ok(Header::$variant(<$module::Header as LayerHeader>::ZERO));
                        }
                        return Ok(Header::$variant($module::Header::decode_fields(variant, r)?));
                    }
                )*
                Err(WireError { kind: WireErrorKind::Layer(layer), offset })
            }

            /// The name of the layer this header belongs to.
            pub fn layer_name(&self) -> &'static str {
                match self {
                    $(Header::$variant(_) => stringify!($module),)*
                }
            }
        }
    };
}

headers! {
    Bottom(bottom),
    Mnak(mnak),
    Pt2pt(pt2pt),
    Stable(stable),
    Frag(frag),
    Pt2ptw(pt2ptw),
    Mflow(mflow),
    Local(local),
    Appl(appl),
    Suspect(suspect),
    Slander(slander),
    Elect(elect),
    Sync(sync),
    Intra(intra),
    Leave(leave),
    Heal(heal),
    Merge(merge),
    Inter(inter),
    Primary(primary),
    Sequencer(sequencer),
    Causal(causal),
    Safe(safe),
    Switch(switch),
    Xfer(xfer),
    Totem(totem),
    Migrate(migrate),
}

fn encode_one<H: LayerHeader>(header: &H, w: &mut Writer<'_>) {
    let variant = header.variant();
    if variant == 0 {
        w.u8(0x80 | H::LAYER);
    } else {
        w.u8(H::LAYER);
        w.u8(variant);
        header.encode_fields(w);
    }
}

/// The error for an unknown variant of layer `H`, at the reader's position.
pub(crate) fn bad_variant<H: LayerHeader>(variant: u8, r: &Reader<'_>) -> WireError {
    r.error(WireErrorKind::Variant { layer: H::LAYER, variant })
}

impl Header {
    /// The sequence number this header carries, for the headers that carry one and nothing else
    /// (`mnak` and `pt2pt` data): the one varying header of a compressed trace.
    pub fn seqno(&self) -> Option<u64> {
        match self {
            Header::Mnak(mnak::Header::Data { seqno }) | Header::Pt2pt(pt2pt::Header::Data { seqno }) => Some(*seqno),
            _ => None,
        }
    }

    /// Whether `other` is this header but for its sequence number: both carry one (see
    /// [`Header::seqno`]), in the same layer's header. Cheaper than building
    /// [`Header::with_seqno`] to compare.
    pub fn same_but_seqno(&self, other: &Header) -> bool {
        matches!(
            (self, other),
            (Header::Mnak(mnak::Header::Data { .. }), Header::Mnak(mnak::Header::Data { .. }))
                | (Header::Pt2pt(pt2pt::Header::Data { .. }), Header::Pt2pt(pt2pt::Header::Data { .. }))
        )
    }

    /// This header with its sequence number replaced (see [`Header::seqno`]).
    pub fn with_seqno(&self, seqno: u64) -> Option<Header> {
        match self {
            Header::Mnak(mnak::Header::Data { .. }) => Some(Header::Mnak(mnak::Header::Data { seqno })),
            Header::Pt2pt(pt2pt::Header::Data { .. }) => Some(Header::Pt2pt(pt2pt::Header::Data { seqno })),
            _ => None,
        }
    }
}
