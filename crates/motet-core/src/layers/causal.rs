//! `causal`: causal order of application casts by vector timestamps (property `Causal`; Ensemble
//! `causal`, digest Appendix A.2, placed just below the application layer like the total-order
//! layers; membership traffic is exempt).
//!
//! Provides: [`Service::CausalOrder`]. Requires below: [`Service::ReliableCast`] (per-origin FIFO,
//! which both the delivery rule and the header compression rely on) and
//! [`Service::LocalDelivery`]; above: [`Service::Flush`] (a view ends at an agreed cut, so every
//! survivor holds the same casts when it settles what can never be delivered). Header:
//! `Data(entries)` on application casts, `NoHdr` on everything else.
//!
//! A cast's timestamp has one entry per rank of the view (not per endpoint ever seen): how many of
//! that rank's casts its sender had delivered when it cast, and for the sender itself how many it
//! had cast before. A member delivers a cast of `o` once it has delivered exactly the casts of `o`
//! before it and, of every other rank, at least as many as the timestamp says; until then it holds
//! it. Compression: casts of one origin arrive in FIFO order, so the header carries only the
//! entries that changed since the origin's previous cast, and never the origin's own (it is
//! always one more). A sender that delivered nothing in between sends an empty list.
//!
//! View changes: the cut holds every cast some survivor delivered, so a cast held at the cut waits
//! for a cast no survivor has (one a failed member delivered and nobody else received). Such casts
//! (only failed members can have sent them) are dropped at the cut, the same way at every survivor
//! (counted as `Orphan`).

use crate::event::{Dn, DropReason, Msg, Qos, Up};
use crate::layer::{Layer, LayerSpec, Outbox, Service};
use crate::view::ViewState;
use crate::Rank;
use motet_wire::hdr::causal::Header;
use std::collections::VecDeque;

/// `causal` has no parameters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {}

/// Static description.
pub static SPEC: LayerSpec = LayerSpec {
    name: "causal",
    summary: "causal order of application casts: vector timestamps, sent as changed entries only",
    provides: &[Service::CausalOrder],
    requires_below: &[Service::ReliableCast, Service::LocalDelivery],
    requires_above: &[Service::Flush],
};

/// `causal` state.
#[derive(Debug)]
pub struct Causal {
    rank: Rank,
    /// Casts delivered, per origin rank.
    delivered: Vec<u64>,
    /// The timestamp of this member's previous cast (to send only what changed).
    sent: Vec<u64>,
    /// Casts this member has cast.
    casts: u64,
    /// Per origin: the timestamp of its last cast received (to expand the next one).
    last: Vec<Vec<u64>>,
    /// Per origin: casts received, and so the own entry of the next one.
    received: Vec<u64>,
    /// Per origin, in FIFO order: casts waiting for what they depend on, with their timestamps.
    held: Vec<VecDeque<(Vec<u64>, Msg)>>,
    /// The view's cut was delivered and settled.
    completed: bool,
}

impl Causal {
    /// A `causal` for `view`.
    pub fn new(_config: &Config, view: &ViewState, rank: Rank) -> Causal {
        let n = view.len();
        Causal {
            rank,
            delivered: vec![0; n],
            sent: vec![0; n],
            casts: 0,
            last: vec![vec![0; n]; n],
            received: vec![0; n],
            held: vec![VecDeque::new(); n],
            completed: false,
        }
    }

    /// Whether a cast of `origin` with timestamp `vt` can be delivered now.
    fn deliverable(&self, origin: usize, vt: &[u64]) -> bool {
        vt.iter().enumerate().all(|(k, &t)| if k == origin { self.delivered[k] == t } else { self.delivered[k] >= t })
    }

    /// Delivers every held cast whose predecessors are delivered, until none is.
    fn deliver_ready(&mut self, out: &mut Outbox<'_>) {
        let mut progress = true;
        while progress {
            progress = false;
            for origin in 0..self.held.len() {
                while let Some((vt, _)) = self.held[origin].front() {
                    if !self.deliverable(origin, vt) {
                        break;
                    }
                    let (_, msg) = self.held[origin].pop_front().expect("front exists");
                    self.delivered[origin] += 1;
                    out.up(Up::Cast { origin: origin as Rank, msg, qos: Qos::Reliable });
                    progress = true;
                }
            }
        }
    }

    fn recv(&mut self, origin: Rank, entries: &[(u16, u64)], msg: Msg, out: &mut Outbox<'_>) {
        let o = usize::from(origin);
        if entries.iter().any(|&(rank, _)| usize::from(rank) >= self.delivered.len() || rank == origin) {
            return out.drop_input(DropReason::Malformed);
        }
        let mut vt = self.last[o].clone();
        for &(rank, count) in entries {
            vt[usize::from(rank)] = count;
        }
        vt[o] = self.received[o];
        self.received[o] += 1;
        self.last[o].clone_from(&vt);
        if self.completed {
            // Nothing should arrive after the cut; if it does, it goes up only in order.
            if self.deliverable(o, &vt) {
                self.delivered[o] += 1;
                out.up(Up::Cast { origin, msg, qos: Qos::Reliable });
            } else {
                out.drop_input(DropReason::Orphan);
            }
            return;
        }
        self.held[o].push_back((vt, msg));
        self.deliver_ready(out);
    }
}

