//! Which endpoint each stack serves, and its view: a table by the stack's slot in the node.
//! Every delivered message looks its stack up here; an ordered map's search was about 60
//! instructions of a round trip.

use motet_core::{EndpointId, StackId, ViewState};
use std::sync::Arc;

/// The owners of the node's stacks, by [`StackId::slot`].
#[derive(Default)]
pub(super) struct Owners {
    slots: Vec<Option<(StackId, EndpointId, Arc<ViewState>)>>,
    /// Turns with a view change or an exit since the last [`Owners::retain`].
    changes: usize,
}

impl Owners {
    /// The endpoint `stack` serves and its view, if it is known (an exited stack stays known
    /// until [`Owners::retain`] drops it, so its last events are still translated).
    #[inline]
    pub(super) fn get(&self, stack: StackId) -> Option<(EndpointId, &Arc<ViewState>)> {
        match self.slots.get(stack.slot()) {
            Some(Some((id, endpoint, view))) if *id == stack => Some((*endpoint, view)),
            _ => None,
        }
    }

    /// `stack` serves `endpoint`, in `view` (replacing what its slot held).
    pub(super) fn insert(&mut self, stack: StackId, endpoint: EndpointId, view: Arc<ViewState>) {
        let slot = stack.slot();
        if slot >= self.slots.len() {
            self.slots.resize_with(slot + 1, || None);
        }
        self.slots[slot] = Some((stack, endpoint, view));
    }

    /// A turn changed views or ended a stack: whether it is time to drop the entries of stacks
    /// that are gone ([`Owners::retain`]). Once every eighth of the table's size: the walk costs
    /// O(1) a view change over time, where it walked every stack of the process at each (a
    /// review's finding: 10^5 groups, each view change a walk of them all). A gone stack's entry
    /// is never taken for another's ([`Owners::get`] compares whole ids); kept a while, it only
    /// holds its last view.
    pub(super) fn changed(&mut self) -> bool {
        self.changes += 1;
        if self.changes.saturating_mul(8) < self.slots.len() {
            return false;
        }
        self.changes = 0;
        true
    }

    /// Keeps the stacks for which `keep` holds.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(StackId) -> bool) {
        for slot in &mut self.slots {
            if slot.as_ref().is_some_and(|(id, ..)| !keep(*id)) {
                *slot = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use motet_core::{Address, GroupName, Instant, Node, StackConfig, StackSpec};

    /// A stack is found by its whole id: a later stack in the same slot is not taken for it.
    #[test]
    fn a_stack_is_found_by_its_id_not_by_its_slot() {
        let view = Arc::new(ViewState::initial(
            GroupName::new("owners"),
            StackSpec::parse("fifo").unwrap(),
            StackConfig::default(),
            vec![EndpointId(7)],
            vec![Address::Sim(0)],
        ));
        let mut node = Node::new();
        let first = node.join(Instant::ZERO, Arc::clone(&view), 0).unwrap();
        let mut owners = Owners::default();
        assert!(owners.get(first).is_none());
        owners.insert(first, EndpointId(7), Arc::clone(&view));
        assert_eq!(owners.get(first).map(|(e, _)| e), Some(EndpointId(7)));
        node.remove(first);
        let second = node.join(Instant::ZERO, Arc::clone(&view), 0).unwrap();
        assert_eq!(second.slot(), first.slot(), "the slot is reused");
        assert!(owners.get(second).is_none(), "another stack in the same slot");
        owners.insert(second, EndpointId(8), view);
        assert!(owners.get(first).is_none());
        owners.retain(|id| id != second);
        assert!(owners.get(second).is_none());
    }

    /// With a table of 80 slots, the gone stacks' entries are dropped at every tenth turn that
    /// changed views, not at each.
    #[test]
    fn gone_stacks_are_dropped_once_in_a_while() {
        let mut owners = Owners { slots: (0..80).map(|_| None).collect(), changes: 0 };
        let due: Vec<bool> = (0..20).map(|_| owners.changed()).collect();
        assert_eq!(due.iter().filter(|&&d| d).count(), 2, "{due:?}");
        assert!(due[9] && due[19]);
        let mut small = Owners::default();
        assert!(small.changed() && small.changed(), "a small table, at each");
    }
}
