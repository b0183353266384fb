//! The application side of the event loop: actions in (taken at once, or parked in order while
//! flow control or a view change holds them), events out (the node's, translated to endpoint ids).

use super::{EventLoop, RuntimeStats};
use crate::io::Chunks;
use crate::weighed::Weighed;
use crate::{Error, Event, View};
use bytes::Bytes;
use motet_core::{Action, Address, ApiError, AppEvent, EndpointId, Node, Payload, Rank, StackId, ViewId, ViewState};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;

/// Actions parked per endpoint (waiting for flow control or a view change) before more are
/// refused with [`Error::QueueFull`].
pub(crate) const PARKED_MAX: usize = 65_536;

/// The same bound in payload bytes (one action may pass it).
pub(crate) const PARKED_BYTES_MAX: usize = 64 << 20;

/// Actions other than messages and state-transfer chunks (a leave, a switch, a migration, the
/// end of a transfer) park beyond the bound, up to this many more: the threaded runtime's handles
/// count only messages and chunks, and a leave refused for a full lot would leave the member in
/// the group.
const PARKED_CONTROL_EXTRA: usize = 1024;

/// The two lots an endpoint parks actions in, each bounded on its own (and counted on its own by
/// the threaded runtime's handles): its messages wait for the end of a state-transfer view,
/// while the transfer's chunks must go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lot {
    /// Casts, sends, subcasts and role casts (and the actions queued behind them).
    Messages,
    /// State-transfer chunks (and the ends of transfers queued behind them).
    Xfer,
}

/// An endpoint's parked actions of one lot, in order, with how many are counted (messages, or
/// chunks) and the payload bytes they hold.
#[derive(Debug, Default)]
pub(super) struct Parked {
    ops: Weighed<Op>,
    messages: usize,
}

impl Parked {
    pub(super) fn push_back(&mut self, op: Op) {
        self.messages += usize::from(op.counted().is_some());
        self.ops.push_back(op);
    }

    pub(super) fn push_front(&mut self, op: Op) {
        self.messages += usize::from(op.counted().is_some());
        self.ops.push_front(op);
    }

    pub(super) fn pop_front(&mut self) -> Option<Op> {
        let op = self.ops.pop_front()?;
        self.messages -= usize::from(op.counted().is_some());
        Some(op)
    }

    pub(super) fn messages(&self) -> usize {
        self.messages
    }

    pub(super) fn len(&self) -> usize {
        self.ops.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    pub(super) fn bytes(&self) -> usize {
        self.ops.bytes()
    }

    pub(super) fn clear(&mut self) {
        self.ops.clear();
        self.messages = 0;
    }

    /// Drops the state-transfer actions of transfer view `view`, keeping the others in order;
    /// how many went.
    fn drop_xfer_view(&mut self, view: motet_core::ViewId) -> usize {
        let ops: Vec<Op> = std::iter::from_fn(|| self.pop_front()).collect();
        let before = ops.len();
        for op in ops.into_iter().filter(|op| op.xfer_view() != Some(view)) {
            self.push_back(op);
        }
        before - self.len()
    }

    /// No room for `op`: for a message or a chunk, [`PARKED_MAX`] of them or [`PARKED_BYTES_MAX`]
    /// of payload are parked; for another action, [`PARKED_CONTROL_EXTRA`] more actions than that.
    fn full_for(&self, op: &Op) -> bool {
        match op.counted().is_some() {
            true => self.messages >= PARKED_MAX || self.ops.bytes() >= PARKED_BYTES_MAX,
            false => self.ops.len() >= PARKED_MAX + PARKED_CONTROL_EXTRA,
        }
    }
}

/// An application action, by endpoint id (translated to ranks of the current view when taken).
#[derive(Clone, Debug)]
pub(crate) enum Op {
    Cast(Bytes),
    Send(EndpointId, Bytes),
    Leave,
    Switch(motet_core::StackSpec),
    /// State-transfer actions name the transfer view they belong to: one for an earlier view
    /// (the application had not yet seen the view change) is void and dropped.
    Subcast(Vec<EndpointId>, Bytes),
    /// A cast to the servers only (`false`) or the clients only (`true`) of the view it is taken in.
    RoleCast(bool, Bytes),
    XferChunk(motet_core::ViewId, Bytes, bool),
    XferDone(motet_core::ViewId),
    /// Move this endpoint to the process's new address (endpoint migration).
    Migrate(SocketAddr),
}

impl Op {
    /// The lot that counts this action, for a message (a cast, a send, a subcast) or a
    /// state-transfer chunk: what the threaded runtime's handles count toward their member's
    /// parked actions (`runtime::Handle::act_bounded`). `None` for other actions.
    pub(crate) fn counted(&self) -> Option<Lot> {
        match self {
            Op::Cast(_) | Op::Send(..) | Op::Subcast(..) | Op::RoleCast(..) => Some(Lot::Messages),
            Op::XferChunk(..) => Some(Lot::Xfer),
            _ => None,
        }
    }

