//! The oracles' tests: hand-built traces, correct and with each guarantee broken, run through
//! [`check`].

use super::*;
use bytes::Bytes;
use motet_core::Instant;

/// A correct trace of 3 nodes: each casts twice, node 0 sends once to node 1.
fn good() -> Trace {
    let mut trace = Trace {
        nodes: 3,
        crashed: vec![None; 3],
        quiesced: true,
        buffered: vec![vec![("mnak", 0)]; 3],
        ..Trace::default()
    };
    let mut ids = Vec::new();
    for origin in 0..3 {
        for index in 0..2 {
            ids.push(MsgId { origin, channel: Channel::Cast, index });
        }
    }
    ids.push(MsgId { origin: 0, channel: Channel::Send { dest: 1 }, index: 0 });
    for id in ids {
        let mut bytes = id.tag().to_vec();
        bytes.extend_from_slice(b"payload");
        let payload = Bytes::from(bytes);
        trace.sent.push(Sent { id, time: Instant::ZERO, digest: digest(&payload), view: (0, 0) });
        let nodes: Vec<usize> = match id.channel {
            Channel::Cast => (0..3).collect(),
            Channel::Send { dest } => vec![dest],
        };
        for node in nodes {
            let cast = id.channel == Channel::Cast;
            trace.deliveries.push(Delivery {
                time: Instant::ZERO,
                node,
                origin: id.origin,
                cast,
                payload: payload.clone(),
                view: (0, 0),
                blocked: false,
            });
        }
    }
    for node in 0..3 {
        trace.views.push(installed(node, (0, 0), vec![0, 1, 2]));
    }
    trace
}

fn installed(node: usize, view: ViewKey, members: Vec<usize>) -> Installed {
    Installed {
        time: Instant::ZERO,
        node,
        view,
        primary: true,
        guarantees: Guarantees::default(),
        stack: String::new(),
        addresses: members.iter().map(|&m| m as u32).collect(),
        members,
        xfer: false,
    }
}

#[test]
fn a_migration_the_final_view_lacks_is_caught() {
    let mut trace = with_view_change();
    trace.quiesced = true;
    trace.migrations.push((1, 1 << 20));
    assert_eq!(check(&trace), vec![Violation::Migration { node: 1, address: 1 << 20 }]);
    // The same when the final view has it.
    for v in trace.views.iter_mut().filter(|v| v.view == (1, 7)) {
        v.addresses[1] = 1 << 20;
    }
    assert_eq!(check(&trace), vec![]);
    // Two members disagreeing on an address in one view break view agreement.
    trace.views.last_mut().unwrap().addresses[0] = 5;
    assert_eq!(check(&trace), vec![Violation::ViewAgreement { view: (1, 7) }]);
}

/// `good()` plus a second view (1, 7) of members 0 and 1, after node 2 crashed.
fn with_view_change() -> Trace {
    let mut trace = good();
    trace.membership = true;
    trace.crashed[2] = Some(Instant::ZERO);
    trace.views.push(installed(0, (1, 7), vec![0, 1]));
    trace.views.push(installed(1, (1, 7), vec![0, 1]));
    trace
}

#[test]
fn a_correct_view_change_passes() {
    assert_eq!(check(&with_view_change()), vec![]);
}

#[test]
fn catches_disagreement_on_a_views_members() {
    let mut trace = with_view_change();
    trace.views[4].members = vec![0, 1, 2];
    assert!(check(&trace).iter().any(|v| matches!(v, Violation::ViewAgreement { view: (1, 7) })));
}

#[test]
fn catches_members_of_one_view_running_different_stacks() {
    let mut trace = with_view_change();
    trace.views.iter_mut().filter(|v| v.view == (1, 7)).for_each(|v| v.stack = "vsync".into());
    assert_eq!(check(&trace), vec![]);
    trace.views.iter_mut().find(|v| v.view == (1, 7)).unwrap().stack = "total".into();
    assert!(check(&trace).contains(&Violation::ViewAgreement { view: (1, 7) }));
}

