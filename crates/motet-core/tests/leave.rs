//! A member that leaves while it coordinates: the survivors install the view it casts even when
//! one of them lost that cast, which the leaver sends once before its stack exits.

use bytes::Bytes;
use motet_core::testkit::Group;
use motet_core::{Action, AppEvent, Duration, EndpointId};

/// Delivers datagrams as `Group::pump` does, but drops those from `from` to `to` that `from`
/// queued in the same turn in which its endpoint exited (its last: the view it cast as it left).
/// Returns whether it dropped any.
fn pump_losing_the_leavers_last(group: &mut Group, from: usize, to: usize) -> bool {
    let mut dropped = false;
    loop {
        let mut moved = false;
        for sender in 0..group.nodes.len() {
            // Events first, so that an exit is seen before the datagrams of its turn go out.
            let mut exited_now = false;
            while let Some((stack, event)) = group.nodes[sender].0.poll_event() {
                match event {
                    AppEvent::View { view, .. } => {
                        group.nodes[sender].1 = stack;
                        group.views[sender] = Some(view);
                    }
                    AppEvent::Exit => {
                        exited_now = !group.exited[sender];
                        group.exited[sender] = true;
                    }
                    _ => {}
                }
            }
            while let Some(out) = group.nodes[sender].0.poll_transmit() {
                moved = true;
                let datagram: Bytes = out.to_bytes();
                for address in out.to.addresses() {
                    let motet_core::Address::Sim(receiver) = address else { continue };
                    let receiver = receiver as usize;
                    if receiver >= group.nodes.len() {
                        continue;
                    }
                    if sender == from && receiver == to && exited_now {
                        dropped = true;
                        continue;
                    }
                    group.nodes[receiver].0.handle_datagram(group.now, datagram.clone());
                }
            }
        }
        for (node, _) in &mut group.nodes {
            node.settle();
            if node.poll_alarm().is_some_and(|at| at <= group.now) {
                node.handle_timeout(group.now);
                moved = true;
            }
        }
        if !moved {
            return dropped;
        }
    }
}

/// The coordinator (rank 0) of a three-member `vsync` group leaves; the view it casts without
/// itself reaches rank 1 but not rank 2. Rank 2 must still install it, from rank 1's copy, well
/// within `intra.commit_timeout` (5 s), after which it would go on alone and be merged back.
/// Before the fix, rank 2 NAKed only the origin, whose stack had exited.
#[test]
fn a_survivor_that_lost_a_leaving_coordinators_view_gets_it_from_another_survivor() {
    let mut group = Group::new(3, "vsync");
    assert!(group.views.iter().all(|v| v.as_ref().is_some_and(|v| v.members.len() == 3)));
    let id = group.nodes[0].1;
    group.nodes[0].0.handle_action(group.now, id, Action::Leave).unwrap();
    assert!(pump_losing_the_leavers_last(&mut group, 0, 2), "the leaver's last datagram to rank 2 was dropped");
    assert!(group.exited[0], "rank 0 left");
    let survivors = [EndpointId(1), EndpointId(2)];
    assert_eq!(group.views[1].as_ref().unwrap().members, survivors, "rank 1 got the view");
    // Time goes on in steps of 10 ms for a second: less than a fifth of the commit timeout.
    for _ in 0..100 {
        if group.views[2].as_ref().is_some_and(|v| v.members == survivors) {
            break;
        }
        group.now = group.now + Duration::from_millis(10);
        for (node, _) in &mut group.nodes {
            node.handle_timeout(group.now);
        }
        pump_losing_the_leavers_last(&mut group, 0, 2);
    }
    let at_2 = group.views[2].as_ref().unwrap();
    assert_eq!(at_2.members, survivors, "rank 2 installed the leaver's view within a second: {at_2:?}");
    assert_eq!(at_2.view_id, group.views[1].as_ref().unwrap().view_id, "the same view as rank 1's");
}

/// A member alone in its view that casts and then leaves at once gets its own casts first, in
/// every preset: in `total` and `safe` an own cast waits for its order (the sequencer's
/// end-of-turn announcement) or its acknowledgement, and the leave must not cut it off.
#[test]
fn a_lone_member_that_leaves_delivers_its_own_casts_first() {
    for stack in ["fifo", "vsync", "total", "safe", "causal", "vsync+Token"] {
        let mut group = Group::new(1, stack);
        let id = group.nodes[0].1;
        group.nodes[0].0.handle_action(group.now, id, Action::Cast(bytes::Bytes::from_static(b"last").into())).unwrap();
        group.nodes[0].0.handle_action(group.now, id, Action::Leave).unwrap();
        for _ in 0..100 {
            if group.exited[0] {
                break;
            }
            group.tick(Duration::from_millis(10));
        }
        assert!(group.exited[0], "{stack}: left");
        assert_eq!(group.delivered[0], 1, "{stack}: its own cast before its exit");
    }
}
