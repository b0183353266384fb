//! Delayed processing (thesis §3.4.3): kept copies filed after the transmit or delivery.

use super::*;
use crate::event::Action;
use crate::stack::delayed::SETTLE_BATCH;
use crate::stack::{Bypass, SETTLE_LATE};
use crate::testkit::Group;
use crate::time::Duration;
use crate::ViewState;

fn buffered_at(stack: &Stack, layer: &str) -> usize {
    stack.buffered_by_layer().into_iter().find(|(name, _)| *name == layer).map_or(0, |(_, n)| n)
}

/// A split into more parts than delayed processing may hold, and the long run a gap-filling
/// cast releases, keep the bound (`Stack::check_invariants`) without the driver settling.
#[test]
fn a_long_split_and_a_long_release_keep_delayed_work_bounded() {
    let mut group = Group::with_bypass(2, "vsync", Bypass::Diff);
    group.settle = false;
    // 60 parts of 1,024 B: all within `mflow`'s window, each keeping a copy at `mnak`.
    group.act(1, Action::Cast(vec![3; 60 * 1024].into())).unwrap();
    for (node, _) in &group.nodes {
        node.check_invariants();
    }
    assert_eq!(group.delivered, [1, 1]);
    // Rank 0 gets 60 casts with the first last: 59 are held, then one input releases them.
    let mut group = Group::with_bypass(2, "vsync", Bypass::Diff);
    group.settle = false;
    let (sender, id) = &mut group.nodes[1];
    let mut datagrams = Vec::new();
    for k in 0..60u8 {
        sender.handle_action(group.now, *id, Action::Cast(vec![k; 8].into())).unwrap();
        datagrams.extend(std::iter::from_fn(|| sender.poll_transmit()).map(|out| out.to_bytes()));
    }
    let receiver = &mut group.nodes[0].0;
    for datagram in datagrams[1..].iter().chain(&datagrams[..1]) {
        receiver.handle_datagram(group.now, datagram.clone());
        receiver.check_invariants();
    }
    let casts = std::iter::from_fn(|| receiver.poll_event()).filter(|(_, e)| matches!(e, crate::AppEvent::Cast { .. }));
    assert_eq!(casts.count(), 60);
}

#[test]
fn a_kept_copy_is_filed_after_the_transmit_and_before_any_other_input() {
    let view = crate::testing::view_of("vsync", 3);
    let mut stack = Stack::with_bypass(view, 1, Instant::ZERO, Bypass::Diff).unwrap();
    stack.handle_action(Instant::ZERO, Action::Cast(b"x".as_slice().into())).unwrap();
    assert_eq!(stack.bypass_stats().compiled, 1);
    // Transmitted and looped back; mnak's copy for retransmission waits.
    assert_eq!(stack.transmits.len(), 1);
    assert!(stack.unsettled());
    assert_eq!(buffered_at(&stack, "mnak"), 0);
    assert_eq!(stack.buffered(), 1, "a copy waiting to be filed still counts as buffered");
    // And in the per-layer list (the simulator's report of a run that did not settle): before, it
    // summed to 0 here, and a run under the bypass reported other counts than the layered path.
    assert_eq!(buffered_at(&stack, "delayed"), 1);
    assert_eq!(stack.buffered_by_layer().iter().map(|(_, n)| n).sum::<usize>(), stack.buffered());
    // `Diff` settles whenever idle (a batch of one), since it compares the layers only then.
    assert!(stack.settle_due());
    assert_eq!(stack.poll_timeout(), Some(Instant::ZERO), "the driver is asked to come back at once");
    // A send: pt2pt's copy and its retransmission alarm wait too, behind the cast's.
    let pt2pt = stack.view.stack.layers().iter().position(|&k| k == crate::LayerKind::Pt2pt).unwrap();
    stack.handle_action(Instant::ZERO, Action::send(2, b"y".as_slice().into())).unwrap();
    assert_eq!(stack.delayed.len(), 2);
    assert_eq!(stack.alarms[pt2pt], None);
    // The driver is idle: the copies are filed (and `Diff` compares every layer).
    stack.settle();
    assert!(!stack.unsettled());
    assert_eq!((buffered_at(&stack, "mnak"), buffered_at(&stack, "pt2pt")), (1, 1));
    assert!(stack.alarms[pt2pt].is_some(), "pt2pt's sweep is armed");
    // An input off the compiled traces settles first: a failure notice finds the buffers
    // filled.
    stack.handle_action(Instant::ZERO, Action::Cast(b"z".as_slice().into())).unwrap();
    assert!(stack.unsettled());
    let mut failed = crate::view::RankSet::new();
    failed.insert(0);
    stack.handle_fail(Instant::ZERO, failed);
    assert!(!stack.unsettled());
    stack.check_invariants();
}

