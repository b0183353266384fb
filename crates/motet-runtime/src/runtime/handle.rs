//! [`Handle`]: what a member's application does (cast, send, leave, switch, transfer state),
//! checked against the latest view handed to it before it goes to the loop.

use super::{Command, MemberShared, Shared};
use crate::event_loop::{Lot, Op};
use crate::{Error, Event};
use bytes::Bytes;
use motet_core::{EndpointId, ViewId};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// What a member's handle checks actions against: the latest view the loop handed to the
/// application's channel (it may be ahead of the last `View` event taken).
#[derive(Debug)]
pub(super) struct Latest {
    id: ViewId,
    members: Vec<EndpointId>,
    /// This member's rank.
    rank: usize,
    /// A state-transfer view.
    xfer: bool,
    /// The view's stack, and whether it can switch (has `switch`).
    stack: String,
    switchable: bool,
    /// Clients in the view (the rest are servers).
    clients: usize,
}

impl Latest {
    pub(super) fn of(view: &crate::View) -> Latest {
        let switchable = motet_core::StackSpec::parse(&view.stack)
            .is_ok_and(|spec| spec.layers().contains(&motet_core::LayerKind::Switch));
        Latest {
            id: view.id,
            members: view.members.clone(),
            rank: view.rank,
            xfer: view.xfer,
            stack: view.stack.clone(),
            switchable,
            clients: view.clients.len(),
        }
    }
}

/// A cloneable, thread-safe handle to act as a member (cast, send, leave) from any thread.
#[derive(Clone)]
pub struct Handle {
    pub(super) endpoint: EndpointId,
    pub(super) shared: Arc<Shared>,
    pub(super) member: Arc<MemberShared>,
}

impl Handle {
    /// This endpoint's id (as it appears in views).
    pub fn id(&self) -> EndpointId {
        self.endpoint
    }

    /// Multicasts `data` to the current view. Returns once the command is in the loop's channel
    /// (a refusal the loop makes later, which the checks here leave rare, is counted in
    /// `RuntimeStats::actions_refused` and logged); the message goes out as soon as flow control
    /// and view changes allow (FIFO with this member's other casts). Blocks while `action_queue` actions wait for the loop (back-pressure). Refuses with
    /// `Error::QueueFull` while this member's messages parked at the loop are at their bound
    /// (65,536, or 64 MiB): take events (a member that lags holds its own casts back) and retry.
    pub fn cast(&self, data: impl Into<Bytes>) -> Result<(), Error> {
        let data = data.into();
        self.check(data.len())?;
        self.act_bounded(Op::Cast(data))
    }

    /// Like [`Handle::cast`], but never waits: while `action_queue` actions wait for the loop it
    /// refuses with `Error::QueueFull(Queue::Action)` (retry later: in async code, after yielding).
    pub fn try_cast(&self, data: impl Into<Bytes>) -> Result<(), Error> {
        let data = data.into();
        self.check(data.len())?;
        self.act_bounded_or(Op::Cast(data), false)
    }

    /// Sends `data` to member `to` of the current view. The view checked is the latest the loop
    /// handed to this member's channel, which may be ahead of the last `View` event taken: a
    /// member that event still names may already be gone (`NotMember`), and one a view still
    /// queued for the application drops is sent nothing (the loop counts it in
    /// `RuntimeStats::sends_to_departed`).
    pub fn send(&self, to: EndpointId, data: impl Into<Bytes>) -> Result<(), Error> {
        self.send_or(to, data.into(), true)
    }

    /// Like [`Handle::send`], but never waits: while `action_queue` actions wait for the loop it
    /// refuses with `Error::QueueFull(Queue::Action)`.
    pub fn try_send(&self, to: EndpointId, data: impl Into<Bytes>) -> Result<(), Error> {
        self.send_or(to, data.into(), false)
    }

    /// [`Handle::send`], waiting for room in `action_queue` or not.
    fn send_or(&self, to: EndpointId, data: Bytes, wait: bool) -> Result<(), Error> {
        self.check(data.len())?;
        let view = self.latest()?;
        if !view.members.contains(&to) {
            return Err(Error::NotMember(to));
        }
        self.act_bounded_or(Op::Send(to, data), wait)
    }