    /// What the action weighs against its member's bounds on parked actions: its payload, and a
    /// subcast's list of members (up to `SUBSET_MAX` of them, 8 KiB, with a payload of one byte:
    /// counted by payload alone, 65,536 parked subcasts held 512 MiB of lists under a bound of
    /// 64 MiB).
    pub(crate) fn weight(&self) -> usize {
        match self {
            Op::Subcast(to, data) => data.len() + std::mem::size_of_val(to.as_slice()),
            op => op.payload_len(),
        }
    }

    /// The transfer view a state-transfer action belongs to.
    fn xfer_view(&self) -> Option<motet_core::ViewId> {
        match self {
            Op::XferChunk(view, ..) | Op::XferDone(view) => Some(*view),
            _ => None,
        }
    }

    /// The payload bytes the action carries (and its events will: its own delivery of a cast).
    pub(crate) fn payload_len(&self) -> usize {
        match self {
            Op::Cast(data) | Op::Send(_, data) | Op::Subcast(_, data) | Op::RoleCast(_, data) => data.len(),
            Op::XferChunk(_, data, _) => data.len(),
            _ => 0,
        }
    }

    /// Copies the operation's small data into a shared chunk, once, when it comes in (a parked
    /// operation is not copied again when it is retried): the stack keeps a reference for
    /// retransmission, and the first clone of a vector-backed `Bytes` would allocate its shared
    /// count. A copy of up to 256 bytes costs less than that allocation. (Up to 1,536 bytes, as
    /// received datagrams are, it took fewer instructions but no less time: the copy writes
    /// memory the application's buffer had warm.) Data that is shared already (a message the
    /// application received and casts on, as a relay or an echo does) is not copied: its clone
    /// only counts a reference. `Bytes::is_unique` is false for it, and for static data.
    fn copy_small(&mut self, chunks: &mut Chunks) {
        if let Op::Cast(data) | Op::Send(_, data) | Op::Subcast(_, data) | Op::RoleCast(_, data) = self {
            if (1..=crate::io::SMALL).contains(&data.len()) && data.is_unique() {
                *data = chunks.copy(data);
            }
        }
    }
}

/// One joined endpoint.
#[derive(Debug)]
pub(super) struct MemberState {
    pub(super) current: StackId,
    /// The group it joined, and the addresses of its seeds (IP literals, and names as last
    /// resolved): the node's seeds of a group are those of all its endpoints here.
    pub(super) group: motet_core::GroupName,
    pub(super) seeds: Vec<Address>,
    pub(super) view: Option<Arc<ViewState>>,
    pub(super) parked: Parked,
    /// State-transfer actions waiting for flow control: apart from `parked`, where the
    /// application's casts wait for the end of the transfer view.
    pub(super) xfer_parked: Parked,
    /// A view change is in progress (between `Block` and the next view).
    pub(super) blocked: bool,
    pub(super) casts_blocked: bool,
    pub(super) sends_blocked: BTreeSet<Rank>,
    /// Something that may unblock parked actions happened.
    pub(super) retry: bool,
    pub(super) left: bool,
    /// The application asked to leave (the threaded runtime's stop waits for the leave).
    pub(super) leave_asked: bool,
    /// Migration: the view in which this endpoint last asked for its new address, and how many
    /// views it has asked in since it moved (at most `MIGRATE_TRIES`).
    pub(super) migrate_asked: Option<ViewId>,
    pub(super) migrate_tries: u32,
    /// This endpoint's own protocol parameters (its configuration): its first view's; later
    /// views run the group's.
    pub(super) configured: Arc<motet_core::StackConfig>,
    /// A view with other parameters than `configured` has been logged.
    pub(super) params_warned: bool,
    /// This endpoint's own stack (its configuration): its first view's; later views run the
    /// group's, which a merge takes from the larger partition and a switch changes.
    pub(super) configured_stack: motet_core::StackSpec,
    /// The last stack a merge changed this endpoint's to, logged (once per stack, not per view).
    pub(super) stack_warned: Option<motet_core::StackSpec>,
    /// The application lags its events ([`EventLoop::set_lagging`]): said to each new stack.
    pub(super) lagging: bool,
}

impl EventLoop {
    pub(crate) fn act(&mut self, endpoint: EndpointId, op: Op) -> Result<(), Error> {
        let mut op = op;
        op.copy_small(&mut self.chunks);
        // Not `ok_or(Error::Left)`: that builds the error, and drops it, on every action (about 20
        // instructions of a round trip, `drop_in_place::<Error>`).
        let Some(member) = self.members.get_mut(&endpoint) else { return Err(Error::Left) };
        if member.left {
            return Err(Error::Left);
        }
        if matches!(op, Op::Leave) {
            if member.leave_asked {
                // One leave is under way (a stopping runtime asks for every member's).
                return Ok(());
            }
            let transfer = member.view.as_ref().filter(|v| v.xfer_view).map(|v| (v.view_id, v.rank_of(endpoint)));
            if let Some(transfer) = transfer {
                return self.leave_in_transfer(endpoint, transfer, op);
            }
        }
        if matches!(op, Op::XferChunk(..) | Op::XferDone(_)) {
            // Not behind the application's casts, which wait for the transfer view to end.
            if !member.xfer_parked.is_empty() {
                // Refused at the call, as when nothing is parked: parked, it was answered `Ok`,
                // then refused in the loop, and the chunks after it went on, so receivers
                // installed a state with a chunk missing (a review's finding).
                too_large(member, &op)?;
                if member.xfer_parked.full_for(&op) {
                    return Err(Error::QueueFull(crate::Queue::ParkedTransfer));
                }
                member.xfer_parked.push_back(op);
                return Ok(());
            }
            let now = self.clock.now();
            let result = match take(&mut self.node, now, member, &op, &mut self.stats) {
                // Held by flow control, or by a view change: taken when that ends (after a view
                // change, as stale: the transfer starts over in the next view).
                Err(Error::Api(ApiError::FlowBlocked { .. } | ApiError::Blocked)) => {
                    member.xfer_parked.push_back(op);
                    Ok(())
                }
                other => other,
            };
            self.drain();
            return result;
        }
        // A leave taken or parked is under way: a stopping runtime waits for it.
        let leave = matches!(op, Op::Leave);
        // The application is behind on its events: this action (a cast comes back to its own
        // member as an event) waits with the others, in order, until it catches up
        // ([`EventLoop::next_event`]). Without this, events made by actions grew without bound
        // while the loop had stopped reading the network for the same reason.
        let behind = self.ready.full(0, 0, &self.config);
        self.parked_for_events |= behind;
        if behind || !member.parked.is_empty() {
            too_large(member, &op)?;
            if member.parked.full_for(&op) {
                return Err(Error::QueueFull(crate::Queue::Parked));
            }
            member.parked.push_back(op);
            member.leave_asked |= leave;
            return Ok(());
        }
        let now = self.clock.now();
        let result = take(&mut self.node, now, member, &op, &mut self.stats);
        let result = match result {
            Err(Error::Api(ApiError::FlowBlocked { .. } | ApiError::Blocked | ApiError::NoSuchStack)) => {
                too_large(member, &op)?;
                member.parked.push_back(op);
                Ok(())
            }
            other => other,
        };
        member.leave_asked |= leave && result.is_ok();
        // What the action produced waits in the packing buffers until the end of this turn
        // (`poll`), so a burst of casts goes out packed.
        self.drain();
        result
    }

