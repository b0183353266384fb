//! `stable`: broadcast stability detection (thesis Fig 2.3, Table 2.2 fields `Stability` and
//! `NumCasts`; the algorithm is not in the seeds, see the digest §2.4 working definition).
//!
//! Provides: [`Service::Stability`]. Requires below: [`Service::CastCounts`].
//! Header: `Gossip { received, stable }`, cast unreliably, and `NoHdr`.
//!
//! Each member keeps a matrix `rows[member][origin]` of how many casts of `origin` each member has
//! received. Every sweep it asks `mnak` for its own row (`StableReq` / `NumCasts`; `mnak` also
//! reports it unasked every `report_every` casts it buffers) and gossips it when it changed or
//! when something is not yet stable. The stability vector is the column minimum
//! over live members (casts everyone holds: `mnak` frees them) and the column maximum tells `mnak`
//! about casts it never saw. Gossip also carries the sender's stability vector: a member whose own
//! row is ahead of it knows the sender is missing its row and gossips again, so stability
//! converges and then the layer falls silent (no gossip once everything is stable).
//!
//! Stability gossip is above `appl`, so it never interleaves with application traffic in
//! `appl`'s view, and it is unreliable: a lost gossip is repaired by the next sweep.

use crate::event::{Counter, Dn, DropReason, Msg, Qos, Stability, Up};
use crate::layer::{Layer, LayerSpec, Outbox, Service};
use crate::time::Duration;
use crate::view::{RankSet, ViewState};
use crate::Rank;
use motet_wire::hdr::stable::{Gossip, Header};
use std::sync::Arc;

/// `stable` parameters.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Period of the stability sweep (request counts, gossip if needed). Default 100 ms.
    #[serde(
        rename = "sweep_interval_ms",
        deserialize_with = "crate::time::millis",
        serialize_with = "crate::time::ser_millis"
    )]
    pub sweep_interval: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config { sweep_interval: Duration::from_millis(100) }
    }
}

/// Static description.
pub static SPEC: LayerSpec = LayerSpec {
    name: "stable",
    summary: "stability detection by gossip of receive counts; frees retransmission buffers",
    provides: &[Service::Stability],
    requires_below: &[Service::CastCounts],
    requires_above: &[],
};

/// `stable` state.
#[derive(Debug, PartialEq)]
pub struct Stable {
    config: Config,
    rank: Rank,
    failed: RankSet,
    /// `rows[member][origin]`: casts of `origin` that `member` has received, as far as we know.
    rows: Vec<Vec<u64>>,
    /// The last stability published below.
    published: Stability,
    /// Our row changed, or a peer seems to lack it: gossip at the next sweep.
    dirty: bool,
}

impl Stable {
    /// A `stable` for `view`.
    pub fn new(config: &Config, view: &ViewState, rank: Rank) -> Stable {
        let n = view.len();
        Stable {
            config: config.clone(),
            rank,
            failed: RankSet::new(),
            rows: vec![vec![0; n]; n],
            published: Stability { stable: vec![0; n], max: vec![0; n] },
            dirty: false,
        }
    }

    fn live(&self) -> impl Iterator<Item = &Vec<u64>> {
        self.rows.iter().enumerate().filter(|(r, _)| !self.failed.contains(*r as Rank)).map(|(_, row)| row)
    }

    /// The column minimum and maximum over live members, computed afresh.
    fn columns(&self) -> Stability {
        let n = self.rows.len();
        let stable = (0..n).map(|o| self.live().map(|row| row[o]).min().unwrap_or(0)).collect();
        let max = (0..n).map(|o| self.live().map(|row| row[o]).max().unwrap_or(0)).collect();
        Stability { stable, max }
    }

    /// Recomputes every column (a failure changes which rows count); publishes if changed.
    fn publish_all(&mut self, out: &mut Outbox<'_>) {
        let next = self.columns();
        if next != self.published {
            self.published = next;
            self.announce(out);
        }
    }

