//! `leave`: reliable leave (thesis Fig 2.3, Table 2.1 `Leave`).
//!
//! Provides: [`Service::Leave`]. Requires below: [`Service::ReliableCast`]; above:
//! [`Service::Membership`], which acts on leave requests. Header: `Leave` and `NoHdr`.
//!
//! The application's leave request (coming up from `appl`) is cast reliably to the view and passed
//! up, and every member passes up the requests it receives, so whichever member coordinates
//! excludes the leaver at the next view; the leaver's messages sent before it asked are delivered
//! consistently by the flush, and its stack exits when the view without it is agreed. (Ensemble
//! puts `leave` above `intra`; here it sits just below, so requests flow up to `intra` as events.)

use crate::event::{Dn, DropReason, Msg, Qos, Up};
use crate::layer::{Layer, LayerSpec, Outbox, Service};
use crate::view::ViewState;
use crate::Rank;
use motet_wire::hdr::leave::Header;

/// `leave` has no parameters.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {}

/// Static description.
pub static SPEC: LayerSpec = LayerSpec {
    name: "leave",
    summary: "reliable leave: tells the view, so the coordinator excludes the leaver",
    provides: &[Service::Leave],
    requires_below: &[Service::ReliableCast],
    requires_above: &[Service::Membership],
    above_every: &[],
    below_every: &[],
};

/// `leave` state.
#[derive(Debug, PartialEq)]
pub struct Leave {
    rank: Rank,
    asked: bool,
}

impl Leave {
    /// A `leave` for `view`.
    pub fn new(_config: &Config, _view: &ViewState, rank: Rank) -> Leave {
        Leave { rank, asked: false }
    }
}

impl Layer for Leave {
    fn handle_up(&mut self, ev: Up, out: &mut Outbox<'_>) {
        match ev {
            Up::LeaveReq(rank) if rank == self.rank => {
                // From our own application, below: tell everyone, and the membership layer above.
                if !self.asked {
                    self.asked = true;
                    out.dn(Dn::Cast { msg: Msg::default().with(Header::Leave), qos: Qos::Reliable });
                    out.up(Up::LeaveReq(rank));
                }
            }
            Up::Cast { origin, ref msg, qos } if msg.hdrs.last().as_deref() == Some(&Header::Leave.into()) => {
                // Cast reliably only: a request on an unreliable cast is forged.
                if qos == Qos::Unreliable {
                    out.drop_input(super::LayerKind::Leave, DropReason::HeaderMismatch);
                } else if origin != self.rank {
                    tracing::info!(member = origin, "a member asks to leave");
                    out.up(Up::LeaveReq(origin));
                }
            }
            other => out.pass_up(super::LayerKind::Leave, other, Header::NoHdr),
        }
    }

    fn handle_dn(&mut self, ev: Dn, out: &mut Outbox<'_>) {
        out.pass_dn(ev, Header::NoHdr);
    }

    fn check_invariants(&self) {}
}