#[test]
fn catches_views_installed_out_of_order() {
    let mut trace = with_view_change();
    trace.views.push(installed(1, (1, 3), vec![1]));
    assert!(check(&trace).iter().any(|v| matches!(v, Violation::ViewOrder { node: 1, .. })));
    // Two members installing the same two views in opposite orders.
    let mut trace = good();
    trace.views.push(installed(0, (1, 1), vec![0, 1]));
    trace.views.push(installed(0, (2, 2), vec![0, 1]));
    trace.views.push(installed(1, (2, 2), vec![0, 1]));
    trace.views.push(installed(1, (1, 1), vec![0, 1]));
    assert!(check(&trace).iter().any(|v| matches!(v, Violation::ViewOrder { .. })));
}

#[test]
fn catches_a_virtual_synchrony_violation() {
    let mut trace = with_view_change();
    // Node 1 moves on to the next view without a cast that node 0 delivered in the old one.
    trace.deliveries.retain(|d| !(d.node == 1 && d.origin == 2 && d.cast));
    let violations = check(&trace);
    assert!(violations.contains(&Violation::VirtualSynchrony { view: (0, 0), nodes: (0, 1) }), "{violations:?}");
}

#[test]
fn catches_delivery_outside_the_sending_view() {
    let mut trace = with_view_change();
    trace.deliveries[0].view = (1, 7);
    assert!(check(&trace).iter().any(|v| matches!(v, Violation::SendingView { node: 0, .. })));
}

#[test]
fn catches_two_concurrent_primary_views() {
    let mut trace = good();
    // A partition: {0, 1} and {2} both claim to be primary.
    trace.views.push(installed(0, (1, 0), vec![0, 1]));
    trace.views.push(installed(1, (1, 0), vec![0, 1]));
    trace.views.push(installed(2, (1, 2), vec![2]));
    let violations = check(&trace);
    assert!(violations.contains(&Violation::Primary { views: ((1, 0), (1, 2)) }), "{violations:?}");
    // The minority marked non-primary is fine.
    trace.views.last_mut().unwrap().primary = false;
    assert!(!check(&trace).iter().any(|v| matches!(v, Violation::Primary { .. })));
}

/// A primary view must hold a majority of the primary view it follows: the minority of a split
/// marked primary (and the majority not) is caught, though the primary views still form a chain;
/// and members that disagree on a view's primary flag break view agreement.
#[test]
fn catches_a_primary_view_without_a_majority_and_a_disputed_flag() {
    let mut trace = good();
    let mut majority = [installed(0, (1, 0), vec![0, 1]), installed(1, (1, 0), vec![0, 1])];
    majority.iter_mut().for_each(|v| v.primary = false);
    trace.views.extend(majority);
    trace.views.push(installed(2, (1, 2), vec![2]));
    let violations = check(&trace);
    assert!(violations.contains(&Violation::PrimaryWithoutMajority { view: (1, 2) }), "{violations:?}");
    assert!(!violations.iter().any(|v| matches!(v, Violation::Primary { .. })), "one chain: {violations:?}");
    // The majority primary and the minority not: fine.
    let mut trace = good();
    trace.views.extend([installed(0, (1, 0), vec![0, 1]), installed(1, (1, 0), vec![0, 1])]);
    let mut alone = installed(2, (1, 2), vec![2]);
    alone.primary = false;
    trace.views.push(alone);
    assert!(!check(&trace).iter().any(|v| matches!(v, Violation::PrimaryWithoutMajority { .. })));
    // One member of (1, 0) thinks it primary, the other not.
    trace.views[4].primary = false;
    assert!(check(&trace).contains(&Violation::ViewAgreement { view: (1, 0) }));
}

#[test]
fn catches_members_that_never_converge() {
    let mut trace = with_view_change();
    trace.views.pop(); // node 1 never installs the common view
    let violations = check(&trace);
    assert!(violations.iter().any(|v| matches!(v, Violation::Liveness { .. })), "{violations:?}");
}

