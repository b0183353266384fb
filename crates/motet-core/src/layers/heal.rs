//! `heal`: discovery of the group's other partitions (thesis Fig 2.3, Table 2.2 `HealGos`;
//! Ensemble `heal`).
//!
//! Provides: [`Service::Healing`]. Requires below: [`Service::Membership`] (it needs to know who
//! coordinates); above: [`Service::Merging`], which it asks to merge. Header: `Hello` (group
//! gossip) and `NoHdr`.
//!
//! Every `gossip_interval` the coordinator of each partition gossips `Hello { view id, contact, .. }`
//! on the group's gossip channel to every known peer address. Partitions are ordered by (primary,
//! view id): a coordinator that hears a *larger* partition asks `inter` to merge into it, and the
//! larger one waits to be asked, so two partitions never ask each other at once and a primary
//! partition is always the one that grants (it keeps its primary status; the requester's never
//! carries over). Thus a crashed-and-restarted process (a new singleton
//! endpoint) or the two sides of a healed partition find each other and merge.
//!
//! A coordinator asks only once it knows that messages get through both ways (a merge request
//! must reach the granter). A hello heard from a larger partition proves only that *its*
//! messages reach us; so we send our hello to its coordinator, which answers a
//! smaller partition's hello with an `answer` hello sent to us alone, and only an answer makes us
//! ask. Asking floods our own partition (an `intra` round: the application is blocked) and waits
//! for a grant until `merge.merge_timeout` (3 s) from the start of that flush; with a partition that heals in one direction
//! only, the request could never arrive, and every member of ours would be blocked for those 3 s
//! and then get a new view of the same members. So nothing happens until the other direction
//! heals.
//!
//! Two rules keep healing from feeding on itself. A view asks at most once, and not before it is
//! `gossip_interval` old (a hello heard earlier is remembered and acted on at the first tick), so
//! a lineage of views that keep failing to merge — each failure makes a new view — asks at most
//! once per `gossip_interval`, instead of once per round trip. And a stack replaced by its
//! successor view (`NewView` passed up through it) falls silent: it lingers only to finish
//! retransmissions, and must not announce or act on a view that is no longer current.
//!
//! Announcements back off in a view a merge made (how every runtime member's group forms): each
//! one that heard no partition we could merge with since the last doubles the time to the next,
//! from `gossip_interval` up to `gossip_interval_max` (2 s), and the hello of one brings it back
//! to `gossip_interval` at once (as a new view, and a coordinator taking over mid-view, start
//! there). A group that has formed hears no other partition, and its announcements are part of
//! what idle groups cost a process (docs/PERFORMANCE.md, "Groups per process"). Other views keep
//! the base pace: a view made from one other (members failed or left) is a partition's side,
//! which must find the other side as soon after the partition heals as before, however lossy
//! the link (`Heal::backs_off`).
//!
//! A hello also carries its partition's size and what of a merge's concern its stack has
//! (membership, merging, `Primary`: `switch::kept`). Two partitions that `inter` could not merge
//! (their view together past `inter.members_max`, or a stack the smaller could not take:
//! `switch::keeps`) neither ask nor answer, with one warning per view of the other: each request
//! would have held the smaller partition in a flush until it was refused, at every gossip.

use crate::event::{Dn, Msg, Up};
use crate::layer::{Layer, LayerSpec, Outbox, Service};
use crate::time::{Duration, Instant};
use crate::view::{EndpointId, ViewId, ViewState};
use crate::Rank;
use motet_wire::hdr::heal::{Header, Hello};
use motet_wire::Header as AnyHeader;
use std::sync::Arc;

/// `heal` parameters.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// How often a coordinator announces its partition. Default 500 ms.
    #[serde(
        rename = "gossip_interval_ms",
        deserialize_with = "crate::time::millis",
        serialize_with = "crate::time::ser_millis"
    )]
    pub gossip_interval: Duration,
    /// The longest the announcements of a merged partition that hears no other grow apart to:
    /// each announcement that heard no other partition since the last doubles the interval, up
    /// to this, and hearing one brings it back to `gossip_interval` (other views keep the base
    /// pace: `Heal::backs_off`). It bounds how long after a
    /// partition heals the two sides take to find each other. Default 2,000 ms; one shorter than
    /// `gossip_interval` means no back-off (a configuration that set only a `gossip_interval`
    /// longer than 2 s, valid before this parameter, keeps its pace).
    #[serde(
        rename = "gossip_interval_max_ms",
        deserialize_with = "crate::time::millis",
        serialize_with = "crate::time::ser_millis"
    )]
    pub gossip_interval_max: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config { gossip_interval: Duration::from_millis(500), gossip_interval_max: Duration::from_millis(2_000) }
    }
}

