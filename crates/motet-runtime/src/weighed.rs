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
        Some(item)
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
}
