//! Oracles: the guarantees of the stack, checked globally over the trace of a run (STYLE
//! principle 11). They know nothing of the protocol's internals: they read what the application
//! saw and what the layers still hold at the end.
//!
//! - **exactly once at every correct destination**: every cast from a correct (never crashed)
//!   sender is delivered once at every correct node, the sender included unless its application
//!   discards its own casts (then never there); every send from a correct sender to a correct
//!   destination is delivered once there;
//! - **per-sender FIFO**: on each channel (origin → node, casts; origin → dest, sends) the
//!   delivered messages are exactly the first k sent, in order, for some k;
//! - **no creation**: everything delivered was sent, by the origin it is attributed to, on the
//!   channel it arrived on;
//! - **integrity**: delivered bytes equal sent bytes;
//! - **quiescence**: the run went quiet before its time limit, and then every retransmission,
//!   reordering and flow-control buffer of every live node is empty.

use std::collections::{BTreeMap, BTreeSet};

mod ordering;
mod trace;
mod views;
use ordering::{check_causal, check_safe, check_total};
pub use ordering::{decode_clock, encode_clock};
pub use trace::{Channel, Delivery, Guarantees, Installed, MsgId, Sent, Trace, Transfer, ViewKey, Violation};
use views::{check_views, successors};

/// A stable 64-bit digest of bytes (BLAKE3, truncated).
pub fn digest(bytes: &[u8]) -> u64 {
    let hash = blake3::hash(bytes);
    u64::from_le_bytes(hash.as_bytes()[..8].try_into().expect("8 bytes"))
}

/// Runs every oracle over `trace`.
pub fn check(trace: &Trace) -> Vec<Violation> {
    let mut violations = Vec::new();
    let sent: BTreeMap<MsgId, u64> = trace.sent.iter().map(|s| (s.id, s.digest)).collect();
    let sent_view: BTreeMap<MsgId, ViewKey> = trace.sent.iter().map(|s| (s.id, s.view)).collect();
    let correct = |node: usize| trace.crashed.get(node).is_some_and(Option::is_none);

    // No creation, integrity, no duplication, FIFO: one pass over the deliveries.
    // FIFO per view: what a member delivers from a sender in view V is a prefix, in order, of what
    // the sender sent in V (with one static view: of everything it sent).
    let mut sent_in_view: BTreeMap<(usize, Channel, ViewKey), Vec<u32>> = BTreeMap::new();
    for s in &trace.sent {
        sent_in_view.entry((s.id.origin, s.id.channel, s.view)).or_default().push(s.id.index);
    }
    let mut next: BTreeMap<(usize, usize, Channel, ViewKey), usize> = BTreeMap::new();
    let mut delivered: BTreeSet<(usize, MsgId)> = BTreeSet::new();
    for d in &trace.deliveries {
        let Some(id) = MsgId::parse(&d.payload) else {
            violations.push(Violation::Created {
                node: d.node,
                detail: format!("untagged payload of {} B", d.payload.len()),
            });
            continue;
        };
        let Some(&expected_digest) = sent.get(&id) else {
            violations.push(Violation::Created { node: d.node, detail: format!("{id:?} was never sent") });
            continue;
        };
        let channel_ok = match id.channel {
            Channel::Cast => d.cast,
            Channel::Send { dest } => !d.cast && dest == d.node,
        };
        if id.origin != d.origin || !channel_ok {
            let detail = format!("{id:?} delivered as {} from {}", if d.cast { "cast" } else { "send" }, d.origin);
            violations.push(Violation::Created { node: d.node, detail });
            continue;
        }
        if digest(&d.payload) != expected_digest {
            violations.push(Violation::Corrupt { id, node: d.node });
        }
        if sent_view.get(&id) != Some(&d.view) {
            violations.push(Violation::SendingView { id, node: d.node });
        }
        if trace.discarded(d.node, id) {
            violations.push(Violation::OwnCast { id, node: d.node });
        }
        if !delivered.insert((d.node, id)) {
            violations.push(Violation::Duplicate { id, node: d.node });
            continue;
        }
        let position = next.entry((d.node, id.origin, id.channel, d.view)).or_insert(0);
        let in_view = sent_in_view.get(&(id.origin, id.channel, d.view)).map(Vec::as_slice).unwrap_or(&[]);
        match in_view.get(*position) {
            Some(&expected) if expected == id.index => *position += 1,
            Some(&expected) => {
                violations.push(Violation::Fifo { id, node: d.node, expected });
                *position = in_view.iter().position(|&i| i == id.index).map_or(*position, |p| p + 1);
            }
            None => violations.push(Violation::Fifo { id, node: d.node, expected: u32::MAX }),
        }
    }

    // Exactly once at every correct destination that goes on with the sender (at-most-once was
    // checked above): a message sent in view V must reach every correct member of V that leaves V
    // for the same next view as the sender, or stays in V to the end with it.
    let successor = successors(trace);
    let members: BTreeMap<ViewKey, &Vec<usize>> = trace.views.iter().map(|v| (v.view, &v.members)).collect();
    // Correct in view V: it went on to a next view, or never crashed (a restarted process is a
    // new node). A member that crashes views later is held to V's guarantees like any other:
    // the guarantee is per view.
    let correct_in = |node: usize, view: ViewKey| successor.contains_key(&(node, view)) || correct(node);
    for s in &trace.sent {
        if !correct_in(s.id.origin, s.view) {
            continue;
        }
        let next = successor.get(&(s.id.origin, s.view));
        // Leaving the view by exiting (a leaver) is not going on together: the leaver's deliveries
        // are held to those of the members of its round's next view (`check_views`).
        let exited = |n: usize| trace.exited.get(n).copied().unwrap_or(false);
        let mut check_at = |node: usize| {
            let in_view = members.get(&s.view).is_none_or(|m| m.contains(&node));
            let together =
                successor.get(&(node, s.view)) == next && (next.is_some() || !exited(node) && !exited(s.id.origin));
            let owed = !trace.discarded(node, s.id);
            if correct_in(node, s.view) && in_view && together && owed && !delivered.contains(&(node, s.id)) {
                violations.push(Violation::Lost { id: s.id, node });
            }
        };
        match s.id.channel {
            Channel::Cast => (0..trace.nodes).for_each(&mut check_at),
            Channel::Send { dest } => check_at(dest),
        }
    }
    check_views(trace, &successor, &mut violations);
    let mut guarantees: BTreeMap<ViewKey, Guarantees> = BTreeMap::new();
    for v in &trace.views {
        let g = guarantees.entry(v.view).or_default();
        g.total |= trace.total || v.guarantees.total;
        g.causal |= trace.causal || v.guarantees.causal;
        g.safe |= trace.safe || v.guarantees.safe;
    }
    let views = |f: fn(&Guarantees) -> bool| -> BTreeSet<ViewKey> {
        guarantees.iter().filter(|(_, g)| f(g)).map(|(&v, _)| v).collect()
    };
    check_total(trace, &views(|g| g.total), &successor, &correct, &mut violations);
    check_causal(trace, &views(|g| g.causal), &sent_view, &mut violations);
    check_safe(trace, &views(|g| g.safe), &successor, &correct, &mut violations);
    // State transfer: what a receiver installed is exactly what its view's provider streamed (its
    // state at the view's start, after the previous views' cuts).
    let provided: BTreeMap<ViewKey, u64> =
        trace.transfers.iter().filter(|t| t.provided).map(|t| (t.view, t.digest)).collect();
    for t in trace.transfers.iter().filter(|t| !t.provided) {
        if provided.get(&t.view) != Some(&t.digest) {
            violations.push(Violation::StateTransfer { view: t.view, node: t.node });
        }
    }
    check_transfer_views(trace, &successor, &mut violations);

    // Quiescence.
    if !trace.quiesced {
        violations.push(Violation::Liveness { detail: "the run did not go quiet before its time limit".into() });
    }
    for (node, layers) in trace.buffered.iter().enumerate() {
        for &(layer, held) in layers {
            if held > 0 {
                violations.push(Violation::NotQuiescent { node, layer, held });
            }
        }
    }
    violations
}

