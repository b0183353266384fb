//! [`AsyncMember`]: a member whose events are an async stream (feature `tokio`).

use crate::runtime::{Handle, Unlistened};
use crate::{Error, Event};
use bytes::Bytes;
use motet_core::EndpointId;
use std::pin::Pin;
use std::task::{Context, Poll};

/// One endpoint in one group, for async code: `recv().await` or use it as a
/// [`futures_core::Stream`] of events (ending after [`Event::Exit`]). `cast(..).await` and
/// `send(..).await` wait for room in the loop's action queue without blocking the thread.
/// Dropping it leaves the group.
pub struct AsyncMember {
    handle: Handle,
    events: tokio::sync::mpsc::Receiver<Event>,
    /// Last, so that it drops after `events` (`runtime::Unlistened`).
    _unlistened: Unlistened,
}

impl AsyncMember {
    pub(crate) fn new(handle: Handle, events: tokio::sync::mpsc::Receiver<Event>) -> AsyncMember {
        let unlistened = Unlistened(handle.clone());
        AsyncMember { handle, events, _unlistened: unlistened }
    }

    /// A handle for acting from other tasks or threads.
    pub fn handle(&self) -> Handle {
        self.handle.clone()
    }

    /// This endpoint's id.
    pub fn id(&self) -> EndpointId {
        self.handle.id()
    }

    /// Casts `data` to the group (see [`Handle::cast`]), waiting without blocking the thread
    /// while the loop's action queue is full: back-pressure, as `tokio::sync::mpsc::Sender::send`
    /// gives, so a task that casts faster than the loop takes its casts waits here. Other errors
    /// are returned at once, `QueueFull(Queue::Parked)` among them, as the blocking `cast` returns
    /// it: 65,536 messages (or 64 MiB) parked behind flow control, a view change, or this
    /// member's own events not taken; take events, then retry.
    pub async fn cast(&self, data: impl Into<Bytes>) -> Result<(), Error> {
        self.handle.cast_when_room(data.into()).await
    }

    /// See [`Handle::try_cast`]: never waits; `Error::QueueFull` when [`AsyncMember::cast`] would.
    pub fn try_cast(&self, data: impl Into<Bytes>) -> Result<(), Error> {
        self.handle.try_cast(data)
    }

    /// Sends `data` to member `to` (see [`Handle::send`]), waiting as [`AsyncMember::cast`] does.
    pub async fn send(&self, to: EndpointId, data: impl Into<Bytes>) -> Result<(), Error> {
        self.handle.send_when_room(to, data.into()).await
    }

    /// See [`Handle::try_send`]: never waits.
    pub fn try_send(&self, to: EndpointId, data: impl Into<Bytes>) -> Result<(), Error> {
        self.handle.try_send(to, data)
    }

    /// Leaves the group (see [`Handle::leave`]), waiting as [`AsyncMember::cast`] does while
    /// the loop's action queue is full.
    pub async fn leave(&self) -> Result<(), Error> {
        self.handle.leave_when_room().await
    }

    /// Asks the group to switch stacks (see [`Handle::switch`]), waiting as
    /// [`AsyncMember::cast`] does while the loop's action queue is full.
    pub async fn switch(&self, spec: &str) -> Result<(), Error> {
        self.handle.switch_when_room(spec).await
    }

    /// The next event; `None` after [`Event::Exit`] or when the runtime stopped.
    pub async fn recv(&mut self) -> Option<Event> {
        let event = self.events.recv().await?;
        self.handle.taken(&event);
        Some(event)
    }
}

impl futures_core::Stream for AsyncMember {
    type Item = Event;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        let this = &mut *self;
        match this.events.poll_recv(cx) {
            Poll::Ready(Some(event)) => {
                this.handle.taken(&event);
                Poll::Ready(Some(event))
            }
            other => other,
        }
    }
}

/// Ended once the loop has let go of the member's channel and every event in it was taken: a
/// `futures::select!` may then skip it, without `.fuse()`.
impl futures_core::FusedStream for AsyncMember {
    fn is_terminated(&self) -> bool {
        self.events.is_closed() && self.events.is_empty()
    }
}

impl Drop for AsyncMember {
    fn drop(&mut self) {
        if !self.handle.has_left() {
            let _ = self.handle.leave();
        }
    }
}

impl std::fmt::Debug for AsyncMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncMember").field("endpoint", &self.handle.id()).finish_non_exhaustive()
    }
}
