//! `mflow`: credit flow control for multicasts (thesis Fig 2.3; SOSP Table 2b).
//!
//! Provides: [`Service::CastFlow`]. Requires below: [`Service::ReliableCast`] (it counts casts
//! delivered in order) and [`Service::ReliableSend`] (credit goes back point-to-point). Header:
//! `NoHdr` on casts, `Credit { count }` on feedback. A sender may be at most `window` casts ahead
//! of its slowest live receiver; beyond that casts queue (bounded) and `FlowBlock { dest: None }`
//! goes up. Unreliable casts (gossip) are not flow controlled.

use super::flow::{Consumer, Offer, Window};
use crate::event::{Counter, Dn, DropReason, Msg, Qos, Up};
use crate::fast::{self, DnStep, Down, UpStep};
use crate::layer::{Layer, LayerSpec, Outbox, Service};
use crate::view::{RankSet, ViewState};
use crate::Rank;
use motet_wire::hdr::mflow::Header;

/// `mflow` parameters.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Casts (fragments) a sender may be ahead of its slowest live receiver. Default 64.
    pub window: u64,
    /// Casts queued while blocked. Default 2048; must hold the fragments of the largest message.
    pub pending_max: usize,
}

impl Default for Config {
    fn default() -> Config {
        Config { window: 64, pending_max: 2048 }
    }
}

/// Static description.
pub static SPEC: LayerSpec = LayerSpec {
    name: "mflow",
    summary: "multicast credit flow control with back-pressure",
    provides: &[Service::CastFlow],
    requires_below: &[Service::ReliableCast, Service::ReliableSend],
    requires_above: &[],
};

/// `mflow` state.
#[derive(Debug, PartialEq)]
pub struct Mflow {
    config: Config,
    rank: Rank,
    failed: RankSet,
    window: Window,
    /// Per receiver: how many of our casts it reported consumed.
    credit: Vec<u64>,
    /// Per origin: how many of its casts we consumed.
    consumers: Vec<Consumer>,
    /// A flush (`Block`) waits here until every pending cast is out.
    block_held: bool,
}

impl Mflow {
    /// An `mflow` for `view`.
    pub fn new(config: &Config, view: &ViewState, rank: Rank) -> Mflow {
        Mflow {
            config: config.clone(),
            rank,
            failed: RankSet::new(),
            window: Window::default(),
            credit: vec![0; view.len()],
            consumers: vec![Consumer::default(); view.len()],
            block_held: false,
        }
    }

    /// What the slowest live receiver consumed (everything we sent, if we are alone).
    fn consumed(&self) -> u64 {
        let live = (0..self.credit.len() as Rank).filter(|&r| r != self.rank && !self.failed.contains(r));
        live.map(|r| self.credit[usize::from(r)]).min().unwrap_or(self.window.sent)
    }

    /// Records a credit report from `origin` (cumulative casts it consumed, never more than we
    /// sent). The layered handler and the fast path share it.
    fn take_credit(&mut self, origin: Rank, count: u64) {
        let o = usize::from(origin);
        self.credit[o] = self.credit[o].max(count.min(self.window.sent));
    }

    fn release(&mut self, out: &mut Outbox<'_>) {
        let consumed = self.consumed();
        if self.window.release(consumed, self.config.window, |msg| out.dn(Dn::Cast { msg, qos: Qos::Reliable })) {
            out.up(Up::FlowBlock { dest: None, blocked: false });
        }
        // A held flush continues once nothing is pending.
        if self.block_held && self.window.pending() == 0 {
            self.block_held = false;
            out.dn(Dn::Block);
        }
    }
}

