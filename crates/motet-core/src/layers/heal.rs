//! `heal`: discovery of the group's other partitions (thesis Fig 2.3, Table 2.2 `HealGos`;
//! Ensemble `heal`).
//!
//! Provides: [`Service::Healing`]. Requires below: [`Service::Membership`] (it needs to know who
//! coordinates); above: [`Service::Merging`], which it asks to merge. Header: `Hello` (group
//! gossip) and `NoHdr`.
//!
//! Every `gossip_interval` the coordinator of each partition gossips `Hello { view id, contact }`
//! on the group's gossip channel to every known peer address. A coordinator that hears a partition
//! with a *larger* view id asks `inter` to merge into it; the other side waits to be asked, so two
//! partitions never ask each other at once. Thus a crashed-and-restarted process (a new singleton
//! endpoint) or the two sides of a healed partition find each other and merge.

use crate::event::{Dn, Msg, Up};
use crate::layer::{Layer, LayerSpec, Outbox, Service};
use crate::time::Duration;
use crate::view::{EndpointId, ViewId, ViewState};
use crate::Rank;
use motet_wire::hdr::heal::Header;
use motet_wire::Header as AnyHeader;
use std::sync::Arc;

/// `heal` parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// How often a coordinator announces its partition. Default 500 ms.
    pub gossip_interval: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config { gossip_interval: Duration::from_millis(500) }
    }
}

/// Static description.
pub static SPEC: LayerSpec = LayerSpec {
    name: "heal",
    summary: "coordinators gossip their view; a smaller view asks to merge into a larger one",
    provides: &[Service::Healing],
    requires_below: &[Service::Membership],
    requires_above: &[Service::Merging],
};

/// `heal` state.
#[derive(Debug)]
pub struct Heal {
    config: Config,
    view: Arc<ViewState>,
    rank: Rank,
    coord: Rank,
    /// The partition we last asked to merge with (ask once per view).
    asked: Option<ViewId>,
}

impl Heal {
    /// A `heal` for `view`.
    pub fn new(config: &Config, view: &Arc<ViewState>, rank: Rank) -> Heal {
        Heal { config: config.clone(), view: Arc::clone(view), rank, coord: view.coord, asked: None }
    }
}

impl Layer for Heal {
    fn handle_up(&mut self, ev: Up, out: &mut Outbox<'_>) {
        match ev {
            Up::Init => {
                out.alarm(out.now() + self.config.gossip_interval);
                out.up(Up::Init);
            }
            Up::Elect(coord) => {
                self.coord = coord;
                out.up(Up::Elect(coord));
            }
            Up::Gossip(mut msg) if matches!(msg.hdrs.last(), Some(AnyHeader::Heal(Header::Hello { .. }))) => {
                let Some(Header::Hello { ltime, coord, contact }) = msg.pop_as::<Header>() else { unreachable!() };
                let theirs = ViewId { ltime, coord: EndpointId(coord) };
                let ours = self.view.view_id;
                let stranger = self.view.rank_of(EndpointId(coord)).is_none();
                if self.coord == self.rank && stranger && theirs > ours && self.asked.is_none() {
                    self.asked = Some(theirs);
                    out.up(Up::MergeWith { contact: contact.into(), view: theirs });
                }
            }
            other => out.pass_up(other, Header::NoHdr),
        }
    }

    fn handle_dn(&mut self, ev: Dn, out: &mut Outbox<'_>) {
        out.pass_dn(ev, Header::NoHdr);
    }

    fn handle_timer(&mut self, out: &mut Outbox<'_>) {
        if self.coord == self.rank {
            let contact = self.view.addresses[usize::from(self.rank)].into();
            let id = self.view.view_id;
            let hello = Header::Hello { ltime: id.ltime, coord: id.coord.0, contact };
            out.dn(Dn::Gossip { to: None, msg: Msg::default().with(hello) });
        }
        out.alarm(out.now() + self.config.gossip_interval);
    }

    fn check_invariants(&self) {
        assert!(usize::from(self.coord) < self.view.len());
    }
}
