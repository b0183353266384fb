//! Fast-path declarations: what each layer does in the common case of the common event traces
//! (thesis §3.3, SOSP'99 §3-4: "trace conditions" and "trace handlers").
//!
//! A layer that takes part in a common trace declares two things, next to its layered handlers:
//!
//! - its **condition**, a pure function of its state and the event (`Layer::fast_dn` and
//!   `Layer::fast_up` return `None` when the event is not the common case here), which also says
//!   what the layer would do: the header it pushes, the guarantee it passes on, and whether the
//!   trace branches here (a cast that also loops back up, a receipt that also sends an
//!   acknowledgement down);
//! - its **action** on its own state in that case (`Layer::fast_dn_apply`, `Layer::fast_up_apply`),
//!   which may count, set its alarm and deliver to the application through the same [`Outbox`]
//!   the layered handlers use, but may not emit events: the trace's shape was fixed by the
//!   conditions.
//!
//! **Delayed processing** (thesis §3.4.3 and §5.4.5; HvR §4.3): what a layer does to its state in
//! the common case is split in two. The *action* updates what the conditions read (a sequence
//! number, a window) and runs at once; keeping a copy of the message for retransmission (the step's
//! `keep`, then `Layer::fast_keep`) is bookkeeping that no condition and no action of an
//! application trace reads, so the bypass does it after the message is transmitted or delivered,
//! in batches when the driver is idle (`Stack::settle`), by a deadline no later than any alarm the
//! filing sets (`Layer::fast_keep_wait`), or, at the latest, before any input that is not an
//! application message on a compiled trace. No observer can tell: every layered handler, timer and
//! NAK finds the buffers filled.
//!
//! A layer may also declare itself **inert** on a trace (`Layer::fast_inert`): in its current
//! state, every message of the trace passes it with its template header, the guarantee unchanged,
//! no action and no reply, until its next layered-path handler. A stack compiles each trace into
//! the set of layers that are not inert, recompiled only after the layered path has run, so a
//! message asks only the layers that have work to do: most of a deep stack costs nothing on the
//! common path (thesis §3.3.2, the "trace handler" that leaves out what the layers would only pass
//! through; SOSP'99 Table 2, "cost per extra layer").
//!
//! The bypass (`crate::bypass`) composes these for whatever stack a view runs, with no
//! stack-specific code: every condition first, and only if all hold, every action, then the
//! outputs. An event that fails any condition takes the layered path unchanged. Each declaration
//! must do exactly what the layer's handler does in that case; `Bypass::Diff` checks this on every
//! input (the simulator's `--bypass diff`).
//!
//! [`Outbox`]: crate::layer::Outbox

use crate::event::Qos;
use crate::Rank;
use motet_wire::Header;

/// The common traces, which a stack compiles from the layers' declarations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Trace {
    /// An application cast from `appl` to the network (and back up through `local`).
    CastDn,
    /// An application send to one rank, from `appl` to the network.
    SendDn,
    /// An application cast from the network up to `appl`.
    CastUp,
    /// An application send from the network up to `appl`.
    SendUp,
}

impl Trace {
    /// The four traces, in the order a stack keeps their compiled forms.
    pub const ALL: [Trace; 4] = [Trace::CastDn, Trace::SendDn, Trace::CastUp, Trace::SendUp];

    /// A cast (or else a send).
    pub fn is_cast(self) -> bool {
        matches!(self, Trace::CastDn | Trace::CastUp)
    }

    /// Going down (or else up).
    pub fn is_down(self) -> bool {
        matches!(self, Trace::CastDn | Trace::SendDn)
    }

    /// The trace going down of a cast (`dest` `None`) or a send to `dest`.
    pub fn down(dest: Option<Rank>) -> Trace {
        if dest.is_none() {
            Trace::CastDn
        } else {
            Trace::SendDn
        }
    }

    /// The trace going up of a cast or a send.
    pub fn up(cast: bool) -> Trace {
        if cast {
            Trace::CastUp
        } else {
            Trace::SendUp
        }
    }
}

/// [`Layer::fast_inert`](crate::layer::Layer::fast_inert) for a layer inert on a trace for messages of any size.
pub const ANY_LEN: Option<usize> = Some(usize::MAX);

/// A message of a common trace going down, as a layer's condition sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Down {
    /// `None` for a cast to the view, else the destination of a send.
    pub dest: Option<Rank>,
    /// The guarantee asked of the layers below (casts).
    pub qos: Qos,
    /// Payload bytes.
    pub len: usize,
}