impl Layer for Mflow {
    fn handle_up(&mut self, ev: Up, out: &mut Outbox<'_>) {
        match ev {
            Up::Cast { origin, mut msg, qos } => match msg.pop_as::<Header>() {
                Some(Header::NoHdr) => {
                    if qos == Qos::Reliable {
                        if let Some(count) = self.consumers[usize::from(origin)].consume(self.config.window) {
                            out.count(Counter::AckSent);
                            out.dn(Dn::Send { dest: origin, msg: Msg::default().with(Header::Credit { count }) });
                        }
                    }
                    out.up(Up::Cast { origin, msg, qos });
                }
                _ => out.drop_input(DropReason::HeaderMismatch),
            },
            Up::Send { origin, mut msg } => match msg.pop_as::<Header>() {
                Some(Header::NoHdr) => out.up(Up::Send { origin, msg }),
                Some(Header::Credit { count }) => {
                    self.take_credit(origin, count);
                    self.release(out);
                }
                None => out.drop_input(DropReason::HeaderMismatch),
            },
            other => out.up(other),
        }
    }

    fn handle_dn(&mut self, ev: Dn, out: &mut Outbox<'_>) {
        match ev {
            Dn::Cast { msg, qos: Qos::Reliable } => {
                let consumed = self.consumed();
                match self.window.offer(msg.with(Header::NoHdr), consumed, self.config.window, self.config.pending_max)
                {
                    Offer::Send(msg) => out.dn(Dn::Cast { msg, qos: Qos::Reliable }),
                    Offer::Blocked => {
                        out.count(Counter::FlowBlocked);
                        out.up(Up::FlowBlock { dest: None, blocked: true });
                    }
                    Offer::Queued => {}
                }
            }
            Dn::Fail(ranks) => {
                self.failed.union_with(&ranks);
                out.dn(Dn::Fail(ranks));
                self.release(out);
            }
            Dn::Block => {
                self.block_held = true;
                self.release(out);
            }
            other => out.pass_dn(other, Header::NoHdr),
        }
    }

    // Fast path: a reliable cast the window admits (counted); a reliable cast received
    // (consumed, with a `Credit` reply when a report is due); the rest passes.
    fn fast_dn(&self, down: &Down) -> Option<DnStep> {
        if down.dest.is_none() && down.qos == Qos::Reliable && !self.window.admits(self.consumed(), self.config.window)
        {
            return None;
        }
        DnStep::pass(Header::NoHdr, down)
    }

    fn fast_dn_apply(&mut self, down: &Down, _out: &mut Outbox<'_>) {
        if down.dest.is_none() && down.qos == Qos::Reliable {
            self.window.sent += 1;
        }
    }

    fn fast_up(&self, up: &fast::Up<'_>) -> Option<UpStep> {
        if let motet_wire::Header::Mflow(Header::Credit { .. }) = up.header {
            // A credit report that releases nothing (no cast waits, no flush is held) only
            // raises a count: kept here, with no event.
            let quiet = !up.cast && self.window.pending() == 0 && !self.block_held;
            return quiet.then_some(UpStep { absorb: true, ..UpStep::to(up.qos) });
        }
        if !fast::is(up.header, Header::NoHdr) {
            return None;
        }
        let reply = match up.cast && up.qos == Qos::Reliable {
            true => self.consumers[usize::from(up.origin)]
                .peek(self.config.window)
                .map(|count| (up.origin, Header::Credit { count }.into())),
            false => None,
        };
        Some(UpStep { reply, ..UpStep::to(up.qos) })
    }

    fn fast_up_apply(&mut self, up: &fast::Up<'_>, _msg: &Msg, out: &mut Outbox<'_>) {
        if let motet_wire::Header::Mflow(Header::Credit { count }) = up.header {
            return self.take_credit(up.origin, *count);
        }
        if up.cast
            && up.qos == Qos::Reliable
            && self.consumers[usize::from(up.origin)].consume(self.config.window).is_some()
        {
            out.count(Counter::AckSent);
        }
    }

    fn fast_inert(&self, trace: fast::Trace) -> Option<usize> {
        // Multicast flow control: only casts have work here.
        (!trace.is_cast()).then_some(usize::MAX)
    }

    fn check_invariants(&self) {
        self.window.check(self.consumed(), self.config.window, self.config.pending_max);
        assert_eq!(self.credit.len(), self.consumers.len());
    }

    fn buffered(&self) -> usize {
        self.window.pending()
    }
}