    /// Merges `counts` into the row of `member` (counts only grow) and brings the published
    /// columns up to date for the entries that grew, without recomputing the rest: a column's
    /// maximum can only rise to the new entry, and its minimum can move only if the entry held
    /// it. A gossip then costs O(n) per column it moves, where recomputing every column cost
    /// O(n²) for each of the O(n²) gossips of a round (at 32 members, most of a cast's cost in a
    /// window of `motet bench worker` that holds a stability round). Returns whether the row
    /// grew, and whether the published columns moved.
    fn merge(&mut self, member: Rank, counts: &[u64]) -> (bool, bool) {
        let live = !self.failed.contains(member);
        let (mut grew, mut moved) = (false, false);
        for (o, &count) in counts.iter().enumerate() {
            let old = self.rows[usize::from(member)][o];
            if count <= old {
                continue;
            }
            self.rows[usize::from(member)][o] = count;
            grew = true;
            if !live {
                continue;
            }
            if count > self.published.max[o] {
                self.published.max[o] = count;
                moved = true;
            }
            if old == self.published.stable[o] {
                let min = self.live().map(|row| row[o]).min().unwrap_or(0);
                if min != self.published.stable[o] {
                    self.published.stable[o] = min;
                    moved = true;
                }
            }
        }
        (grew, moved)
    }

    /// Tells the layers below the published stability (it moved).
    fn announce(&self, out: &mut Outbox<'_>) {
        out.dn(Dn::Stable(Arc::new(self.published.clone())));
    }

    fn all_stable(&self) -> bool {
        self.published.stable == self.published.max
    }

    fn gossip(&mut self, out: &mut Outbox<'_>) {
        self.dirty = false;
        out.count(Counter::Gossip);
        let gossip =
            Gossip { received: self.rows[usize::from(self.rank)].clone(), stable: self.published.stable.clone() };
        out.dn(Dn::Cast { msg: Msg::default().with(Header::Gossip(Arc::new(gossip))), qos: Qos::Unreliable });
    }
}

impl Layer for Stable {
    fn handle_up(&mut self, ev: Up, out: &mut Outbox<'_>) {
        match ev {
            Up::Init => {
                out.alarm(out.now() + self.config.sweep_interval);
                out.up(Up::Init);
            }
            Up::NumCasts(counts) => {
                if counts.len() != self.rows.len() {
                    out.drop_input(DropReason::Gossip);
                    return;
                }
                let (grew, moved) = self.merge(self.rank, &counts);
                self.dirty |= grew;
                if moved {
                    self.announce(out);
                }
                if self.dirty || !self.all_stable() {
                    self.gossip(out);
                }
            }
            Up::Cast { origin, mut msg, qos } => match msg.pop_as::<Header>() {
                Some(Header::Gossip(gossip)) => {
                    let n = self.rows.len();
                    if gossip.received.len() != n || gossip.stable.len() != n {
                        out.drop_input(DropReason::Gossip);
                        return;
                    }
                    if origin == self.rank {
                        return; // our own gossip, looped back by `local`
                    }
                    let (_, moved) = self.merge(origin, &gossip.received);
                    let mine = &self.rows[usize::from(self.rank)];
                    // The sender's stability is behind our row: it is missing our row.
                    self.dirty |= gossip.stable.iter().zip(mine).any(|(s, m)| s < m);
                    if moved {
                        self.announce(out);
                    }
                }
                Some(Header::NoHdr) => out.up(Up::Cast { origin, msg, qos }),
                None => out.drop_input(DropReason::HeaderMismatch),
            },
            other => out.pass_up(other, Header::NoHdr),
        }
    }

    fn handle_dn(&mut self, ev: Dn, out: &mut Outbox<'_>) {
        match ev {
            Dn::Fail(ranks) => {
                self.failed.union_with(&ranks);
                out.dn(Dn::Fail(ranks));
                self.publish_all(out);
            }
            other => out.pass_dn(other, Header::NoHdr),
        }
    }

    fn handle_timer(&mut self, out: &mut Outbox<'_>) {
        out.dn(Dn::StableReq);
        out.alarm(out.now() + self.config.sweep_interval);
    }

