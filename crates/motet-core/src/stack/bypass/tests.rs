//! The bypass against the layered path, and the checker's seeded bugs.

use super::*;
use crate::event::Action;
use crate::stack::{Bypass, Transmit};
use crate::LayerKind;
use motet_wire::Mux;

/// Rank 1's stack of a 3-member `vsync` view after `input` and delayed processing (the layers'
/// states are compared once it is done), or what the diff's panic said.
fn after(bypass: Bypass, input: impl FnOnce(&mut Stack)) -> Result<Stack, String> {
    let view = crate::testing::view_of("vsync", 3);
    let mut stack = Stack::with_bypass(view, 1, Instant::ZERO, bypass).unwrap();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        input(&mut stack);
        stack.settle();
    }));
    match result {
        Ok(()) => Ok(stack),
        Err(panic) => Err(panic.downcast_ref::<String>().cloned().unwrap_or_default()),
    }
}

fn cast(bypass: Bypass) -> Result<Stack, String> {
    after(bypass, |stack| stack.handle_action(Instant::ZERO, Action::Cast(b"x".as_slice().into())).unwrap())
}

#[test]
fn a_cast_takes_the_bypass_and_equals_the_layered_path() {
    let stack = cast(Bypass::Diff).unwrap();
    assert_eq!((stack.bypass_stats().hits, stack.bypass_stats().misses), (1, 0));
    let transmit = &stack.transmits[0];
    assert_eq!(transmit.mux, Mux::Cast);
    assert_eq!(transmit.msg.hdrs.len(), stack.layers.len() - stack.appl);
    assert!(matches!(stack.app.back(), Some(crate::AppEvent::Cast { origin: 1, .. })), "looped back");
}

#[test]
fn the_diff_catches_a_bypass_that_skips_a_layers_bookkeeping() {
    for layer in [LayerKind::Mnak, LayerKind::Mflow] {
        SKIP_ACTION.with(|s| s.set(Some(layer)));
        let caught = cast(Bypass::Diff).err();
        SKIP_ACTION.with(|s| s.set(None));
        let message = caught.unwrap_or_else(|| panic!("a skipped {layer:?} action went unnoticed"));
        assert!(message.contains(&format!("layer {} differs", layer.name())), "{message}");
    }
    // `appl`'s action on the loop-back branch (the cast's delivery to its sender), which the
    // fused trace runs by `appl`'s type.
    let before = APPL_BRANCHES.with(std::cell::Cell::get);
    SKIP_ACTION.with(|s| s.set(Some(LayerKind::Appl)));
    let caught = cast(Bypass::Diff).err();
    SKIP_ACTION.with(|s| s.set(None));
    assert_eq!(APPL_BRANCHES.with(std::cell::Cell::get), before + 1, "the typed branch ran");
    let message = caught.expect("a skipped delivery to the sender went unnoticed");
    assert!(message.contains("differ"), "{message}");
    // The same bug with the bypass on and no check: nothing notices.
    SKIP_ACTION.with(|s| s.set(Some(LayerKind::Mnak)));
    assert!(cast(Bypass::On).is_ok());
    SKIP_ACTION.with(|s| s.set(None));
}

/// Rank 0's first cast, as `receiver` gets it from a compressed datagram: its headers rebuilt from
/// the receiver's own template, as the node does.
fn received_cast(receiver: &Stack) -> Msg {
    let view = crate::testing::view_of("vsync", 3);
    let mut sender = Stack::with_bypass(view, 0, Instant::ZERO, Bypass::On).unwrap();
    sender.handle_action(Instant::ZERO, Action::Cast(b"y".as_slice().into())).unwrap();
    let sent = sender.transmits.pop_front().expect("the cast").msg;
    let low = sender.compress(&Transmit { mux: Mux::Cast, msg: sent.clone(), to: None }).expect("compressed");
    let low = (low & 0xff_ffff) as u32; // what goes on the wire
    Msg { hdrs: receiver.expand(0, true, low).expect("the receiver's template"), payload: sent.payload }
}

