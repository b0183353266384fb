//! The node: routing, slots, alarms, batches and the loop-back setting across views.

use super::*;
use crate::{Action, Counter, DropReason, Duration, Payload};
use motet_wire::Mux;

/// A datagram of another wire version is counted as such, apart from malformed ones, and is
/// said once in the log.
#[test]
fn datagrams_of_another_wire_version_are_counted_apart() {
    let (mut nodes, now) = pair();
    let node = &mut nodes[0].0;
    let older = motet_wire::VERSION - 1;
    for _ in 0..3 {
        node.handle_datagram(now, Bytes::from(vec![older, 1, 2, 3, 4, 0, 0, 0]));
    }
    node.handle_datagram(now, Bytes::from(vec![motet_wire::VERSION, 1]));
    node.handle_datagram(now, Bytes::from(vec![older, 1]));
    node.handle_datagram(now, Bytes::from(vec![0x3f; 40]));
    let stats = node.stats();
    assert_eq!(stats.drops(DropReason::OtherVersion), 3);
    assert_eq!(stats.drops(DropReason::Malformed), 3, "truncated, too short for a head, and noise");
}

/// A batch of datagrams (a bundle's parts) gives what handling them one by one gives: the
/// same events and datagrams, in the same order, for datagrams of two groups interleaved.
#[test]
fn a_batch_of_datagrams_equals_them_one_by_one() {
    let groups: Vec<Arc<ViewState>> = ["vsync", "total"]
        .iter()
        .enumerate()
        .map(|(g, stack)| {
            Arc::new(ViewState::initial(
                crate::view::GroupName::new(&format!("batch{g}")),
                crate::StackSpec::parse(stack).unwrap(),
                crate::StackConfig::default(),
                vec![crate::EndpointId(0), crate::EndpointId(1)],
                vec![Address::Sim(0), Address::Sim(1)],
            ))
        })
        .collect();
    let now = Instant::ZERO;
    let mut sender = Node::new();
    let ids: Vec<StackId> = groups.iter().map(|v| sender.join(now, Arc::clone(v), 0).unwrap()).collect();
    let receivers = || {
        let mut node = Node::new();
        for v in &groups {
            node.join(now, Arc::clone(v), 1).unwrap();
        }
        while node.poll_transmit().is_some() {}
        while node.poll_event().is_some() {}
        node
    };
    let (mut batched, mut single) = (receivers(), receivers());
    while sender.poll_transmit().is_some() {}
    for k in 0..12u8 {
        sender.handle_action(now, ids[usize::from(k % 2)], Action::Cast(vec![k].into())).unwrap();
    }
    sender.handle_action(now, ids[0], Action::send(1, b"to one".as_slice().into())).unwrap();
    let datagrams: Vec<Bytes> = std::iter::from_fn(|| sender.poll_transmit()).map(|o| o.to_bytes()).collect();
    assert!(datagrams.len() >= 13, "{}", datagrams.len());
    batched.handle_datagrams(now, datagrams.iter().cloned());
    for datagram in &datagrams {
        single.handle_datagram(now, datagram.clone());
    }
    let drain = |node: &mut Node| {
        let events: Vec<String> = std::iter::from_fn(|| node.poll_event()).map(|e| format!("{e:?}")).collect();
        let sent: Vec<Bytes> = std::iter::from_fn(|| node.poll_transmit()).map(|o| o.to_bytes()).collect();
        (events, sent, node.stats())
    };
    let (got, expected) = (drain(&mut batched), drain(&mut single));
    // `vsync`'s casts and the send at once; `total`'s wait for the sequencer's order.
    assert_eq!(got.0.iter().filter(|e| e.contains("Cast") || e.contains("Send")).count(), 7, "{:?}", got.0);
    assert_eq!(got, expected);
}

/// The view change and the new view's first cast in one batch (a bundle the coordinator packed
/// in the turn it installed the view): the receiver installs the view at the first, so the
/// second finds the new view's stack routed and is delivered, not dropped for an unknown
/// connection.
#[test]
fn a_batch_that_changes_the_view_routes_the_rest_to_the_new_views_stack() {
    let (mut nodes, now) = pair();
    let spec = crate::spec::StackSpec::parse("total").unwrap();
    let (a, id) = &mut nodes[0];
    a.handle_action(now, *id, Action::Switch(spec)).unwrap();
    let mut cast_sent = false;
    for _ in 0..100 {
        for from in 0..2 {
            // The coordinator casts in its new view as soon as it has one, before its queue
            // reaches the other member.
            if from == 0 && !cast_sent {
                let installed = std::iter::from_fn(|| nodes[0].0.poll_event())
                    .find_map(|(stack, e)| matches!(e, AppEvent::View { .. }).then_some(stack));
                if let Some(stack) = installed {
                    nodes[0].0.handle_action(now, stack, Action::Cast(b"first".as_slice().into())).unwrap();
                    cast_sent = true;
                }
            }
            let batch: Vec<Bytes> =
                std::iter::from_fn(|| nodes[from].0.poll_transmit()).map(|o| o.to_bytes()).collect();
            nodes[1 - from].0.handle_datagrams(now, batch);
        }
        if cast_sent {
            break;
        }
    }
    assert!(cast_sent, "the coordinator installed the new view");
    let b = &mut nodes[1].0;
    assert_eq!(b.stats().drops(DropReason::UnknownConn), 0, "the cast found its stack");
    assert!(b.stacks().any(|(_, s)| s.view().stack.layers().contains(&crate::LayerKind::Sequencer)));
}