    fn check_invariants(&self) {
        let n = self.rows.len();
        assert!(self.rows.iter().all(|row| row.len() == n));
        assert!(self.published.stable.iter().zip(&self.published.max).all(|(s, m)| s <= m));
        assert_eq!(self.published, self.columns(), "the published columns are the live rows' minimum and maximum");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::harness::{Harness, Out};

    fn gossip(received: Vec<u64>, stable: Vec<u64>) -> Msg {
        Msg::default().with(Header::Gossip(Arc::new(Gossip { received, stable })))
    }

    proptest::proptest! {
        /// The columns kept up to date entry by entry equal the live rows' minimum and maximum
        /// recomputed afresh, after any mix of own counts, gossip and failures; and the layer
        /// announces stability below exactly when they moved.
        #[test]
        fn kept_columns_equal_recomputed_ones(
            ops in proptest::collection::vec((0u8..6, 0usize..5, proptest::collection::vec(0u64..6, 5)), 1..60)
        ) {
            let view = crate::testing::view(5);
            let mut h = Harness::new(Stable::new(&Config::default(), &view, 0), 0);
            let mut counts = [0u64; 5];
            for (kind, member, values) in ops {
                let before = h.layer.published.clone();
                let out = match kind {
                    // Own counts only grow (`mnak`'s buffers).
                    0 | 1 => {
                        counts.iter_mut().zip(&values).for_each(|(c, v)| *c += v);
                        h.up(Up::NumCasts(Arc::from(counts.to_vec())))
                    }
                    5 if member != 0 => h.dn(Dn::Fail([member as Rank].into_iter().collect())),
                    _ if member != 0 => {
                        let received = values.iter().map(|v| v * 2).collect();
                        h.up(Up::Cast { origin: member as Rank, msg: gossip(received, vec![0; 5]), qos: Qos::Unreliable })
                    }
                    _ => Vec::new(),
                };
                proptest::prop_assert_eq!(&h.layer.published, &h.layer.columns());
                let announced = out.iter().any(|o| matches!(o, Out::Dn(Dn::Stable(s)) if **s == h.layer.published));
                proptest::prop_assert_eq!(announced, h.layer.published != before);
            }
        }
    }

    #[test]
    fn stability_is_the_minimum_over_live_members() {
        let view = crate::testing::view(3);
        let mut h = Harness::new(Stable::new(&Config::default(), &view, 0), 0);
        let out = h.up(Up::NumCasts(Arc::from(vec![2, 1, 0])));
        // Our row changed: publish (max known) and gossip.
        assert!(matches!(&out[..], [Out::Dn(Dn::Stable(_)), Out::Dn(Dn::Cast { qos: Qos::Unreliable, .. })]));
        h.up(Up::Cast { origin: 1, msg: gossip(vec![2, 1, 0], vec![0, 0, 0]), qos: Qos::Unreliable });
        assert_eq!(h.layer.published.stable, vec![0, 0, 0], "rank 2 has not reported");
        let out = h.dn(Dn::Fail([2].into_iter().collect()));
        assert_eq!(h.layer.published.stable, vec![2, 1, 0]);
        assert!(out.iter().any(|o| matches!(o, Out::Dn(Dn::Stable(_)))));
        // Rank 1's gossip showed it lacks our row: we gossip once more at the next sweep...
        let out = h.up(Up::NumCasts(Arc::from(vec![2, 1, 0])));
        assert!(matches!(&out[..], [Out::Dn(Dn::Cast { .. })]), "{out:?}");
        // ...and then, everything stable and nothing new, the layer falls silent.
        let out = h.up(Up::NumCasts(Arc::from(vec![2, 1, 0])));
        assert!(out.is_empty(), "{out:?}");
        // A malformed gossip is dropped, not trusted.
        h.up(Up::Cast { origin: 1, msg: gossip(vec![1], vec![]), qos: Qos::Unreliable });
        assert_eq!(h.stats.drops(DropReason::Gossip), 1);
    }
}
