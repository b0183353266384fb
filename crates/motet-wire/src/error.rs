use thiserror::Error;

/// Why a datagram could not be decoded, and where. Malformed input is data, not a crash: the
/// receiver drops the datagram and counts the reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("malformed datagram at byte {offset}: {kind}")]
pub struct WireError {
    /// What was wrong.
    pub kind: WireErrorKind,
    /// Byte offset into the datagram at which the problem was found.
    pub offset: usize,
}

/// The kinds of malformation the decoder distinguishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum WireErrorKind {
    /// The datagram ended before a field was complete.
    #[error("truncated")]
    Truncated,
    /// The datagram is larger than [`crate::DATAGRAM_SIZE_MAX`].
    #[error("oversized")]
    Oversized,
    /// The version byte is not one this build speaks.
    #[error("unknown version {0}")]
    Version(u8),
    /// The multiplexing index is not a known channel.
    #[error("unknown multiplexing index {0}")]
    Mux(u8),
    /// More headers than [`crate::HEADER_COUNT_MAX`].
    #[error("too many headers ({0})")]
    HeaderCount(usize),
    /// A header tag names no known layer.
    #[error("unknown layer tag {0}")]
    Layer(u8),
    /// A header variant is unknown for its layer.
    #[error("unknown variant {variant} of layer {layer}")]
    Variant {
        /// The layer tag.
        layer: u8,
        /// The unknown variant byte.
        variant: u8,
    },
    /// A variable-length integer was longer than 10 bytes or overflowed 64 bits.
    #[error("bad varint")]
    Varint,
    /// A field's value is out of its documented range (e.g. a rank above `u16::MAX`).
    #[error("field out of range")]
    Range,
    /// A vector field is longer than [`crate::RANKS_MAX`] or than the bytes that remain.
    #[error("vector too long ({0})")]
    VectorLength(u64),
    /// A bundle's framing is wrong: a zero or overlong length, a nested bundle, or fewer than two
    /// datagrams.
    #[error("malformed bundle")]
    Bundle,
}