/// A stack without `Heal` may end split (`splits`): each correct member's final view must then
/// hold correct members only, each ending in it. Two views of the correct members pass there and
/// fail where the group must merge; a final view that still holds a crashed member, or one that
/// a member of it has left for another, fails either way.
#[test]
fn a_stack_that_cannot_merge_may_end_split_but_not_stuck() {
    let mut split = with_view_change();
    split.crashed[2] = None;
    split.views.truncate(3);
    split.views.push(installed(0, (1, 7), vec![0]));
    split.views.push(installed(1, (1, 8), vec![1, 2]));
    split.views.push(installed(2, (1, 8), vec![1, 2]));
    split.views[3..].iter_mut().for_each(|v| v.primary = false); // neither has a majority's say
    let liveness = |trace: &Trace| check(trace).iter().filter(|v| matches!(v, Violation::Liveness { .. })).count();
    assert_eq!(liveness(&split), 1, "a group that must merge");
    split.splits = true;
    assert_eq!(check(&split), vec![]);
    // Node 2 crashed, and a view of a live member still holds it.
    let mut stuck = split.clone();
    stuck.crashed[2] = Some(Instant::ZERO);
    stuck.views.pop();
    assert_eq!(liveness(&stuck), 1, "{:?}", check(&stuck));
    // Node 2 went on to a view of its own: node 1's final view is no longer node 2's.
    let mut left_behind = split.clone();
    left_behind.views.push(Installed { primary: false, ..installed(2, (2, 9), vec![2]) });
    assert_eq!(liveness(&left_behind), 1, "{:?}", check(&left_behind));
}

/// Swaps, at `node`, its delivery of origin 0's last cast with origin 1's first cast (each
/// origin's FIFO order is kept; only the total order changes, from position 1).
fn swap_first_casts(trace: &mut Trace, node: usize) {
    let is = |d: &Delivery, origin| d.node == node && d.cast && d.origin == origin;
    let i = trace.deliveries.iter().rposition(|d| is(d, 0)).unwrap();
    let j = trace.deliveries.iter().position(|d| is(d, 1)).unwrap();
    trace.deliveries.swap(i, j);
}

/// A run that hit its time limit holds members still in a view only to one's sequence being a
/// prefix of the other's; that does not carry from pair to pair, so neighbours alone are not
/// enough: `[m1]`, `[]`, `[m2]` passed (a review's finding).
#[test]
fn catches_casts_in_different_orders_at_members_apart_in_an_unfinished_run() {
    let mut trace = good();
    trace.total = true;
    trace.quiesced = false;
    let first = |origin| MsgId { origin, channel: Channel::Cast, index: 0 };
    let keep = |d: &Delivery| match d.node {
        0 => MsgId::parse(&d.payload) == Some(first(0)),
        2 => MsgId::parse(&d.payload) == Some(first(1)),
        _ => false,
    };
    trace.deliveries.retain(|d| !d.cast || keep(d));
    let violations = check(&trace);
    assert!(violations.iter().any(|v| matches!(v, Violation::TotalOrder { nodes: (0, 2), .. })), "{violations:?}");
}

#[test]
fn catches_casts_delivered_in_different_orders() {
    let mut trace = good();
    trace.total = true;
    assert_eq!(check(&trace), vec![]);
    swap_first_casts(&mut trace, 1);
    assert_eq!(
        check(&trace),
        vec![
            Violation::TotalOrder { view: (0, 0), nodes: (0, 1), position: 1 },
            Violation::TotalOrder { view: (0, 0), nodes: (1, 2), position: 1 }
        ]
    );
    // Without total order asked for, FIFO alone holds and nothing is reported.
    trace.total = false;
    assert_eq!(check(&trace), vec![]);
    // Members that go on together to the next view are held to one order too.
    let mut trace = with_view_change();
    trace.total = true;
    swap_first_casts(&mut trace, 0);
    assert!(check(&trace).iter().any(|v| matches!(v, Violation::TotalOrder { nodes: (0, 1), .. })));
    // A member that crashed is not (the order is not uniform).
    let mut trace = with_view_change();
    trace.total = true;
    swap_first_casts(&mut trace, 2);
    assert!(!check(&trace).iter().any(|v| matches!(v, Violation::TotalOrder { .. })));
    // A member that stopped short of the others (a prefix) is caught once the run is quiet.
    let mut trace = good();
    trace.total = true;
    let last = trace.deliveries.iter().rposition(|d| d.node == 2 && d.cast).unwrap();
    trace.deliveries.remove(last);
    assert!(check(&trace).iter().any(|v| matches!(v, Violation::TotalOrder { nodes: (1, 2), position: 5, .. })));
}

