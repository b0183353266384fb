//! The Motet wire format.
//!
//! A datagram is `version ‖ connection id ‖ addressing ‖ headers ‖ payload` (thesis §2.3.1: "connection
//! identifier ‖ headers ‖ payload"). Every layer's header is a typed Rust value defined in
//! [`hdr`], one file per layer, and *one* central codec ([`codec`]) marshals the whole header stack,
//! so that header compression (thesis §3.4.2) can later be added here without touching any layer.
//!
//! The decoder is total: any byte string yields a [`Decoded`] datagram or a [`WireError`], never a
//! panic, and it never allocates more than the input length justifies.

#![warn(missing_docs, unreachable_pub)]

pub mod bundle;
pub mod chunks;
pub mod codec;
pub mod datagram;
mod error;
pub mod hdr;
pub mod header_stack;
mod payload;

pub use chunks::Chunks;
pub use codec::WireAddress;
pub use datagram::{Compressed, ConnId, Decoded, Head, Mux, DATAGRAM_SIZE_MAX, HEADER_COUNT_MAX, VERSION};
pub use error::{WireError, WireErrorKind};
pub use hdr::Header;
pub use header_stack::{HeaderStack, Template};
pub use payload::Payload;

/// The position of a member in a view (`0..view.len()`), as in Ensemble. Ranks are only meaningful
/// together with a view.
pub type Rank = u16;

/// A per-origin message sequence number (first message is 0).
pub type Seqno = u64;

/// The largest number of ranks a vector field on the wire may carry; longer vectors are rejected
/// before anything is allocated.
pub const RANKS_MAX: usize = 4096;
