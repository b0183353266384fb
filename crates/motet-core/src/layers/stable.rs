//! `stable`: broadcast stability detection through a coordinator (thesis Fig 2.3, Table 2.2
//! fields `Stability` and `NumCasts`; the algorithm is not in the seeds, see the digest §2.4
//! working definition).
//!
//! Provides: [`Service::Stability`]. Requires below: [`Service::CastCounts`]. Header: `Row` (on
//! the group's gossip channel, to the coordinator's address), `Columns` (cast unreliably), and
//! `NoHdr`.
//!
//! Stability of a cast is a fact about a matrix: `rows[member][origin]`, how many casts of `origin`
//! each member has received. The stability vector is the column minimum over live members (casts
//! everyone holds: `mnak` frees them) and the column maximum tells `mnak` about casts it never saw.
//!
//! One member keeps the matrix: the **coordinator**, the lowest rank this member does not count as
//! failed (the failures the flush announced, `Fail`). Every member asks `mnak` for its own row
//! each sweep (`StableReq` / `NumCasts`; `mnak` also reports it unasked every `report_every` casts
//! it buffers) and sends it to the coordinator when it grew, or while the last columns it heard of
//! are not all stable or do not yet hold its row. The coordinator merges the rows and casts its
//! columns once it has a row from every other live member since its last cast, or at its own
//! sweep if anything moved or arrived since. So a round costs O(n) messages, each O(n) to handle:
//! O(n) per member on average, where each member gossiping its row to all (this layer until
//! 2026-11-27) cost every member O(n²) a round, most of a cast's cost at 64 members
//! (docs/layers.md, "stable").
//!
//! Losses repair themselves: a lost row leaves the coordinator's columns short, so nobody hears
//! that everything is stable and the rows come again at the next sweep; a lost cast of the
//! columns leaves a member asking, with its row, and the coordinator casts again. Once every row
//! is in and equal, the columns are all stable and the layer falls silent. When the coordinator
//! fails, the next rank takes over and every member sends it its row at once.
//!
//! Stability traffic is above `appl`, so it never interleaves with application traffic in `appl`'s
//! view. Both kinds are unreliable, and a lost one is repaired by the next. A row goes on the
//! group's gossip channel, not as a reliable send: `pt2pt` holds a view change's flush until every
//! send is acknowledged, and the flush needs rows to go on (below, `send_row`). The simulator's
//! swarms found both (flushes that never ended, with rows as sends, or stopped at the flush).

use crate::event::{Counter, Dn, DropReason, Msg, Qos, Stability, Up};
use crate::layer::{Layer, LayerSpec, Outbox, Service};
use crate::time::Duration;
use crate::view::{Address, RankSet, ViewId, ViewState};
use crate::Rank;
use motet_wire::hdr::stable::{Columns, Header, Row};
use motet_wire::Header as AnyHeader;
use std::sync::Arc;

/// `stable` parameters.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Period of the stability sweep (request counts, send or cast if needed). Default 100 ms.
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
    summary: "stability detection: rows to a coordinator, columns cast back; frees retransmission buffers",
    provides: &[Service::Stability],
    requires_below: &[Service::CastCounts],
    requires_above: &[],
    above_every: &[],
    below_every: &[],
};

/// How far ahead of the last one taken a coordinator's `Columns` may be numbered (2^16 casts in a
/// row lost: at one a sweep, hours). Beyond, it is dropped (`OutOfWindow`): see `handle_up`.
const COLUMNS_AHEAD_MAX: u64 = 1 << 16;

/// `stable` state.
#[derive(Debug, PartialEq)]
pub struct Stable {
    config: Config,
    rank: Rank,
    /// The view, which names our rows, and where its members are (rows go to an address).
    view_id: ViewId,
    addresses: Vec<Address>,
    failed: RankSet,
    /// `rows[member][origin]`: casts of `origin` that `member` has received, as far as we know
    /// (our own row always; the others' as the coordinator hears them). Another member's row is
    /// empty, and reads as zeros ([`entry`]), until a row of its arrives: only a coordinator (or a
    /// member some other member takes for one) holds the n × n matrix, the others O(n) (at 64
    /// members, about 32 KB less per stack).
    rows: Vec<Vec<u64>>,
    /// The live rows' column minimum and maximum, kept up to date as rows grow: what this member
    /// announces and casts while it is the coordinator.
    columns: Stability,
    /// Per column, how many live rows sit at its minimum: the minimum can move only when the last
    /// of them grows, so a column is recomputed once per level it rises, not for every row that
    /// grows while all are tied (every member casting, at the coordinator: O(n²) a row).
    at_min: Vec<u32>,
    /// The number of the last cast of our columns (coordinator), and of the last columns taken
    /// from each rank (member): an older cast that arrives late (reordered, duplicated) is not
    /// taken, or the maximum would go back down under `mnak` and `frag`.
    cast_seq: u64,
    taken_seq: Vec<u64>,
    /// The last stability told to the layers below: our columns while we coordinate, else the
    /// coordinator's last cast.
    announced: Stability,
    /// Our row grew since we last sent it: send it (with the next counts from `mnak`).
    dirty: bool,
    /// Coordinator: the members whose rows arrived since our last cast.
    heard: RankSet,
    /// Coordinator: our columns moved since our last cast.
    moved: bool,
    /// The sweep asked `mnak` for our row: the answer is the sweep's (the coordinator casts then
    /// if anything moved or arrived, without waiting for every row).
    sweeping: bool,
}