/// The rules of a state-transfer view beyond the bytes (docs/ordering.md, "State transfer"): its
/// rank 0 provides, and nobody else; the application's casts wait for the next view, so none is
/// delivered in it; and a member that goes on from it to a normal view with others has installed
/// the state (a transfer view that ends before every member is done is followed by another,
/// unless a member goes on alone, keeping the state it had).
fn check_transfer_views(
    trace: &Trace,
    successor: &BTreeMap<(usize, ViewKey), ViewKey>,
    violations: &mut Vec<Violation>,
) {
    let views: BTreeMap<ViewKey, &Installed> = trace.views.iter().map(|v| (v.view, v)).collect();
    let transfer = |view: &ViewKey| views.get(view).is_some_and(|v| v.xfer);
    let broke = |view, node, broke| Violation::TransferRule { view, node, broke };
    let mut providers: BTreeMap<ViewKey, usize> = BTreeMap::new();
    for t in trace.transfers.iter().filter(|t| t.provided) {
        if views.get(&t.view).is_some_and(|v| v.members.first() != Some(&t.node)) {
            violations.push(broke(t.view, t.node, "a member other than rank 0 provided"));
        }
        if providers.get(&t.view).is_some_and(|&other| other != t.node) {
            violations.push(broke(t.view, t.node, "two members provided"));
        }
        providers.entry(t.view).or_insert(t.node);
    }
    for d in trace.deliveries.iter().filter(|d| d.cast && transfer(&d.view)) {
        violations.push(broke(d.view, d.node, "an application cast was delivered in it"));
    }
    let installed: BTreeSet<(ViewKey, usize)> =
        trace.transfers.iter().filter(|t| !t.provided).map(|t| (t.view, t.node)).collect();
    for v in trace.views.iter().filter(|v| v.xfer && v.members.first() != Some(&v.node)) {
        let Some(next) = successor.get(&(v.node, v.view)).and_then(|next| views.get(next)) else { continue };
        if !next.xfer && next.members.len() > 1 && !installed.contains(&(v.view, v.node)) {
            violations.push(broke(v.view, v.node, "it went on to a normal view with others without the state"));
        }
    }
}

#[cfg(test)]
mod tests;