/// Groups whose members take each other's datagrams in batches run as those taking them one
/// by one, through casts, sends and view changes (protocol switches, each a new view whose
/// stack must be routed before the batch's next datagram reaches it): the same views, the
/// same deliveries, the same counters.
#[test]
fn members_taking_batches_run_as_members_taking_datagrams_one_by_one() {
    let run = |batches: bool| {
        let mut group = crate::testkit::Group::new(3, "vsync");
        group.batches = batches;
        for round in 0..6u8 {
            for rank in 0..3 {
                group.act(rank, Action::Cast(vec![round].into())).unwrap();
                let dest = ((rank + 1) % 3) as Rank;
                group.act(rank, Action::send(dest, vec![round].into())).unwrap();
            }
            if round % 2 == 1 {
                let target = ["total", "vsync"][usize::from(round / 2 % 2)];
                group.act(0, Action::Switch(crate::spec::StackSpec::parse(target).unwrap())).unwrap();
            }
            for _ in 0..20 {
                group.tick(crate::time::Duration::from_millis(50));
            }
        }
        let views: Vec<_> = group.views.iter().map(|v| v.as_ref().map(|v| (v.view_id, v.stack.to_string()))).collect();
        let stats: Vec<_> = group.nodes.iter().map(|(n, _)| n.stats()).collect();
        (views, group.delivered.clone(), stats)
    };
    let (batched, single) = (run(true), run(false));
    assert_eq!(batched.0[0].as_ref().map(|v| v.0.ltime), Some(3), "three switches, three views");
    assert_eq!(batched, single);
}

/// A batch whose iterator panics (the caller's code), caught by the caller, leaves the node
/// working: a later cast's datagram is there to send at once. Before, the batch stayed open and
/// a node of one stack held its outputs back for good.
#[test]
fn a_batch_whose_iterator_panics_leaves_the_node_working() {
    let (mut nodes, now) = pair();
    let (node, id) = &mut nodes[1];
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let datagrams =
            (0..2).map(|k| if k == 0 { Bytes::from_static(b"noise") } else { panic!("the caller's iterator") });
        node.handle_datagrams(now, datagrams);
    }));
    assert!(caught.is_err());
    node.handle_action(now, *id, Action::Cast(Payload::from(vec![1]))).unwrap();
    assert!(node.poll_transmit().is_some(), "the cast's datagram is out");
}

/// A batch whose iterator panics after a datagram that was handled: that datagram's delivery is
/// there at once, and the alarm it set is filed, not held back until the stack's next input.
#[test]
fn a_batch_whose_iterator_panics_hands_over_what_it_handled() {
    let (mut nodes, now) = pair();
    let (sender, id) = &mut nodes[0];
    let mut datagrams = Vec::new();
    for k in 0..3u8 {
        sender.handle_action(now, *id, Action::Cast(Payload::from(vec![k; 4]))).unwrap();
        datagrams.push(sender.poll_transmit().expect("the cast's datagram").to_bytes());
    }
    let node = &mut nodes[1].0;
    let panicking = |node: &mut Node, datagram: Bytes| {
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut first = Some(datagram);
            let datagrams = (0..2).map(|_| first.take().unwrap_or_else(|| panic!("the caller's iterator")));
            node.handle_datagrams(now, datagrams);
        }));
        assert!(caught.is_err());
    };
    // In order: delivered.
    panicking(node, datagrams[0].clone());
    let delivered = std::iter::from_fn(|| node.poll_event()).any(|(_, e)| matches!(e, AppEvent::Cast { .. }));
    assert!(delivered, "the cast handled before the panic is delivered");
    // Out of order (the second is missing): held, and its NAK's alarm is in the node's index.
    let before = node.poll_alarm();
    panicking(node, datagrams[2].clone());
    let brute = node.stacks().filter_map(|(_, s)| s.poll_wake()).min();
    assert_ne!(brute, before, "the gap armed a NAK");
    assert_eq!(node.poll_alarm(), brute, "the alarm the batch's input set is filed");
}

/// Two nodes, one endpoint each, in one `vsync` view.
fn pair() -> (Vec<(Node, StackId)>, Instant) {
    pair_of("vsync")
}

/// Two nodes, one endpoint each, in one view of the stack `spec`.
fn pair_of(spec: &str) -> (Vec<(Node, StackId)>, Instant) {
    let view = crate::testing::view_of(spec, 2);
    let now = Instant::ZERO;
    let nodes = (0..2)
        .map(|rank| {
            let mut node = Node::new();
            let id = node.join(now, Arc::clone(&view), rank).unwrap();
            while node.poll_transmit().is_some() {}
            while node.poll_event().is_some() {}
            (node, id)
        })
        .collect();
    (nodes, now)
}

