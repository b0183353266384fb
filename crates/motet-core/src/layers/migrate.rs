//! `migrate`: endpoint migration (property `Migrate`; Ensemble `migrate`, digest §1.15 and
//! item 35; thesis §2.1.3: endpoint ids carry no address, so migrating "just means that a
//! different address should be used to send a message to the endpoint after it has migrated").
//!
//! Provides: [`Service::Migration`]. Requires below: [`Service::ReliableCast`]; above:
//! [`Service::Membership`], which builds the next view with the new address. Header:
//! `Request(address)` and `NoHdr`.
//!
//! The application (or the runtime, when its process moves to another socket) asks
//! (`Action::Migrate`, coming up from `appl`); this layer casts the new address to the view, and
//! every member passes up the requests it *delivers*, its own included (through `local`). The
//! coordinator's membership layer then runs a view change with nobody excluded, and every member
//! builds the next view with the mover's new address (a member's latest request wins; casts from
//! one origin are delivered in FIFO order and the flush's cut makes the delivered set the same
//! everywhere, so all agree). Until that view, members send to the old address: the driver keeps
//! receiving at both, so nothing in flight is lost, and the flush retransmits what was. A request
//! in a view that ends by a merge is not carried into the merged view: ask again (the runtime
//! does, until a view has the new address).

use crate::event::{Dn, DropReason, Msg, Qos, Up};
use crate::layer::{Layer, LayerSpec, Outbox, Service};
use crate::view::ViewState;
use crate::Rank;
use motet_wire::hdr::migrate::Header;

/// `migrate` has no parameters.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {}

/// Static description.
pub static SPEC: LayerSpec = LayerSpec {
    name: "migrate",
    summary: "endpoint migration: a new address cast to the view, the next view has it",
    provides: &[Service::Migration],
    requires_below: &[Service::ReliableCast],
    requires_above: &[Service::Membership],
    above_every: &[],
    below_every: &[],
};

/// `migrate` state.
#[derive(Debug, PartialEq)]
pub struct Migrate {
    members: usize,
}

impl Migrate {
    /// A `migrate` for `view`.
    pub fn new(_config: &Config, view: &ViewState, _rank: Rank) -> Migrate {
        Migrate { members: view.len() }
    }
}

impl Layer for Migrate {
    fn handle_up(&mut self, ev: Up, out: &mut Outbox<'_>) {
        match ev {
            Up::MigrateReq(address) => {
                // From our own application, below: tell everyone (ourselves included).
                let msg = Msg::default().with(Header::Request(address.into()));
                out.dn(Dn::Cast { msg, qos: Qos::Reliable });
            }
            Up::Cast { origin, mut msg, qos } => match msg.pop_as::<Header>() {
                Some(Header::NoHdr) => out.up(Up::Cast { origin, msg, qos }),
                // This layer casts its headers reliably only: one on an unreliable cast (it has no
                // sequence number, so a forger need not guess one) is forged.
                Some(_) if qos == Qos::Unreliable => {
                    out.drop_input(super::LayerKind::Migrate, DropReason::HeaderMismatch)
                }
                Some(Header::Request(address)) => {
                    tracing::info!(member = origin, ?address, "a member moves to a new address at the next view");
                    out.up(Up::Migrate { origin, address: address.into() })
                }
                None => out.drop_input(super::LayerKind::Migrate, DropReason::HeaderMismatch),
            },
            other => out.pass_up(super::LayerKind::Migrate, other, Header::NoHdr),
        }
    }

    fn handle_dn(&mut self, ev: Dn, out: &mut Outbox<'_>) {
        out.pass_dn(ev, Header::NoHdr);
    }

    fn check_invariants(&self) {
        assert!(self.members >= 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::harness::{Harness, Out};
    use crate::view::Address;

    #[test]
    fn a_request_is_cast_and_what_is_delivered_goes_up() {
        let view = crate::testing::view_of("vsync", 2);
        let mut h = Harness::new(Migrate::new(&Config {}, &view, 1), 1);
        let out = h.up(Up::MigrateReq(Address::Sim(7)));
        let msg = match &out[..] {
            [Out::Dn(Dn::Cast { msg, qos: Qos::Reliable })] => msg.clone(),
            other => panic!("{other:?}"),
        };
        // Only what is delivered counts, our own request included.
        let out = h.up(Up::Cast { origin: 1, msg, qos: Qos::Reliable });
        assert!(matches!(&out[..], [Out::Up(Up::Migrate { origin: 1, address: Address::Sim(7) })]), "{out:?}");
        // A cast of another layer's header is dropped and counted.
        let msg = Msg::default().with(motet_wire::hdr::switch::Header::NoHdr);
        assert!(h.up(Up::Cast { origin: 0, msg, qos: Qos::Reliable }).is_empty());
        assert_eq!(h.stats.drops(DropReason::HeaderMismatch), 1);
    }
}
