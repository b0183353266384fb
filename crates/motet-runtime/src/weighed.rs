//! A queue in order that keeps the payload bytes of what it holds: the runtime's queues are
//! bounded in bytes as well as in count (the loop's events for the application, a member's
//! overflow, an endpoint's parked actions).

use crate::event_loop::Op;
use crate::Event;
use motet_core::EndpointId;
use std::collections::VecDeque;

/// What an item of a [`Weighed`] queue weighs: the payload bytes it carries.
pub(crate) trait Weigh {
    fn weight(&self) -> usize;
}

impl Weigh for Event {
    fn weight(&self) -> usize {
        self.payload_len()
    }
}

impl Weigh for (EndpointId, Event) {
    fn weight(&self) -> usize {
        self.1.payload_len()
    }
}

impl Weigh for Op {
    fn weight(&self) -> usize {
        Op::weight(self)
    }
}

/// Slots an empty queue keeps; beyond, it gives its room back (a queue that fills and empties
/// past this again pays one allocation per 4,096 items).
const KEPT_MAX: usize = 4096;

/// Items in order, and the bytes they weigh together.
#[derive(Debug)]
pub(crate) struct Weighed<T> {
    items: VecDeque<T>,
    bytes: usize,
}

impl<T> Default for Weighed<T> {
    fn default() -> Weighed<T> {
        Weighed { items: VecDeque::new(), bytes: 0 }
    }
}

impl<T: Weigh> Weighed<T> {
    #[inline]
    pub(crate) fn push_back(&mut self, item: T) {
        self.bytes += item.weight();
        self.items.push_back(item);
    }

    pub(crate) fn push_front(&mut self, item: T) {
        self.bytes += item.weight();
        self.items.push_front(item);
    }

    #[inline]
    pub(crate) fn pop_front(&mut self) -> Option<T> {
        let item = self.items.pop_front()?;
        self.bytes -= item.weight();
        if self.items.is_empty() && self.items.capacity() > KEPT_MAX {
            self.release();
        }
        Some(item)
    }

    /// Gives back the room of a queue that grew past [`KEPT_MAX`] and is empty again: a member
    /// that lagged once to its overflow's bound (2^19 events or more, 56 B each) otherwise held
    /// that room for the rest of its life (a review's finding).
    #[cold]
    fn release(&mut self) {
        self.items = VecDeque::new();
    }

    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    pub(crate) fn clear(&mut self) {
        self.items.clear();
        self.bytes = 0;
        if self.items.capacity() > KEPT_MAX {
            self.release();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A parked subcast weighs its list of members as well as its payload: a payload of one byte
    /// to 1,024 members holds 8 KiB, and the parked actions' bound in bytes must see it (found by
    /// a review: 65,536 such subcasts held 512 MiB under a bound of 64 MiB).
    #[test]
    fn a_subcast_weighs_its_list_of_members() {
        let to: Vec<EndpointId> = (0..1024).map(EndpointId).collect();
        let mut parked = Weighed::default();
        parked.push_back(Op::Subcast(to, bytes::Bytes::from_static(b"x")));
        parked.push_back(Op::Cast(bytes::Bytes::from_static(b"yz")));
        assert_eq!(parked.bytes(), 1 + 1024 * 8 + 2);
    }

    /// A queue that grew large gives its room back once empty; a small one keeps it.
    #[test]
    fn an_emptied_queue_gives_back_the_room_it_grew_to() {
        let mut queue = Weighed::default();
        for n in [100, 100_000] {
            for _ in 0..n {
                queue.push_back(Event::Block);
            }
            let grown = queue.items.capacity();
            while queue.pop_front().is_some() {}
            let kept = queue.items.capacity();
            match n > KEPT_MAX {
                true => assert!(kept <= KEPT_MAX, "{grown} slots kept as {kept}"),
                false => assert_eq!(kept, grown),
            }
        }
    }
}