/// A long-lived process goes through many views: each builds a stack, and the slot of the one
/// it replaces is reused once that one has exited, so the node's slots stay bounded by the
/// stacks live at once. A handle kept from an exited stack names nothing, not the stack that
/// took its slot.
#[test]
fn slots_of_exited_stacks_are_reused_and_their_old_handles_name_nothing() {
    let mut group = crate::testkit::Group::new(2, "vsync");
    let first = group.nodes[0].1;
    let targets = ["total", "vsync"];
    for round in 0..40 {
        group.act(round % 2, Action::Switch(crate::spec::StackSpec::parse(targets[round % 2]).unwrap())).unwrap();
        for _ in 0..20 {
            group.tick(crate::time::Duration::from_millis(100));
        }
        let view = group.views[0].as_ref().unwrap();
        assert_eq!(view.view_id.ltime, round as u64 + 1, "every switch installs a view");
        for (node, _) in &group.nodes {
            assert_eq!(node.stacks().count(), 1, "the replaced stack has exited");
            assert!(node.slots() <= 2, "round {round}: {} slots for 1 live stack", node.slots());
        }
    }
    let (node, current) = &mut group.nodes[0];
    assert_ne!(first, *current);
    assert!(node.stack(first).is_none(), "an old handle names nothing");
    let now = group.now;
    assert_eq!(node.handle_action(now, first, Action::Cast(Payload::new())), Err(ApiError::NoSuchStack));
    assert!(node.stack(*current).is_some());
    group.act(0, Action::Cast(b"after".as_slice().into())).unwrap();
    assert_eq!(group.delivered[1], 1, "the current stack still works");
}

/// The node's statistics keep what its replaced stacks counted: every view change replaces a
/// stack, and the runtime exports these as Prometheus counters, which must never go down. Here
/// each protocol switch installs a view, and the stability gossip counted by the old stacks
/// stays in the node's total.
#[test]
fn counts_of_replaced_stacks_stay_in_the_nodes_statistics() {
    let mut group = crate::testkit::Group::new(2, "vsync");
    let gossip = |group: &crate::testkit::Group| group.nodes[0].0.stats().counter(crate::Counter::Gossip);
    let mut last = gossip(&group);
    for (round, target) in ["total", "vsync", "total"].into_iter().enumerate() {
        for _ in 0..50 {
            group.act(0, Action::Cast(b"c".as_slice().into())).unwrap();
            group.tick(crate::time::Duration::from_millis(100));
        }
        let before = gossip(&group);
        assert!(before > last, "round {round}: the stack gossiped ({last} then {before})");
        group.act(1, Action::Switch(crate::spec::StackSpec::parse(target).unwrap())).unwrap();
        for _ in 0..20 {
            group.tick(crate::time::Duration::from_millis(100));
        }
        assert_eq!(group.nodes[0].0.stacks().count(), 1, "round {round}: the old stack has exited");
        let after = gossip(&group);
        assert!(after >= before, "round {round}: {before} counted before the switch, {after} after");
        last = after;
    }
}

/// A member's loop-back setting is its own and outlives its views: the node gives it to the
/// stack of every next view (here, through protocol switches). Its casts reach the others
/// all along, and never itself.
#[test]
fn the_loopback_setting_is_carried_to_the_next_views() {
    let mut group = crate::testkit::Group::new(2, "vsync");
    group.act(0, Action::Loopback(false)).unwrap();
    for (round, target) in ["total", "vsync"].into_iter().enumerate() {
        group.act(0, Action::Cast(b"before".as_slice().into())).unwrap();
        let (own, other) = (group.delivered[0], group.delivered[1]);
        group.act(1, Action::Switch(crate::spec::StackSpec::parse(target).unwrap())).unwrap();
        for _ in 0..20 {
            group.tick(crate::time::Duration::from_millis(100));
        }
        assert_eq!(group.views[0].as_ref().unwrap().view_id.ltime, round as u64 + 1, "a new view");
        group.act(0, Action::Cast(b"after".as_slice().into())).unwrap();
        assert_eq!(group.delivered[0], own, "round {round}: rank 0 never gets its own casts");
        assert_eq!(group.delivered[1], other + 1, "round {round}: rank 1 gets them");
        group.act(1, Action::Cast(b"theirs".as_slice().into())).unwrap();
        assert_eq!(group.delivered[0], own + 1, "round {round}: rank 0 gets the others' casts");
    }
}