#[test]
fn compiled_traces_run_ahead_of_delayed_processing_and_equal_the_layered_path() {
    // The pump never settles: only the inputs that need it do, and the end of the test. Every
    // input is compared with the layered path; the layers' states at each settling.
    let mut group = Group::with_bypass(3, "vsync", Bypass::Diff);
    group.settle = false;
    for k in 0..200u8 {
        group.act(usize::from(k % 3), Action::Cast(vec![k; 8].into())).unwrap();
        group.act(1, Action::send(2, vec![k; 8].into())).unwrap();
        if k % 50 == 0 {
            group.tick(Duration::from_millis(60)); // sweeps and NAK timers: settle first
        }
    }
    let compiled: u64 = group.nodes.iter().map(|(node, _)| node.bypass_stats().compiled).sum();
    assert!(compiled > 600, "{compiled}");
    assert!(group.nodes.iter().any(|(node, _)| node.stacks().any(|(_, s)| s.unsettled())));
    for (node, _) in &mut group.nodes {
        node.settle();
        node.check_invariants();
    }
    assert_eq!(group.delivered, [200, 200, 400]);
}

#[test]
fn the_diff_catches_an_input_that_does_not_settle_first() {
    let view = crate::testing::view_of("vsync", 3);
    let late = |settle_late: bool| {
        let mut stack = Stack::with_bypass(Arc::clone(&view), 1, Instant::ZERO, Bypass::Diff).unwrap();
        stack.handle_action(Instant::ZERO, Action::send(0, b"x".as_slice().into())).unwrap();
        SETTLE_LATE.with(|s| s.set(settle_late));
        // pt2pt's sweep retransmits the unacknowledged send: only if its copy was filed.
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            stack.handle_timeout(Instant::ZERO + Duration::from_millis(1_000));
        }));
        SETTLE_LATE.with(|s| s.set(false));
        result.err().and_then(|e| e.downcast_ref::<String>().cloned())
    };
    assert_eq!(late(false), None);
    let caught = late(true).expect("a retransmission buffer filed late went unnoticed");
    assert!(caught.contains("bypass diff after a timeout"), "{caught}");
}

/// `Diff` settles in batches, as `On` does, in views of odd logical time: compiled traces then run
/// ahead of the copies they leave waiting and are still compared with the layered twin at every
/// input, and a bug in what waits is still caught (here, a timer that does not settle first).
/// Before, `Diff` always settled after each input, and copies never waited across inputs.
#[test]
fn in_views_of_odd_logical_time_the_diff_settles_in_batches() {
    let base = crate::testing::view_of("vsync", 3);
    let at = |ltime: u64| {
        Arc::new(ViewState { view_id: crate::view::ViewId { ltime, ..base.view_id }, ..ViewState::clone(&base) })
    };
    let waiting = |view: Arc<ViewState>| {
        let mut stack = Stack::with_bypass(view, 1, Instant::ZERO, Bypass::Diff).unwrap();
        stack.handle_action(Instant::ZERO, Action::send(0, b"x".as_slice().into())).unwrap();
        stack.handle_action(Instant::ZERO, Action::send(0, b"y".as_slice().into())).unwrap();
        assert_eq!(stack.bypass_stats().compiled, 2);
        (stack.settle_due(), stack)
    };
    assert!(waiting(at(2)).0, "an even view settles whenever idle");
    let (due, mut stack) = waiting(at(3));
    assert!(!due && stack.unsettled(), "two copies wait for a batch of {SETTLE_BATCH}");
    SETTLE_LATE.with(|s| s.set(true));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        stack.handle_timeout(Instant::ZERO + Duration::from_millis(1_000));
    }));
    SETTLE_LATE.with(|s| s.set(false));
    let caught = result.err().and_then(|e| e.downcast_ref::<String>().cloned()).expect("caught");
    assert!(caught.contains("bypass diff after a timeout"), "{caught}");
}