    /// The node's events for the applications, translated to endpoint ids.
    pub(super) fn collect_events(&mut self) {
        // Stacks come and go with views: the owners' map is pruned when one does.
        let mut views_changed = false;
        while let Some((stack, event)) = self.node.poll_event() {
            // The common case inline: a message needs only its stack's endpoint and view (a
            // member of this loop is never forgotten, so one that owns a stack is there), and its
            // payload moves into the event (no reference-count traffic). The rest is out of line,
            // so that the loop that every message takes stays small.
            let (cast, origin, payload) = match event {
                AppEvent::Cast { origin, payload } => (true, origin, payload),
                AppEvent::Send { origin, payload } => (false, origin, payload),
                event => {
                    views_changed |= self.other_event(stack, event);
                    continue;
                }
            };
            let Some((endpoint, view)) = self.owners.get(stack) else { continue };
            let (from, data) = (view.members[usize::from(origin)], payload.into_bytes());
            let event = if cast { Event::Cast { from, data } } else { Event::Send { from, data } };
            self.ready.push_back((endpoint, event));
        }
        if views_changed && self.owners.changed() {
            let node = &self.node;
            self.owners.retain(|stack| node.stack(stack).is_some());
        }
    }

    /// An event of stack `stack` other than a message. True if it was a view or an exit (the
    /// owners' map is then pruned).
    #[cold]
    #[inline(never)]
    fn other_event(&mut self, stack: StackId, event: AppEvent) -> bool {
        if matches!(event, AppEvent::View { .. } | AppEvent::Exit) {
            self.migration_walk = true;
        }
        if let AppEvent::View { view, rank } = &event {
            let endpoint = view.members[usize::from(*rank)];
            self.owners.insert(stack, endpoint, Arc::clone(view));
        }
        let views_changed = matches!(event, AppEvent::View { .. } | AppEvent::Exit);
        let Some((endpoint, view)) = self.owners.get(stack) else { return views_changed };
        let Some(member) = self.members.get_mut(&endpoint) else { return views_changed };
        let current = stack == member.current;
        let event = match event {
            AppEvent::View { view, rank } => {
                self.stats.views_installed += 1;
                tracing::info!(%endpoint, view = ?view.view_id, members = view.members.len(), "view installed");
                if view.params != member.configured {
                    self.stats.views_with_other_params += 1;
                    if !std::mem::replace(&mut member.params_warned, true) {
                        tracing::warn!(%endpoint, view = ?view.view_id, "this view's protocol parameters (the group's) differ from this member's configuration; the member runs the view's (configure every member of a group alike; a group takes new parameters only when all its members restart)");
                        // The join checked the timer slack against this member's own failure
                        // timeout; the group's may be shorter (a review's finding: unchecked).
                        let timeout = view.params.suspect.timeout.as_millis();
                        if self.config.timer_slack_ms.saturating_mul(10) > timeout {
                            tracing::warn!(%endpoint, slack_ms = self.config.timer_slack_ms, timeout_ms = timeout, "timer_slack_ms is more than a tenth of this view's suspect.timeout_ms: this member's beats could go out late enough to be suspected; lower timer_slack_ms");
                        }
                    }
                }
                // A merge takes the larger partition's stack (it must keep membership, merging
                // and Primary, not every guarantee: partitions that switched apart must still
                // merge). A member whose stack a merge changed hears of what it lost here (a
                // review's finding: a member started with `total` ran `vsync` without a word). A
                // switch is the group's agreed change (one view before), not counted.
                let before = member.view.as_ref().map_or(&member.configured_stack, |v| &v.stack);
                if view.prev_ids.len() >= 2 && view.stack != *before {
                    self.stats.merges_changing_stack += 1;
                    if member.stack_warned.as_ref() != Some(&view.stack) {
                        member.stack_warned = Some(view.stack.clone());
                        let lacks = before.lacks(&view.stack);
                        if lacks.is_empty() {
                            tracing::info!(%endpoint, view = ?view.view_id, stack = %view.stack, %before, "merged into a partition running another stack, which provides all this member's did");
                        } else {
                            tracing::warn!(%endpoint, view = ?view.view_id, stack = %view.stack, %before, lacks = %lacks.join(", "), "merged into a partition running a stack that lacks guarantees this member's provided; the member runs the view's (start every member of a group with one stack)");
                        }
                    }
                }
                member.current = stack;
                if member.lagging {
                    // A new view's stack starts with credit flowing.
                    let _ = self.node.handle_action(self.clock.now(), stack, Action::Lagging(true));
                }
                member.view = Some(Arc::clone(&view));
                member.blocked = false;
                member.casts_blocked = false;
                member.sends_blocked.clear();
                flag_retry(&mut self.retrying, endpoint, member);
                Event::View(Box::new(View::new(&view, rank)))
            }
            // Taken by `collect_events`.
            AppEvent::Cast { .. } | AppEvent::Send { .. } => return views_changed,
            AppEvent::Block => {
                if current {
                    member.blocked = true;
                }
                Event::Block
            }
            AppEvent::FlowBlock { dest, blocked } => {
                if current {
                    match dest {
                        None => member.casts_blocked = blocked,
                        Some(rank) if blocked => drop(member.sends_blocked.insert(rank)),
                        Some(rank) => drop(member.sends_blocked.remove(&rank)),
                    }
                    if !blocked {
                        flag_retry(&mut self.retrying, endpoint, member);
                    }
                }
                return views_changed;
            }
            AppEvent::Exit => {
                member.left = true;
                // Accepted, and now never taken (a provider's casts held by its transfer view,
                // actions queued behind the leave): refused, and counted.
                let lost = member.parked.len() + member.xfer_parked.len();
                if lost > 0 {
                    self.stats.actions_refused += lost as u64;
                    tracing::warn!(%endpoint, lost, "actions still parked at the member's exit were refused");
                }
                member.parked.clear();
                member.xfer_parked.clear();
                Event::Exit
            }
            AppEvent::XferProvide if current => Event::XferProvide { view: view.view_id },
            AppEvent::XferChunk { payload, last } if current => {
                Event::XferChunk { view: view.view_id, data: payload.into_bytes(), last }
            }
            // A transfer of a view this member has already left.
            AppEvent::XferProvide | AppEvent::XferChunk { .. } => return views_changed,
        };
        let exit = event == Event::Exit;
        self.ready.push_back((endpoint, event));
        if exit {
            // Gone for good: a process that joins and leaves groups all its life does not
            // keep their state, nor resolve their seeds (an action for it is `Error::Left`), nor
            // keep the seeds of a group it no longer has a member in.
            if let Some(member) = self.members.remove(&endpoint) {
                if let Some(endpoints) = self.groups.get_mut(&member.group) {
                    endpoints.retain(|e| *e != endpoint);
                    if endpoints.is_empty() {
                        self.groups.remove(&member.group);
                    }
                }
                self.publish_peers(&member.group);
            }
            self.forget_seeds(endpoint);
        }
        views_changed
    }

