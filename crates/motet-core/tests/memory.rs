//! Memory per stack: what a group's stacks hold once traffic has settled, per member, as the view
//! grows. Motet is to serve many groups per process (10^5) and views of 100 and more members, so a
//! stack's memory must grow linearly with its view: per-origin state is fine, anything kept per
//! pair of members (a matrix of receive counts at every member, as `stable` once kept) is not.
//!
//! `allocation_counter` counts the bytes allocated and not freed on this thread while a group of
//! `n` members is built and runs casts from every member, then quiet rounds of timers (stability
//! empties the retransmission buffers). The figures are printed (docs/PERFORMANCE.md, "Memory per
//! stack"); the test asserts only the shape.

use allocation_counter::measure;
use motet_core::testkit::Group;
use motet_core::{Action, Bypass, Duration, Payload};

/// Bytes held per member by a settled `vsync` group of `n` members (its nodes and stacks, and
/// the test kit's per-member bookkeeping, which is linear); with `pairs`, also a seeded bug: a
/// count kept per pair of members at every member (8 bytes × n² each, as `stable`'s matrix was),
/// which the check must catch.
fn held_per_member(n: usize, pairs: bool) -> usize {
    let mut group = None;
    let info = measure(|| {
        let matrix = pairs.then(|| vec![0u64; n * n * n]);
        let mut g = Group::with_bypass(n, "vsync", Bypass::On);
        let payload = Payload::from(vec![1u8; 64]);
        for _ in 0..20 {
            for rank in 0..n {
                g.act(rank, Action::Cast(payload.clone())).expect("a member casts");
            }
            g.pump();
            g.tick(Duration::from_millis(50));
        }
        for _ in 0..30 {
            g.tick(Duration::from_millis(100));
        }
        assert_eq!(g.buffered(), 0, "stability emptied every buffer");
        group = Some((g, matrix));
    });
    drop(group);
    usize::try_from(info.bytes_current).expect("a group holds what it allocated") / n
}

/// From 16 to 32 to 64 members, what each member holds fits `a + b·n + c·n²` with `c` under two
/// bytes: nothing is kept per pair of members. (With 16, 32 and 64 members, `c` is the second
/// difference `(m64 − m32) − 2·(m32 − m16)` over 1,536.) `stable`'s full matrix of 8-byte counts
/// at every member, before it was held only by the coordinator, gave `c` = 8.0.
#[test]
fn a_stack_holds_memory_linear_in_its_view() {
    // A first group of two pays for what is allocated once per thread or process (the
    // allocator's and the tracing subscriber's own), so that the figures below are the groups'.
    held_per_member(2, false);
    let [m2, m16, m32, m64] = [2, 16, 32, 64].map(|n| held_per_member(n, false) as f64);
    let c = ((m64 - m32) - 2.0 * (m32 - m16)) / 1536.0;
    println!("bytes held per member: 2: {m2}, 16: {m16}, 32: {m32}, 64: {m64}; quadratic term {c:.2} bytes × n²");
    assert!(c < 2.0, "per-member memory grows with the square of the view: {m16} -> {m32} -> {m64} bytes (c = {c:.2})");
    // The check catches a count kept per pair of members (the seeded bug).
    let [s16, s32, s64] = [16, 32, 64].map(|n| held_per_member(n, true) as f64);
    let seeded = ((s64 - s32) - 2.0 * (s32 - s16)) / 1536.0;
    assert!(seeded >= 2.0, "a matrix per group went unnoticed: c = {seeded:.2}");
}