    /// [`Handle::try_cast`], waiting without blocking the thread while `action_queue` is full:
    /// the back-pressure of [`crate::AsyncMember::cast`].
    #[cfg(feature = "tokio")]
    pub(crate) async fn cast_when_room(&self, data: Bytes) -> Result<(), Error> {
        self.shared.when_room(|| self.try_cast(data.clone())).await
    }

    /// [`Handle::try_send`], waiting as [`Handle::cast_when_room`] does.
    #[cfg(feature = "tokio")]
    pub(crate) async fn send_when_room(&self, to: EndpointId, data: Bytes) -> Result<(), Error> {
        self.shared.when_room(|| self.try_send(to, data.clone())).await
    }

    /// Leaves the group gracefully: the others install a view without this endpoint, and the
    /// member then receives [`Event::Exit`].
    pub fn leave(&self) -> Result<(), Error> {
        self.leave_or(true)
    }

    /// [`Handle::leave`], waiting for room in `action_queue` or not (`QueueFull(Queue::Action)`).
    fn leave_or(&self, wait: bool) -> Result<(), Error> {
        // Marked before the request is queued, so that of two threads leaving at once one hears
        // `Left`. An action another thread checked just before this may still be queued behind
        // the leave, and is then refused in the loop (counted in `actions_refused`). A refusal
        // (a full queue among them) unmarks it: the leave may be asked again.
        if self.member.left.load(Ordering::SeqCst) || self.member.leaving.swap(true, Ordering::SeqCst) {
            return Err(Error::Left);
        }
        let command = Command::Act { endpoint: self.endpoint, op: Op::Leave };
        let result = match wait {
            true => self.shared.command(command),
            false => self.shared.try_command(command),
        };
        if result.is_err() {
            self.member.leaving.store(false, Ordering::SeqCst);
        }
        result
    }

    /// [`Handle::leave`], waiting without blocking the thread while `action_queue` is full.
    #[cfg(feature = "tokio")]
    pub(crate) async fn leave_when_room(&self) -> Result<(), Error> {
        self.shared.when_room(|| self.leave_or(false)).await
    }

    /// [`Handle::switch`], waiting without blocking the thread while `action_queue` is full.
    #[cfg(feature = "tokio")]
    pub(crate) async fn switch_when_room(&self, spec: &str) -> Result<(), Error> {
        self.shared.when_room(|| self.switch_or(spec, false)).await
    }

    /// Casts `data` to the members `to` of the current view only (a subcast): ordered with the
    /// stack's guarantee among all casts, delivered as a cast at those members. An endpoint not
    /// in the current view is refused with `Error::NotMember`, as `send` refuses it; members that
    /// leave the view between this call and the cast are skipped.
    pub fn subcast(&self, to: &[EndpointId], data: impl Into<Bytes>) -> Result<(), Error> {
        let data = data.into();
        self.check(data.len())?;
        let view = self.latest()?;
        if let Some(&stranger) = to.iter().find(|e| !view.members.contains(e)) {
            return Err(Error::NotMember(stranger));
        }
        // Refused here, where the caller hears of it, rather than in the loop. Duplicates are
        // counted out only for a list that long (no allocation for the usual subcast), and such a
        // list is parked without them: the list weighs against the parked actions' bound.
        let max = motet_core::layers::appl::SUBSET_MAX;
        let to = match to.len() > max {
            false => to.to_vec(),
            true => {
                let named: Vec<EndpointId> =
                    to.iter().copied().collect::<std::collections::BTreeSet<_>>().into_iter().collect();
                if named.len() > max {
                    return Err(Error::Api(motet_core::ApiError::SubsetTooLarge { members: named.len(), max }));
                }
                named
            }
        };
        self.act_bounded(Op::Subcast(to, data))
    }

    /// Casts `data` to the servers of the view only (client/server groups: members that joined
    /// with `GroupConfig::client(true)` do not get it), ordered like every cast.
    pub fn cast_to_servers(&self, data: impl Into<Bytes>) -> Result<(), Error> {
        self.role_cast(false, data.into())
    }

    /// Casts `data` to the clients of the view only, ordered like every cast.
    pub fn cast_to_clients(&self, data: impl Into<Bytes>) -> Result<(), Error> {
        self.role_cast(true, data.into())
    }