/// Node 0 casts a question; node 1 delivers it and casts an answer (its clock says so); node
/// 2 delivers both, in `order`.
fn question_and_answer(order: [usize; 2]) -> Trace {
    let mut trace = Trace {
        nodes: 3,
        crashed: vec![None; 3],
        quiesced: true,
        causal: true,
        views: (0..3).map(|n| installed(n, (0, 0), vec![0, 1, 2])).collect(),
        ..Trace::default()
    };
    let question = MsgId { origin: 0, channel: Channel::Cast, index: 0 };
    let answer = MsgId { origin: 1, channel: Channel::Cast, index: 0 };
    let payload = |id: MsgId, clock: &[u32]| {
        let mut bytes = id.tag().to_vec();
        bytes.extend(encode_clock(clock));
        Bytes::from(bytes)
    };
    let msgs = [(question, payload(question, &[])), (answer, payload(answer, &[1, 0, 0]))];
    for (id, bytes) in &msgs {
        trace.sent.push(Sent { id: *id, time: Instant::ZERO, digest: digest(bytes), view: (0, 0) });
    }
    let deliver = |node, (id, payload): &(MsgId, Bytes)| Delivery {
        time: Instant::ZERO,
        node,
        origin: id.origin,
        cast: true,
        payload: payload.clone(),
        view: (0, 0),
        blocked: false,
    };
    trace.deliveries.push(deliver(0, &msgs[0]));
    trace.deliveries.push(deliver(1, &msgs[0]));
    trace.deliveries.push(deliver(1, &msgs[1]));
    trace.deliveries.push(deliver(0, &msgs[1]));
    for i in order {
        trace.deliveries.push(deliver(2, &msgs[i]));
    }
    trace
}

#[test]
fn catches_an_answer_delivered_before_its_question() {
    assert_eq!(check(&question_and_answer([0, 1])), vec![]);
    let question = MsgId { origin: 0, channel: Channel::Cast, index: 0 };
    let answer = MsgId { origin: 1, channel: Channel::Cast, index: 0 };
    assert_eq!(check(&question_and_answer([1, 0])), vec![Violation::Causal { id: answer, node: 2, missing: question }]);
    // Without causal order asked for, nothing is reported.
    let mut trace = question_and_answer([1, 0]);
    trace.causal = false;
    assert_eq!(check(&trace), vec![]);
    let mut bytes = question.tag().to_vec();
    bytes.extend(encode_clock(&[3, 0, 7]));
    assert_eq!(decode_clock(&bytes), Some(vec![3, 0, 7]));
}

#[test]
fn catches_a_cast_delivered_by_a_crashed_member_only() {
    let mut trace = with_view_change();
    trace.safe = true;
    assert_eq!(check(&trace), vec![]);
    // Node 2 delivered its own last cast and crashed; no survivor ever delivers it. Virtual
    // synchrony and exactly-once allow this (the sender crashed); safe delivery does not.
    let last = MsgId { origin: 2, channel: Channel::Cast, index: 1 };
    trace.deliveries.retain(|d| d.node == 2 || MsgId::parse(&d.payload) != Some(last));
    let violations = check(&trace);
    assert_eq!(
        violations,
        vec![Violation::Safe { id: last, view: (0, 0), node: 0 }, Violation::Safe { id: last, view: (0, 0), node: 1 }]
    );
    // A member that asks to leave in a later view is held to it in the views it went on from
    // (before, asking to leave at any time exempted it in every view).
    let (left, exited) = (trace.left.clone(), trace.exited.clone());
    (trace.left, trace.exited) = (vec![true, false, false], vec![true, false, false]);
    assert!(check(&trace).contains(&Violation::Safe { id: last, view: (0, 0), node: 0 }), "{:?}", check(&trace));
    (trace.left, trace.exited) = (left, exited);
    // So is a member that crashes in a later view (before, any crash in the run exempted it in
    // every view: a review's finding).
    trace.crashed[1] = Some(Instant::ZERO);
    assert!(check(&trace).contains(&Violation::Safe { id: last, view: (0, 0), node: 1 }), "{:?}", check(&trace));
    trace.crashed[1] = None;
    // Delivered during the view change (after `Block`), it is safe only among the survivors.
    trace.safe = true;
    trace.deliveries.iter_mut().filter(|d| d.node == 2).for_each(|d| d.blocked = true);
    assert_eq!(check(&trace), vec![]);
    trace.safe = false;
    trace.deliveries.iter_mut().for_each(|d| d.blocked = false);
    assert_eq!(check(&trace), vec![]);
}