    /// A leave in a state-transfer view. The view ends only once every member said it is done
    /// (`xfer`), and the application's casts wait for its end: a leave parked behind them waited
    /// for ever, and the whole group with it (its member still beats, so nobody suspects it). A
    /// member that receives the state says it is done (what it received no longer matters), so
    /// the view can end, its casts go, then its leave, in order. The provider, whose chunks the
    /// others wait for, leaves at once, ahead of the casts the view holds (they are refused and
    /// counted at its exit: they could go in no view of its own); the next view transfers again,
    /// from another provider.
    fn leave_in_transfer(
        &mut self,
        endpoint: EndpointId,
        (view, rank): (motet_core::ViewId, Option<Rank>),
        op: Op,
    ) -> Result<(), Error> {
        if rank != Some(0) {
            // Refused only if the view is over by now, and then there is nothing to end.
            let _ = self.act(endpoint, Op::XferDone(view));
            let Some(member) = self.members.get_mut(&endpoint) else { return Err(Error::Left) };
            if !member.parked.is_empty() {
                if member.parked.full_for(&op) {
                    return Err(Error::QueueFull(crate::Queue::Parked));
                }
                member.parked.push_back(op);
                member.leave_asked = true;
                return Ok(());
            }
        }
        let Some(member) = self.members.get_mut(&endpoint) else { return Err(Error::Left) };
        member.leave_asked = true;
        let now = self.clock.now();
        let result = match take(&mut self.node, now, member, &op, &mut self.stats) {
            // A view change is under way: first in line once it ends.
            Err(Error::Api(ApiError::FlowBlocked { .. } | ApiError::Blocked | ApiError::NoSuchStack)) => {
                member.parked.push_front(op);
                flag_retry(&mut self.retrying, endpoint, member);
                Ok(())
            }
            other => other,
        };
        self.drain();
        result
    }

