//! `local`: a sender delivers its own casts (SOSP Table 2b, the 10-layer stack; Ensemble `local`).
//!
//! Provides: [`Service::LocalDelivery`]. Requires: nothing (a cast from below never comes back to
//! its sender, so the loop-back copy is the only one). Header: `NoHdr`.
//! A cast going down is passed down and a copy goes straight back up, so the sender delivers its
//! own casts in the order it sent them, without a network round trip.

use crate::event::{Dn, Up};
use crate::fast::{self, DnStep, Down, UpStep};
use crate::layer::{Layer, LayerSpec, Outbox, Service};
use crate::view::ViewState;
use crate::Rank;
use motet_wire::hdr::local::Header;

/// `local` has no parameters.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {}

/// Static description.
pub static SPEC: LayerSpec = LayerSpec {
    name: "local",
    summary: "loops each cast back to its sender",
    provides: &[Service::LocalDelivery],
    requires_below: &[],
    requires_above: &[],
    // Its own casts turn back here. Above it they must meet `appl` (else they are never
    // delivered to their sender, whatever its loop-back setting); below it they must not meet a
    // layer that keeps per-origin receive state for casts (`mflow` credited them and sent a
    // credit report to its own rank, which `pt2pt` refuses; `mnak` would take them for another
    // member's).
    above_every: &[Service::ReliableCast, Service::CastFlow],
    below_every: &[Service::Application],
};

/// `local` state.
#[derive(Debug, PartialEq)]
pub struct Local {
    rank: Rank,
}

impl Local {
    /// A `local` for `view`.
    pub fn new(_config: &Config, _view: &ViewState, rank: Rank) -> Local {
        Local { rank }
    }
}

impl Layer for Local {
    fn handle_up(&mut self, ev: Up, out: &mut Outbox<'_>) {
        out.pass_up(super::LayerKind::Local, ev, Header::NoHdr);
    }

    fn handle_dn(&mut self, ev: Dn, out: &mut Outbox<'_>) {
        match ev {
            Dn::Cast { msg, qos } => {
                out.up(Up::Cast { origin: self.rank, msg: msg.clone(), qos });
                out.dn(Dn::Cast { msg: msg.with(Header::NoHdr), qos });
            }
            other => out.pass_dn(other, Header::NoHdr),
        }
    }

    // Fast path: a cast goes down and loops back up (a branching trace); the rest passes. `local`
    // keeps no state, so it is inert on every trace: a compiled cast going down takes the
    // loop-back at its place without asking it (`fast_loopback`).
    fn fast_dn(&self, down: &Down) -> Option<DnStep> {
        Some(DnStep { loopback: down.dest.is_none(), ..DnStep::to(Header::NoHdr, down.qos) })
    }

    fn fast_up(&self, up: &fast::Up<'_>) -> Option<UpStep> {
        fast::is(up.header, Header::NoHdr).then(|| UpStep::pass(up)).flatten()
    }

    fn fast_inert(&self, _trace: fast::Trace) -> Option<usize> {
        fast::ANY_LEN
    }

    fn fast_loopback(&self, trace: fast::Trace) -> bool {
        trace == fast::Trace::CastDn
    }

    fn check_invariants(&self) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Msg, Qos};
    use crate::layer::harness::{Harness, Out};

    #[test]
    fn cast_is_sent_and_looped_back() {
        let view = crate::testing::view(2);
        let mut h = Harness::new(Local::new(&Config {}, &view, 1), 1);
        let out = h.dn(Dn::Cast { msg: Msg::new(b"x".as_slice().into()), qos: Qos::Reliable });
        match &out[..] {
            [Out::Up(Up::Cast { origin: 1, msg: up, .. }), Out::Dn(Dn::Cast { msg: dn, .. })] => {
                assert!(up.hdrs.is_empty());
                assert_eq!(dn.hdrs.len(), 1);
            }
            other => panic!("{other:?}"),
        }
    }
}