#[test]
fn delayed_processing_goes_in_batches_and_a_batch_that_does_not_fill_waits_for_its_deadline() {
    let view = crate::testing::view_of("vsync", 3);
    let mut stack = Stack::with_bypass(view, 1, Instant::ZERO, Bypass::On).unwrap();
    let at = |ms: u64| Instant::ZERO + Duration::from_millis(ms);
    // Casts a millisecond apart: each leaves a copy for mnak, whose filing sets no alarm, so
    // they wait for a full batch or the stack's next input that needs them.
    for k in 0..SETTLE_BATCH as u64 - 1 {
        stack.handle_action(at(k), Action::Cast(vec![k as u8; 4].into())).unwrap();
        assert!(!stack.settle_due(), "{k}");
        assert_eq!(stack.settle_deadline(), None, "{k}");
        assert_eq!(stack.poll_wake(), stack.poll_alarm(), "{k}");
        assert_eq!(stack.poll_timeout(), stack.poll_alarm(), "{k}");
    }
    // The batch fills: due now.
    stack.handle_action(at(SETTLE_BATCH as u64), Action::Cast(b"x".as_slice().into())).unwrap();
    assert!(stack.settle_due());
    assert_eq!(stack.poll_timeout(), Some(at(0)), "a full batch is due at once");
    stack.settle();
    assert_eq!((stack.settle_deadline(), stack.settle_due(), stack.unsettled()), (None, false, false));
    // A send's copy arms pt2pt's sweep when it is filed: it may wait a sweep interval after its
    // input, no more, and a timeout at that deadline files it (with the send waiting longer,
    // the sweep that retransmits it would fire late).
    // The deadline is the send's, not the first copy's: a cast first (no deadline), then the send.
    let sweep = stack.view.params.pt2pt.sweep_interval;
    stack.handle_action(at(100), Action::Cast(b"z".as_slice().into())).unwrap();
    assert_eq!(stack.settle_deadline(), None);
    stack.handle_action(at(101), Action::send(2, b"y".as_slice().into())).unwrap();
    assert_eq!(stack.settle_deadline(), Some(at(101) + sweep));
    assert_eq!(stack.poll_wake(), [stack.poll_alarm(), Some(at(101) + sweep)].into_iter().flatten().min());
    assert!(stack.poll_timeout().is_some_and(|t| t <= at(101) + sweep));
    stack.handle_timeout(at(101) + sweep);
    assert!(!stack.unsettled(), "filed by the timeout");
    assert!(stack.poll_alarm().is_some_and(|t| t > at(101) + sweep), "the sweep fired and was armed again");
    stack.check_invariants();
}

/// The seeded bug: a layer that declares a longer wait than its filing allows (pt2pt's copies
/// said to wait two sweep intervals) is caught when the copy is filed, in debug builds.
#[test]
fn a_wait_longer_than_the_alarm_filing_sets_is_caught() {
    let view = crate::testing::view_of("vsync", 3);
    let run = |stretch: u64| {
        let mut stack = Stack::with_bypass(Arc::clone(&view), 1, Instant::ZERO, Bypass::On).unwrap();
        let pt2pt = stack.view.stack.layers().iter().position(|&k| k == crate::LayerKind::Pt2pt).unwrap();
        stack.delayed.waits[pt2pt] = Duration(stack.view.params.pt2pt.sweep_interval.0 * stretch);
        stack.handle_action(Instant::ZERO, Action::send(2, b"y".as_slice().into())).unwrap();
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| stack.settle())).err()
    };
    assert!(run(1).is_none(), "the declared wait holds");
    if cfg!(debug_assertions) {
        let caught = run(2).expect("a wait longer than the sweep went unnoticed");
        let text = caught.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(text.contains("Pt2pt's fast_keep set an alarm sooner than its fast_keep_wait"), "{text}");
    }
}

/// A copy of a layer that declares no wait (the default) makes the copies due at the driver's next
/// idle moment, as a full batch does: not at a deadline of its input's time.
#[test]
fn a_copy_of_a_layer_without_a_wait_is_due_at_once() {
    let view = crate::testing::view_of("vsync", 3);
    let mut stack = Stack::with_bypass(view, 1, Instant::ZERO, Bypass::On).unwrap();
    let pt2pt = stack.view.stack.layers().iter().position(|&k| k == crate::LayerKind::Pt2pt).unwrap();
    stack.delayed.waits[pt2pt] = Duration::ZERO;
    stack.handle_action(Instant::ZERO, Action::send(2, b"y".as_slice().into())).unwrap();
    assert!(stack.settle_due(), "due as a full batch");
    assert_eq!(stack.settle_deadline(), None);
    stack.settle();
    assert!(!stack.settle_due() && !stack.unsettled());
    stack.handle_action(Instant::ZERO, Action::Cast(b"x".as_slice().into())).unwrap();
    assert!(!stack.settle_due(), "mnak's copy alone waits");
}
