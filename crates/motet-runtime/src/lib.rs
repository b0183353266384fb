//! Motet's runtime and public Rust API: drives the sans-IO core ([`motet_core`]) with a real UDP
//! socket and real timers, one event loop per process serving all its endpoints.
//!
//! ```no_run
//! use motet_runtime::{Event, GroupConfig, Runtime, RuntimeConfig};
//!
//! let runtime = Runtime::start(RuntimeConfig::bind("127.0.0.1:7001".parse()?))?;
//! let member = runtime.join(GroupConfig::new("chat").peers(["127.0.0.1:7002"]))?;
//! member.cast("hello")?;
//! for event in member.events() {
//!     match event {
//!         Event::View(view) => println!("view {:?}: {:?}", view.id, view.members),
//!         Event::Cast { from, data } => println!("{from}: {data:?}"),
//!         _ => {}
//!     }
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Errors say what to do. The protocol's refusals are [`Error::Api`], an [`ApiError`], named from
//! this crate like every core type the API uses:
//!
//! ```no_run
//! use motet_runtime::{ApiError, Error, Event, GroupConfig, Runtime, RuntimeConfig};
//! use std::time::Duration;
//!
//! let runtime = Runtime::start(RuntimeConfig::bind("127.0.0.1:7001".parse()?))?;
//! let member = runtime.join(GroupConfig::new("chat").stack("vsync"))?;
//! // The first event is the member's first view, which says how large a message may be.
//! if let Some(Event::View(view)) = member.recv_timeout(Duration::from_secs(5))? {
//!     match member.cast(vec![0u8; view.message_size_max + 1]) {
//!         Err(Error::Api(ApiError::TooLarge { size, max })) => println!("{size} bytes is over {max}"),
//!         other => other?,
//!     }
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! With the `tokio` feature, `Runtime::join_async` gives an `AsyncMember` whose events are a
//! `Stream`, and whose `cast(..).await` and `send(..).await` wait for room in the bounded queues
//! without blocking the thread.
//!
//! Two ways to run it: [`Runtime`] runs the loop on a thread of its own and hands you [`Member`]
//! handles (blocking iterators of events, thread-safe casts); [`EventLoop`] is the same loop for
//! you to drive on your own thread, with no thread hop (lowest latency; `motet perf` uses it).

#![warn(missing_docs)]

/// Said on the real standard error, for the unit tests' skips: libtest captures `eprintln!` and
/// shows it only for a failing test, so a skip said with it was seen by nobody.
#[cfg(test)]
macro_rules! skipped {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

mod clock;
mod config;
mod connected;
mod error;
mod event_loop;
mod io;
pub mod metrics;
mod runtime;
mod slots;
#[cfg(feature = "tokio")]
mod stream;
mod weighed;

pub use config::{FileConfig, GroupConfig, MulticastConfig, RuntimeConfig, TIMER_SLACK_MAX_MS};
pub use error::{Error, Queue};
pub use event_loop::{EventLoop, RuntimeStats};
// The core's types that this API's signatures name, so that an application needs no dependency
// on `motet-core` of its own (and cannot get a second, mismatched version of it): the errors inside
// `Error`, the protocol parameters of `GroupConfig::params`, the layer counters of `stats`. The
// rest of the core (drop reasons, counters) is there as `motet_runtime::motet_core`.
pub use motet_core;
pub use motet_core::layer::Stats;
pub use motet_core::{ApiError, EndpointId, StackConfig, StackSpecError, ViewId};
pub use runtime::{Handle, Member, Runtime, StatsHandle};
#[cfg(feature = "tokio")]
pub use stream::AsyncMember;

use bytes::Bytes;
use motet_core::{Rank, ViewState};
use std::net::SocketAddr;

/// A view as the application sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    /// The view's id: logical time and coordinator.
    pub id: ViewId,
    /// The members, in rank order.
    pub members: Vec<EndpointId>,
    /// Where each member is reached, in rank order.
    pub addresses: Vec<SocketAddr>,
    /// This endpoint's rank.
    pub rank: usize,
    /// Whether the view is primary (only stacks with the `Primary` property mark views primary).
    pub primary: bool,
    /// The stack the view runs, as a layer list (it changes when the group switches).
    pub stack: String,
    /// The members that joined as clients (client/server groups); the others are servers.
    pub clients: Vec<EndpointId>,
    /// A state-transfer view (stack with `Xfer`, formed by a merge): casts wait for the next view
    /// while rank 0 streams its state to the others (`Event::XferProvide`, `Event::XferChunk`).
    pub xfer: bool,
    /// The protocol parameters every member of the view runs (the group's: docs/runtime.md,
    /// "Protocol parameters").
    pub params: std::sync::Arc<motet_core::StackConfig>,
    /// The largest message the view takes: `params.appl.message_size_max`, or one datagram's
    /// worth (`motet_core::layers::appl::UNFRAGMENTED_MAX`) on a stack without `frag`. Larger
    /// casts and sends fail with `ApiError::TooLarge`.
    pub message_size_max: usize,
}

