//! `elect`: coordinator election (thesis Fig 2.3, Table 2.1 `Elect`).
//!
//! Provides: [`Service::Election`]. Requires below: [`Service::FailureDetection`].
//! Header: `NoHdr` only. The coordinator is the lowest rank not suspected; suspicions are shared
//! (`slander`) and only grow within a view, so every member converges on the same coordinator.
//! A change is announced upward with `Elect(rank)`. A member never suspects itself, so a partition
//! cut off from the others elects its own coordinator.

use crate::event::{Dn, Up};
use crate::layer::{Layer, LayerSpec, Outbox, Service};
use crate::view::{RankSet, ViewState};
use crate::Rank;
use motet_wire::hdr::elect::Header;

/// `elect` has no parameters.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {}

/// Static description.
pub static SPEC: LayerSpec = LayerSpec {
    name: "elect",
    summary: "elects the lowest unsuspected rank as coordinator",
    provides: &[Service::Election],
    requires_below: &[Service::FailureDetection],
    requires_above: &[],
    above_every: &[],
    below_every: &[],
};

/// `elect` state.
#[derive(Debug, PartialEq)]
pub struct Elect {
    n: usize,
    rank: Rank,
    coord: Rank,
    suspected: RankSet,
}

impl Elect {
    /// An `elect` for `view`.
    pub fn new(_config: &Config, view: &ViewState, rank: Rank) -> Elect {
        Elect { n: view.len(), rank, coord: view.coord, suspected: RankSet::new() }
    }
}

impl Layer for Elect {
    fn handle_up(&mut self, ev: Up, out: &mut Outbox<'_>) {
        match ev {
            Up::Suspect(ranks) => {
                // Suspicion of ourselves (slandered by a partition that lost us) is not ours to act
                // on: we stay a candidate, and the others exclude us with their own view.
                self.suspected.union_with(&ranks.iter().filter(|&r| r != self.rank).collect());
                out.up(Up::Suspect(ranks));
                let coord = (0..self.n as Rank).find(|&r| !self.suspected.contains(r)).unwrap_or(self.coord);
                if coord != self.coord {
                    tracing::info!(coord, was = self.coord, "the coordinator is suspected: a new one takes over");
                    self.coord = coord;
                    out.up(Up::Elect(coord));
                }
            }
            other => out.pass_up(super::LayerKind::Elect, other, Header::NoHdr),
        }
    }

    fn handle_dn(&mut self, ev: Dn, out: &mut Outbox<'_>) {
        out.pass_dn(ev, Header::NoHdr);
    }

    fn check_invariants(&self) {
        assert!(usize::from(self.coord) < self.n);
    }
}
