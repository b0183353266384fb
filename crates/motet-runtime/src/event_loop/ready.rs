//! The events waiting for the application, in order, with the payload bytes they carry: the loop
//! stops reading the network and parks the process's own actions once either reaches its bound
//! (`RuntimeConfig::event_queue`, `RuntimeConfig::event_queue_bytes`).

use crate::config::RuntimeConfig;
use crate::weighed::Weighed;
use crate::Event;
use motet_core::EndpointId;

pub(super) type Ready = Weighed<(EndpointId, Event)>;

impl Ready {
    /// The application is behind on its events: `event_queue` of them wait, or
    /// `event_queue_bytes` of payload (with `events` more of `bytes` about to come: the events of
    /// parked actions taken in one pass, collected after it). The loop then stops reading the
    /// network and parks the process's own actions until the application has taken half
    /// ([`Ready::half_free`]).
    #[inline]
    pub(super) fn full(&self, events: usize, bytes: usize, config: &RuntimeConfig) -> bool {
        self.len() + events >= config.event_queue || self.bytes() + bytes >= config.event_queue_bytes
    }

    /// Half of both bounds is free again, or nothing waits at all (bounds of 1): parked actions
    /// may go.
    pub(super) fn half_free(&self, config: &RuntimeConfig) -> bool {
        self.is_empty() || (self.len() <= config.event_queue / 2 && self.bytes() <= config.event_queue_bytes / 2)
    }
}