#[test]
fn catches_a_state_transfer_that_installs_other_bytes() {
    let mut trace = good();
    let t = |node, provided, digest| Transfer { view: (1, 9), node, provided, digest };
    trace.transfers = vec![t(0, true, 7), t(1, false, 7), t(2, false, 7)];
    assert_eq!(check(&trace), vec![]);
    trace.transfers[2].digest = 8;
    assert_eq!(check(&trace), vec![Violation::StateTransfer { view: (1, 9), node: 2 }]);
    // A receiver in a view whose provider streamed nothing installed something from nowhere.
    trace.transfers.remove(0);
    assert_eq!(check(&trace).len(), 2);
}

#[test]
fn a_correct_trace_passes() {
    assert_eq!(check(&good()), vec![]);
}

#[test]
fn catches_a_lost_delivery() {
    let mut trace = good();
    trace.deliveries.remove(4); // origin 0 index 1 at node 1
    assert!(matches!(check(&trace)[..], [Violation::Lost { node: 1, .. }]), "{:?}", check(&trace));
}

/// A member that crashes views later is held to the earlier views' guarantees: here nodes 0 and
/// 1 go on together from (0, 0) to (1, 7), then node 0 crashes; node 1 never delivered node 0's
/// send of (0, 0). Before, a crash at any time exempted the member in every view, and this passed.
#[test]
fn a_member_that_crashes_later_is_held_to_the_views_it_went_on_from() {
    let mut trace = with_view_change();
    assert_eq!(check(&trace), vec![]);
    trace.crashed[0] = Some(Instant::ZERO); // after (1, 7), its last view
    let send = MsgId { origin: 0, channel: Channel::Send { dest: 1 }, index: 0 };
    trace.deliveries.retain(|d| MsgId::parse(&d.payload) != Some(send));
    assert!(check(&trace).contains(&Violation::Lost { id: send, node: 1 }), "{:?}", check(&trace));
}

#[test]
fn a_crashed_sender_need_not_be_delivered_but_a_crashed_receiver_is_excused_too() {
    let mut trace = good();
    trace.deliveries.retain(|d| !(d.origin == 2 && d.node == 0));
    // The crashed node also misses another's casts, as a receiver.
    trace.deliveries.retain(|d| !(d.origin == 0 && d.node == 2));
    trace.crashed[2] = Some(Instant::ZERO);
    assert_eq!(check(&trace), vec![]);
    // The control: the same trace with node 2 correct loses casts at node 2.
    trace.crashed[2] = None;
    let violations = check(&trace);
    assert!(violations.iter().any(|v| matches!(v, Violation::Lost { node: 2, .. })), "{violations:?}");
}

#[test]
fn catches_a_duplicate() {
    let mut trace = good();
    let again = trace.deliveries[0].clone();
    trace.deliveries.push(again);
    assert!(matches!(check(&trace)[..], [Violation::Duplicate { node: 0, .. }]));
}

#[test]
fn catches_reordering() {
    let mut trace = good();
    // Deliveries 0..3 are origin 0 index 0 at nodes 0,1,2; 3..6 are index 1.
    trace.deliveries.swap(0, 3);
    let violations = check(&trace);
    assert!(violations.iter().any(|v| matches!(v, Violation::Fifo { node: 0, expected: 0, .. })), "{violations:?}");
}

#[test]
fn catches_creation_and_misattribution() {
    let mut trace = good();
    let mut forged = trace.deliveries[0].clone();
    forged.payload = Bytes::from_static(b"never sent by anyone");
    trace.deliveries.push(forged);
    let mut misattributed = trace.deliveries[0].clone();
    misattributed.origin = 2;
    trace.deliveries[0] = misattributed;
    let violations = check(&trace);
    assert_eq!(violations.iter().filter(|v| matches!(v, Violation::Created { .. })).count(), 2, "{violations:?}");
}

#[test]
fn catches_a_send_delivered_at_the_wrong_node_or_as_a_cast() {
    let mut trace = good();
    let send = trace.deliveries.iter_mut().find(|d| !d.cast).expect("one send");
    send.node = 2;
    assert!(check(&trace).iter().any(|v| matches!(v, Violation::Created { node: 2, .. })));
}