/// The alarm index answers what a visit of every stack would: two nodes sharing 40 groups,
/// casts and sends on random groups, datagrams carried both ways, time advancing by random
/// steps and alarms fired when due, and after every step `poll_alarm` and `poll_timeout`
/// equal the minimum over the stacks.
#[test]
fn the_alarm_index_equals_a_visit_of_every_stack() {
    let groups = 40;
    let mut nodes = [Node::new(), Node::new()];
    let mut ids = [Vec::new(), Vec::new()];
    for g in 0..groups {
        let view = Arc::new(ViewState::initial(
            crate::view::GroupName::new(&format!("g{g}")),
            crate::StackSpec::parse("vsync").unwrap(),
            crate::StackConfig::default(),
            vec![crate::EndpointId(0), crate::EndpointId(1)],
            vec![Address::Sim(0), Address::Sim(1)],
        ));
        for (rank, node) in nodes.iter_mut().enumerate() {
            ids[rank].push(node.join(Instant::ZERO, Arc::clone(&view), rank as Rank).unwrap());
        }
    }
    let brute = |node: &Node| {
        let alarm = node.stacks().filter_map(|(_, s)| s.poll_wake()).min();
        let timeout = node.stacks().filter_map(|(_, s)| s.poll_timeout()).min();
        (alarm, timeout)
    };
    let (mut now, mut seed) = (Instant::ZERO, 0x9e37_79b9_7f4a_7c15u64);
    let mut random = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for step in 0..3_000 {
        let (from, g) = (random(2) as usize, random(groups) as usize);
        let payload = Payload::from(vec![step as u8; 16]);
        let action = if random(3) == 0 { Action::send(1 - from as Rank, payload) } else { Action::Cast(payload) };
        // Flow control may refuse for a while: that is the test's business only as an input.
        let _ = nodes[from].handle_action(now, ids[from][g], action);
        if random(4) == 0 {
            nodes[random(2) as usize].settle();
        }
        now = now + Duration::from_micros(random(20_000));
        for n in 0..2 {
            while let Some(out) = nodes[n].poll_transmit() {
                if random(10) != 0 {
                    nodes[1 - n].handle_datagram(now, out.to_bytes());
                }
            }
            while nodes[n].poll_event().is_some() {}
            if nodes[n].poll_timeout().is_some_and(|at| at <= now) {
                nodes[n].handle_timeout(now);
            }
        }
        for node in &nodes {
            assert_eq!((node.poll_alarm(), node.poll_timeout()), brute(node), "step {step}");
        }
    }
    assert!(nodes.iter().all(|n| n.poll_alarm().is_some()), "sweeps are armed");
}

#[test]
fn common_casts_and_sends_leave_with_at_most_8_bytes_of_head_and_arrive_whole() {
    let (mut nodes, now) = pair();
    for k in 0..300u32 {
        let payload = Payload::from(k.to_le_bytes().to_vec());
        let action = if k % 2 == 0 { Action::Cast(payload) } else { Action::send(1, payload) };
        let (node, id) = &mut nodes[0];
        node.handle_action(now, *id, action).unwrap();
        let mut datagrams = Vec::new();
        while let Some(out) = node.poll_transmit() {
            if out.payload.len() == 4 {
                assert!(out.head.len() <= 8, "message {k}: {} bytes of head", out.head.len());
                assert!(datagram::is_compressed(&out.head));
            }
            datagrams.push(out.to_bytes());
        }
        let (peer, _) = &mut nodes[1];
        for datagram in datagrams {
            peer.handle_datagram(now, datagram);
        }
        let back: Vec<Bytes> = std::iter::from_fn(|| peer.poll_transmit().map(|o| o.to_bytes())).collect();
        back.into_iter().for_each(|bytes| nodes[0].0.handle_datagram(now, bytes));
        let got: Vec<AppEvent> = std::iter::from_fn(|| nodes[1].0.poll_event().map(|(_, e)| e)).collect();
        let want = Bytes::copy_from_slice(&k.to_le_bytes());
        match &got[..] {
            [AppEvent::Cast { origin: 0, payload }] | [AppEvent::Send { origin: 0, payload }] => {
                assert_eq!(payload.to_bytes(), want, "message {k}")
            }
            other => panic!("message {k}: {other:?}"),
        }
    }
    // Past 256 per trace, so the sequence numbers' low bytes wrapped at least once.
    assert!(nodes[0].0.stats().counter(Counter::CompressedOut) >= 300);
    assert!(nodes[1].0.stats().counter(Counter::CompressedIn) >= 300);
}

/// Without flow control nothing bounds how far a sender runs ahead of a receiver, so the low bits
/// of sequence number a compressed datagram carries could be expanded to the wrong message (with
/// 16 bits, a receiver that missed 65,536 casts took the next one for the first it missed): such a stack's
/// casts go in the full form, its full sequence number on the wire, and arrive whole.
#[test]
fn casts_of_a_stack_without_flow_control_go_in_the_full_form() {
    let (mut nodes, now) = pair_of("top:stable:appl:local:pt2pt:mnak:bottom");
    for k in 0..3u32 {
        let (node, id) = &mut nodes[0];
        node.handle_action(now, *id, Action::Cast(Payload::from(k.to_le_bytes().to_vec()))).unwrap();
        let out = node.poll_transmit().expect("the cast");
        assert!(!datagram::is_compressed(&out.head), "cast {k}: {} bytes of head", out.head.len());
        nodes[1].0.handle_datagram(now, out.to_bytes());
        match nodes[1].0.poll_event() {
            Some((_, AppEvent::Cast { origin: 0, payload })) => assert_eq!(payload.to_bytes()[..], k.to_le_bytes()),
            other => panic!("cast {k}: {other:?}"),
        }
    }
    assert_eq!(nodes[0].0.stats().counter(Counter::CompressedOut), 0);
}

