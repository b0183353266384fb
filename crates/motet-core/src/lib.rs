//! Motet's sans-IO protocol core.
//!
//! Layers ([`layers`]) are deterministic state machines that talk only through typed events
//! ([`event`]); a [`Stack`] composes them linearly from a [`StackSpec`] and a replicated, immutable
//! [`ViewState`]; a [`Node`] hosts the stacks of one process and routes datagrams to them by
//! connection identifier. Nothing here reads a clock, opens a socket, spawns a thread or draws a
//! random number: drivers (the simulator, later the runtime) pass `now` in and poll outputs out.
//! See [`node`] for the call-order contract and `docs/ARCHITECTURE.md` for the picture.

#![warn(missing_docs, unreachable_pub)]

mod error;
pub mod event;
pub mod fast;
#[cfg(feature = "fault-injection")]
pub mod faults;

/// Whether this build has the test hooks of `faults` (feature `fault-injection`): checked on the
/// bypass's path, so a benchmark says so. Cargo turns the feature on in any build of the
/// workspace that includes `motet-sim`'s tests (`cargo test --workspace`, `cargo bench
/// --workspace`); `cargo build --release -p motet-cli` has none.
pub const FAULT_INJECTION: bool = cfg!(feature = "fault-injection");
pub mod layer;
pub mod layers;
pub mod node;
pub mod spec;
pub mod stack;
pub mod testkit;
pub mod time;
pub mod view;

pub use error::{ApiError, StackSpecError};
pub use event::{Action, AppEvent, Counter, DropReason, Ranks};
pub use layers::{LayerKind, StackConfig};
pub use node::{datagram_bytes, DatagramHead, Destination, Node, Outgoing, StackId};
pub use spec::{Property, StackSpec};
pub use stack::{Bypass, BypassStats, Stack};
pub use time::{Duration, Instant};
pub use view::{Address, EndpointId, GroupName, RankSet, ViewId, ViewState};

pub use motet_wire::{Payload, Rank, Seqno};

/// Helpers for tests of this crate.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;
    use std::sync::Arc;

    /// A `fifo` view of `n` simulated members.
    pub(crate) fn view(n: usize) -> Arc<ViewState> {
        view_of("fifo", n)
    }

    /// A view of `n` members with the stack `spec`.
    pub(crate) fn view_of(spec: &str, n: usize) -> Arc<ViewState> {
        Arc::new(ViewState::initial(
            GroupName::new("test"),
            StackSpec::parse(spec).unwrap(),
            StackConfig::default(),
            (0..n as u64).map(EndpointId).collect(),
            (0..n as u32).map(Address::Sim).collect(),
        ))
    }
}
