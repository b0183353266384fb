//! A node hosting stacks: routing by connection id, drops of bad input, old and new stacks side by
//! side, and flow control pushing back on a slow receiver.

use bytes::Bytes;
use motet_core::node::conn_id;
use motet_core::{
    Action, Address, ApiError, AppEvent, DropReason, EndpointId, GroupName, Instant, Node, StackConfig, StackSpec,
    ViewId, ViewState,
};
use std::sync::Arc;

fn view(ltime: u64, n: usize) -> Arc<ViewState> {
    let mut view = ViewState::initial(
        GroupName::new("g"),
        StackSpec::parse("fifo").unwrap(),
        StackConfig::default(),
        (0..n as u64).map(EndpointId).collect(),
        (0..n as u32).map(Address::Sim).collect(),
    );
    view.view_id = ViewId { ltime, coord: EndpointId(0) };
    Arc::new(view)
}

/// Moves every datagram from `from` to `to` (both directions are the caller's business).
fn forward(from: &mut Node, to: &mut Node) -> usize {
    let mut count = 0;
    while let Some(out) = from.poll_transmit() {
        if out.to.addresses().count() > 0 {
            to.handle_datagram(Instant::ZERO, out.to_bytes());
            count += 1;
        }
    }
    count
}

fn casts(node: &mut Node) -> Vec<Bytes> {
    std::iter::from_fn(|| node.poll_event())
        .filter_map(|(_, e)| match e {
            AppEvent::Cast { payload, .. } => Some(payload.to_bytes()),
            _ => None,
        })
        .collect()
}

#[test]
fn bad_datagrams_are_dropped_and_counted_by_reason() {
    let mut node = Node::new();
    node.join(Instant::ZERO, view(0, 2), 1).unwrap();
    node.handle_datagram(Instant::ZERO, Bytes::from_static(b"\x01\x02"));
    node.handle_datagram(Instant::ZERO, Bytes::from_static(&[0x20; 40]));
    assert_eq!(node.stats().drops(DropReason::Malformed), 2);
    // A well-formed datagram of a connection nobody here has.
    let mut other = Node::new();
    let id = other.join(Instant::ZERO, view(5, 2), 0).unwrap();
    other.handle_action(Instant::ZERO, id, Action::Cast(b"x".as_slice().into())).unwrap();
    forward(&mut other, &mut node);
    assert_eq!(node.stats().drops(DropReason::UnknownConn), 1);
}

#[test]
fn old_and_new_stacks_live_side_by_side_and_never_see_each_others_traffic() {
    let (old, new) = (view(1, 2), view(2, 2));
    assert_ne!(conn_id(&old), conn_id(&new), "each view has its own connection id");
    let (mut a, mut b) = (Node::new(), Node::new());
    let a_old = a.join(Instant::ZERO, Arc::clone(&old), 0).unwrap();
    let a_new = a.join(Instant::ZERO, Arc::clone(&new), 0).unwrap();
    let b_old = b.join(Instant::ZERO, old, 1).unwrap();
    let b_new = b.join(Instant::ZERO, new, 1).unwrap();
    while a.poll_event().is_some() {}
    while b.poll_event().is_some() {}

    a.handle_action(Instant::ZERO, a_old, Action::Cast(b"old".as_slice().into())).unwrap();
    a.handle_action(Instant::ZERO, a_new, Action::Cast(b"new".as_slice().into())).unwrap();
    while a.poll_event().is_some() {}
    forward(&mut a, &mut b);
    let delivered: Vec<_> = std::iter::from_fn(|| b.poll_event()).collect();
    assert_eq!(delivered.len(), 2);
    for (stack, event) in delivered {
        let AppEvent::Cast { payload, .. } = event else { panic!("{event:?}") };
        let expected = if stack == b_old { &b"old"[..] } else { &b"new"[..] };
        assert_eq!(&payload.to_bytes()[..], expected);
        assert!(stack == b_old || stack == b_new);
    }

    // The old stack exits: its route disappears and its traffic is dropped as unknown.
    b.handle_action(Instant::ZERO, b_old, Action::Leave).unwrap();
    assert!(matches!(b.poll_event(), Some((_, AppEvent::Exit))));
    assert!(b.stack(b_old).is_none() && b.stack(b_new).is_some());
    assert!(!b.routes(conn_id(&view(1, 2))));
    a.handle_action(Instant::ZERO, a_old, Action::Cast(b"late".as_slice().into())).unwrap();
    forward(&mut a, &mut b);
    assert_eq!(b.stats().drops(DropReason::UnknownConn), 1);
    assert_eq!(b.handle_action(Instant::ZERO, b_old, Action::Leave), Err(ApiError::NoSuchStack));
}

