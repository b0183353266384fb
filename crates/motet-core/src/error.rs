//! Errors at the public boundaries. Each says what went wrong and what to do.

use crate::layer::Service;
use crate::Rank;
use thiserror::Error;

/// Misuse of the application interface. Non-exhaustive: later releases add refusals, and a match
/// on it needs an arm for the others (a review's finding: each added variant broke matches).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ApiError {
    /// Flow control is holding messages back; retry after an `AppEvent::FlowBlock` with
    /// `blocked: false` for the same destination.
    #[error("flow control is blocking {}; wait for the FlowBlock release event and retry", match .dest { None => "casts".to_string(), Some(r) => format!("sends to rank {r}") })]
    FlowBlocked {
        /// `None` for casts, the rank for sends.
        dest: Option<Rank>,
    },
    /// The message is larger than the stack accepts.
    #[error(
        "message of {size} bytes exceeds the stack's maximum of {max} bytes; split it, or {advice}",
        advice = if *max == crate::layers::appl::UNFRAGMENTED_MAX {
            "add the Frag property to the stack (without it a message must fit one datagram); with Frag, raise appl.message_size_max"
        } else {
            "raise appl.message_size_max (a view runs its group's parameters: every member needs the new value)"
        }
    )]
    TooLarge {
        /// The message size.
        size: usize,
        /// The configured maximum.
        max: usize,
    },
    /// A destination rank is not in the view.
    #[error("rank {rank} is not in the current view of {len} members; use a rank from the latest View event")]
    NoSuchRank {
        /// The bad rank.
        rank: Rank,
        /// View size.
        len: usize,
    },
    /// A send names a member known to have failed (`Node::handle_fail`, or a flush under way).
    #[error("member {rank} has failed: nothing sent to it would be delivered; with membership it leaves at the next view (send to the members of that view), and in a static group it is gone for the group's life")]
    MemberFailed {
        /// The failed rank.
        rank: Rank,
    },
    /// A send names no destination.
    #[error("a send names no destination; name at least one rank of the current view (or cast to all)")]
    NoDestination,
    /// A subcast names more members than its header may carry.
    #[error(
        "a subcast names at most {max} members ({members} given, duplicates removed); cast to all instead, or split it"
    )]
    SubsetTooLarge {
        /// The members named, without duplicates.
        members: usize,
        /// The most a subcast may name.
        max: usize,
    },
    /// A view change is in progress; retry after the next `AppEvent::View`.
    #[error("the group is changing view; wait for the next View event and send again")]
    Blocked,
    /// The endpoint has left; no further actions are possible.
    #[error("the endpoint has left the group; join again to send")]
    Left,
    /// A switch was asked of a stack without the `Switch` property, or for a stack without it
    /// (the group could never switch again).
    #[error("cannot switch {0}: both the current and the new stack need the Switch property (add +Switch)")]
    NoSwitch(String),
    /// A switch asked in a state-transfer view to a stack without `Xfer`: the next view would
    /// still owe the transfer, with no layer to finish it.
    #[error("cannot switch to `{0}` during a state transfer: the new stack needs the Xfer property too (add +Xfer), or ask once a View without xfer has come")]
    SwitchInTransfer(String),
    /// A switch to a stack without what the group could not regain once it ran without it:
    /// membership and merging, or primary views as they are.
    #[error("cannot switch to `{to}`: {why}")]
    SwitchLoses {
        /// The stack asked for.
        to: String,
        /// What it would lose, and what to do.
        why: &'static str,
    },
    /// A migration was asked of a stack without the `Migrate` property.
    #[error("cannot migrate: stack `{0}` lacks the Migrate property (add +Migrate, or use a preset with membership)")]
    NoMigrate(String),
    /// A state-transfer action outside a state-transfer view, or a chunk from a member that is not
    /// the provider.
    #[error("no state transfer for this member now: chunks come from the provider (XferProvide) in a transfer view")]
    NotInTransfer,
    /// This member already made `max` switch or migration requests in this view (each takes
    /// effect at the next view, which the first one starts).
    #[error("already {max} switch or migration requests in this view; they take effect at the next view: wait for the next View event and ask again")]
    TooManyRequests {
        /// The most requests a member makes in one view.
        max: u32,
    },
    /// The stack handle does not name a live stack.
    #[error("no such stack (it has exited); use the handle from the latest join")]
    NoSuchStack,
}

/// A stack specification that cannot be built. Non-exhaustive, as [`ApiError`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum StackSpecError {
    /// Nothing was named.
    #[error("the stack is empty: give a preset (`vsync`, `total`, ...), properties (`Gmp+Sync+Total`) or a layer list (`motet stack explain vsync`)")]
    Empty,
    /// An unknown layer name in an explicit layer list.
    #[error("unknown layer `{0}`; known layers: {1}")]
    UnknownLayer(String, String),
    /// An unknown property or preset.
    #[error("unknown property or preset `{0}`; known: {1}")]
    UnknownProperty(String, String),
    /// A layer appears twice.
    #[error("layer `{0}` appears twice")]
    Duplicate(&'static str),
    /// The first layer must be `top` and the last `bottom`.
    #[error("a stack must start with `top` and end with `bottom` (got `{0}`)")]
    Ends(String),
    /// Exactly one `appl` layer is needed.
    #[error("a stack needs exactly one `appl` layer")]
    NoAppl,
    /// A layer's requirement is not met.
    #[error("layer `{layer}` requires {} {} it, and no layer there provides it", .service.describe(), if *.below { "below" } else { "above" })]
    Missing {
        /// The layer whose requirement is unmet.
        layer: &'static str,
        /// The missing service.
        service: Service,
        /// Whether it was required below (else above).
        below: bool,
    },
    /// A layer is on the wrong side of a layer it must sit above or below.
    #[error("layer `{layer}` must sit {} `{other}`: every layer that provides {} must be {} `{layer}`", if *.above { "above" } else { "below" }, .service.describe(), if *.above { "below" } else { "above" })]
    Order {
        /// The misplaced layer.
        layer: &'static str,
        /// The layer on the wrong side of it.
        other: &'static str,
        /// What `other` provides.
        service: Service,
        /// Whether `layer` must sit above `other` (else below).
        above: bool,
    },
    /// Two layers that cannot share a stack.
    #[error(
        "layers `{0}` and `{1}` cannot be in one stack: a stack has one delivery discipline (choose one of Total, Causal, Agree)"
    )]
    Conflict(&'static str, &'static str),
    /// Parameters that do not fit together.
    #[error("inconsistent parameters: {0}")]
    Params(String),
}