/// Static description.
pub static SPEC: LayerSpec = LayerSpec {
    name: "heal",
    summary: "coordinators gossip their view; a smaller view asks to merge into a larger one",
    provides: &[Service::Healing],
    requires_below: &[Service::Membership],
    requires_above: &[Service::Merging],
    above_every: &[],
    below_every: &[],
};

/// Partitions that cannot be merged with, remembered so each is logged once ([`Heal`]'s `apart`).
const APART_MAX: usize = 8;

/// `heal` state.
#[derive(Debug, PartialEq)]
pub struct Heal {
    config: Config,
    view: Arc<ViewState>,
    rank: Rank,
    coord: Rank,
    /// The partition we last asked to merge with (ask once per view).
    asked: Option<ViewId>,
    /// When this view's stack started; it asks no earlier than `gossip_interval` after.
    born: Option<Instant>,
    /// A larger partition heard before we were old enough to ask: (contact, view).
    candidate: Option<(crate::view::Address, ViewId)>,
    /// A successor view has been installed: this stack only lingers.
    replaced: bool,
    /// The last few partitions found too large to merge with, or running a stack a merge with
    /// them could not keep (each logged once per view of it; several such partitions, heard in
    /// turn, would each be logged at every gossip with one slot: a review's finding).
    apart: Vec<ViewId>,
    /// What of a merge's concern our stack has (`switch::kept`), which our hello carries.
    kept: u8,
    /// The time to the next announcement: `gossip_interval`, doubled after each one that heard
    /// no other partition, up to `gossip_interval_max`.
    interval: Duration,
}

impl Heal {
    /// A `heal` for `view`.
    pub fn new(config: &Config, view: &Arc<ViewState>, rank: Rank) -> Heal {
        Heal {
            config: config.clone(),
            view: Arc::clone(view),
            rank,
            coord: view.coord,
            asked: None,
            born: None,
            candidate: None,
            replaced: false,
            apart: Vec::new(),
            kept: super::switch::kept(&view.stack),
            interval: config.gossip_interval,
        }
    }
}

impl Heal {
    /// Whether this view's announcements back off: only in a view a merge made, which is how
    /// every runtime member's group forms (each starts alone). Any other view keeps the base
    /// pace: a view made from one other (members failed or left) is a partition's side, which
    /// must find the other side soon after the partition heals however lossy the link, and a
    /// first view may be one whose members have not all started. Backing off in every view, the
    /// 300-seed `vsync` swarm's slowest convergence went from 7 s to 19 s (seed 243, 57% of
    /// datagrams lost); in merged views only, it is unchanged.
    fn backs_off(&self) -> bool {
        self.view.prev_ids.len() >= 2
    }

    /// Announces our view, to one address or to every known peer; `answer`: to a smaller
    /// partition's coordinator, in answer to its hello.
    fn hello(&self, to: Option<crate::view::Address>, answer: bool, out: &mut Outbox<'_>) {
        let contact = self.view.addresses[usize::from(self.rank)].into();
        let id = self.view.view_id;
        let hello = Hello {
            answer,
            ltime: id.ltime,
            coord: id.coord.0,
            primary: self.view.primary,
            contact,
            // At most `RANKS_MAX`, a view's length.
            members: self.view.len() as u16,
            keeps: self.kept,
        };
        out.dn(Dn::Gossip { to, msg: Msg::default().with(Header::Hello(Box::new(hello))) });
    }

    /// Whether the partition of `view` is found unmergeable for the first time (then logged):
    /// remembered among the last [`APART_MAX`].
    fn first_apart(&mut self, view: ViewId) -> bool {
        if self.apart.contains(&view) {
            return false;
        }
        if self.apart.len() == APART_MAX {
            self.apart.remove(0);
        }
        self.apart.push(view);
        true
    }

    /// Asks `inter` to merge into the partition of `view`, now or at the first tick.
    fn ask(&mut self, contact: crate::view::Address, view: ViewId, out: &mut Outbox<'_>) {
        let old_enough = self.born.is_some_and(|born| out.now() >= born + self.config.gossip_interval);
        if old_enough {
            self.asked = Some(view);
            self.candidate = None;
            tracing::debug!(?contact, ltime = view.ltime, coord = %view.coord, "a hello from another partition of the group");
            out.up(Up::MergeWith { contact, view });
        } else {
            self.candidate = Some((contact, view));
        }
    }
}

