//! The ordering oracles: total order, causal order (with the vector clock simulated casts carry)
//! and safe delivery.

use super::trace::TAG_LEN;
use super::{Channel, MsgId, Trace, ViewKey, Violation};
use std::collections::{BTreeMap, BTreeSet};

/// Total order: members that leave a view for the same next view delivered its casts in the same
/// sequence (virtual synchrony makes the sets equal; this checks the order); correct members that
/// stay in a view to the end delivered sequences of which one is a prefix of the other (equal once
/// the run went quiet). Across views this is the same order for members that survive together.
/// A member that crashed or was partitioned away is not held to the others' order (Ensemble's
/// total order is not uniform).
pub(super) fn check_total(
    trace: &Trace,
    checked: &BTreeSet<ViewKey>,
    successor: &BTreeMap<(usize, ViewKey), ViewKey>,
    correct: &dyn Fn(usize) -> bool,
    violations: &mut Vec<Violation>,
) {
    let mut sequences: BTreeMap<(usize, ViewKey), Vec<MsgId>> = BTreeMap::new();
    for d in trace.deliveries.iter().filter(|d| d.cast) {
        if let Some(id) = MsgId::parse(&d.payload) {
            sequences.entry((d.node, d.view)).or_default().push(id);
        }
    }
    let installed: BTreeSet<(usize, ViewKey)> = trace.views.iter().map(|v| (v.node, v.view)).collect();
    // Members grouped by (view, where they went next): `None` for correct members still in it. A
    // member that left the group (its stack ended) went nowhere and is not compared (see the
    // leaver note in `check_views`).
    let exited = |n: usize| trace.exited.get(n).copied().unwrap_or(false);
    let mut groups: BTreeMap<(ViewKey, Option<ViewKey>), Vec<usize>> = BTreeMap::new();
    let mut keys: BTreeSet<(usize, ViewKey)> = installed;
    keys.extend(sequences.keys().copied());
    for &(node, view) in &keys {
        match successor.get(&(node, view)) {
            Some(&next) => groups.entry((view, Some(next))).or_default().push(node),
            None if exited(node) => {}
            None if correct(node) => groups.entry((view, None)).or_default().push(node),
            None => {}
        }
    }
    let empty = Vec::new();
    for ((view, next), nodes) in groups {
        if !checked.contains(&view) {
            continue;
        }
        // Members still in the view at a run's time limit are held only to one sequence being a
        // prefix of the other, which does not carry from pair to pair: every pair is compared
        // (neighbours alone missed `[m1]`, `[]`, `[m2]`: a review's finding).
        let unequal = next.is_some() || trace.quiesced;
        let pairs = match unequal {
            true => trace.pairs(&nodes),
            false => Trace::every_pair(&nodes),
        };
        for (p, q) in pairs {
            // Both without what either's application discards (its own casts; one delivered
            // anyway is an `OwnCast` violation of its own).
            let owed = |id: &MsgId| !trace.discarded(p, *id) && !trace.discarded(q, *id);
            let seen = |at: usize| -> Vec<MsgId> {
                sequences.get(&(at, view)).unwrap_or(&empty).iter().copied().filter(owed).collect()
            };
            let (a, b) = (&seen(p), &seen(q));
            let common = a.len().min(b.len());
            let differs = (0..common).find(|&i| a[i] != b[i]);
            let position = differs.or((unequal && a.len() != b.len()).then_some(common));
            if let Some(position) = position {
                violations.push(Violation::TotalOrder { view, nodes: (p, q), position });
            }
        }
    }
}

/// The vector clock a simulated sender writes after a cast's tag: per origin node, how many of its
/// casts (index of the last delivered + 1) the sender had delivered: `u16` count, then `u32`s, LE.
pub fn encode_clock(clock: &[u32]) -> Vec<u8> {
    let mut out = (clock.len() as u16).to_le_bytes().to_vec();
    out.extend(clock.iter().flat_map(|c| c.to_le_bytes()));
    out
}

