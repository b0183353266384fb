//! The membership oracles: view agreement, consistent view order, virtual synchrony, primary
//! partition, and the live members' convergence on one final view.

use super::{MsgId, Trace, ViewKey, Violation};
use std::collections::{BTreeMap, BTreeSet};

/// For each (node, view it installed): the view it installed next, if any.
pub(super) fn successors(trace: &Trace) -> BTreeMap<(usize, ViewKey), ViewKey> {
    let mut last: BTreeMap<usize, ViewKey> = BTreeMap::new();
    let mut next = BTreeMap::new();
    for v in &trace.views {
        if let Some(previous) = last.insert(v.node, v.view) {
            next.insert((v.node, previous), v.view);
        }
    }
    next
}

/// The membership oracles: view agreement, consistent order, virtual synchrony, and (when the run
/// quiesced) that the live members end in one common view, or, for a group that cannot merge
/// after a fault (`Trace::splits`), each in a view agreed by its members, all correct.
pub(super) fn check_views(
    trace: &Trace,
    successor: &BTreeMap<(usize, ViewKey), ViewKey>,
    violations: &mut Vec<Violation>,
) {
    // View agreement: one membership, one stack and one address per member, per view id.
    let mut membership: BTreeMap<ViewKey, &Vec<usize>> = BTreeMap::new();
    let mut stacks: BTreeMap<ViewKey, (&String, &Vec<u32>, bool)> = BTreeMap::new();
    for v in &trace.views {
        let members_differ = membership.insert(v.view, &v.members).is_some_and(|previous| previous != &v.members);
        // The primary flag too: every member computes it alike (docs/membership.md, `primary`).
        let config = (&v.stack, &v.addresses, v.primary);
        let stacks_differ = stacks.insert(v.view, config).is_some_and(|previous| previous != config);
        if members_differ || stacks_differ {
            violations.push(Violation::ViewAgreement { view: v.view });
        }
    }
    // Consistent order: strictly increasing logical time per member. That is also all of "no two
    // members install two views in opposite orders": two views a member installs both have
    // different logical times, in the same order at every member (a pairwise check of it, which
    // could never fire on its own, was removed on a review's finding).
    let mut order: BTreeMap<usize, Vec<ViewKey>> = BTreeMap::new();
    for v in &trace.views {
        let seq = order.entry(v.node).or_default();
        if seq.last().is_some_and(|last| last.0 >= v.view.0) {
            violations
                .push(Violation::ViewOrder { node: v.node, detail: format!("{:?} after {:?}", v.view, seq.last()) });
        }
        seq.push(v.view);
    }
    // Virtual synchrony: members moving from V to the same V' delivered the same casts in V (but
    // for a member's own casts, where its application discards them).
    let mut casts_in: BTreeMap<(usize, ViewKey), BTreeSet<MsgId>> = BTreeMap::new();
    for d in trace.deliveries.iter().filter(|d| d.cast) {
        if let Some(id) = MsgId::parse(&d.payload) {
            casts_in.entry((d.node, d.view)).or_default().insert(id);
        }
    }
    let empty = BTreeSet::new();
    let mut groups: BTreeMap<(ViewKey, ViewKey), Vec<usize>> = BTreeMap::new();
    for (&(node, from), &to) in successor {
        groups.entry((from, to)).or_default().push(node);
    }
    // A leaver (its stack ended in its last view, with no next view) is not checked here: which
    // next view its round led to (its partition's) is not in the trace, and with partitions a
    // leaver may rightly have delivered what no member that went on did. Recording it (the next
    // view id a leaver's round cast) would let this check hold leavers to their round.
    for ((from, _), nodes) in groups {
        for (a, b) in trace.pairs(&nodes) {
            // Both without what either's application discards (its own casts; one delivered
            // anyway is an `OwnCast` violation of its own).
            let owed = |id: &MsgId| !trace.discarded(a, *id) && !trace.discarded(b, *id);
            let seen = |at: usize| -> BTreeSet<MsgId> {
                casts_in.get(&(at, from)).unwrap_or(&empty).iter().copied().filter(owed).collect()
            };
            if seen(a) != seen(b) {
                violations.push(Violation::VirtualSynchrony { view: from, nodes: (a, b) });
            }
        }
    }
    // Primary partition: the primary views form one chain of descent (no two concurrent primaries).
    let mut descendants: BTreeMap<ViewKey, BTreeSet<ViewKey>> = BTreeMap::new();
    for (&(_, from), &to) in successor {
        descendants.entry(from).or_default().insert(to);
    }
    let reaches = |a: ViewKey, b: ViewKey| {
        let mut stack = vec![a];
        let mut seen = BTreeSet::new();
        while let Some(v) = stack.pop() {
            if v == b {
                return true;
            }
            if seen.insert(v) {
                stack.extend(descendants.get(&v).into_iter().flatten().copied());
            }
        }
        false
    };
    let primaries: BTreeSet<ViewKey> = trace.views.iter().filter(|v| v.primary).map(|v| v.view).collect();
    for &a in &primaries {
        for &b in primaries.range((std::ops::Bound::Excluded(a), std::ops::Bound::Unbounded)) {
            if !reaches(a, b) && !reaches(b, a) {
                violations.push(Violation::Primary { views: (a, b) });
            }
        }
    }
    // And each primary view that follows others holds a majority of a primary one it follows
    // (docs/membership.md: a view of one partition keeps a majority of its primary previous view;
    // a merged view, of the granter's, whose survivors are those of its view in the merged one).
    // A view nobody came to from another is a group's first.
    let mut predecessors: BTreeMap<ViewKey, BTreeSet<ViewKey>> = BTreeMap::new();
    for (&(_, from), &to) in successor {
        predecessors.entry(to).or_default().insert(from);
    }
    for &v in &primaries {
        let Some(before) = predecessors.get(&v) else { continue };
        let held = |p: &ViewKey| {
            let (Some(members), Some(previous)) = (membership.get(&v), membership.get(p)) else { return false };
            primaries.contains(p) && 2 * previous.iter().filter(|m| members.contains(m)).count() > previous.len()
        };
        if !before.iter().any(held) {
            violations.push(Violation::PrimaryWithoutMajority { view: v });
        }
    }
    // Liveness of membership: a quiet run ends with the correct members in one view of exactly
    // them, and every correct member that asked to leave has left (its stack ended).
    if trace.membership && trace.quiesced {
        let asked = |n: usize| trace.left.get(n).copied().unwrap_or(false);
        let alive = |n: usize| trace.crashed.get(n).is_some_and(Option::is_none);
        for n in (0..trace.nodes).filter(|&n| alive(n) && asked(n)) {
            if !trace.exited.get(n).copied().unwrap_or(true) {
                violations.push(Violation::Liveness { detail: format!("node {n} asked to leave and never left") });
            }
        }
        let stayed = |n: usize| alive(n) && !asked(n);
        let correct: Vec<usize> = (0..trace.nodes).filter(|&n| stayed(n)).collect();
        let finals: BTreeSet<ViewKey> =
            correct.iter().filter_map(|n| order.get(n).and_then(|s| s.last().copied())).collect();
        let same_members = |m: &Vec<usize>| {
            let mut m = m.clone();
            m.sort_unstable();
            m == correct
        };
        // Nothing to agree on when every member left or crashed.
        let agreed = match trace.splits {
            // Each correct member's final view holds correct members only, each ending in it.
            true => correct.iter().all(|n| {
                let last = |n: &usize| order.get(n).and_then(|s| s.last().copied());
                let Some(view) = last(n) else { return false };
                membership.get(&view).is_some_and(|m| m.iter().all(|m| correct.contains(m) && last(m) == Some(view)))
            }),
            false => {
                correct.is_empty()
                    || finals.len() == 1
                        && membership.get(finals.iter().next().unwrap()).is_some_and(|m| same_members(m))
            }
        };
        if !agreed {
            violations
                .push(Violation::Liveness { detail: format!("correct members {correct:?} end in views {finals:?}") });
        }
        // Migration: a member that moved ends in a view that has it at its new address.
        let mut moved: BTreeMap<usize, u32> = BTreeMap::new();
        moved.extend(trace.migrations.iter().copied());
        for (node, address) in moved.into_iter().filter(|&(n, _)| stayed(n)) {
            let last = trace.views.iter().rev().find(|v| v.node == node);
            let at =
                last.and_then(|v| v.members.iter().position(|&m| m == node).and_then(|r| v.addresses.get(r).copied()));
            if at != Some(address) {
                violations.push(Violation::Migration { node, address });
            }
        }
    }
}