#[test]
fn a_compressed_datagram_nobody_can_expand_is_dropped_and_counted() {
    let (mut nodes, now) = pair();
    let conn = conn_id(nodes[1].0.stack(nodes[1].1).unwrap().view());
    let mut head = Vec::new();
    // A send to a rank outside the view (its connection id names nobody), a send under the
    // view's connection id (a cast's: the kind does not match it), and a truncated one.
    let bad = datagram::Compressed { conn, mux: Mux::Send { dest: 9 }, origin: 0, seqno: 0 };
    datagram::encode_compressed(&bad, &mut head).unwrap();
    nodes[1].0.handle_datagram(now, Bytes::from(head.clone()));
    let mut cast = Vec::new();
    datagram::encode_compressed(&datagram::Compressed { conn, mux: Mux::Cast, origin: 0, seqno: 0 }, &mut cast)
        .unwrap();
    cast[0] &= !0x80; // a send's kind
    nodes[1].0.handle_datagram(now, Bytes::from(cast));
    nodes[1].0.handle_datagram(now, Bytes::from(head[..3].to_vec()));
    // A datagram in the full form under an id whose key is this view's but whose other bits are
    // not (another view's, whose key is the same): not for this stack.
    let head = datagram::Head { conn: ConnId(conn.0 ^ 1 << 40), mux: Mux::Cast, origin: 0 };
    let full = datagram::encode(&head, std::iter::empty::<motet_wire::Header>(), &Payload::new());
    nodes[1].0.handle_datagram(now, full);
    let stats = nodes[1].0.stats();
    assert_eq!(stats.drops(DropReason::UnknownConn), 1);
    assert_eq!(stats.drops(DropReason::NotForMe), 2);
    assert_eq!(stats.drops(DropReason::Malformed), 1);
    assert!(nodes[1].0.poll_event().is_none());
}

/// The node remembers the last route that named one stack, and forgets it whenever a route
/// changes: a stack that joins under the same connection gets its datagrams from then on, and
/// once the last stack under it is gone a datagram for it is counted as unknown, not handed to a
/// stack that no longer exists.
#[test]
fn the_route_remembered_last_is_forgotten_when_routes_change() {
    let view = crate::testing::view_of("vsync", 3);
    let now = Instant::ZERO;
    let (mut a, mut b) = (Node::new(), Node::new());
    let from = a.join(now, Arc::clone(&view), 0).unwrap();
    let one = b.join(now, Arc::clone(&view), 1).unwrap();
    let carry = |a: &mut Node, b: &mut Node| {
        while let Some(out) = a.poll_transmit() {
            b.handle_datagram(now, out.to_bytes());
        }
        std::iter::from_fn(|| b.poll_event()).filter(|(_, e)| !matches!(e, AppEvent::View { .. })).collect::<Vec<_>>()
    };
    carry(&mut a, &mut b);
    a.handle_action(now, from, Action::Cast(Payload::from(b"first".to_vec()))).unwrap();
    let got = carry(&mut a, &mut b);
    assert!(matches!(&got[..], [(id, AppEvent::Cast { origin: 0, .. })] if *id == one), "{got:?}");
    // Another stack under the same connection: a send to it reaches it.
    let two = b.join(now, Arc::clone(&view), 2).unwrap();
    a.handle_action(now, from, Action::send(2, Payload::from(b"second".to_vec()))).unwrap();
    let got = carry(&mut a, &mut b);
    assert!(matches!(&got[..], [(id, AppEvent::Send { origin: 0, .. })] if *id == two), "{got:?}");
    // Back to one stack, remembered again; then none.
    b.remove(two);
    a.handle_action(now, from, Action::send(1, Payload::from(b"third".to_vec()))).unwrap();
    let got = carry(&mut a, &mut b);
    assert!(matches!(&got[..], [(id, AppEvent::Send { origin: 0, .. })] if *id == one), "{got:?}");
    b.remove(one);
    let unknown = b.stats().drops(DropReason::UnknownConn);
    a.handle_action(now, from, Action::send(1, Payload::from(b"fourth".to_vec()))).unwrap();
    assert!(carry(&mut a, &mut b).is_empty());
    assert_eq!(b.stats().drops(DropReason::UnknownConn), unknown + 1);
}

/// A view of `group` at logical time `ltime`, of two members (`Sim(0)`, `Sim(1)`).
fn view_at(group: &str, ltime: u64) -> Arc<ViewState> {
    let mut view = ViewState::initial(
        crate::view::GroupName::new(group),
        crate::StackSpec::parse("vsync").unwrap(),
        crate::StackConfig::default(),
        vec![crate::EndpointId(0), crate::EndpointId(1)],
        vec![Address::Sim(0), Address::Sim(1)],
    );
    view.view_id.ltime = ltime;
    Arc::new(view)
}