#[test]
fn catches_corruption() {
    let mut trace = good();
    let mut bytes = trace.deliveries[1].payload.to_vec();
    *bytes.last_mut().unwrap() ^= 1;
    trace.deliveries[1].payload = Bytes::from(bytes);
    assert!(matches!(check(&trace)[..], [Violation::Corrupt { node: 1, .. }]));
}

#[test]
fn catches_buffers_left_after_quiescence_and_lack_of_quiescence() {
    let mut trace = good();
    trace.buffered[2] = vec![("pt2pt", 3)];
    trace.quiesced = false;
    let violations = check(&trace);
    assert!(violations.contains(&Violation::NotQuiescent { node: 2, layer: "pt2pt", held: 3 }));
    assert!(violations.iter().any(|v| matches!(v, Violation::Liveness { .. })));
}

/// `trace` with node `node`'s application discarding its own casts: its deliveries of them gone.
fn discarding_own_casts(mut trace: Trace, node: usize) -> Trace {
    trace.no_loopback = (0..trace.nodes).map(|n| n == node).collect();
    trace.deliveries.retain(|d| !(d.node == node && d.cast && d.origin == node));
    trace
}

#[test]
fn a_member_that_discards_its_own_casts_is_held_to_everything_else() {
    // Every guarantee checked, across a view change: nothing is missing but its own casts.
    let mut trace = discarding_own_casts(with_view_change(), 1);
    (trace.total, trace.causal, trace.safe) = (true, true, true);
    assert_eq!(check(&trace), vec![]);
    // The same trace with the setting off: its own casts are lost there.
    let mut taken_back = trace.clone();
    taken_back.no_loopback.clear();
    let own = MsgId { origin: 1, channel: Channel::Cast, index: 0 };
    assert!(check(&taken_back).contains(&Violation::Lost { id: own, node: 1 }));
    // Delivering one of them is caught.
    let mut delivered = trace.clone();
    let at_zero = trace.deliveries.iter().find(|d| d.node == 0 && d.origin == 1 && d.cast).unwrap().clone();
    delivered.deliveries.push(Delivery { node: 1, ..at_zero });
    assert_eq!(check(&delivered), vec![Violation::OwnCast { id: own, node: 1 }]);
    // Missing another's cast is still caught, by virtual synchrony and total order too.
    let mut missing = trace.clone();
    missing.deliveries.retain(|d| !(d.node == 1 && d.origin == 0 && d.cast));
    let violations = check(&missing);
    let other = MsgId { origin: 0, channel: Channel::Cast, index: 0 };
    assert!(violations.contains(&Violation::Lost { id: other, node: 1 }), "{violations:?}");
    assert!(violations.contains(&Violation::VirtualSynchrony { view: (0, 0), nodes: (0, 1) }), "{violations:?}");
    assert!(violations.iter().any(|v| matches!(v, Violation::TotalOrder { .. })), "{violations:?}");
}

/// A member that discards its own casts, between two that disagree on them: every pair is
/// compared (a comparison leaving out the middle member's casts does not carry from pair to
/// pair).
#[test]
fn members_on_either_side_of_one_that_discards_its_casts_are_compared() {
    let mut trace = discarding_own_casts(good(), 1);
    trace.membership = true;
    trace.total = true;
    for node in 0..3 {
        trace.views.push(installed(node, (1, 7), vec![0, 1, 2]));
    }
    assert_eq!(check(&trace), vec![]);
    // Node 2 moves on without node 1's first cast, which node 0 delivered.
    let c1 = MsgId { origin: 1, channel: Channel::Cast, index: 0 };
    let mut missing = trace.clone();
    missing.deliveries.retain(|d| !(d.node == 2 && MsgId::parse(&d.payload) == Some(c1)));
    let violations = check(&missing);
    assert!(violations.contains(&Violation::VirtualSynchrony { view: (0, 0), nodes: (0, 2) }), "{violations:?}");
    // Node 2 delivers node 1's casts in another order than node 0 (both delivered).
    let mut swapped = trace.clone();
    let at_two: Vec<usize> = (0..swapped.deliveries.len())
        .filter(|&i| swapped.deliveries[i].node == 2 && swapped.deliveries[i].origin == 1)
        .collect();
    swapped.deliveries.swap(at_two[0], at_two[1]);
    let violations = check(&swapped);
    assert!(violations.iter().any(|v| matches!(v, Violation::TotalOrder { nodes: (0, 2), .. })), "{violations:?}");
}

