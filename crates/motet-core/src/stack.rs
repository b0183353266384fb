//! A protocol stack: a linear composition of layers with an event-queue scheduler (thesis
//! §2.1.9, the default "event queue" composition; HvR §2).
//!
//! The scheduler keeps the layering model's invariants:
//! 1. events pass between adjacent layers in FIFO order (one global FIFO queue);
//! 2. each layer runs one event at a time (handlers run to completion, outputs are queued);
//! 3. every event is eventually run (each `handle_*` drains the queue before returning);
//! 4. drain-first: an external input is admitted only when the queue is empty, so a later bypass
//!    can be substituted for the layered path whenever no event is queued (thesis §3.3.1).

use crate::error::ApiError;
use crate::event::{Action, AppEvent, Dn, Msg, Up};
use crate::layer::{Ev, Outbox, Stats};
use crate::layers::{AnyLayer, LayerKind};
use crate::time::Instant;
use crate::view::{RankSet, ViewState};
use crate::{Rank, StackSpecError};
use motet_wire::Mux;
use std::collections::VecDeque;
use std::sync::Arc;

/// A message leaving the bottom of a stack, to be encoded and transmitted by the driver.
#[derive(Debug, Clone)]
pub struct Transmit {
    /// Cast, send to a rank, or group gossip.
    pub mux: Mux,
    /// Headers and payload.
    pub msg: Msg,
    /// For gossip: one address, or `None` for every known peer of the group.
    pub to: Option<crate::view::Address>,
}

/// What leaves the top of a stack (thesis §2.1.9: only `NewView` and `Exit`).
#[derive(Debug, Clone, PartialEq)]
pub enum TopOutput {
    /// Build the stack of the next view from this `ViewState`.
    NewView(Arc<ViewState>),
    /// This stack is done: remove its routes and free it.
    Exit,
}

/// One endpoint's protocol stack for one view.
#[derive(Debug)]
pub struct Stack {
    view: Arc<ViewState>,
    rank: Rank,
    layers: Vec<AnyLayer>,
    appl: usize,
    queue: VecDeque<(usize, Ev)>,
    scratch: Vec<Ev>,
    alarms: Vec<Option<Instant>>,
    app: VecDeque<AppEvent>,
    transmits: VecDeque<Transmit>,
    top: VecDeque<TopOutput>,
    stats: Stats,
}

impl Stack {
    /// Builds the stack named by `view.stack` with `view.params`, for the member at `rank`, and
    /// runs `Init` up from the bottom (thesis §2.3.4).
    pub fn new(view: Arc<ViewState>, rank: Rank, now: Instant) -> Result<Stack, StackSpecError> {
        assert!(usize::from(rank) < view.len(), "rank {rank} outside a view of {}", view.len());
        view.params.validate()?;
        let kinds = view.stack.layers();
        let layers: Vec<AnyLayer> = kinds.iter().map(|&kind| AnyLayer::new(kind, &view.params, &view, rank)).collect();
        let appl = kinds.iter().position(|&k| k == LayerKind::Appl).expect("StackSpec guarantees one appl");
        let mut stack = Stack {
            alarms: vec![None; layers.len()],
            view,
            rank,
            layers,
            appl,
            queue: VecDeque::new(),
            scratch: Vec::new(),
            app: VecDeque::new(),
            transmits: VecDeque::new(),
            top: VecDeque::new(),
            stats: Stats::default(),
        };
        let bottom = stack.layers.len() - 1;
        stack.queue.push_back((bottom, Ev::Up(Up::Init)));
        stack.run(now);
        Ok(stack)
    }

    /// The view this stack was built for.
    pub fn view(&self) -> &Arc<ViewState> {
        &self.view
    }

    /// This endpoint's rank in the view.
    pub fn rank(&self) -> Rank {
        self.rank
    }

    /// An application action, injected at `appl` (which may sit mid-stack, thesis §2.1.10).
    pub fn handle_action(&mut self, now: Instant, action: Action) -> Result<(), ApiError> {
        debug_assert!(self.queue.is_empty(), "drain-first: the queue is empty between inputs");
        let AnyLayer::Appl(appl) = &mut self.layers[self.appl] else { unreachable!("appl index") };
        let mut alarm = None;
        let mut out = Outbox {
            now,
            rank: self.rank,
            events: &mut self.scratch,
            alarm: &mut alarm,
            app: &mut self.app,
            stats: &mut self.stats,
        };
        let result = appl.handle_action(action, &mut out);
        self.after_handler(self.appl, alarm);
        self.run(now);
        result
    }