impl Stable {
    /// A `stable` for `view`.
    pub fn new(config: &Config, view: &ViewState, rank: Rank) -> Stable {
        let n = view.len();
        let zero = Stability { stable: vec![0; n], max: vec![0; n] };
        Stable {
            config: config.clone(),
            rank,
            view_id: view.view_id,
            addresses: view.addresses.clone(),
            failed: RankSet::new(),
            rows: (0..n).map(|r| if r == usize::from(rank) { vec![0; n] } else { Vec::new() }).collect(),
            columns: zero.clone(),
            at_min: vec![n as u32; n],
            cast_seq: 0,
            taken_seq: vec![0; n],
            announced: zero,
            dirty: false,
            heard: RankSet::new(),
            moved: false,
            sweeping: false,
        }
    }

    fn live(&self) -> impl Iterator<Item = &Vec<u64>> {
        self.rows.iter().enumerate().filter(|(r, _)| !self.failed.contains(*r as Rank)).map(|(_, row)| row)
    }

    /// The column minimum and maximum over live members, computed afresh.
    fn recompute(&self) -> Stability {
        let n = self.rows.len();
        let stable = (0..n).map(|o| self.live().map(|row| entry(row, o)).min().unwrap_or(0)).collect();
        let max = (0..n).map(|o| self.live().map(|row| entry(row, o)).max().unwrap_or(0)).collect();
        Stability { stable, max }
    }

    /// Per column, the live rows at `stable`'s value.
    fn count_at_min(&self, stable: &[u64]) -> Vec<u32> {
        (0..self.rows.len()).map(|o| self.live().filter(|row| entry(row, o) == stable[o]).count() as u32).collect()
    }

    /// Recomputes every column (a failure changes which rows count). True if they moved.
    fn recompute_all(&mut self) -> bool {
        let next = self.recompute();
        self.at_min = self.count_at_min(&next.stable);
        let moved = next != self.columns;
        self.columns = next;
        moved
    }

    /// The lowest rank this member does not count as failed: the failures `sync`'s flush
    /// announced (`Fail`), not `elect`'s suspicions, so a suspected rank coordinates until the
    /// flush fails it.
    fn coordinator(&self) -> Rank {
        (0..self.rows.len() as Rank).find(|&r| !self.failed.contains(r)).unwrap_or(self.rank)
    }

    fn coordinating(&self) -> bool {
        self.coordinator() == self.rank
    }

    /// Merges `counts` into the row of `member` (counts only grow) and brings the columns up to
    /// date for the entries that grew, without recomputing the rest: a column's maximum can only
    /// rise to the new entry, and its minimum can move only when the last live row at it grows
    /// (`at_min`). A row then costs O(n), and O(n) more per column whose minimum rises, where
    /// recomputing every column cost O(n²). Returns whether the row grew, and whether the columns
    /// moved.
    fn merge(&mut self, member: Rank, counts: &[u64]) -> (bool, bool) {
        let live = !self.failed.contains(member);
        let (mut grew, mut moved) = (false, false);
        let n = self.rows.len();
        for (o, &count) in counts.iter().enumerate() {
            let row = &mut self.rows[usize::from(member)];
            let old = entry(row, o);
            if count <= old {
                continue;
            }
            if row.is_empty() {
                row.resize(n, 0); // its first row that says anything
            }
            row[o] = count;
            grew = true;
            if !live {
                continue;
            }
            if count > self.columns.max[o] {
                self.columns.max[o] = count;
                moved = true;
            }
            if old == self.columns.stable[o] {
                self.at_min[o] -= 1;
                if self.at_min[o] == 0 {
                    let min = self.live().map(|row| entry(row, o)).min().unwrap_or(0);
                    self.at_min[o] = self.live().filter(|row| entry(row, o) == min).count() as u32;
                    self.columns.stable[o] = min;
                    moved = true;
                }
            }
        }
        (grew, moved)
    }

    /// Tells the layers below `stability`, if it is news to them.
    fn announce(&mut self, stability: Stability, out: &mut Outbox<'_>) {
        if stability != self.announced {
            self.announced = stability;
            out.dn(Dn::Stable(Arc::new(self.announced.clone())));
        }
    }

    /// Coordinator: our columns moved; announce them below now, cast them in their turn.
    fn columns_moved(&mut self, out: &mut Outbox<'_>) {
        self.moved = true;
        self.announce(self.columns.clone(), out);
    }