/// Reads the vector clock written by [`encode_clock`] after the tag.
pub fn decode_clock(payload: &[u8]) -> Option<Vec<u32>> {
    let rest = payload.get(TAG_LEN..)?;
    let n = usize::from(u16::from_le_bytes([*rest.first()?, *rest.get(1)?]));
    let entries = rest.get(2..2 + 4 * n)?;
    Some(entries.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

/// Causal order: when a node delivers cast `m` sent in view V, it has already delivered every
/// cast of V that `m`'s sender had delivered before casting `m` (read from the clock `m`
/// carries). Casts of earlier views are virtual synchrony's business (a member that joined later
/// never sees them).
pub(super) fn check_causal(
    trace: &Trace,
    checked: &BTreeSet<ViewKey>,
    sent_view: &BTreeMap<MsgId, ViewKey>,
    violations: &mut Vec<Violation>,
) {
    let mut delivered: BTreeSet<(usize, MsgId)> = BTreeSet::new();
    for d in trace.deliveries.iter().filter(|d| d.cast) {
        let Some(id) = MsgId::parse(&d.payload) else { continue };
        if let Some(clock) = decode_clock(&d.payload).filter(|_| checked.contains(&d.view)) {
            for (origin, &count) in clock.iter().enumerate() {
                let Some(index) = count.checked_sub(1) else { continue };
                let missing = MsgId { origin, channel: Channel::Cast, index };
                // Casts of one origin are delivered in FIFO order (checked elsewhere), so the
                // latest dependency on each origin stands for the earlier ones.
                // A node's own cast that its application discards was known there at its sending.
                let known = delivered.contains(&(d.node, missing)) || trace.discarded(d.node, missing);
                if sent_view.get(&missing) == Some(&d.view) && !known {
                    violations.push(Violation::Causal { id, node: d.node, missing });
                }
            }
        }
        delivered.insert((d.node, id));
    }
}

/// Safe delivery, as the application can observe it (extended virtual synchrony's "safe"): a cast
/// delivered before the view change begins (before `Block`) was held by every member of the view,
/// so if any member delivers it so in view V (and then crashes, or is cut off) every correct member
/// of V that goes on to a next view, or stays in V to the quiet end, delivers it in V too (uniform
/// agreement). Casts delivered during the view change are safe only among the members going on
/// together, which virtual synchrony already checks. Plain virtual synchrony does not give this: a
/// sender delivers its own cast at once and may crash before anyone else receives it.
pub(super) fn check_safe(
    trace: &Trace,
    checked: &BTreeSet<ViewKey>,
    successor: &BTreeMap<(usize, ViewKey), ViewKey>,
    correct: &dyn Fn(usize) -> bool,
    violations: &mut Vec<Violation>,
) {
    let mut anywhere: BTreeMap<ViewKey, BTreeSet<MsgId>> = BTreeMap::new();
    let mut at: BTreeSet<(usize, ViewKey, MsgId)> = BTreeSet::new();
    for d in trace.deliveries.iter().filter(|d| d.cast) {
        if let Some(id) = MsgId::parse(&d.payload) {
            if !d.blocked {
                anywhere.entry(d.view).or_default().insert(id);
            }
            at.insert((d.node, d.view, id));
        }
    }
    let installed: BTreeSet<(usize, ViewKey)> = trace.views.iter().map(|v| (v.node, v.view)).collect();
    for &(node, view) in &installed {
        let next = successor.contains_key(&(node, view));
        let went_on = next || trace.quiesced;
        // A member that asked to leave is exempt only in the view it left (its last): in every
        // view it went on from, it is held to the guarantee like the others.
        let left_here = !next && trace.left.get(node).copied().unwrap_or(false);
        // Correct in this view: it went on from it, or never crashed. A member that crashes views
        // later is held to this view's guarantee like the others (as `Lost` holds it); before,
        // any crash in the run exempted it in every view (a review's finding).
        if !(next || correct(node)) || left_here || !went_on || !checked.contains(&view) {
            continue;
        }
        for &id in anywhere.get(&view).into_iter().flatten() {
            if !at.contains(&(node, view, id)) && !trace.discarded(node, id) {
                violations.push(Violation::Safe { id, view, node });
            }
        }
    }
}