#[test]
fn a_slow_receiver_throttles_the_sender_without_loss_and_throughput_recovers() {
    let view = view(0, 2);
    let (mut a, mut b) = (Node::new(), Node::new());
    let a_id = a.join(Instant::ZERO, Arc::clone(&view), 0).unwrap();
    b.join(Instant::ZERO, view, 1).unwrap();
    while b.poll_event().is_some() {}
    // b is slow: a casts without ever hearing back.
    let mut accepted = 0u32;
    let blocked = loop {
        match a.handle_action(Instant::ZERO, a_id, Action::Cast(accepted.to_le_bytes().to_vec().into())) {
            Ok(()) => accepted += 1,
            Err(err) => break err,
        }
        assert!(accepted < 10_000, "flow control never pushed back");
    };
    assert_eq!(blocked, ApiError::FlowBlocked { dest: None });
    // The window's worth went out; one more was accepted, found the window full and waits in the
    // bounded pending queue; the next was refused.
    let window = window_of_small_casts();
    assert_eq!(accepted, window + 1);
    let mut released = false;
    while let Some((_, event)) = a.poll_event() {
        released |= event == AppEvent::FlowBlock { dest: None, blocked: false };
    }
    assert!(!released);
    // b catches up: its credit releases a, which continues where it stopped.
    forward(&mut a, &mut b);
    assert_eq!(casts(&mut b).len(), window as usize);
    forward(&mut b, &mut a);
    let events: Vec<_> = std::iter::from_fn(|| a.poll_event()).map(|(_, e)| e).collect();
    assert!(events.contains(&AppEvent::FlowBlock { dest: None, blocked: false }), "{events:?}");
    for i in accepted..accepted + 10 {
        a.handle_action(Instant::ZERO, a_id, Action::Cast(i.to_le_bytes().to_vec().into())).unwrap();
    }
    forward(&mut a, &mut b);
    let next = casts(&mut b);
    assert_eq!(next.len(), 11, "the queued cast and the ten new ones");
    assert_eq!(&next[0][..], &window.to_le_bytes()[..], "FIFO across the block");
    assert_eq!(&next[10][..], &(accepted + 9).to_le_bytes()[..]);
}

/// How many of these tests' casts (4 bytes each) `mflow`'s default window lets out before it
/// closes: it sends while less than the window is outstanding, each cast costing its bytes and the
/// charge.
fn window_of_small_casts() -> u32 {
    let cost = 4 + motet_core::layers::MESSAGE_CHARGE;
    StackConfig::default().mflow.window_bytes.div_ceil(cost) as u32
}

/// Moves datagrams both ways until neither node has anything to send.
fn exchange(a: &mut Node, b: &mut Node) {
    while forward(a, b) + forward(b, a) > 0 {}
}

#[test]
fn a_lagging_application_holds_its_senders_and_refuses_its_own_casts_until_it_catches_up() {
    let view = view(0, 2);
    let (mut a, mut b) = (Node::new(), Node::new());
    let a_id = a.join(Instant::ZERO, Arc::clone(&view), 0).unwrap();
    let b_id = b.join(Instant::ZERO, view, 1).unwrap();
    while a.poll_event().is_some() || b.poll_event().is_some() {}
    b.handle_action(Instant::ZERO, b_id, Action::Lagging(true)).unwrap();
    // a casts and b's stack receives everything at once, but b reports no credit: a's window
    // closes after a window's worth (and one more queued), as for a receiver that never hears.
    let mut accepted = 0u32;
    let blocked = loop {
        match a.handle_action(Instant::ZERO, a_id, Action::Cast(accepted.to_le_bytes().to_vec().into())) {
            Ok(()) => accepted += 1,
            Err(err) => break err,
        }
        exchange(&mut a, &mut b);
        assert!(accepted < 10_000, "a lagging receiver never held its sender back");
    };
    assert_eq!(blocked, ApiError::FlowBlocked { dest: None });
    let window = window_of_small_casts();
    assert_eq!(accepted, window + 1);
    assert_eq!(casts(&mut b).len(), window as usize);
    assert_eq!(casts(&mut a).len(), accepted as usize, "a's own, delivered back to it at once (`local`)");
    // b's own casts would come back to b: they are refused until it catches up.
    let refused = b.handle_action(Instant::ZERO, b_id, Action::Cast(b"own".as_slice().into()));
    assert_eq!(refused, Err(ApiError::FlowBlocked { dest: None }));
    // Caught up: the credit goes out, b may cast again (told so), and a continues where it
    // stopped, in order.
    b.handle_action(Instant::ZERO, b_id, Action::Lagging(false)).unwrap();
    let told: Vec<_> = std::iter::from_fn(|| b.poll_event()).map(|(_, e)| e).collect();
    assert!(told.contains(&AppEvent::FlowBlock { dest: None, blocked: false }), "{told:?}");
    b.handle_action(Instant::ZERO, b_id, Action::Cast(b"own".as_slice().into())).unwrap();
    exchange(&mut a, &mut b);
    let at_b = casts(&mut b);
    assert_eq!(at_b[0], Bytes::from_static(b"own"), "b's own, delivered back to it at once");
    assert_eq!(at_b[1], Bytes::from(window.to_le_bytes().to_vec()), "a's queued cast");
    assert_eq!(casts(&mut a), vec![Bytes::from_static(b"own")]);
    for i in accepted..accepted + 100 {
        a.handle_action(Instant::ZERO, a_id, Action::Cast(i.to_le_bytes().to_vec().into())).unwrap();
        exchange(&mut a, &mut b);
    }
    assert_eq!(casts(&mut b).len(), 100, "credit flows again");
}