/// The ordering oracles switched on the way real runs switch them: by the guarantees of the view
/// a member installed (`Installed::guarantees`, from the view's stack), not by the trace's global
/// flags, which only hand-built traces set. A view's guarantee holds its own deliveries to it,
/// and only its own.
#[test]
fn a_views_own_guarantees_switch_the_ordering_oracles_on_for_that_view() {
    let mark = |trace: &mut Trace, view: ViewKey, set: fn(&mut Guarantees)| {
        trace.views.iter_mut().filter(|v| v.view == view).for_each(|v| set(&mut v.guarantees));
    };
    // Total order: casts swapped at node 1 in view (0, 0).
    let mut trace = good();
    swap_first_casts(&mut trace, 1);
    assert_eq!(check(&trace), vec![], "no view asks for total order");
    mark(&mut trace, (0, 0), |g| g.total = true);
    assert!(
        check(&trace).iter().any(|v| matches!(v, Violation::TotalOrder { view: (0, 0), .. })),
        "{:?}",
        check(&trace)
    );
    // Asked for in another view only, it does not reach this one's deliveries.
    let mut trace = with_view_change();
    swap_first_casts(&mut trace, 1);
    mark(&mut trace, (1, 7), |g| g.total = true);
    assert!(
        !check(&trace).iter().any(|v| matches!(v, Violation::TotalOrder { view: (0, 0), .. })),
        "{:?}",
        check(&trace)
    );
    // Causal order: the answer before its question at node 2.
    let mut trace = question_and_answer([1, 0]);
    trace.causal = false;
    assert_eq!(check(&trace), vec![]);
    mark(&mut trace, (0, 0), |g| g.causal = true);
    assert!(check(&trace).iter().any(|v| matches!(v, Violation::Causal { node: 2, .. })), "{:?}", check(&trace));
    // Safe delivery: a cast only its crashed sender delivered.
    let mut trace = with_view_change();
    let last = MsgId { origin: 2, channel: Channel::Cast, index: 1 };
    trace.deliveries.retain(|d| d.node == 2 || MsgId::parse(&d.payload) != Some(last));
    assert_eq!(check(&trace), vec![]);
    mark(&mut trace, (0, 0), |g| g.safe = true);
    assert!(check(&trace).contains(&Violation::Safe { id: last, view: (0, 0), node: 0 }), "{:?}", check(&trace));
}

/// `good()` with a second send from node 0 to node 1, sent and delivered after the first.
fn two_sends() -> Trace {
    let mut trace = good();
    let id = MsgId { origin: 0, channel: Channel::Send { dest: 1 }, index: 1 };
    let mut bytes = id.tag().to_vec();
    bytes.extend_from_slice(b"payload");
    let payload = Bytes::from(bytes);
    trace.sent.push(Sent { id, time: Instant::ZERO, digest: digest(&payload), view: (0, 0) });
    let first = trace.deliveries.iter().find(|d| !d.cast).expect("the first send").clone();
    trace.deliveries.push(Delivery { payload, ..first });
    trace
}

/// The send channel is held to FIFO and to at-most-once as casts are, and a send delivered as a
/// cast (or a cast as a send) is one never sent: each broken on its own is caught (a review found
/// only the wrong node tested, with a single send).
#[test]
fn catches_sends_out_of_order_twice_or_on_the_wrong_channel() {
    assert_eq!(check(&two_sends()), vec![]);
    let sends = |trace: &Trace| -> Vec<usize> {
        trace.deliveries.iter().enumerate().filter(|(_, d)| !d.cast).map(|(i, _)| i).collect()
    };
    // Swapped.
    let mut trace = two_sends();
    let [a, b] = sends(&trace)[..] else { panic!("two sends") };
    trace.deliveries.swap(a, b);
    assert!(check(&trace).iter().any(|v| matches!(v, Violation::Fifo { .. })), "{:?}", check(&trace));
    // Delivered twice.
    let mut trace = two_sends();
    let again = trace.deliveries[sends(&trace)[1]].clone();
    trace.deliveries.push(again);
    assert!(check(&trace).iter().any(|v| matches!(v, Violation::Duplicate { .. })), "{:?}", check(&trace));
    // A send delivered as a cast, and a cast delivered as a send.
    for flip_send in [true, false] {
        let mut trace = two_sends();
        let index = match flip_send {
            true => sends(&trace)[0],
            false => trace.deliveries.iter().position(|d| d.cast && d.node == 1).expect("a cast at node 1"),
        };
        trace.deliveries[index].cast = !trace.deliveries[index].cast;
        assert!(
            check(&trace).iter().any(|v| matches!(v, Violation::Created { .. })),
            "flip_send {flip_send}: {:?}",
            check(&trace)
        );
    }
}