fn receive(bypass: Bypass) -> Result<Stack, String> {
    after(bypass, |stack| {
        let msg = received_cast(stack);
        stack.handle_recv(Instant::ZERO, 0, Mux::Cast, msg);
    })
}

/// A cast that `frag` splits takes the general handler going down (no fused shape splits), and
/// the diff catches a layer's skipped action there too (before, every seeded skip ran on fused
/// traces, and the general handler's hook was never exercised).
#[test]
fn the_diff_catches_a_skipped_action_on_the_general_trace_going_down() {
    let split = |bypass| {
        after(bypass, |stack| stack.handle_action(Instant::ZERO, Action::Cast(vec![7u8; 4_000].into())).unwrap())
    };
    let stack = split(Bypass::Diff).unwrap();
    assert_eq!(stack.bypass_stats().hits, 1, "the split cast took the bypass");
    assert!(stack.transmits.len() >= 4, "in parts: {}", stack.transmits.len());
    for layer in [LayerKind::Mnak, LayerKind::Mflow] {
        SKIP_ACTION.with(|s| s.set(Some(layer)));
        let caught = split(Bypass::Diff).err();
        SKIP_ACTION.with(|s| s.set(None));
        let message = caught.unwrap_or_else(|| panic!("a skipped {layer:?} action went unnoticed"));
        assert!(message.contains("differ"), "{message}");
    }
}

/// A received cast takes the fused trace (`vsync`'s shape has one), and the diff still catches a
/// layer's skipped action there (it is checked like the general handler). The same for a cast
/// going down: `the_diff_catches_a_bypass_that_skips_a_layers_bookkeeping`.
#[test]
fn the_diff_catches_a_skipped_action_on_a_fused_trace_going_up() {
    let stack = receive(Bypass::Diff).unwrap();
    assert_eq!((stack.bypass_stats().hits, stack.bypass_stats().compiled), (1, 1));
    assert!(matches!(stack.app.back(), Some(crate::AppEvent::Cast { origin: 0, .. })), "delivered");
    for layer in [LayerKind::Mnak, LayerKind::Mflow, LayerKind::Appl] {
        SKIP_ACTION.with(|s| s.set(Some(layer)));
        let caught = receive(Bypass::Diff).err();
        SKIP_ACTION.with(|s| s.set(None));
        let message = caught.unwrap_or_else(|| panic!("a skipped {layer:?} action went unnoticed"));
        assert!(message.contains("differ"), "{message}");
    }
}

/// With the loop-back off (`Action::Loopback(false)`), a cast is sent as before but not
/// delivered to its sender, on the bypass (which then takes no loop-back branch) as on the
/// layered path; the others' casts are still delivered.
#[test]
fn a_member_without_loopback_gets_the_others_casts_and_not_its_own() {
    for bypass in [Bypass::Diff, Bypass::Off] {
        let view = crate::testing::view_of("vsync", 3);
        let mut stack = Stack::with_bypass(view, 1, Instant::ZERO, bypass).unwrap();
        stack.handle_action(Instant::ZERO, Action::Loopback(false)).unwrap();
        stack.app.clear();
        stack.handle_action(Instant::ZERO, Action::Cast(b"x".as_slice().into())).unwrap();
        stack.settle();
        assert_eq!(stack.transmits.len(), 1, "{bypass:?}: the cast goes out");
        assert!(stack.app.is_empty(), "{bypass:?}: not delivered to its sender: {:?}", stack.app);
        if bypass == Bypass::Diff {
            assert_eq!(stack.bypass_stats().hits, 1);
        }
        let msg = received_cast(&stack);
        stack.handle_recv(Instant::ZERO, 0, Mux::Cast, msg);
        assert!(matches!(stack.app.back(), Some(crate::AppEvent::Cast { origin: 0, .. })), "{bypass:?}");
        stack.handle_action(Instant::ZERO, Action::Loopback(true)).unwrap();
        stack.handle_action(Instant::ZERO, Action::Cast(b"z".as_slice().into())).unwrap();
        assert!(matches!(stack.app.back(), Some(crate::AppEvent::Cast { origin: 1, .. })), "{bypass:?}: on again");
    }
}
