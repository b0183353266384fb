//! A table of per-destination state in slots, found by the slot used last, then through an index:
//! most sends go where the one before went (a peer's unicast, a round trip), and comparing an
//! address is a fraction of a search of an ordered map (about 55 instructions a send, measured on
//! a round trip). The packing buffers (`event_loop/send.rs`) and the connected send sockets
//! (`connected.rs`) keep theirs in one.

use std::collections::BTreeMap;
use std::net::SocketAddr;

/// Per-destination values in slots, with an index by address and the slot found last.
#[derive(Debug)]
pub(crate) struct AddrSlots<V> {
    slots: Vec<(SocketAddr, V)>,
    index: BTreeMap<SocketAddr, usize>,
    /// The slot found last (possibly out of range, or another address's since: checked).
    last: usize,
}

impl<V> Default for AddrSlots<V> {
    fn default() -> AddrSlots<V> {
        AddrSlots { slots: Vec::new(), index: BTreeMap::new(), last: 0 }
    }
}

impl<V> AddrSlots<V> {
    /// The slot of `to`, if it has one.
    #[inline]
    pub(crate) fn find(&mut self, to: SocketAddr) -> Option<usize> {
        match self.slots.get(self.last) {
            Some((at, _)) if *at == to => Some(self.last),
            _ => {
                let slot = *self.index.get(&to)?;
                self.last = slot;
                Some(slot)
            }
        }
    }

    /// A new slot for `to` (which has none), holding `value`.
    pub(crate) fn insert(&mut self, to: SocketAddr, value: V) -> usize {
        debug_assert!(!self.index.contains_key(&to), "one slot per destination");
        self.slots.push((to, value));
        let slot = self.slots.len() - 1;
        self.index.insert(to, slot);
        self.last = slot;
        slot
    }

    /// Forgets `to`'s slot: the last slot takes its place.
    pub(crate) fn remove(&mut self, to: SocketAddr) -> Option<V> {
        let slot = self.index.remove(&to)?;
        let (_, value) = self.slots.swap_remove(slot);
        if let Some((moved, _)) = self.slots.get(slot) {
            self.index.insert(*moved, slot);
        }
        Some(value)
    }

    pub(crate) fn clear(&mut self) {
        self.slots.clear();
        self.index.clear();
    }

    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &(SocketAddr, V)> {
        self.slots.iter()
    }
}

impl<V> std::ops::Index<usize> for AddrSlots<V> {
    type Output = (SocketAddr, V);

    fn index(&self, slot: usize) -> &(SocketAddr, V) {
        &self.slots[slot]
    }
}

impl<V> std::ops::IndexMut<usize> for AddrSlots<V> {
    fn index_mut(&mut self, slot: usize) -> &mut (SocketAddr, V) {
        &mut self.slots[slot]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A removed destination's slot is taken by the last one, which is still found there, by the
    /// last-used shortcut and through the index alike.
    #[test]
    fn a_removed_slot_is_taken_by_the_last_and_every_destination_is_found() {
        let to: Vec<SocketAddr> = (9..12).map(|port| SocketAddr::from(([127, 0, 0, 1], port))).collect();
        let mut slots = AddrSlots::default();
        for (k, &to) in to.iter().enumerate() {
            assert_eq!(slots.find(to), None);
            assert_eq!(slots.insert(to, k), k);
        }
        assert_eq!(slots.remove(to[0]), Some(0));
        assert_eq!(slots.remove(to[0]), None);
        assert_eq!(slots.len(), 2);
        for k in [2, 1, 2, 2] {
            let slot = slots.find(to[k]).expect("found");
            assert_eq!(slots[slot], (to[k], k));
        }
        assert_eq!(slots.find(to[0]), None);
        slots.clear();
        assert_eq!((slots.len(), slots.find(to[2])), (0, None));
    }
}