    /// A cast to the clients or the servers of the view: a subcast, so more than
    /// `SUBSET_MAX` of them is refused here, where the caller hears of it (the loop would refuse
    /// it after this returned `Ok`).
    fn role_cast(&self, clients: bool, data: Bytes) -> Result<(), Error> {
        self.check(data.len())?;
        if let Ok(view) = self.latest() {
            let members = if clients { view.clients } else { view.members.len() - view.clients };
            let max = motet_core::layers::appl::SUBSET_MAX;
            if members > max {
                return Err(Error::Api(motet_core::ApiError::SubsetTooLarge { members, max }));
            }
        }
        self.act_bounded(Op::RoleCast(clients, data))
    }

    /// The latest view handed to the application.
    fn latest(&self) -> Result<Arc<Latest>, Error> {
        // A poisoned lock means the loop panicked holding it: say so (`Failed`, with its cause),
        // not that the runtime was stopped (a review's finding).
        self.member.view.lock().map_err(|_| self.shared.gone())?.clone().ok_or(Error::NoView)
    }

    /// Asks the whole group to run stack `spec` from its next view on (protocol switching; both
    /// the current and the new stack need the `Switch` property). Watch `View::stack` for the
    /// change; a request made during a view change waits for it to end.
    pub fn switch(&self, spec: &str) -> Result<(), Error> {
        self.switch_or(spec, true)
    }

    /// [`Handle::switch`], waiting for room in `action_queue` or not (`QueueFull(Queue::Action)`).
    fn switch_or(&self, spec: &str, wait: bool) -> Result<(), Error> {
        let spec = crate::switch_target(spec)?;
        if self.member.left.load(Ordering::SeqCst) || self.member.leaving.load(Ordering::SeqCst) {
            return Err(Error::Left);
        }
        // The current stack must switch too: refused here, where the caller hears of it (the
        // loop refused it after this returned `Ok`, counted in `actions_refused`).
        if let Ok(view) = self.latest() {
            if !view.switchable {
                return Err(Error::Api(motet_core::ApiError::NoSwitch(format!("from `{}`", view.stack))));
            }
            if view.xfer && !spec.layers().contains(&motet_core::LayerKind::Xfer) {
                return Err(Error::Api(motet_core::ApiError::SwitchInTransfer(spec.to_string())));
            }
        }
        let command = Command::Act { endpoint: self.endpoint, op: Op::Switch(spec) };
        match wait {
            true => self.shared.command(command),
            false => self.shared.try_command(command),
        }
    }

    /// In a state-transfer view, at the provider (after `Event::XferProvide`): the next chunk of
    /// the application's state (at most `appl.message_size_max`; 64 KiB is a good size); mark
    /// the last one. `Error::Api(NotInTransfer)` once a later view has been handed to this member
    /// (or at a member that does not provide): that transfer is over, so stop sending it; the
    /// next view transfers again if it must. Blocks like `cast` under back-pressure; held while flow control blocks.
    /// Refuses with `Error::QueueFull` while this member's chunks held at the loop are at their
    /// bound (65,536, or 64 MiB; apart from its casts, which wait for the transfer's end): they
    /// go as the receivers acknowledge them, so wait a moment and retry.
    pub fn xfer_chunk(&self, view: ViewId, data: impl Into<Bytes>, last: bool) -> Result<(), Error> {
        let data = data.into();
        self.check(data.len())?;
        self.in_transfer(view, true)?;
        self.act_bounded(Op::XferChunk(view, data, last))
    }

    /// Refuses a state-transfer action for `view` unless it is the latest view handed to the
    /// application, a transfer view, and (for a chunk, `provider`) this member is its provider,
    /// rank 0. Such an action was dropped by the loop after the call returned `Ok` (counted in
    /// `stale_xfer` or `actions_refused`), and the transfer waited for a chunk that never came.
    fn in_transfer(&self, view: ViewId, provider: bool) -> Result<(), Error> {
        let latest = self.latest()?;
        if latest.id != view || !latest.xfer || (provider && latest.rank != 0) {
            return Err(Error::Api(motet_core::ApiError::NotInTransfer));
        }
        Ok(())
    }