/// What a layer does to a message going down, in the common case.
#[derive(Clone, Debug, PartialEq)]
pub struct DnStep {
    /// The header it pushes.
    pub header: Header,
    /// The guarantee it passes to the layer below.
    pub qos: Qos,
    /// The message also goes back up from here, as this endpoint's own cast (`local`).
    pub loopback: bool,
    /// The layer keeps a copy of the message as it reaches it (for retransmission): the bypass
    /// hands it over with [`Layer::fast_keep`](crate::layer::Layer::fast_keep) after the transmit (delayed processing).
    pub keep: bool,
    /// The layer splits the message into this many parts (`frag`), each of which goes on down
    /// the rest of the trace as a message of its own, made by [`Layer::fast_split`](crate::layer::Layer::fast_split)
    /// (`header` is then the first part's). 1 (or 0): the message stays whole.
    pub parts: u32,
}

impl DnStep {
    /// Pushes `header` and passes the message on with the guarantee `qos`, nothing else.
    pub fn to(header: impl Into<Header>, qos: Qos) -> DnStep {
        DnStep { header: header.into(), qos, loopback: false, keep: false, parts: 1 }
    }

    /// Pushes `header` and passes the message on unchanged otherwise.
    pub fn pass(header: impl Into<Header>, down: &Down) -> Option<DnStep> {
        Some(DnStep::to(header, down.qos))
    }
}

/// A message of a common trace going up, as a layer's condition sees it: its own header is
/// `header` (not yet popped).
#[derive(Clone, Copy, Debug)]
pub struct Up<'a> {
    /// The sender's rank.
    pub origin: Rank,
    /// A cast (or else a send).
    pub cast: bool,
    /// The guarantee the layers below gave it.
    pub qos: Qos,
    /// This layer's header on the message.
    pub header: &'a Header,
    /// Payload bytes (what the flow-control windows count).
    pub len: usize,
}

/// What a layer does to a message going up, in the common case.
#[derive(Clone, Debug, PartialEq)]
pub struct UpStep {
    /// The guarantee it passes to the layer above.
    pub qos: Qos,
    /// The trace also sends this header-only message to this rank, from here down (an
    /// acknowledgement, a credit report, a NAK).
    pub reply: Option<(Rank, Header)>,
    /// The trace ends here: the layer keeps the message (an ordering layer queues it until its
    /// turn, `mnak` holds a cast that arrived ahead of a gap) and nothing goes further up now.
    pub absorb: bool,
    /// The layer keeps a copy of the message, its own header popped (for retransmission to other
    /// members): the bypass hands it over with [`Layer::fast_keep`](crate::layer::Layer::fast_keep) after the delivery
    /// (delayed processing).
    pub keep: bool,
    /// The message completes a larger one (the last part of a fragmented message): the layer
    /// takes it with [`Layer::fast_join`](crate::layer::Layer::fast_join) instead of its action, and the message it gives
    /// back goes on up from there. The conditions of the layers above are asked about that
    /// message, once it exists.
    pub join: bool,
    /// The message fills a gap: once it has gone on up, the layer releases the messages it held
    /// behind it, in order, with [`Layer::fast_release`](crate::layer::Layer::fast_release); each goes on up from here in turn
    /// (with `keep`, the layer keeps a copy of each, as of this one).
    pub release: bool,
}

impl UpStep {
    /// Pops the header and passes the message on up with the guarantee `qos`, nothing else.
    pub fn to(qos: Qos) -> UpStep {
        UpStep { qos, reply: None, absorb: false, keep: false, join: false, release: false }
    }

    /// Pops the header and passes the message on unchanged otherwise.
    pub fn pass(up: &Up<'_>) -> Option<UpStep> {
        Some(UpStep::to(up.qos))
    }
}

/// A copy of a message that a layer keeps, handed over after the transmit or delivery
/// ([`Layer::fast_keep`](crate::layer::Layer::fast_keep)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kept {
    /// The trace the message took.
    pub trace: Trace,
    /// The destination of a send going down, the origin of a message going up, this endpoint's
    /// own rank for a cast going down.
    pub peer: Rank,
}

/// Whether `header` is the trivial header `expected` of a layer (the condition of a layer that
/// only passes messages through).
pub fn is<H>(header: &Header, expected: H) -> bool
where
    Header: PartialEq<H>,
{
    *header == expected
}