/// The logical times of a view of group `a` and one of group `b` whose connection ids share a key
/// (the low 32 bits, which compressed datagrams carry): a birthday search.
fn ltimes_sharing_a_key() -> (u64, u64) {
    let mut seen = std::collections::BTreeMap::new();
    for ltime in 0..(1u64 << 16) {
        seen.insert(conn_id(&view_at("a", ltime)).key(), ltime);
    }
    (0..(1u64 << 18))
        .find_map(|ltime| seen.get(&conn_id(&view_at("b", ltime)).key()).map(|&a| (a, ltime)))
        .expect("a collision among 2^34 pairs of 32-bit keys")
}

/// Keys are 32 bits: two views of different groups may share one. A node that builds stacks for
/// both counts the collision (`ConnCollision`) and says it; views that are merely successive, or
/// groups that do not collide, count none. Found by a review; docs/bypass.md, "Connection ids".
#[test]
fn a_key_shared_by_two_views_is_counted() {
    let (ours, theirs) = ltimes_sharing_a_key();
    assert_ne!(conn_id(&view_at("a", ours)), conn_id(&view_at("b", theirs)), "the full ids differ");
    let mut node = Node::new();
    node.join(Instant::ZERO, view_at("a", ours), 0).unwrap();
    node.join(Instant::ZERO, view_at("a", ours + 1), 0).unwrap();
    node.join(Instant::ZERO, view_at("c", 7), 0).unwrap();
    assert_eq!(node.stats().counter(Counter::ConnCollision), 0, "successive views, another group");
    node.join(Instant::ZERO, view_at("b", theirs), 0).unwrap();
    assert_eq!(node.stats().counter(Counter::ConnCollision), 1);
}

/// Two nodes each run a member of group `a` and one of group `b`, whose views share a key. A cast
/// and a send in `a` leave compressed (under the key); the receiving node cannot tell which of its
/// stacks they are for, so it drops them (`SharedKey`), and `mnak`'s and `pt2pt`'s repair
/// brings them in full, whose 64-bit id reaches `a`'s stack alone. Before, when ids had 32 bits,
/// both stacks took them: the cast and the send were delivered in group `b` too.
#[test]
fn a_key_shared_by_two_views_delivers_in_the_right_group_only() {
    let (ours, theirs) = ltimes_sharing_a_key();
    let views = [view_at("a", ours), view_at("b", theirs)];
    let mut now = Instant::ZERO;
    let mut nodes = [Node::new(), Node::new()];
    let ids: Vec<[StackId; 2]> = (0..2u16)
        .map(|rank| views.clone().map(|view| nodes[usize::from(rank)].join(now, view, rank).unwrap()))
        .collect();
    let mut got: Vec<(StackId, AppEvent)> = Vec::new();
    let pump = |nodes: &mut [Node; 2], now: Instant, got: &mut Vec<(StackId, AppEvent)>| loop {
        let mut moved = false;
        for from in 0..2 {
            nodes[from].settle();
            if nodes[from].poll_alarm().is_some_and(|at| at <= now) {
                nodes[from].handle_timeout(now);
            }
            while let Some(out) = nodes[from].poll_transmit() {
                moved = true;
                for address in out.to.addresses() {
                    let Address::Sim(to) = address else { continue };
                    nodes[to as usize].handle_datagram(now, out.to_bytes());
                }
            }
            while let Some((id, event)) = nodes[from].poll_event() {
                if from == 1 && matches!(event, AppEvent::Cast { .. } | AppEvent::Send { .. }) {
                    got.push((id, event));
                }
            }
        }
        if !moved {
            break;
        }
    };
    pump(&mut nodes, now, &mut got);
    assert_eq!(nodes[1].stats().counter(Counter::ConnCollision), 1);
    let compressed = nodes[0].stats().counter(Counter::CompressedOut);
    nodes[0].handle_action(now, ids[0][0], Action::Cast(Payload::from(b"cast in a".to_vec()))).unwrap();
    nodes[0].handle_action(now, ids[0][0], Action::send(1, Payload::from(b"send in a".to_vec()))).unwrap();
    pump(&mut nodes, now, &mut got);
    assert_eq!(nodes[0].stats().counter(Counter::CompressedOut), compressed + 2, "both left compressed");
    assert_eq!(nodes[1].stats().drops(DropReason::SharedKey), 2, "and were dropped: {got:?}");
    for _ in 0..300 {
        now = now + Duration::from_millis(10);
        pump(&mut nodes, now, &mut got);
    }
    // Casts and sends are repaired apart, in either order.
    let mut got: Vec<_> = got
        .into_iter()
        .map(|(id, event)| match event {
            AppEvent::Cast { origin, payload } => (id, "cast", origin, payload.to_bytes()),
            AppEvent::Send { origin, payload } => (id, "send", origin, payload.to_bytes()),
            other => panic!("{other:?}"),
        })
        .collect();
    got.sort();
    let a = ids[1][0];
    assert_eq!(
        got,
        vec![(a, "cast", 0, Bytes::from_static(b"cast in a")), (a, "send", 0, Bytes::from_static(b"send in a"))],
        "repaired in full, in group a only"
    );
    // The first drops had node 1's stacks ask their members for the full form (`bottom`'s
    // `Full`): node 0's next cast in `a` leaves in full and arrives at once, in `a` alone, with
    // no drop and no repair.
    let mut got = Vec::new();
    let (compressed, shared) =
        (nodes[0].stats().counter(Counter::CompressedOut), nodes[1].stats().drops(DropReason::SharedKey));
    nodes[0].handle_action(now, ids[0][0], Action::Cast(Payload::from(b"next cast in a".to_vec()))).unwrap();
    pump(&mut nodes, now, &mut got);
    assert_eq!(nodes[0].stats().counter(Counter::CompressedOut), compressed, "in the full form");
    assert_eq!(nodes[1].stats().drops(DropReason::SharedKey), shared);
    assert!(matches!(&got[..], [(id, AppEvent::Cast { origin: 0, .. })] if *id == a), "{got:?}");
}