    /// A message from the network, injected at the bottom.
    pub fn handle_recv(&mut self, now: Instant, origin: Rank, mux: Mux, msg: Msg) {
        let ev = match mux {
            Mux::Gossip => Up::Gossip(msg),
            // The network is unreliable: `mnak` upgrades the guarantee when it sequences the cast.
            Mux::Cast => Up::Cast { origin, msg, qos: crate::event::Qos::Unreliable },
            Mux::Send { .. } => Up::Send { origin, msg },
        };
        self.queue.push_back((self.layers.len() - 1, Ev::Up(ev)));
        self.run(now);
    }

    /// Marks `ranks` failed, from the top down (as a membership layer would).
    pub fn handle_fail(&mut self, now: Instant, ranks: RankSet) {
        self.queue.push_back((0, Ev::Dn(Dn::Fail(ranks))));
        self.run(now);
    }

    /// Fires every alarm due at `now`, bottom layer first (thesis §2.3.2: the Timer event travels
    /// up the stack).
    pub fn handle_timeout(&mut self, now: Instant) {
        for index in (0..self.layers.len()).rev() {
            if self.alarms[index].is_some_and(|at| at <= now) {
                self.alarms[index] = None;
                self.queue.push_back((index, Ev::Timer));
            }
        }
        self.run(now);
    }

    /// When the stack next needs [`Stack::handle_timeout`].
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.alarms.iter().flatten().min().copied()
    }

    /// The next message to transmit.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    /// The next output from the top of the stack.
    pub fn poll_top(&mut self) -> Option<TopOutput> {
        self.top.pop_front()
    }

    /// The next upcall for the application.
    pub fn poll_event(&mut self) -> Option<AppEvent> {
        self.app.pop_front()
    }

    /// Drop and protocol counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Counts a drop decided outside the layers (by the node's router).
    pub(crate) fn count_drop(&mut self, reason: crate::DropReason) {
        self.stats.drop_one(reason);
    }

    /// Messages held by all layers for retransmission or reordering.
    pub fn buffered(&self) -> usize {
        self.layers.iter().map(AnyLayer::buffered).sum()
    }

    /// Per layer (top to bottom): name and buffered messages.
    pub fn buffered_by_layer(&self) -> Vec<(&'static str, usize)> {
        self.view.stack.layers().iter().zip(&self.layers).map(|(k, l)| (k.name(), l.buffered())).collect()
    }

    /// Asserts every layer's invariants and the scheduler's.
    pub fn check_invariants(&self) {
        assert!(self.queue.is_empty(), "the scheduler drains before returning");
        assert!(self.scratch.is_empty());
        for layer in &self.layers {
            layer.check_invariants();
        }
    }

    /// Runs queued events until none is left.
    fn run(&mut self, now: Instant) {
        while let Some((index, ev)) = self.queue.pop_front() {
            let mut alarm = None;
            let mut out = Outbox {
                now,
                rank: self.rank,
                events: &mut self.scratch,
                alarm: &mut alarm,
                app: &mut self.app,
                stats: &mut self.stats,
            };
            let layer = &mut self.layers[index];
            match ev {
                Ev::Up(up) => layer.handle_up(up, &mut out),
                Ev::Dn(dn) => layer.handle_dn(dn, &mut out),
                Ev::Timer => layer.handle_timer(&mut out),
            }
            self.after_handler(index, alarm);
        }
    }

    /// Records the handler's alarm request and queues its outputs for the adjacent layers.
    fn after_handler(&mut self, index: usize, alarm: Option<Instant>) {
        if let Some(at) = alarm {
            self.alarms[index] = Some(self.alarms[index].map_or(at, |current| current.min(at)));
        }
        let bottom = self.layers.len() - 1;
        for ev in self.scratch.drain(..) {
            match ev {
                Ev::Up(up) if index == 0 => match up {
                    // Only NewView and Exit may leave the top (thesis §2.1.9).
                    Up::NewView(view) => self.top.push_back(TopOutput::NewView(view)),
                    Up::Exit => self.top.push_back(TopOutput::Exit),
                    other => panic!("event {other:?} left the top of the stack"),
                },
                Ev::Up(up) => self.queue.push_back((index - 1, Ev::Up(up))),
                Ev::Dn(dn) if index == bottom => match dn {
                    Dn::Cast { msg, .. } => self.transmits.push_back(Transmit { mux: Mux::Cast, msg, to: None }),
                    Dn::Send { dest, msg } => {
                        self.transmits.push_back(Transmit { mux: Mux::Send { dest }, msg, to: None })
                    }
                    Dn::Gossip { to, msg } => self.transmits.push_back(Transmit { mux: Mux::Gossip, msg, to }),
                    other => panic!("bottom let a non-message event out: {other:?}"),
                },
                Ev::Dn(dn) => self.queue.push_back((index + 1, Ev::Dn(dn))),
                Ev::Timer => unreachable!("layers do not emit timer events"),
            }
        }
    }
}