    /// Coordinator: casts the columns when there is news (they moved, or are not all stable:
    /// someone is missing something, and a member that lost a cast learns of it only from the
    /// maximum) or a member asked (its row arrived), once every other live member's row has
    /// arrived since the last cast, or at the sweep (a row or a cast may have been lost). So about
    /// one cast per round of rows (a sweep's, and those `mnak`'s early reports bring) while
    /// anything is unstable, and silence once all is.
    fn maybe_cast(&mut self, out: &mut Outbox<'_>) {
        let others = (0..self.rows.len() as Rank).filter(|&r| r != self.rank && !self.failed.contains(r));
        let mut others = others.peekable();
        if others.peek().is_none() {
            return; // alone: nobody to tell
        }
        let all_heard = others.all(|r| self.heard.contains(r));
        let news = self.moved || self.columns.stable != self.columns.max;
        let due = (all_heard || self.sweeping) && (news || !self.heard.is_empty());
        if !due {
            return;
        }
        self.heard = RankSet::new();
        self.moved = false;
        self.cast_seq += 1;
        out.count(super::LayerKind::Stable, Counter::Gossip);
        let failed = self.failed.iter().map(u64::from).collect();
        let (stable, max) = (self.columns.stable.clone(), self.columns.max.clone());
        let columns = Columns { seq: self.cast_seq, stable, max, failed };
        out.dn(Dn::Cast { msg: Msg::default().with(Header::Columns(Arc::new(columns))), qos: Qos::Unreliable });
    }

    /// Member: sends our row to the coordinator, on the group's gossip channel: unreliable and
    /// unsequenced, so it neither waits behind nor holds back the view's reliable traffic. A view
    /// change's flush needs rows to go on (a failed origin's casts are repaired among the
    /// survivors, and `mnak` forgets what none of them holds only once the columns say so), and
    /// `pt2pt` holds a flush until every reliable send is acknowledged.
    fn send_row(&mut self, out: &mut Outbox<'_>) {
        self.dirty = false;
        out.count(super::LayerKind::Stable, Counter::Gossip);
        let row = Row {
            view_ltime: self.view_id.ltime,
            view_coord: self.view_id.coord.0,
            rank: u64::from(self.rank),
            counts: self.rows[usize::from(self.rank)].clone(),
        };
        let to = self.addresses[usize::from(self.coordinator())];
        out.dn(Dn::Gossip { to: Some(to), msg: Msg::default().with(Header::Row(Arc::new(row))) });
    }

    /// As far as this member has heard, every cast is stable, its own receipts included (the
    /// coordinator's columns are all stable and hold our row): nothing to send.
    fn settled(&self) -> bool {
        let own = &self.rows[usize::from(self.rank)];
        self.announced.stable == self.announced.max && own.iter().zip(&self.announced.stable).all(|(r, s)| r <= s)
    }