/// A compressed cast of view `from`, from rank 0, whose number reads at the stack of view `at` as
/// the first it expects.
fn stale_cast(from: ConnId, at: ConnId) -> Bytes {
    let encode = |seqno: u64| {
        let mut out = Vec::new();
        let head = datagram::Compressed { conn: from, mux: Mux::Cast, origin: 0, seqno };
        datagram::encode_compressed(&head, &mut out).unwrap();
        out.extend_from_slice(b"stale cast");
        Bytes::from(out)
    };
    let (arrived, _) = datagram::decode_compressed(encode(0)).unwrap();
    let seqno = u64::from((1 << datagram::SEQNO_BITS) - arrived.seqno(at)) % (1 << datagram::SEQNO_BITS);
    let datagram = encode(seqno);
    assert_eq!(datagram::decode_compressed(datagram.clone()).unwrap().0.seqno(at), 0, "read as the first");
    datagram
}

/// The casts `node` delivers now.
fn casts_delivered(node: &mut Node) -> Vec<(StackId, AppEvent)> {
    std::iter::from_fn(|| node.poll_event()).filter(|(_, e)| matches!(e, AppEvent::Cast { .. })).collect()
}

/// A compressed cast of a view whose stack this node has removed, still on its way, under a key
/// that a live stack of another view has, is not taken by that stack, even when its number reads
/// there as the one expected next: the removed stack's keys are remembered a while (`gone`),
/// each removed stack's, not only the last one's under a key (the second case: a review's
/// finding), and for longer than the view's failure timeout.
#[test]
fn a_stale_cast_under_a_key_of_a_removed_stack_is_not_taken_by_another_view() {
    let (ours, theirs) = ltimes_sharing_a_key();
    let (a, b) = (view_at("a", ours), view_at("b", theirs));
    let (conn_a, conn_b) = (conn_id(&a), conn_id(&b));
    // One stack of `a`, removed; one of `b`.
    let mut node = Node::new();
    let mut now = Instant::ZERO;
    let old = node.join(now, Arc::clone(&a), 1).unwrap();
    node.remove(old);
    node.join(now, Arc::clone(&b), 1).unwrap();
    while node.poll_event().is_some() {}
    now = now + Duration::from_millis(1000);
    node.handle_datagram(now, stale_cast(conn_a, conn_b));
    assert_eq!(node.stats().drops(DropReason::SharedKey), 1);
    assert_eq!(casts_delivered(&mut node), [], "a cast of group a delivered in group b");
    // Two endpoints of `b` and one of `a`: `a`'s removed, then one of `b`'s. The key is
    // remembered for both; before, the second removal replaced the first, and `b`'s other
    // endpoint took the cast.
    let mut node = Node::new();
    let b0 = node.join(now, Arc::clone(&b), 0).unwrap();
    node.join(now, Arc::clone(&b), 1).unwrap();
    let gone = node.join(now, Arc::clone(&a), 1).unwrap();
    node.remove(gone);
    node.remove(b0);
    while node.poll_event().is_some() {}
    node.handle_datagram(now + Duration::from_millis(1000), stale_cast(conn_a, conn_b));
    assert_eq!(node.stats().drops(DropReason::SharedKey), 1);
    assert_eq!(casts_delivered(&mut node), []);
    // A view whose failure timeout is a minute: its cut-off members cast for that long, and its
    // keys are remembered twice that (and its linger), past the 30 s of the default.
    let mut slow = (*a).clone();
    let mut params = (*slow.params).clone();
    params.suspect.timeout = Duration::from_millis(60_000);
    params.intra.flush_timeout = Duration::from_millis(70_000);
    params.safe.ack_timeout = Duration::from_millis(70_000);
    params.pt2pt.ack_timeout = Duration::from_millis(70_000);
    params.mflow.credit_timeout = Duration::from_millis(70_000);
    params.pt2ptw.credit_timeout = Duration::from_millis(70_000);
    slow.params = Arc::new(params);
    let mut node = Node::new();
    let gone = node.join(now, Arc::new(slow), 1).unwrap();
    node.remove(gone);
    node.join(now, Arc::clone(&b), 1).unwrap();
    while node.poll_event().is_some() {}
    node.handle_datagram(now + Duration::from_millis(100_000), stale_cast(conn_a, conn_b));
    assert_eq!(node.stats().drops(DropReason::SharedKey), 1, "remembered for 2 x 60 s");
    assert_eq!(casts_delivered(&mut node), []);
    node.handle_datagram(now + Duration::from_millis(130_000), stale_cast(conn_a, conn_b));
    assert_eq!(node.stats().drops(DropReason::SharedKey), 1, "and then forgotten");
}