impl Layer for Causal {
    fn handle_up(&mut self, ev: Up, out: &mut Outbox<'_>) {
        match ev {
            Up::Cast { origin, mut msg, qos } => match msg.pop_as::<Header>() {
                Some(Header::NoHdr) => out.up(Up::Cast { origin, msg, qos }),
                Some(Header::Data(entries)) => self.recv(origin, &entries, msg, out),
                None => out.drop_input(DropReason::HeaderMismatch),
            },
            Up::CutReached => {
                self.deliver_ready(out);
                for held in &mut self.held {
                    for _ in held.drain(..) {
                        out.drop_input(DropReason::Orphan);
                    }
                }
                self.completed = true;
                out.up(Up::CutReached);
            }
            other => out.pass_up(other, Header::NoHdr),
        }
    }

    fn handle_dn(&mut self, ev: Dn, out: &mut Outbox<'_>) {
        match ev {
            Dn::Cast { msg, qos: Qos::Causal } => {
                let me = usize::from(self.rank);
                let changed: Vec<(u16, u64)> = (0..self.delivered.len())
                    .filter(|&k| k != me && self.delivered[k] != self.sent[k])
                    .map(|k| (k as u16, self.delivered[k]))
                    .collect();
                self.sent.clone_from(&self.delivered);
                self.casts += 1;
                out.dn(Dn::Cast { msg: msg.with(Header::Data(changed.into())), qos: Qos::Reliable });
            }
            other => out.pass_dn(other, Header::NoHdr),
        }
    }

    fn check_invariants(&self) {
        let me = usize::from(self.rank);
        assert!(self.delivered[me] <= self.casts, "delivered more own casts than cast");
        for (origin, held) in self.held.iter().enumerate() {
            assert!(self.delivered[origin] + held.len() as u64 <= self.received[origin]);
        }
    }

    fn buffered(&self) -> usize {
        self.held.iter().map(VecDeque::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::harness::{Harness, Out};

    fn delivered(out: &[Out]) -> Vec<(Rank, u8)> {
        out.iter()
            .filter_map(|o| match o {
                Out::Up(Up::Cast { origin, msg, .. }) => Some((*origin, msg.payload.to_bytes()[0])),
                _ => None,
            })
            .collect()
    }

    /// Casts `tag` at `h` and returns what goes down (with its header).
    fn cast(h: &mut Harness<Causal>, tag: u8) -> Msg {
        match &h.dn(Dn::Cast { msg: Msg::new(vec![tag].into()), qos: Qos::Causal })[..] {
            [Out::Dn(Dn::Cast { msg, qos: Qos::Reliable })] => msg.clone(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_reply_waits_for_what_it_answers() {
        let view = crate::testing::view_of("vsync+Causal", 3);
        let (mut a, mut b, mut c) = (
            Harness::new(Causal::new(&Config {}, &view, 0), 0),
            Harness::new(Causal::new(&Config {}, &view, 1), 1),
            Harness::new(Causal::new(&Config {}, &view, 2), 2),
        );
        let question = cast(&mut a, 1);
        assert_eq!(delivered(&b.up(Up::Cast { origin: 0, msg: question.clone(), qos: Qos::Reliable })), vec![(0, 1)]);
        let answer = cast(&mut b, 2);
        assert_eq!(answer.hdrs, vec![Header::Data(vec![(0, 1)].into()).into()], "only the changed entry");
        // c receives the answer first: it waits for the question.
        assert!(delivered(&c.up(Up::Cast { origin: 1, msg: answer, qos: Qos::Reliable })).is_empty());
        assert_eq!(c.layer.buffered(), 1);
        let out = c.up(Up::Cast { origin: 0, msg: question, qos: Qos::Reliable });
        assert_eq!(delivered(&out), vec![(0, 1), (1, 2)]);
        // b casts again having delivered nothing new: no entry at all.
        assert_eq!(cast(&mut b, 3).hdrs, vec![Header::Data(Vec::new().into()).into()]);
    }

    #[test]
    fn the_cut_drops_what_can_never_be_delivered() {
        let view = crate::testing::view_of("vsync+Causal", 3);
        let mut c = Harness::new(Causal::new(&Config {}, &view, 2), 2);
        // A cast of 1 that depends on a cast of 0 nobody else has.
        let msg = Msg::new(vec![9].into()).with(Header::Data(vec![(0, 1)].into()));
        assert!(delivered(&c.up(Up::Cast { origin: 1, msg, qos: Qos::Reliable })).is_empty());
        let out = c.up(Up::CutReached);
        assert!(matches!(&out[..], [Out::Up(Up::CutReached)]));
        assert_eq!((c.layer.buffered(), c.stats.drops(DropReason::Orphan)), (0, 1));
    }

    #[test]
    fn bad_entries_and_foreign_traffic() {
        let view = crate::testing::view_of("vsync+Causal", 2);
        let mut h = Harness::new(Causal::new(&Config {}, &view, 1), 1);
        let bad = Msg::new(vec![1].into()).with(Header::Data(vec![(5, 1)].into()));
        assert!(h.up(Up::Cast { origin: 0, msg: bad, qos: Qos::Reliable }).is_empty());
        assert_eq!(h.stats.drops(DropReason::Malformed), 1);
        let out = h.dn(Dn::Cast { msg: Msg::default(), qos: Qos::Reliable });
        assert!(matches!(&out[..], [Out::Dn(Dn::Cast { msg, .. })] if msg.hdrs == vec![Header::NoHdr.into()]));
    }
}
