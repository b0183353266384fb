//! `top`: the top-most layer (thesis Fig 2.3, §2.1.9).
//!
//! Provides: nothing. Requires: nothing. Header: none (no message passes through it).
//! Only `NewView` and `Exit` may leave the top of a stack (thesis §2.1.9). `top` passes `NewView`
//! out and then lingers for `linger` so the old stack can still answer retransmission requests of
//! members finishing the view, before it emits `Exit` (thesis §2.3.4: old stacks run beside new
//! ones until they exit). A leave request that no membership layer handled (a static stack) ends
//! the stack at once. Everything else that reaches the top is absorbed; events injected at the top
//! (such as `Fail` from a driver's failure detector) go down.

use crate::event::{Dn, DropReason, Up};
use crate::layer::{Layer, LayerSpec, Outbox};
use crate::time::Duration;
use crate::view::ViewState;
use crate::Rank;

/// `top` parameters.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// How long an old stack keeps running after its successor view is agreed. Default 2 s.
    #[serde(
        rename = "linger_ms",
        deserialize_with = "crate::time::millis",
        serialize_with = "crate::time::ser_millis"
    )]
    pub linger: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config { linger: Duration::from_millis(2_000) }
    }
}

/// Static description.
pub static SPEC: LayerSpec = LayerSpec {
    name: "top",
    summary: "top of the stack: absorbs events from below, starts injected events down",
    provides: &[],
    requires_below: &[],
    requires_above: &[],
    above_every: &[],
    below_every: &[],
};

/// `top` state.
#[derive(Debug, PartialEq)]
pub struct Top {
    linger: Duration,
    /// The successor view was passed out; the stack is lingering.
    replaced: bool,
    exited: bool,
}

impl Top {
    /// A `top` for `view`.
    pub fn new(config: &Config, _view: &ViewState, _rank: Rank) -> Top {
        Top { linger: config.linger, replaced: false, exited: false }
    }

    fn exit(&mut self, out: &mut Outbox<'_>) {
        if !self.exited {
            self.exited = true;
            out.up(Up::Exit);
        }
    }
}

impl Layer for Top {
    fn handle_up(&mut self, ev: Up, out: &mut Outbox<'_>) {
        match ev {
            Up::NewView(view) if !self.replaced && !self.exited => {
                self.replaced = true;
                out.up(Up::NewView(view));
                out.dn(Dn::Replaced);
                out.alarm(out.now() + self.linger);
            }
            Up::LeaveReq(_) | Up::Exit => {
                out.dn(Dn::Leave);
                self.exit(out);
            }
            // A message no layer claimed (every header a pass-through one): no member sends
            // that, so it was malformed or forged, and is counted as dropped, as every layer
            // counts what it refuses.
            Up::Cast { .. } | Up::Send { .. } => out.drop_input(super::LayerKind::Top, DropReason::HeaderMismatch),
            // Gossip no layer here takes may be genuine: another partition of the group may run
            // a stack with a layer this one lacks.
            Up::Gossip(_) => out.drop_input(super::LayerKind::Top, DropReason::Gossip),
            _ => {}
        }
    }
    fn handle_dn(&mut self, ev: Dn, out: &mut Outbox<'_>) {
        out.dn(ev);
    }
    fn handle_timer(&mut self, out: &mut Outbox<'_>) {
        if self.replaced {
            out.dn(Dn::Leave);
            self.exit(out);
        }
    }
    fn check_invariants(&self) {
        // Two flags, both only ever set: nothing can be inconsistent.
    }
}
