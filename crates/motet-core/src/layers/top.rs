//! `top`: the top-most layer (thesis Fig 2.3, §2.1.9).
//!
//! Provides: nothing. Requires: nothing. Header: none (no message passes through it).
//! Only `NewView` and `Exit` may leave the top of a stack; with the static membership of this
//! release there are neither, so `top` absorbs every event that reaches it from below and passes
//! injected events (such as `Fail` from the driver's failure detector) down.

use crate::event::{Dn, Up};
use crate::layer::{Layer, LayerSpec, Outbox};
use crate::view::ViewState;
use crate::Rank;

/// `top` has no parameters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {}

/// Static description.
pub static SPEC: LayerSpec = LayerSpec {
    name: "top",
    summary: "top of the stack: absorbs events from below, starts injected events down",
    provides: &[],
    requires_below: &[],
    requires_above: &[],
};

/// `top` state (none).
#[derive(Debug)]
pub struct Top {
    absorbed: u64,
}

impl Top {
    /// A `top` for `view`.
    pub fn new(_config: &Config, _view: &ViewState, _rank: Rank) -> Top {
        Top { absorbed: 0 }
    }
}

impl Layer for Top {
    fn handle_up(&mut self, _ev: Up, _out: &mut Outbox<'_>) {
        self.absorbed += 1;
    }
    fn handle_dn(&mut self, ev: Dn, out: &mut Outbox<'_>) {
        out.dn(ev);
    }
    fn check_invariants(&self) {}
}