/// `good()`, then a state-transfer view (1, 9) of the three, whose rank 0 streams its state and
/// the others install it, then a normal view (2, 9) of the three.
fn with_transfer_view() -> Trace {
    let mut trace = good();
    for node in 0..3 {
        trace.views.push(Installed { xfer: true, ..installed(node, (1, 9), vec![0, 1, 2]) });
    }
    for node in 0..3 {
        trace.views.push(installed(node, (2, 9), vec![0, 1, 2]));
    }
    let t = |node, provided| Transfer { view: (1, 9), node, provided, digest: 7 };
    trace.transfers = vec![t(0, true), t(1, false), t(2, false)];
    trace
}

/// The transfer view's rules beyond the bytes, each broken on its own, are caught: a provider
/// other than rank 0, two providers, an application cast delivered in the transfer view, and a
/// receiver that went on to a normal view with others without the state (one that goes on alone
/// keeps the state it had, and is not). Only the bytes were checked before (a review's finding).
#[test]
fn catches_a_state_transfer_view_that_breaks_its_rules() {
    assert_eq!(check(&with_transfer_view()), vec![]);
    let rule = |trace: &Trace| -> Vec<(usize, &'static str)> {
        check(trace)
            .into_iter()
            .filter_map(|v| match v {
                Violation::TransferRule { view: (1, 9), node, broke } => Some((node, broke)),
                _ => None,
            })
            .collect()
    };
    let mut trace = with_transfer_view();
    trace.transfers[0].node = 1;
    assert_eq!(rule(&trace), [(1, "a member other than rank 0 provided")]);
    let mut trace = with_transfer_view();
    trace.transfers.push(Transfer { view: (1, 9), node: 1, provided: true, digest: 7 });
    assert_eq!(rule(&trace), [(1, "a member other than rank 0 provided"), (1, "two members provided")]);
    let mut trace = with_transfer_view();
    let cast = trace.deliveries.iter().position(|d| d.cast && d.node == 2).unwrap();
    trace.deliveries[cast].view = (1, 9);
    assert!(rule(&trace).contains(&(2, "an application cast was delivered in it")), "{:?}", check(&trace));
    let mut trace = with_transfer_view();
    trace.transfers.retain(|t| t.node != 2);
    assert_eq!(rule(&trace), [(2, "it went on to a normal view with others without the state")]);
    // Alone, it keeps the state it had.
    for v in trace.views.iter_mut().filter(|v| v.view == (2, 9)) {
        if v.node == 2 {
            (v.view, v.members, v.addresses) = ((2, 2), vec![2], vec![2]);
        } else {
            (v.members, v.addresses) = (vec![0, 1], vec![0, 1]);
        }
    }
    assert_eq!(rule(&trace), []);
}

/// Each delivery's latency is its time less its message's acceptance, and deliveries of bytes
/// that are no workload message's are left out.
#[test]
fn delivery_latencies_run_from_acceptance_to_each_delivery() {
    let mut trace = good();
    let ms = |n: u64| Instant::ZERO + motet_core::Duration::from_millis(n);
    trace.sent[0].time = ms(10);
    for (k, d) in trace.deliveries.iter_mut().enumerate() {
        d.time = ms(20 + k as u64);
    }
    trace.deliveries.push(Delivery { payload: Bytes::from_static(b"stray"), ..trace.deliveries[0].clone() });
    let got = trace.delivery_latencies();
    assert_eq!(got.len(), 3 * 2 * 3 + 1, "every workload delivery, not the stray one");
    // The first message's three deliveries came at 20, 21 and 22 ms, 10 ms after it was accepted.
    assert_eq!(got[..3], [10_000_000, 11_000_000, 12_000_000]);
    // The others were accepted at 0.
    assert_eq!(got[3], 23_000_000);
}