impl Layer for Heal {
    fn handle_up(&mut self, ev: Up, out: &mut Outbox<'_>) {
        match ev {
            Up::Init => {
                self.born = Some(out.now());
                out.alarm(out.now() + self.config.gossip_interval);
                out.up(Up::Init);
            }
            Up::NewView(view) => {
                self.replaced = true;
                out.up(Up::NewView(view));
            }
            Up::Elect(coord) => {
                // Taking over mid-view: announce at the base pace, as a new view does.
                if coord == self.rank && self.coord != self.rank && !self.replaced {
                    self.interval = self.config.gossip_interval;
                    out.alarm(out.now() + self.interval);
                }
                self.coord = coord;
                out.up(Up::Elect(coord));
            }
            Up::Gossip(mut msg) if matches!(msg.hdrs.last().as_deref(), Some(AnyHeader::Heal(Header::Hello(_)))) => {
                let Some(Header::Hello(hello)) = msg.pop_as::<Header>() else { unreachable!() };
                let Hello { answer, ltime, coord, primary, contact, members, keeps } = *hello;
                let view = ViewId { ltime, coord: EndpointId(coord) };
                let (theirs, ours) = ((primary, view), (self.view.primary, self.view.view_id));
                let stranger = self.view.rank_of(EndpointId(coord)).is_none();
                // A partition at the largest logical time cannot be merged with (`inter` refuses
                // it): asking would only flush both sides for nothing, at every hello.
                let mergeable =
                    ltime.max(self.view.view_id.ltime).saturating_add(2) <= motet_wire::hdr::intra::LTIME_MAX;
                if self.coord != self.rank || !stranger || self.replaced || !mergeable {
                    return;
                }
                // Nor can two partitions whose view together would pass either one's
                // `members_max` (`inter` refuses it): asking held the smaller partition in a
                // flush for up to the merge timeout at every gossip, for good. Each side checks
                // its own limit: the smaller does not ask, the larger does not answer (so the
                // smaller never asks either). They stay apart, which the log says once per view.
                let max = self.view.params.inter.members_max;
                if self.view.len() + usize::from(members) > max {
                    if self.first_apart(view) {
                        tracing::warn!(
                            ours = self.view.len(),
                            theirs = members,
                            their_view = ?view,
                            max,
                            "another partition of the group found, too large to merge with (inter.members_max)"
                        );
                    }
                    return;
                }
                // Nor can the smaller partition take the larger one's stack if it lacks
                // membership or merging the smaller's has, or differs in `Primary` (`inter`'s
                // granter refuses such a merge, and its requester the grant: `switch::keeps`).
                // Asking held the smaller partition in a flush at every gossip, for good; the
                // members were started with different stacks, or one partition switched.
                let (from, to) = if theirs > ours { (self.kept, keeps) } else { (keeps, self.kept) };
                if !super::switch::keeps_kept(from, to) {
                    if self.first_apart(view) {
                        tracing::warn!(
                            ours = %self.view.stack,
                            their_view = ?view,
                            their_layers = keeps,
                            "another partition of the group found, running a stack that keeps membership, merging or Primary otherwise: the two cannot merge (start every member with one stack)"
                        );
                    }
                    return;
                }
                // Another partition we could merge with is about: announce at the base pace
                // again, from now (not from a backed-off tick), until the two have merged: on a
                // lossy link the exchange (hello, answer, request) may take several rounds, each
                // of which would otherwise wait out a backed-off interval.
                self.interval = self.config.gossip_interval;
                out.alarm(out.now() + self.interval);
                match (theirs > ours, answer) {
                    // A larger partition heard us: messages get through both ways.
                    (true, true) if self.asked.is_none() => self.ask(contact.into(), view, out),
                    (true, true) => {}
                    // A larger partition's announcement: tell its coordinator where we are, and
                    // ask once it answers.
                    (true, false) if self.asked.is_none() => self.hello(Some(contact.into()), false, out),
                    (true, false) => {}
                    // They wait for us to be asked, but may not know where we are (a new process
                    // is in nobody's peer list) nor whether we hear them: answer so they can ask.
                    (false, false) => self.hello(Some(contact.into()), true, out),
                    // An answer from a partition that is now the smaller (views changed since):
                    // answers are never answered, so no two coordinators keep each other busy.
                    (false, true) => {}
                }
            }
            other => out.pass_up(super::LayerKind::Heal, other, Header::NoHdr),
        }
    }