    /// Our own row, from `mnak`.
    fn own_counts(&mut self, counts: &[u64], out: &mut Outbox<'_>) {
        let (grew, moved) = self.merge(self.rank, counts);
        self.dirty |= grew;
        if self.coordinating() {
            self.dirty = false;
            if moved {
                self.columns_moved(out);
            }
            self.maybe_cast(out);
        } else if self.dirty || !self.settled() {
            self.send_row(out);
        }
        self.sweeping = false;
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
                    out.drop_input(super::LayerKind::Stable, DropReason::Gossip);
                    return;
                }
                self.own_counts(&counts, out);
            }
            Up::Gossip(mut msg) if matches!(msg.hdrs.last().as_deref(), Some(AnyHeader::Stable(Header::Row(_)))) => {
                let Some(Header::Row(row)) = msg.pop_as::<Header>() else { unreachable!("matched above") };
                if row.view_ltime != self.view_id.ltime || row.view_coord != self.view_id.coord.0 {
                    return; // another view's (the channel crosses views and partitions)
                }
                let origin = match Rank::try_from(row.rank) {
                    Ok(origin) if usize::from(origin) < self.rows.len() && origin != self.rank => origin,
                    _ => return out.drop_input(super::LayerKind::Stable, DropReason::Gossip),
                };
                if row.counts.len() != self.rows.len() {
                    return out.drop_input(super::LayerKind::Stable, DropReason::Gossip);
                }
                // Kept whoever we think coordinates (a member that thinks we do is right soon,
                // or its row is merely early): the columns stay what the rows say.
                let (_, moved) = self.merge(origin, &row.counts);
                // A member we count as failed (being excluded, it never hears of it) keeps
                // sending: its rows neither count nor make us cast.
                if self.coordinating() && !self.failed.contains(origin) {
                    self.heard.insert(origin);
                    if moved {
                        self.columns_moved(out);
                    }
                    self.maybe_cast(out);
                }
            }
            Up::Cast { origin, mut msg, qos } => match msg.pop_as::<Header>() {
                Some(Header::Columns(columns)) => {
                    let n = self.rows.len();
                    let ordered = columns.stable.iter().zip(&columns.max).all(|(s, m)| s <= m);
                    if columns.stable.len() != n || columns.max.len() != n || !ordered {
                        out.drop_input(super::LayerKind::Stable, DropReason::Gossip);
                        return;
                    }
                    if origin == self.rank {
                        return; // our own cast, looped back by `local`
                    }
                    // Columns that count failed no member we count live (`within`, below) come
                    // from our coordinator and no one else: their sender coordinates, so every
                    // rank below it is in its failed set, hence in ours, and ranks we count failed
                    // are dropped by `bottom`. And their minimum cannot pass our own row: it is
                    // over a row of ours the coordinator had, and rows only grow. Columns that
                    // break either are no genuine coordinator's; taken, one faulty member's cast
                    // would free every retransmission buffer here (`mnak` frees up to the
                    // minimum), so that a failed origin's casts could never be repaired.
                    let within =
                        columns.failed.iter().all(|&r| Rank::try_from(r).is_ok_and(|r| self.failed.contains(r)));
                    let own = &self.rows[usize::from(self.rank)];
                    if within && (origin != self.coordinator() || columns.stable.iter().zip(own).any(|(&s, &r)| s > r))
                    {
                        out.drop_input(super::LayerKind::Stable, DropReason::Gossip);
                        return;
                    }
                    // Columns that count failed a member we count live (only their maximum is
                    // taken, below) still come from a coordinator, as their sender sees the view:
                    // ranks of this view, every one below the sender among them. Taken from any
                    // member, one cast naming a rank past the view made every member NAK for
                    // casts nobody sent, each sweep, until the view ended.
                    if !within {
                        let failed: Option<RankSet> = columns
                            .failed
                            .iter()
                            .map(|&r| Rank::try_from(r).ok().filter(|&r| usize::from(r) < n))
                            .collect();
                        if failed
                            .is_none_or(|failed| (0..origin).any(|r| !failed.contains(r)) || failed.contains(origin))
                        {
                            out.drop_input(super::LayerKind::Stable, DropReason::Gossip);
                            return;
                        }
                    }
                    // An older cast of that coordinator's, arriving late, is old news. One far ahead
                    // of the last taken is no coordinator's: its casts are numbered one by one, and
                    // so many lost in a row would have had it suspected. Taken, one forged cast
                    // would make every later genuine one look old, freezing stability (and every
                    // retransmission buffer) for the rest of the view.
                    let seq = &mut self.taken_seq[usize::from(origin)];
                    if columns.seq <= *seq {
                        return;
                    }
                    if columns.seq - *seq > COLUMNS_AHEAD_MAX {
                        out.drop_input(super::LayerKind::Stable, DropReason::OutOfWindow);
                        return;
                    }
                    *seq = columns.seq;
                    // While we coordinate, our own columns are what we announce (a cast of a
                    // coordinator we have just replaced is old news).
                    if self.coordinating() {
                        return;
                    }
                    // The minimum is safe to take only if the coordinator left out no row of a
                    // member we count as live: it is then over a superset of our live members,
                    // no more than what each of them holds. A coordinator that counts a member
                    // failed which we do not (a partition seen from the other side, or a failure
                    // not yet announced to us) could otherwise make us free casts that member
                    // lacks, which it could never get back if it stays in our next view. The
                    // maximum we always take: that some member holds a cast is what reveals a
                    // lost tail (here, the flush's own cast that tells us of the failure).
                    //
                    // The maximum never goes below our own row: the coordinator may not have our
                    // latest row yet, and `frag` drops a failed origin's partial message for good
                    // when its stable and maximum meet, while we may still hold more of it.
                    let stability = if within {
                        let max = columns.max.iter().zip(own).map(|(&m, &r)| m.max(r)).collect();
                        Stability { stable: columns.stable.clone(), max }
                    } else {
                        let max = self.announced.max.iter().zip(&columns.max).zip(own);
                        let max = max.map(|((&a, &b), &r)| a.max(b).max(r)).collect();
                        Stability { stable: self.announced.stable.clone(), max }
                    };
                    self.announce(stability, out);
                }
                Some(Header::NoHdr) => out.up(Up::Cast { origin, msg, qos }),
                _ => out.drop_input(super::LayerKind::Stable, DropReason::HeaderMismatch),
            },
            other => out.pass_up(super::LayerKind::Stable, other, Header::NoHdr),
        }
    }

    fn handle_dn(&mut self, ev: Dn, out: &mut Outbox<'_>) {
        match ev {
            Dn::Fail(ranks) => {
                let before = self.coordinator();
                self.failed.union_with(&ranks);
                out.dn(Dn::Fail(ranks));
                // A failure changes which rows count.
                if self.recompute_all() && self.coordinating() {
                    self.columns_moved(out);
                }
                if self.coordinating() {
                    self.maybe_cast(out);
                } else if self.coordinator() != before {
                    // A new coordinator may have no row of ours, or an old one: ours, at once.
                    self.send_row(out);
                }
            }
            other => out.pass_dn(other, Header::NoHdr),
        }
    }

    fn handle_timer(&mut self, out: &mut Outbox<'_>) {
        self.sweeping = true;
        out.dn(Dn::StableReq);
        out.alarm(out.now() + self.config.sweep_interval);
    }

    fn check_invariants(&self) {
        let n = self.rows.len();
        assert!(self.rows.iter().all(|row| row.len() == n || row.is_empty()));
        assert_eq!(self.rows[usize::from(self.rank)].len(), n, "our own row is always there");
        assert!(self.columns.stable.iter().zip(&self.columns.max).all(|(s, m)| s <= m));
        assert_eq!(self.columns, self.recompute(), "the columns are the live rows' minimum and maximum");
        assert_eq!(self.at_min, self.count_at_min(&self.columns.stable), "the live rows at each minimum");
    }
}