    /// Takes parked actions of endpoints that may have been unblocked. True if any was taken.
    pub(super) fn retry_parked(&mut self) -> bool {
        // Only the members flagged are visited: a process may run very many groups.
        if self.retrying.is_empty() {
            return false;
        }
        let mut progress = false;
        // What the actions taken in this pass will add to the events (collected after it).
        let (mut taken, mut taken_bytes) = (0, 0);
        // Read only when some member has parked actions to retry (rarely).
        let mut now = None;
        // The list is walked from a spare, which keeps its capacity (a turn that flags a member,
        // as each credit report that unblocks one does, allocated a new list).
        std::mem::swap(&mut self.retrying, &mut self.retrying_spare);
        for &endpoint in &self.retrying_spare {
            let Some(member) = self.members.get_mut(&endpoint) else { continue };
            if !std::mem::take(&mut member.retry) || member.blocked {
                continue;
            }
            let now = *now.get_or_insert_with(|| self.clock.now());
            while let Some(op) = member.xfer_parked.pop_front() {
                match take(&mut self.node, now, member, &op, &mut self.stats) {
                    Err(Error::Api(ApiError::FlowBlocked { .. } | ApiError::Blocked)) => {
                        member.xfer_parked.push_front(op);
                        break;
                    }
                    Err(e) => {
                        // A stream with a chunk refused must not go on: the receivers would
                        // install a state with a hole in it. The rest of this view's stream is
                        // dropped with it (counted), and the transfer stalls where the provider's
                        // application can see it (`actions_refused`, the warning) instead.
                        refused(&mut self.stats, &e);
                        if let Some(view) = op.xfer_view() {
                            self.stats.actions_refused += member.xfer_parked.drop_xfer_view(view) as u64;
                        }
                    }
                    Ok(()) => progress = true,
                }
            }
            while let Some(op) = member.parked.pop_front() {
                // Not beyond the events' bounds (the events of the actions taken in this pass are
                // collected after it: each is counted as one event of its payload's bytes).
                if self.ready.full(taken, taken_bytes, &self.config) {
                    member.parked.push_front(op);
                    self.parked_for_events = true;
                    break;
                }
                taken += 1;
                taken_bytes += op.payload_len();
                match take(&mut self.node, now, member, &op, &mut self.stats) {
                    Err(Error::Api(ApiError::FlowBlocked { .. } | ApiError::Blocked | ApiError::NoSuchStack)) => {
                        member.parked.push_front(op);
                        break;
                    }
                    Err(e) => refused(&mut self.stats, &e),
                    Ok(()) => progress = true,
                }
            }
        }
        self.retrying_spare.clear();
        progress
    }
}

/// Flags `member` (of `endpoint`) for `retry_parked`, once until it runs.
pub(super) fn flag_retry(retrying: &mut Vec<EndpointId>, endpoint: EndpointId, member: &mut MemberState) {
    if !std::mem::replace(&mut member.retry, true) {
        retrying.push(endpoint);
    }
}

/// Counts an action refused after it was queued (its caller had its `Ok`), and says so: the
/// first time and every 1,024th, so a flood is seen without flooding the log.
pub(crate) fn refused(stats: &mut RuntimeStats, error: &Error) {
    stats.actions_refused += 1;
    if stats.actions_refused % 1024 == 1 {
        tracing::warn!(%error, refused = stats.actions_refused, "an application action was refused after it was queued");
    }
}

/// Hands one action to the endpoint's current stack.
fn take(
    node: &mut Node,
    now: motet_core::Instant,
    member: &MemberState,
    op: &Op,
    stats: &mut RuntimeStats,
) -> Result<(), Error> {
    let action = match op {
        Op::Cast(data) => Action::Cast(payload(data)),
        Op::Send(to, data) => {
            let Some(view) = member.view.as_ref() else { return Err(Error::Api(ApiError::Blocked)) };
            let Some(rank) = view.rank_of(*to) else {
                stats.sends_to_departed += 1;
                return Ok(());
            };
            Action::send(rank, payload(data))
        }
        Op::Subcast(to, data) => {
            let Some(view) = member.view.as_ref() else { return Err(Error::Api(ApiError::Blocked)) };
            let ranks: Vec<Rank> = to.iter().filter_map(|&e| view.rank_of(e)).collect();
            stats.sends_to_departed += (to.len() - ranks.len()) as u64;
            Action::Subcast(ranks, payload(data))
        }
        Op::RoleCast(clients, data) => {
            let Some(view) = member.view.as_ref() else { return Err(Error::Api(ApiError::Blocked)) };
            Action::Subcast(view.ranks_where(*clients), payload(data))
        }
        Op::Leave => Action::Leave,
        Op::Switch(spec) => Action::Switch(spec.clone()),
        Op::XferChunk(view, ..) | Op::XferDone(view) if member.view.as_ref().is_none_or(|v| v.view_id != *view) => {
            stats.stale_xfer += 1;
            return Ok(());
        }
        Op::XferChunk(_, data, last) => Action::XferChunk { payload: payload(data), last: *last },
        Op::XferDone(_) => Action::XferDone,
        Op::Migrate(to) => Action::Migrate(Address::Inet(*to)),
    };
    node.handle_action(now, member.current, action).map_err(Error::from)
}

fn payload(data: &Bytes) -> Payload {
    Payload::from(data.clone())
}

/// A message larger than the member's view takes, refused before it is parked: the stack refuses
/// it when it takes it, but a parked one had already been answered `Ok`, and was then refused in
/// the loop and counted (`actions_refused`) where the application never heard of it (a review's
/// finding; the threaded `Handle` checks the same at the call).
fn too_large(member: &MemberState, op: &Op) -> Result<(), Error> {
    let (Some(view), size) = (&member.view, op.payload_len()) else { return Ok(()) };
    let max = view.params.appl.message_size_max_of(&view.stack);
    match size > max {
        true => Err(Error::Api(ApiError::TooLarge { size, max })),
        false => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refused chunk takes the rest of its transfer view's stream with it (the receivers must
    /// not install a state with a hole), and leaves the other actions, in order, and their counts.
    #[test]
    fn a_refused_chunk_drops_the_rest_of_its_stream_only() {
        let view = |ltime| motet_core::ViewId { ltime, coord: EndpointId(1) };
        let mut parked = Parked::default();
        parked.push_back(Op::XferChunk(view(3), Bytes::from_static(b"old"), true));
        parked.push_back(Op::XferChunk(view(4), Bytes::from_static(b"a"), false));
        parked.push_back(Op::XferDone(view(3)));
        parked.push_back(Op::XferChunk(view(4), Bytes::from_static(b"bc"), true));
        parked.push_back(Op::XferDone(view(4)));
        assert_eq!(parked.drop_xfer_view(view(4)), 3);
        assert_eq!(
            (parked.len(), parked.messages(), parked.bytes()),
            (2, 1, Op::XferChunk(view(3), Bytes::from_static(b"old"), true).weight())
        );
        assert!(matches!(parked.pop_front(), Some(Op::XferChunk(v, _, true)) if v == view(3)));
        assert!(matches!(parked.pop_front(), Some(Op::XferDone(v)) if v == view(3)));
    }

    /// A lot is full for its counted actions at its count or its bytes, whichever comes first,
    /// and still takes control actions beyond: a state-transfer lot bounds its chunks in bytes
    /// as a message lot does (it was bounded by count alone), and the end of a transfer queued
    /// behind full chunks is not refused.
    #[test]
    fn a_lot_is_full_at_its_count_or_its_bytes_and_control_actions_park_beyond() {
        let view = ViewId { ltime: 1, coord: EndpointId(0) };
        let chunk = |size: usize| Op::XferChunk(view, Bytes::from(vec![0u8; size]), false);
        let mut lot = Parked::default();
        // Bounded: were the bytes not bounded, 64 pushes would not fill it.
        for _ in 0..=64 {
            if lot.full_for(&chunk(1 << 20)) {
                break;
            }
            lot.push_back(chunk(1 << 20));
        }
        assert_eq!((lot.messages(), lot.bytes()), (64, PARKED_BYTES_MAX), "bounded by its bytes");
        assert!(!lot.full_for(&Op::XferDone(view)), "the end of the transfer parks beyond");
        lot.push_back(Op::XferDone(view));
        assert_eq!((lot.len(), lot.messages()), (65, 64), "a control action is not counted");

        let mut lot = Parked::default();
        while !lot.full_for(&Op::Cast(Bytes::new())) {
            lot.push_back(Op::Cast(Bytes::new()));
        }
        assert_eq!(lot.messages(), PARKED_MAX, "bounded by its count");
        assert!(!lot.full_for(&Op::Leave), "a leave parks beyond");
        assert_eq!(chunk(1).counted(), Some(Lot::Xfer));
        assert_eq!(Op::Cast(Bytes::new()).counted(), Some(Lot::Messages));
        assert_eq!(Op::XferDone(view).counted(), None);
    }

    /// The application's own small buffer is copied into a shared chunk (its first clone would
    /// allocate); data that is shared already, or static, keeps its buffer (a clone only counts
    /// a reference, and a copy would be work for nothing on every message a relay passes on).
    #[test]
    fn only_small_data_of_its_own_is_copied_into_a_chunk() {
        let mut chunks = Chunks::default();
        let at = |op: &Op| match op {
            Op::Cast(data) => data.as_ptr(),
            _ => unreachable!(),
        };
        let own = Bytes::from(vec![1u8; 64]);
        let own_at = own.as_ptr();
        let mut op = Op::Cast(own);
        op.copy_small(&mut chunks);
        assert_ne!(at(&op), own_at, "copied");
        // A message received (here: a slice of the chunk just copied into, still held).
        let Op::Cast(received) = &op else { unreachable!() };
        let received = received.clone();
        let mut relayed = Op::Cast(received.clone());
        relayed.copy_small(&mut chunks);
        assert_eq!(at(&relayed), received.as_ptr(), "shared: not copied again");
        let mut fixed = Op::Cast(Bytes::from_static(b"static"));
        fixed.copy_small(&mut chunks);
        assert_eq!(at(&fixed), b"static".as_ptr(), "static: not copied");
        let mut large = Op::Cast(Bytes::from(vec![2u8; crate::io::SMALL + 1]));
        let large_at = at(&large);
        large.copy_small(&mut chunks);
        assert_eq!(at(&large), large_at, "larger than small: not copied");
    }
}