/// A removed stack's send key that equals a live stack's view key does not make that stack's
/// casts look shared: a compressed datagram says whether it is a cast or a send, and each kind
/// is looked for under its own keys (a review's finding: every remembered key counted, and the
/// live stack's compressed casts were dropped for 30 s).
#[test]
fn a_removed_stacks_send_key_does_not_shadow_another_views_casts() {
    // A view of `b` whose rank 1 receives sends under the key of a view of `a`.
    let mut seen = std::collections::BTreeMap::new();
    for ltime in 0..(1u64 << 16) {
        seen.insert(datagram::send_conn(conn_id(&view_at("b", ltime)), 1), ltime);
    }
    let (ours, theirs) = (0..(1u64 << 18))
        .find_map(|ltime| seen.get(&conn_id(&view_at("a", ltime)).key()).map(|&b| (ltime, b)))
        .expect("a collision among 2^34 pairs of 32-bit keys");
    let (a, b) = (view_at("a", ours), view_at("b", theirs));
    let mut node = Node::new();
    let now = Instant::ZERO;
    let gone = node.join(now, Arc::clone(&b), 1).unwrap();
    node.remove(gone);
    node.join(now, Arc::clone(&a), 1).unwrap();
    assert_eq!(node.stats().counter(Counter::ConnCollision), 0, "keys of two kinds do not collide");
    while node.poll_event().is_some() {}
    let mut cast = Vec::new();
    let head = datagram::Compressed { conn: conn_id(&a), mux: Mux::Cast, origin: 0, seqno: 0 };
    datagram::encode_compressed(&head, &mut cast).unwrap();
    cast.extend_from_slice(b"cast in a");
    node.handle_datagram(now, Bytes::from(cast));
    assert_eq!(node.stats().drops(DropReason::SharedKey), 0);
    assert_eq!(casts_delivered(&mut node).len(), 1);
}

/// A leave given to the stack of a view the member has just left behind (a driver that has not
/// yet taken the new view's event) goes to the stack of its current view: the member leaves.
/// Before, the lingering stack took it and lost it, and the member stayed in the group for good.
/// Found by a review.
#[test]
fn a_leave_given_to_a_replaced_stack_is_the_members() {
    let mut group = crate::testkit::Group::new(2, "vsync");
    let old = group.nodes[0].1;
    group.act(1, Action::Switch(crate::spec::StackSpec::parse("total").unwrap())).unwrap();
    for _ in 0..2000 {
        if group.nodes[0].1 != old {
            break;
        }
        group.tick(Duration::from_millis(1));
    }
    assert_ne!(group.nodes[0].1, old, "a new view's stack");
    assert!(group.nodes[0].0.stack(old).is_some(), "the old one lingers");
    let now = group.now;
    group.nodes[0].0.handle_action(now, old, Action::Leave).unwrap();
    for _ in 0..50 {
        group.tick(Duration::from_millis(100));
    }
    assert!(group.exited[0], "the member left");
    assert_eq!(group.views[1].as_ref().map(|v| v.members.len()), Some(1), "the other is alone");
}

/// A send to a member the driver marked failed is refused (`MemberFailed`) on every path; sends
/// to the others go on. (The case where the paths differed, a bypass that a layer below `appl`
/// refused mid-trace, is the simulator's `fifo_survives_a_crash_on_both_paths_alike`.)
#[test]
fn a_send_to_a_failed_member_is_refused_on_every_path() {
    for bypass in [crate::Bypass::On, crate::Bypass::Off, crate::Bypass::Diff] {
        let mut group = crate::testkit::Group::with_bypass(3, "fifo", bypass);
        let send = |to: u16| Action::send(to, Payload::from(b"x".as_slice()));
        // Sends to both first: the send trace is compiled, and its template known.
        for _ in 0..3 {
            group.act(0, send(1)).unwrap();
            group.act(0, send(2)).unwrap();
        }
        let (node, id) = &mut group.nodes[0];
        node.handle_fail(Instant::ZERO, *id, [2].into_iter().collect()).unwrap();
        group.pump();
        group.act(0, send(1)).unwrap();
        assert_eq!(group.act(0, send(2)), Err(crate::ApiError::MemberFailed { rank: 2 }), "{bypass:?}");
        let before = group.delivered[1];
        assert_eq!(group.act(0, send(1)), Ok(()), "{bypass:?}");
        assert_eq!(group.delivered[1], before + 1, "{bypass:?}");
    }
}