/// Parses a stack to switch to and checks it can switch again (it has the `Switch` property)
/// and is one the runtime runs (membership and merging, flow control, no `Primary`). A tool
/// checks a target it was given at its start with this, rather than when the switch is asked
/// for, maybe hours later.
pub fn switch_target(spec: &str) -> Result<motet_core::StackSpec, Error> {
    let parsed = motet_core::StackSpec::parse(spec)?;
    if !parsed.layers().contains(&motet_core::LayerKind::Switch) {
        return Err(Error::Api(motet_core::ApiError::NoSwitch(format!("to `{parsed}`"))));
    }
    merges(&parsed, spec)?;
    Ok(parsed)
}

/// Checks that `spec` (given as `text`) has membership and merging: a member the runtime starts
/// begins alone and must merge, and a group switched to a stack without them could never take a
/// new member or heal a partition again (a review's finding: a switch was not held to this). That
/// it has flow control, which bounds what a sender buffers. And that it has no `Primary`, which a
/// group the runtime starts could never use.
pub(crate) fn merges(spec: &motet_core::StackSpec, text: &str) -> Result<(), Error> {
    let layers = spec.layers();
    if !layers.contains(&motet_core::LayerKind::Heal) || !layers.contains(&motet_core::LayerKind::Intra) {
        return Err(Error::Config(format!(
            "stack `{text}` has no membership: a member started by the runtime begins alone and must merge, so it needs the Gmp and Heal properties (use `vsync`)"
        )));
    }
    // Without flow control nothing holds an application back: its casts wait in `mnak` for
    // stability and its sends in `pt2pt` for acknowledgements, so one slow member grows every
    // sender's memory at the application's rate (a review's finding). The simulator and the core
    // still run such stacks, to test the layers apart.
    if !layers.contains(&motet_core::LayerKind::Mflow) || !layers.contains(&motet_core::LayerKind::Pt2ptw) {
        return Err(Error::Config(format!(
            "stack `{text}` has no flow control: without it a slow member makes every sender buffer without bound, so the runtime needs the Flow property (add `+Flow`, or use `vsync`)"
        )));
    }
    // A view is primary only if it follows a primary view (`primary`), and a member the runtime
    // starts begins alone, in a view that is not: no view of such a group would ever be primary,
    // and an application that waited for one would wait for good (found by a review). Primary
    // views need a group founded in one view, as the simulator's are; the runtime cannot found
    // one yet.
    if layers.contains(&motet_core::LayerKind::Primary) {
        return Err(Error::Config(format!(
            "stack `{text}` has Primary, but a member started by the runtime begins alone in a view that is not primary, and a view is primary only if it follows one: no view would ever be primary (use a stack without Primary)"
        )));
    }
    Ok(())
}

impl View {
    fn new(view: &ViewState, rank: Rank) -> View {
        View {
            id: view.view_id,
            members: view.members.clone(),
            addresses: view
                .addresses
                .iter()
                .filter_map(|a| match a {
                    motet_core::Address::Inet(a) => Some(*a),
                    motet_core::Address::Sim(_) => None,
                })
                .collect(),
            rank: usize::from(rank),
            primary: view.primary,
            stack: view.stack.to_string(),
            xfer: view.xfer_view,
            params: std::sync::Arc::clone(&view.params),
            message_size_max: view.params.appl.message_size_max_of(&view.stack),
            clients: view.ranks_where(true).iter().map(|&r| view.members[usize::from(r)]).collect(),
        }
    }
}

/// What an endpoint tells the application. Exhaustive on purpose: an application that handles
/// every kind learns of a new one from its compiler (the crate is before 1.0: a new kind is a
/// breaking change, said in the release notes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A new view was installed. Boxed: a view is about three times as large as any other event,
    /// and every event moves through the loop's queues and the member's channel by value.
    View(Box<View>),
    /// This member provides the state in this state-transfer view: stream it with
    /// `Handle::xfer_chunk` (the last one marked), then call `Handle::xfer_done`.
    XferProvide {
        /// The transfer view (pass it to `xfer_chunk` and `xfer_done`).
        view: ViewId,
    },
    /// A chunk of the provider's state, in order: stage it, install the state when `last`, then
    /// call `Handle::xfer_done`.
    XferChunk {
        /// The transfer view (pass it to `xfer_done`).
        view: ViewId,
        /// The bytes.
        data: Bytes,
        /// The last chunk.
        last: bool,
    },
    /// A multicast from member `from` of the current view.
    Cast {
        /// The sender.
        from: EndpointId,
        /// The bytes.
        data: Bytes,
    },
    /// A point-to-point message from `from`.
    Send {
        /// The sender.
        from: EndpointId,
        /// The bytes.
        data: Bytes,
    },
    /// A view change has started: casts and sends are held until the next view.
    Block,
    /// The endpoint has left the group; no more events follow.
    Exit,
}

impl Event {
    /// The payload bytes the event carries (what `RuntimeConfig::event_queue_bytes` bounds).
    pub(crate) fn payload_len(&self) -> usize {
        match self {
            Event::Cast { data, .. } | Event::Send { data, .. } | Event::XferChunk { data, .. } => data.len(),
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    /// Every event moves by value through the loop's queues and the member's channel: a view
    /// inline made each of them 136 bytes and a `memcpy` call per move (about 130 instructions
    /// per round trip of `motet perf latency`). A message event is an id (16 bytes) and a `Bytes`.
    #[test]
    fn an_event_stays_the_size_of_a_message() {
        assert!(std::mem::size_of::<super::Event>() <= 56, "{}", std::mem::size_of::<super::Event>());
    }
}
