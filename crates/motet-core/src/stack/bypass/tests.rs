//! The bypass against the layered path, and the checker's seeded bugs.

use super::*;
use crate::event::Action;
use crate::stack::Bypass;
use crate::LayerKind;

fn cast(bypass: Bypass) -> Result<Stack, String> {
    let view = crate::testing::view_of("vsync", 3);
    let mut stack = Stack::with_bypass(view, 1, Instant::ZERO, bypass).unwrap();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        stack.handle_action(Instant::ZERO, Action::Cast(b"x".as_slice().into())).unwrap();
        // The layers' states are compared once delayed processing is done.
        stack.settle();
    }));
    match result {
        Ok(()) => Ok(stack),
        Err(panic) => Err(panic.downcast_ref::<String>().cloned().unwrap_or_default()),
    }
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
    // The same bug with the bypass on and no check: nothing notices.
    SKIP_ACTION.with(|s| s.set(Some(LayerKind::Mnak)));
    assert!(cast(Bypass::On).is_ok());
    SKIP_ACTION.with(|s| s.set(None));
}
