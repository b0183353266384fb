//! The runtime's errors: each says what went wrong and what to do.

use motet_core::{ApiError, EndpointId, StackSpecError};
use thiserror::Error;

/// Everything the runtime and its API can refuse. More kinds may come: match the ones you act on
/// and keep a catch-all arm.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// A socket could not be set up or used.
    #[error("network: {context}: {source}")]
    Io {
        /// What the runtime was doing.
        context: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A configuration value is wrong.
    #[error("configuration: {0}")]
    Config(String),
    /// The stack specification or its parameters cannot be built.
    #[error("stack: {0}")]
    Stack(#[from] StackSpecError),
    /// The protocol refused an action.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// A send named an endpoint that is not in the current view.
    #[error("endpoint {0} is not in the current view; send to an id from the latest View event")]
    NotMember(EndpointId),
    /// A send (to a member, or to several) or a state-transfer action before the first view was
    /// handed to this member: there is no member nor transfer to name yet. Casts and switches
    /// before it are taken, and go once the view is installed.
    #[error("no view installed yet; wait for the first View event")]
    NoView,
    /// This endpoint has left the group (or the runtime stopped it).
    #[error("the endpoint has left the group; join again to communicate")]
    Left,
    /// The runtime's event loop has stopped.
    #[error("the runtime has stopped (its event loop exited); start a new one")]
    Stopped,
    /// The runtime's event loop failed (a system call it cannot go on without, or a bug: a panic)
    /// and stopped; the cause is in the message, and was logged.
    #[error("the runtime's event loop failed and stopped ({0}); start a new one")]
    Failed(String),
    /// The application is not keeping up and a bounded queue is full: which one says what to do.
    #[error("{0} queue is full; consume events (or slow down) and retry")]
    QueueFull(Queue),
}

/// Which bounded queue refused an action ([`Error::QueueFull`]). More may come: keep a catch-all
/// arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Queue {
    /// The loop's action queue (`RuntimeConfig::action_queue`): the loop has not yet taken the
    /// actions queued before. Only the `try_` calls refuse for it (a blocking call waits, an
    /// async one awaits); retry in a moment.
    Action,
    /// The member's parked messages (casts, sends, subcasts), held behind flow control, a view
    /// change, or its own events the application has not taken: at most 65,536 of them or
    /// 64 MiB. Take the member's events, then retry.
    Parked,
    /// The member's parked state-transfer chunks, held behind flow control (the same bounds):
    /// retry once the receivers have taken some (`motet kv` retries every millisecond).
    ParkedTransfer,
}

impl std::fmt::Display for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Queue::Action => "action",
            Queue::Parked => "parked actions",
            Queue::ParkedTransfer => "parked state-transfer actions",
        })
    }
}

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io { context: context.into(), source }
    }
}