    fn handle_dn(&mut self, ev: Dn, out: &mut Outbox<'_>) {
        out.pass_dn(ev, Header::NoHdr);
    }

    fn handle_timer(&mut self, out: &mut Outbox<'_>) {
        if self.replaced {
            return;
        }
        if self.coord == self.rank {
            if let Some((contact, view)) = self.candidate.take() {
                if self.asked.is_none() {
                    self.ask(contact, view, out);
                }
            }
            self.hello(None, false, out);
        }
        // Back-off (JGroups' MERGE3 spaces its announcements between a minimum and a maximum
        // too): a group that has merged hears no other partition, and backing off took about
        // 11% off what 1,000 idle 3-member groups cost a process (docs/PERFORMANCE.md, "Groups
        // per process"). The maximum bounds how long a healed partition stays unseen.
        out.alarm(out.now() + self.interval);
        if self.backs_off() {
            let doubled = Duration(self.interval.0.saturating_mul(2));
            self.interval = doubled.min(self.config.gossip_interval_max).max(self.config.gossip_interval);
        }
    }

    fn check_invariants(&self) {
        assert!(usize::from(self.coord) < self.view.len());
        assert!(self.interval >= self.config.gossip_interval);
        assert!(self.interval <= self.config.gossip_interval_max.max(self.config.gossip_interval));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::harness::{Harness, Out};
    use crate::view::Address;

    /// A hello from the coordinator of another partition: an answer to ours (which proves that
    /// messages get through both ways), or an announcement.
    fn hello_from(ltime: u64, coord: u64, answer: bool) -> Up {
        hello_of(true, ltime, coord, answer)
    }

    /// The same from a partition that is primary or not (a non-primary one is the smaller).
    fn hello_of(primary: bool, ltime: u64, coord: u64, answer: bool) -> Up {
        sized_hello(primary, ltime, coord, answer, 3)
    }

    /// The same from a partition of `members`.
    fn sized_hello(primary: bool, ltime: u64, coord: u64, answer: bool, members: u16) -> Up {
        let keeps = super::super::switch::kept(&crate::testing::view(1).stack);
        kept_hello(primary, ltime, coord, answer, members, keeps)
    }

    /// The same from a partition whose stack has `keeps` (`switch::kept`).
    fn kept_hello(primary: bool, ltime: u64, coord: u64, answer: bool, members: u16, keeps: u8) -> Up {
        let contact = Address::Sim(9).into();
        let hello = Hello { answer, ltime, coord, primary, contact, members, keeps };
        Up::Gossip(Msg::default().with(Header::Hello(Box::new(hello))))
    }

    /// A coordinator whose view is `gossip_interval` old (it may ask at once).
    fn old_coordinator() -> Harness<Heal> {
        let view = crate::testing::view(1);
        let mut h = Harness::new(Heal::new(&Config::default(), &view, 0), 0);
        h.up(Up::Init);
        let at = h.alarm.unwrap();
        h.timer(at);
        h
    }

    /// The hellos sent: (to, answer).
    fn hellos(out: &[Out]) -> Vec<(Option<Address>, bool)> {
        out.iter()
            .filter_map(|o| match o {
                Out::Dn(Dn::Gossip { to, msg }) => match msg.hdrs.last().as_deref() {
                    Some(AnyHeader::Heal(Header::Hello(hello))) => Some((*to, hello.answer)),
                    _ => None,
                },
                _ => None,
            })
            .collect()
    }

    fn asked(out: &[Out]) -> bool {
        out.iter().any(|o| matches!(o, Out::Up(Up::MergeWith { .. })))
    }

    /// A view of `n` members made from `prev` others (2: a merge's).
    fn made_from(n: usize, prev: u64) -> Arc<ViewState> {
        let mut view = (*crate::testing::view(n)).clone();
        view.prev_ids = (0..prev).map(|i| ViewId { ltime: 0, coord: EndpointId(i) }).collect();
        Arc::new(view)
    }

    /// The gaps between a coordinator's next `n` announcements, each tick taken when due.
    fn gaps(h: &mut Harness<Heal>, n: usize) -> Vec<u64> {
        (0..n)
            .map(|_| {
                let at = h.alarm.expect("an announcement is due");
                let gap = at - h.now;
                assert_eq!(hellos(&h.timer(at)), [(None, false)], "one announcement to every peer");
                gap.as_millis()
            })
            .collect()
    }

    /// A merged group that hears no other partition announces ever less often, down to one
    /// every `gossip_interval_max`; the hello of a partition it could merge with brings it back
    /// to `gossip_interval` at once, as does taking over as coordinator mid-view (a new view
    /// starts there).
    #[test]
    fn announcements_back_off_while_no_other_partition_is_heard() {
        let view = made_from(2, 2);
        let mut h = Harness::new(Heal::new(&Config::default(), &view, 0), 0);
        h.up(Up::Init);
        assert_eq!(gaps(&mut h, 6), [500, 500, 1_000, 2_000, 2_000, 2_000]);
        // A larger partition's announcement (answered with our hello at once).
        assert_eq!(hellos(&h.up(hello_from(5, 77, false))), [(Some(Address::Sim(9)), false)]);
        assert_eq!(gaps(&mut h, 3), [500, 500, 1_000], "back at the base pace, from the hello");

        // Rank 1 does not announce; once the coordinator's successor, it does, at the base pace.
        let mut h = Harness::new(Heal::new(&Config::default(), &view, 1), 1);
        h.up(Up::Init);
        for _ in 0..5 {
            let at = h.alarm.unwrap();
            assert!(hellos(&h.timer(at)).is_empty(), "only the coordinator announces");
        }
        h.up(Up::Elect(1));
        assert_eq!(h.alarm.unwrap() - h.now, Duration::from_millis(500));
        assert_eq!(gaps(&mut h, 3), [500, 500, 1_000]);
    }

    /// Only a view a merge made backs off: one made from one other (members failed or left: a
    /// partition's side) keeps the base pace, to find the other side soon after the partition
    /// heals, and so does a first view.
    #[test]
    fn only_merged_views_back_off() {
        for (prev, expected) in [(0, [500; 5]), (1, [500; 5]), (2, [500, 500, 1_000, 2_000, 2_000])] {
            let mut h = Harness::new(Heal::new(&Config::default(), &made_from(2, prev), 0), 0);
            h.up(Up::Init);
            assert_eq!(gaps(&mut h, 5), expected, "a view made from {prev}");
        }
    }

    /// A configuration that set only a `gossip_interval` longer than the new maximum's default
    /// (valid before the back-off) is still valid, and keeps its pace: the first version refused
    /// it (a review's finding).
    #[test]
    fn a_gossip_interval_longer_than_the_default_maximum_keeps_its_pace() {
        let mut params = crate::StackConfig::default();
        params.heal.gossip_interval = Duration::from_millis(5_000);
        assert_eq!(params.validate(), Ok(()));
        let mut h = Harness::new(Heal::new(&params.heal, &made_from(2, 2), 0), 0);
        h.up(Up::Init);
        assert_eq!(gaps(&mut h, 4), [5_000; 4]);
    }

    /// A partition that cannot merge with ours (too large together) does not hold our
    /// announcements at the base pace: it never will merge.
    #[test]
    fn an_unmergeable_partition_does_not_stop_the_back_off() {
        let view = made_from(1, 2);
        let mut h = Harness::new(Heal::new(&Config::default(), &view, 0), 0);
        h.up(Up::Init);
        gaps(&mut h, 4);
        let max = h.layer.view.params.inter.members_max as u16;
        assert!(hellos(&h.up(sized_hello(true, 5, 77, false, max))).is_empty());
        assert_eq!(gaps(&mut h, 2), [2_000, 2_000]);
    }

    #[test]
    fn a_young_view_asks_at_its_first_tick_and_only_once() {
        let view = crate::testing::view(1);
        let mut h = Harness::new(Heal::new(&Config::default(), &view, 0), 0);
        h.up(Up::Init);
        assert!(!asked(&h.up(hello_from(5, 77, true))), "asked before the view was gossip_interval old");
        let at = h.alarm.unwrap();
        assert!(asked(&h.timer(at)), "the remembered hello is acted on at the first tick");
        assert!(!asked(&h.up(hello_from(5, 77, true))), "asked twice in one view");
    }

    #[test]
    fn an_old_view_asks_at_once() {
        let mut h = old_coordinator();
        assert!(asked(&h.up(hello_from(5, 77, true))));
    }

    /// A one-way partition: we hear a larger partition's announcements, but nothing of ours
    /// reaches it. Asking would block our partition for a merge timeout and then give it a new
    /// view of the same members; so an announcement gets only our hello, and the request waits
    /// for the answer that proves the other direction.
    #[test]
    fn an_announcement_is_answered_with_our_hello_and_only_an_answer_makes_us_ask() {
        let mut h = old_coordinator();
        let out = h.up(hello_from(5, 77, false));
        assert!(!asked(&out), "asked on a hello that proves only one direction");
        assert_eq!(hellos(&out), vec![(Some(Address::Sim(9)), false)], "our hello to their coordinator");
        assert!(!asked(&h.up(hello_from(5, 77, false))), "a second announcement");
        assert!(asked(&h.up(hello_from(5, 77, true))), "their answer proves both directions");
    }

    #[test]
    fn a_smaller_partition_s_hello_gets_an_answer_and_an_answer_gets_nothing() {
        let mut h = old_coordinator();
        let out = h.up(hello_of(false, 5, 77, false));
        assert!(!asked(&out), "a larger partition asked to merge into a smaller one");
        assert_eq!(hellos(&out), vec![(Some(Address::Sim(9)), true)], "the answer, to their coordinator alone");
        assert!(h.up(hello_of(false, 5, 77, true)).is_empty(), "an answer was answered");
    }

    /// Two partitions whose view together would pass `members_max` neither ask nor answer (`inter`
    /// would refuse the merge): before, the smaller one asked at every gossip, and each request
    /// held it in a flush for up to the merge timeout.
    #[test]
    fn partitions_too_large_to_merge_neither_ask_nor_answer() {
        // Ours has 1 member, and the default limit of 1,024.
        let mut h = old_coordinator();
        assert!(h.up(sized_hello(true, 5, 77, true, 1_024)).is_empty(), "a larger one: no request");
        assert!(h.up(sized_hello(true, 5, 77, false, 1_024)).is_empty(), "nor our hello");
        assert!(h.up(sized_hello(false, 5, 77, false, 1_024)).is_empty(), "a smaller one: no answer");
        assert!(asked(&h.up(sized_hello(true, 5, 77, true, 1_023))), "1 + 1,023 is within it");
    }

    /// Two partitions whose stacks differ in what a merge must keep (`switch::keeps`: here one
    /// has `Primary` and the other not) neither ask nor answer: `inter` would refuse the merge,
    /// and before, the smaller asked at every gossip and was held in a flush each time.
    #[test]
    fn partitions_whose_stacks_a_merge_could_not_keep_neither_ask_nor_answer() {
        let mut h = old_coordinator();
        let ours = super::super::switch::kept(&crate::testing::view(1).stack);
        let primary = super::super::switch::kept(&crate::spec::StackSpec::parse("vsync+Primary").unwrap());
        assert_ne!(ours, primary, "the test's stacks differ");
        assert!(h.up(kept_hello(true, 5, 77, true, 3, primary)).is_empty(), "a larger one: no request");
        assert!(h.up(kept_hello(true, 5, 77, false, 3, primary)).is_empty(), "nor our hello");
        assert!(h.up(kept_hello(false, 5, 77, false, 3, primary)).is_empty(), "a smaller one: no answer");
        assert!(asked(&h.up(kept_hello(true, 5, 77, true, 3, ours))), "the same stack's is asked");
    }

    /// A hello at the largest logical times (the decoder refuses any past `LTIME_MAX`; a layer
    /// harness does not decode) asks for no merge and does not overflow.
    #[test]
    fn a_hello_at_the_largest_logical_time_asks_nothing() {
        let mut h = old_coordinator();
        let max = motet_wire::hdr::intra::LTIME_MAX;
        assert!(!asked(&h.up(hello_from(u64::MAX, 77, true))));
        assert!(!asked(&h.up(hello_from(max, 77, true))));
        assert!(!asked(&h.up(hello_from(max - 1, 77, true))));
        assert!(asked(&h.up(hello_from(max - 2, 77, true))), "the last logical time that leaves room");
    }

    #[test]
    fn a_replaced_stack_is_silent() {
        let view = crate::testing::view(1);
        let mut h = Harness::new(Heal::new(&Config::default(), &view, 0), 0);
        h.up(Up::Init);
        h.up(Up::NewView(Arc::clone(&view)));
        let at = h.alarm.unwrap();
        assert!(h.timer(at).is_empty(), "a replaced stack still gossips");
        assert!(h.up(hello_from(5, 77, true)).is_empty(), "a replaced stack still acts on hellos");
    }
}