    /// This member is done with the current view's state transfer (the provider after its last
    /// chunk, a receiver after installing the state): when every member is, the group moves to a
    /// normal view and held casts go. `Error::Api(NotInTransfer)` once a later view has been
    /// handed to this member: that transfer is over, and nothing needs saying.
    pub fn xfer_done(&self, view: ViewId) -> Result<(), Error> {
        self.check(0)?;
        self.in_transfer(view, false)?;
        self.shared.command(Command::Act { endpoint: self.endpoint, op: Op::XferDone(view) })
    }

    /// The members of the latest view handed to the application's channel, if any: it may be
    /// ahead of the last `View` event the application has taken.
    pub fn view(&self) -> Option<Vec<EndpointId>> {
        self.member.view.lock().ok()?.as_ref().map(|v| v.members.clone())
    }

    /// After the application took `event`: notes an exit, and wakes the loop if it waits for room.
    pub(crate) fn taken(&self, event: &Event) {
        if *event == Event::Exit {
            self.member.left.store(true, Ordering::SeqCst);
        }
        // Before the swap: a loop whose channel was full by its bytes either sees them gone on
        // its retry after its own swap, or is woken here.
        let size = event.payload_len();
        // Saturating: an event that reached the channel some other way than `offer` (none does)
        // must not wrap the count and leave the channel full for good.
        if size > 0 {
            let before = self
                .member
                .channel_bytes
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| Some(b.saturating_sub(size)));
            debug_assert!(before.is_ok_and(|b| b >= size), "an event taken that `offer` did not count");
        }
        if self.member.want_wake.swap(false, Ordering::SeqCst) {
            let _ = self.shared.waker.wake();
        }
    }

    /// Queues a message for the loop, unless this member's messages waiting there (parked for
    /// flow control or a view change, and those on their way) are at the loop's bound:
    /// `Error::QueueFull(Queue::Parked)`, which the application answers by taking its events
    /// (a member that lags holds its own casts back) and trying again. Refused here, the
    /// application knows; past the bound the loop would refuse the message after `cast` had
    /// returned, and it would be lost. Not blocking at that bound (an application that casts and
    /// reads its events on one thread would wait for itself); a full `action_queue` is waited
    /// for (the loop takes commands even when it cannot take events).
    fn act_bounded(&self, op: Op) -> Result<(), Error> {
        self.act_bounded_or(op, true)
    }

    /// [`Handle::act_bounded`]; without `wait`, a full `action_queue` is `QueueFull`, not a wait.
    fn act_bounded_or(&self, op: Op, wait: bool) -> Result<(), Error> {
        let member = &self.member;
        let command = |op| match wait {
            true => self.shared.command(Command::Act { endpoint: self.endpoint, op }),
            false => self.shared.try_command(Command::Act { endpoint: self.endpoint, op }),
        };
        let Some(lot) = op.counted() else { return command(op) };
        let (counted, size) = (member.lot(lot), op.weight());
        if !counted.reserve(size) {
            // A stopping runtime too: its loop takes no more actions, and `QueueFull` would have
            // the application retry for the whole grace period (a review's finding).
            let stopping = self.shared.stopped.load(Ordering::SeqCst) || self.shared.stopping.load(Ordering::SeqCst);
            return Err(if stopping {
                self.shared.gone()
            } else if member.forgotten.load(Ordering::SeqCst) {
                Error::Left
            } else {
                Error::QueueFull(match lot {
                    Lot::Messages => crate::Queue::Parked,
                    Lot::Xfer => crate::Queue::ParkedTransfer,
                })
            });
        }
        let result = command(op);
        if result.is_err() {
            counted.handled(size);
        }
        result
    }

    pub(crate) fn has_left(&self) -> bool {
        self.member.left.load(Ordering::SeqCst)
    }

    fn check(&self, size: usize) -> Result<(), Error> {
        if self.member.left.load(Ordering::SeqCst) || self.member.leaving.load(Ordering::SeqCst) {
            return Err(Error::Left);
        }
        let max = self.member.message_size_max.load(Ordering::Relaxed);
        if size > max {
            return Err(Error::Api(motet_core::ApiError::TooLarge { size, max }));
        }
        Ok(())
    }
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle").field("endpoint", &self.endpoint).finish_non_exhaustive()
    }
}