/// Entry `o` of a row: an empty row (no row of that member has arrived) reads as zeros.
fn entry(row: &[u64], o: usize) -> u64 {
    row.get(o).copied().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::harness::{Harness, Out};
    use crate::time::Instant;

    /// `origin`'s row in the test views (`crate::testing::view`), as it arrives.
    fn row(origin: Rank, counts: Vec<u64>) -> Up {
        let id = crate::testing::view(counts.len()).view_id;
        let row = Row { view_ltime: id.ltime, view_coord: id.coord.0, rank: origin.into(), counts };
        Up::Gossip(Msg::default().with(Header::Row(Arc::new(row))))
    }

    /// The rows among `out`: (the rank whose address they go to, the counts).
    fn rows_sent(out: &[Out], view: &ViewState) -> Vec<(Rank, Vec<u64>)> {
        out.iter()
            .filter_map(|o| match o {
                Out::Dn(Dn::Gossip { to: Some(to), msg }) => match msg.clone().pop_as::<Header>() {
                    Some(Header::Row(r)) => {
                        let rank = view.addresses.iter().position(|a| a == to).expect("a member's address");
                        Some((rank as Rank, r.counts.clone()))
                    }
                    _ => None,
                },
                _ => None,
            })
            .collect()
    }

    /// A member of rank `rank` in `view`, in its harness.
    fn at(view: &ViewState, rank: Rank) -> Harness<Stable> {
        Harness::new(Stable::new(&Config::default(), view, rank), rank)
    }

    /// `origin`'s cast of its columns (`seq`, no member counted failed unless `failed`), as it
    /// arrives.
    fn columns_from(origin: Rank, seq: u64, stable: Vec<u64>, max: Vec<u64>, failed: Vec<u64>) -> Up {
        let columns = Columns { seq, stable, max, failed };
        Up::Cast { origin, msg: Msg::default().with(Header::Columns(Arc::new(columns))), qos: Qos::Unreliable }
    }

    fn casts(out: &[Out]) -> Vec<Columns> {
        out.iter()
            .filter_map(|o| match o {
                Out::Dn(Dn::Cast { msg, qos: Qos::Unreliable }) => match msg.clone().pop_as::<Header>() {
                    Some(Header::Columns(c)) => Some((*c).clone()),
                    _ => None,
                },
                _ => None,
            })
            .collect()
    }

    fn announced(out: &[Out]) -> Vec<Stability> {
        out.iter()
            .filter_map(|o| match o {
                Out::Dn(Dn::Stable(s)) => Some((**s).clone()),
                _ => None,
            })
            .collect()
    }

    proptest::proptest! {
        /// The columns kept up to date entry by entry equal the live rows' minimum and maximum
        /// recomputed afresh, after any mix of own counts, rows and failures; and the coordinator
        /// announces stability below exactly when they moved.
        #[test]
        fn kept_columns_equal_recomputed_ones(
            ops in proptest::collection::vec((0u8..6, 0usize..5, proptest::collection::vec(0u64..6, 5)), 1..60)
        ) {
            let view = crate::testing::view(5);
            let mut h = at(&view, 0);
            let mut counts = [0u64; 5];
            for (kind, member, values) in ops {
                let before = h.layer.columns.clone();
                let out = match kind {
                    // Own counts only grow (`mnak`'s buffers).
                    0 | 1 => {
                        counts.iter_mut().zip(&values).for_each(|(c, v)| *c += v);
                        h.up(Up::NumCasts(Arc::from(counts.to_vec())))
                    }
                    // Rank 0 stays live: it coordinates throughout.
                    5 if member != 0 => h.dn(Dn::Fail([member as Rank].into_iter().collect())),
                    _ if member != 0 => {
                        let received = values.iter().map(|v| v * 2).collect();
                        h.up(row(member as Rank, received))
                    }
                    _ => Vec::new(),
                };
                proptest::prop_assert_eq!(&h.layer.columns, &h.layer.recompute());
                let told = announced(&out);
                proptest::prop_assert_eq!(!told.is_empty(), h.layer.columns != before);
                if let Some(last) = told.last() {
                    proptest::prop_assert_eq!(last, &h.layer.columns);
                }
            }
        }
    }

    /// A round: the members' rows reach the coordinator, which announces the columns below as
    /// they move and casts them once every live member's row is in; the members announce what
    /// it cast. Then, everything stable and nothing new, everyone falls silent.
    #[test]
    fn rows_go_to_the_coordinator_and_its_columns_come_back() {
        let view = crate::testing::view(3);
        let mut coordinator = at(&view, 0);
        let mut member = at(&view, 1);

        // A member's own counts go to rank 0, and nowhere else.
        let out = member.up(Up::NumCasts(Arc::from(vec![2, 1, 0])));
        assert_eq!(rows_sent(&out, &view), vec![(0, vec![2, 1, 0])], "{out:?}");
        assert!(announced(&out).is_empty() && casts(&out).is_empty(), "a member computes nothing: {out:?}");

        // The coordinator's own counts move its columns (announced at once), but it casts only
        // once every other live member's row is in.
        let out = coordinator.up(Up::NumCasts(Arc::from(vec![2, 1, 0])));
        assert_eq!(announced(&out), vec![Stability { stable: vec![0, 0, 0], max: vec![2, 1, 0] }]);
        assert!(casts(&out).is_empty(), "{out:?}");
        let out = coordinator.up(row(1, vec![2, 1, 0]));
        assert!(casts(&out).is_empty(), "rank 2's row is missing: {out:?}");
        let out = coordinator.up(row(2, vec![2, 1, 0]));
        let stable = Stability { stable: vec![2, 1, 0], max: vec![2, 1, 0] };
        assert_eq!(announced(&out), vec![stable.clone()]);
        assert_eq!(casts(&out), vec![Columns { seq: 1, stable: vec![2, 1, 0], max: vec![2, 1, 0], failed: vec![] }]);

        // The member announces the cast columns, once.
        let out = member.up(columns_from(0, 1, vec![2, 1, 0], vec![2, 1, 0], vec![]));
        assert_eq!(announced(&out), vec![stable]);
        let out = member.up(columns_from(0, 1, vec![2, 1, 0], vec![2, 1, 0], vec![]));
        assert!(out.is_empty(), "{out:?}");

        // Everything stable, nothing new: at the next sweeps, silence everywhere.
        for h in [&mut coordinator, &mut member] {
            let out = h.timer(Instant::ZERO + Duration::from_millis(100));
            assert!(matches!(&out[..], [Out::Dn(Dn::StableReq)]), "{out:?}");
            let out = h.up(Up::NumCasts(Arc::from(vec![2, 1, 0])));
            assert!(out.is_empty(), "{out:?}");
        }
    }

    /// Only whoever receives rows holds them: a member keeps its own row and nobody else's (O(n)
    /// per stack), a coordinator each member's once it has arrived; and a row that says nothing
    /// (all zeros) takes no room either.
    #[test]
    fn only_a_coordinator_holds_the_others_rows() {
        let view = crate::testing::view(4);
        let mut coordinator = at(&view, 0);
        let mut member = at(&view, 2);
        let held = |h: &Harness<Stable>| h.layer.rows.iter().map(|row| !row.is_empty()).collect::<Vec<_>>();
        for h in [&mut coordinator, &mut member] {
            h.up(Up::NumCasts(Arc::from(vec![1, 1, 1, 1])));
        }
        member.up(columns_from(0, 1, vec![0; 4], vec![1; 4], vec![]));
        assert_eq!(held(&member), [false, false, true, false]);
        coordinator.up(row(3, vec![0; 4]));
        coordinator.up(row(2, vec![1, 1, 1, 1]));
        assert_eq!(held(&coordinator), [true, false, true, false]);
        // An empty row reads as zeros: rank 1 and 3 hold the minimum at 0.
        assert_eq!(coordinator.layer.columns, Stability { stable: vec![0; 4], max: vec![1; 4] });
    }

    /// A cast of columns numbered far ahead of the last one taken (forged, or corrupt) is dropped:
    /// taken, it made every later genuine cast look old, and stability froze for the view.
    #[test]
    fn columns_numbered_far_ahead_are_dropped() {
        let view = crate::testing::view(3);
        let mut member = at(&view, 1);
        member.up(Up::NumCasts(Arc::from(vec![1, 1, 0])));
        let out = member.up(columns_from(0, u64::MAX, vec![0, 0, 0], vec![1, 1, 0], vec![]));
        assert!(announced(&out).is_empty(), "{out:?}");
        assert_eq!(member.stats.drops(DropReason::OutOfWindow), 1);
        let out = member.up(columns_from(0, 1, vec![1, 1, 0], vec![1, 1, 0], vec![]));
        assert_eq!(announced(&out), [Stability { stable: vec![1, 1, 0], max: vec![1, 1, 0] }], "the genuine one");
        member.up(columns_from(0, 1 + COLUMNS_AHEAD_MAX, vec![1, 1, 0], vec![1, 1, 0], vec![]));
        assert_eq!(member.stats.drops(DropReason::OutOfWindow), 1, "at the limit: taken");
        assert_eq!(member.layer.taken_seq[0], 1 + COLUMNS_AHEAD_MAX);
    }

    /// Losses repair themselves: a member that has not heard that everything is stable sends its
    /// row at each sweep, and a coordinator that heard a row at its sweep casts again.
    #[test]
    fn a_lost_cast_is_asked_for_again_and_cast_again() {
        let view = crate::testing::view(3);
        let mut coordinator = at(&view, 0);
        let mut member = at(&view, 1);
        coordinator.up(Up::NumCasts(Arc::from(vec![1, 0, 0])));
        coordinator.up(row(1, vec![1, 0, 0]));
        let out = coordinator.up(row(2, vec![1, 0, 0]));
        assert_eq!(casts(&out).len(), 1, "{out:?}");
        // The member's copy of that cast is lost: its sweep sends its row again, unchanged.
        member.up(Up::NumCasts(Arc::from(vec![1, 0, 0])));
        member.timer(Instant::ZERO + Duration::from_millis(100));
        let out = member.up(Up::NumCasts(Arc::from(vec![1, 0, 0])));
        assert_eq!(rows_sent(&out, &view).len(), 1, "not all stable as far as it knows: {out:?}");
        // Rank 2 is content and silent: the coordinator casts again at its own sweep.
        let out = coordinator.up(row(1, vec![1, 0, 0]));
        assert!(casts(&out).is_empty(), "{out:?}");
        coordinator.timer(Instant::ZERO + Duration::from_millis(100));
        let out = coordinator.up(Up::NumCasts(Arc::from(vec![1, 0, 0])));
        assert_eq!(casts(&out), vec![Columns { seq: 2, stable: vec![1, 0, 0], max: vec![1, 0, 0], failed: vec![] }]);
        // Nothing heard and nothing moved since: the next sweep is silent.
        coordinator.timer(Instant::ZERO + Duration::from_millis(200));
        assert!(coordinator.up(Up::NumCasts(Arc::from(vec![1, 0, 0]))).is_empty());
    }

    /// When the coordinator fails, the next rank coordinates: the others send it their rows at
    /// once, and the failed member's row no longer counts.
    #[test]
    fn the_next_rank_takes_over_when_the_coordinator_fails() {
        let view = crate::testing::view(3);
        let mut next = at(&view, 1);
        let mut member = at(&view, 2);
        member.up(Up::NumCasts(Arc::from(vec![3, 2, 1])));
        let out = member.dn(Dn::Fail([0].into_iter().collect()));
        assert_eq!(rows_sent(&out, &view), vec![(1, vec![3, 2, 1])], "{out:?}");
        next.up(Up::NumCasts(Arc::from(vec![3, 1, 1])));
        next.dn(Dn::Fail([0].into_iter().collect()));
        let out = next.up(row(2, vec![3, 2, 1]));
        assert_eq!(casts(&out), vec![Columns { seq: 1, stable: vec![3, 1, 1], max: vec![3, 2, 1], failed: vec![0] }]);
        // A cast from the old coordinator, still on its way, does not undo ours.
        let out = next.up(columns_from(0, 1, vec![0, 0, 0], vec![9, 9, 9], vec![]));
        assert!(out.is_empty(), "{out:?}");
    }

    /// A member takes a coordinator's columns only if the coordinator left out no row of a
    /// member it counts as live: a coordinator on the other side of a partition (which counts us
    /// and our side failed) would otherwise have our buffers freed of casts our side lacks. The
    /// simulator found it (`total --swarm`, 7 nodes, seed 1235: a flush stuck for good on casts
    /// nobody alive on the majority's side still held).
    #[test]
    fn columns_that_leave_out_a_member_we_count_live_are_not_taken() {
        let view = crate::testing::view(4);
        let mut member = at(&view, 3);
        member.up(Up::NumCasts(Arc::from(vec![5; 4])));
        let seq = std::cell::Cell::new(0);
        let theirs = |failed: Vec<u64>| {
            seq.set(seq.get() + 1);
            columns_from(0, seq.get(), vec![5; 4], vec![5; 4], failed)
        };
        // Rank 2 is live as far as we know: only the maximum is taken (it reveals lost tails).
        let zero = vec![0; 4];
        assert_eq!(announced(&member.up(theirs(vec![2]))), vec![Stability { stable: zero.clone(), max: vec![5; 4] }]);
        member.dn(Dn::Fail([2].into_iter().collect()));
        let all = Stability { stable: vec![5; 4], max: vec![5; 4] };
        assert_eq!(announced(&member.up(theirs(vec![2]))), vec![all], "now we count it failed too");
        // Not a coordinator's as its sender sees the view: a rank past the view, a sender with a
        // live rank below it, a sender that counts itself failed. Before, any member's cast
        // naming a rank past the view raised the maximum (casts nobody sent, NAKed each sweep).
        let mut other = at(&view, 3);
        assert!(announced(&other.up(theirs(vec![1 << 40]))).is_empty(), "no such rank");
        assert!(announced(&other.up(theirs(vec![4]))).is_empty(), "no such rank");
        assert!(announced(&other.up(columns_from(2, 1, vec![5; 4], vec![9; 4], vec![1]))).is_empty(), "0 lives");
        assert!(announced(&other.up(columns_from(1, 1, vec![5; 4], vec![9; 4], vec![0, 1]))).is_empty(), "itself");
        assert_eq!(other.stats.drops(DropReason::Gossip), 4);
        // A coordinator of the other side of a partition (0 and 1 failed, as rank 2 sees it).
        assert_eq!(
            announced(&other.up(columns_from(2, 2, vec![5; 4], vec![9; 4], vec![0, 1]))),
            vec![Stability { stable: zero, max: vec![9; 4] }]
        );
    }

    /// Columns taken whole (they count failed no member we count live) come from our coordinator
    /// alone, with a minimum no higher than our own row: a faulty member's columns that claimed
    /// everything stable would free every retransmission buffer here (found by a review).
    #[test]
    fn columns_from_no_coordinator_or_beyond_our_row_are_not_taken() {
        let view = crate::testing::view(3);
        let mut member = at(&view, 2);
        member.up(Up::NumCasts(Arc::from(vec![1, 1, 1])));
        let all = vec![1 << 40; 3];
        let out = member.up(columns_from(1, 1, all.clone(), all.clone(), vec![]));
        assert!(announced(&out).is_empty(), "rank 1 does not coordinate: {out:?}");
        let out = member.up(columns_from(0, 1, all.clone(), all, vec![]));
        assert!(announced(&out).is_empty(), "nobody has more than we received: {out:?}");
        assert_eq!(member.stats.drops(DropReason::Gossip), 2);
        // The genuine coordinator's columns, within our row, are taken (the same numbers again:
        // the refused casts left no trace).
        let out = member.up(columns_from(0, 1, vec![1, 0, 1], vec![2, 1, 1], vec![]));
        assert_eq!(announced(&out), vec![Stability { stable: vec![1, 0, 1], max: vec![2, 1, 1] }]);
        // Once the coordinator has failed, the next rank's columns are taken.
        member.dn(Dn::Fail([0].into_iter().collect()));
        let out = member.up(columns_from(1, 1, vec![1, 1, 1], vec![2, 1, 1], vec![0]));
        assert_eq!(announced(&out), vec![Stability { stable: vec![1, 1, 1], max: vec![2, 1, 1] }]);
    }

    /// The review's cases: a late copy of an older cast is not taken (it would take the maximum
    /// back down), the maximum announced is never below our own row (the coordinator may not have
    /// our latest), and a member we count as failed does not make us cast by sending its row.
    #[test]
    fn old_casts_our_own_row_and_failed_members_rows() {
        let view = crate::testing::view(3);
        let mut member = at(&view, 2);
        member.up(Up::NumCasts(Arc::from(vec![4, 0, 7])));
        let cast = |seq, max: Vec<u64>| columns_from(0, seq, vec![4, 0, 0], max, vec![]);
        // Our own row is ahead of the coordinator's maximum for our own casts: ours is announced.
        let out = member.up(cast(2, vec![6, 0, 5]));
        assert_eq!(announced(&out), vec![Stability { stable: vec![4, 0, 0], max: vec![6, 0, 7] }]);
        // An older cast, late: nothing.
        assert!(member.up(cast(1, vec![4, 0, 0])).is_empty());
        // A duplicate of the last: nothing either.
        assert!(member.up(cast(2, vec![6, 0, 5])).is_empty());

        let mut coordinator = at(&view, 0);
        coordinator.dn(Dn::Fail([2].into_iter().collect()));
        coordinator.up(Up::NumCasts(Arc::from(vec![1, 0, 0])));
        let out = coordinator.up(row(2, vec![1, 0, 0]));
        assert!(casts(&out).is_empty(), "rank 1's row is missing, and rank 2 does not count: {out:?}");
        let out = coordinator.up(row(1, vec![1, 0, 0]));
        assert_eq!(casts(&out).len(), 1, "{out:?}");
    }

    /// A failure raises the minimum to the live rows' (the failed member's row no longer holds it
    /// back), and malformed rows and columns are dropped, not trusted.
    #[test]
    fn stability_is_the_minimum_over_live_members() {
        let view = crate::testing::view(3);
        let mut h = at(&view, 0);
        h.up(Up::NumCasts(Arc::from(vec![2, 1, 0])));
        h.up(row(1, vec![2, 1, 0]));
        assert_eq!(h.layer.columns.stable, vec![0, 0, 0], "rank 2 has not reported");
        let out = h.dn(Dn::Fail([2].into_iter().collect()));
        assert_eq!(h.layer.columns.stable, vec![2, 1, 0]);
        assert!(!announced(&out).is_empty() && !casts(&out).is_empty(), "{out:?}");
        h.up(row(1, vec![1]));
        h.up(columns_from(1, 1, vec![1], vec![], vec![]));
        assert_eq!(h.stats.drops(DropReason::Gossip), 2);
    }
}
