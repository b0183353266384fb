//! [`AsyncMember`]: a member whose events are an async stream (feature `tokio`).

use crate::runtime::{Handle, Unlistened};
use crate::{Error, Event};
use bytes::Bytes;
use motet_core::EndpointId;
use std::pin::Pin;
use std::task::{Context, Poll};

/// One endpoint in one group, for async code: `recv().await` or use it as a
/// [`futures_core::Stream`] of events (ending after [`Event::Exit`]). Casting never blocks for
/// long: it only waits while the loop's bounded action queue is full. Dropping it leaves the group.
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

    /// See [`Handle::cast`] (which waits while `action_queue` is full: see [`Handle::try_cast`]).
    pub fn cast(&self, data: impl Into<Bytes>) -> Result<(), Error> {
        self.handle.cast(data)
    }

    /// See [`Handle::try_cast`]: never blocks the async thread.
    pub fn try_cast(&self, data: impl Into<Bytes>) -> Result<(), Error> {
        self.handle.try_cast(data)
    }

    /// See [`Handle::send`].
    pub fn send(&self, to: EndpointId, data: impl Into<Bytes>) -> Result<(), Error> {
        self.handle.send(to, data)
    }

    /// See [`Handle::leave`].
    pub fn leave(&self) -> Result<(), Error> {
        self.handle.leave()
    }

    /// See [`Handle::switch`].
    pub fn switch(&self, spec: &str) -> Result<(), Error> {
        self.handle.switch(spec)
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
