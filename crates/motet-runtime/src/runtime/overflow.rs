//! A member's overflow in the threaded runtime: the events its full channel refused, waiting in
//! order, bounded in events and in payload bytes (see `LoopThread::dispatch`).

use crate::weighed::Weighed;
use crate::Event;

/// The most payload bytes a member's overflow holds before the last resort (one more message may
/// pass it): a stack without flow control could otherwise hold [`super::OVERFLOW_MIN`] messages
/// of any size, a megabyte each. With flow control and 1 KiB fragments, a 100-member group's
/// windows are about 56 MiB, then 12.5 MiB per half-second trickle. The member's own channel is bounded by `event_queue_bytes` too.
pub(super) const OVERFLOW_BYTES_MAX: usize = 64 << 20;

/// A member's overflow: its events in order, and the payload bytes they carry.
pub(super) type Overflow = Weighed<Event>;

impl Overflow {
    /// Holds `events` events or [`OVERFLOW_BYTES_MAX`] bytes: the next event waits (the loop's
    /// last resort).
    pub(super) fn is_full(&self, events: usize) -> bool {
        self.len() >= events || self.bytes() >= OVERFLOW_BYTES_MAX
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::OVERFLOW_MIN;
    use crate::EndpointId;

    /// An overflow is full at its count of events or at [`OVERFLOW_BYTES_MAX`] of payload,
    /// whichever comes first: 64 messages of 1 MiB fill it though far fewer than its count (a
    /// stack without flow control could otherwise hold 2^19 of them), and its bytes follow
    /// what leaves it.
    #[test]
    fn an_overflow_is_full_at_its_count_or_its_bytes() {
        let mut overflow = Overflow::default();
        let big = || Event::Cast { from: EndpointId(1), data: bytes::Bytes::from(vec![0u8; 1 << 20]) };
        for _ in 0..OVERFLOW_BYTES_MAX >> 20 {
            assert!(!overflow.is_full(OVERFLOW_MIN));
            overflow.push_back(big());
        }
        assert!(overflow.is_full(OVERFLOW_MIN), "{} events, {} bytes", overflow.len(), overflow.bytes());
        let first = overflow.pop_front().unwrap();
        assert!(!overflow.is_full(OVERFLOW_MIN));
        overflow.push_front(first);
        overflow.push_back(Event::Block);
        assert_eq!(overflow.bytes(), OVERFLOW_BYTES_MAX, "events without payload weigh nothing");
        while overflow.pop_front().is_some() {}
        assert_eq!(overflow.bytes(), 0);
        // State-transfer chunks weigh their bytes too.
        let view = motet_core::ViewId { ltime: 1, coord: EndpointId(1) };
        overflow.push_back(Event::XferChunk { view, data: bytes::Bytes::from(vec![0u8; 100]), last: true });
        assert_eq!(overflow.bytes(), 100);
        overflow.pop_front();
        assert_eq!(overflow.bytes(), 0);
        // The count alone, for small events.
        (0..3).for_each(|_| overflow.push_back(Event::Block));
        assert!(overflow.is_full(3) && !overflow.is_full(4));
    }
}
