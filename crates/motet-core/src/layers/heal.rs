//! `heal`: discovery of the group's other partitions (thesis Fig 2.3, Table 2.2 `HealGos`;
//! Ensemble `heal`).
//!
//! Provides: [`Service::Healing`]. Requires below: [`Service::Membership`] (it needs to know who
//! coordinates); above: [`Service::Merging`], which it asks to merge. Header: `Hello` (group
//! gossip) and `NoHdr`.
//!
//! Every `gossip_interval` the coordinator of each partition gossips `Hello { view id, contact }`
//! on the group's gossip channel to every known peer address. Partitions are ordered by (primary,
//! view id): a coordinator that hears a *larger* partition asks `inter` to merge into it, and the
//! larger one waits to be asked, so two partitions never ask each other at once and a primary
//! partition is always the one that grants (it keeps its primary status; the requester's never
//! carries over). Thus a crashed-and-restarted process (a new singleton
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

impl Heal {
    /// Announces our view, to one address or to every known peer.
    fn hello(&self, to: Option<crate::view::Address>, out: &mut Outbox<'_>) {
        let contact = self.view.addresses[usize::from(self.rank)].into();
        let id = self.view.view_id;
        let hello = Header::Hello { ltime: id.ltime, coord: id.coord.0, primary: self.view.primary, contact };
        out.dn(Dn::Gossip { to, msg: Msg::default().with(hello) });
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
                let Some(Header::Hello { ltime, coord, primary, contact }) = msg.pop_as::<Header>() else {
                    unreachable!()
                };
                let view = ViewId { ltime, coord: EndpointId(coord) };
                let (theirs, ours) = ((primary, view), (self.view.primary, self.view.view_id));
                let stranger = self.view.rank_of(EndpointId(coord)).is_none();
                if self.coord != self.rank || !stranger {
                    return;
                }
                if theirs > ours && self.asked.is_none() {
                    self.asked = Some(view);
                    out.up(Up::MergeWith { contact: contact.into(), view });
                } else if theirs < ours {
                    // They wait for us to be asked, but may not know where we are (a new process
                    // is in nobody's peer list): answer so they can ask.
                    self.hello(Some(contact.into()), out);
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
            self.hello(None, out);
        }
        out.alarm(out.now() + self.config.gossip_interval);
    }

    fn check_invariants(&self) {
        assert!(usize::from(self.coord) < self.view.len());
    }
}
