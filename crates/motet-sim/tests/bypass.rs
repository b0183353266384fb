//! The bypass (issue 6) changes nothing anyone can observe: on random stacks built from random
//! property sets, under random faults, every input run through both the bypass and the layered
//! path gives the same outputs and layer states (`Bypass::Diff`), and whole runs with the bypass
//! on and off have the same trace hash.

use motet_core::{Bypass, Property, StackSpec};
use motet_sim::{run, SimOptions, Violation};
use proptest::prelude::*;

fn bypass_differences(violations: &[Violation]) -> Vec<&Violation> {
    violations
        .iter()
        .filter(|v| matches!(v, Violation::Invariant { detail } if detail.contains("bypass diff")))
        .collect()
}

fn options(seed: u64, nodes: usize, stack: StackSpec, swarm: bool, bypass: Bypass) -> SimOptions {
    let mut options = if swarm { SimOptions::swarm(seed, nodes, stack) } else { SimOptions::new(seed, nodes, stack) };
    options.bypass = bypass;
    options.casts = 10;
    options
}

/// The simulator reports what the `Diff` checker catches (issue 6, end to end): with a seeded bug
/// in the bypass (it skips `mnak`'s action: `motet_core::faults`), a `--bypass diff` run reports a
/// "bypass diff" violation that says what differs; without it, the same run is clean.
#[test]
fn a_seeded_bypass_bug_is_reported_by_the_simulator() {
    let options = options(7, 3, StackSpec::parse("vsync").unwrap(), false, Bypass::Diff);
    assert_eq!(bypass_differences(&run(&options).violations), Vec::<&Violation>::new(), "clean without the bug");
    motet_core::faults::skip_action(Some(motet_core::LayerKind::Mnak));
    let skipped = run(&options);
    motet_core::faults::skip_action(None);
    let found = bypass_differences(&skipped.violations);
    assert_eq!(found.len(), 1, "the run stops at the first difference: {:?}", skipped.violations);
    let Violation::Invariant { detail } = found[0] else { unreachable!() };
    assert!(detail.contains("differ"), "it says what differs: {detail}");
}

/// Every stack a set of properties builds (a few in a hundred of the sets are valid: drawing
/// sets and rejecting the rest made proptest give up, now and then, after 1,024 rejections).
fn valid_stacks() -> Vec<StackSpec> {
    let n = Property::ALL.len();
    let sets = (0u32..1 << n).map(|mask| (0..n).filter(|i| mask & (1 << i) != 0).map(|i| Property::ALL[i]).collect());
    sets.filter_map(|properties: Vec<Property>| StackSpec::choose(&properties).ok()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn the_bypass_equals_the_layered_path_on_random_stacks(
        stack in proptest::sample::select(valid_stacks()),
        seed in 1u64..10_000,
        nodes in 2usize..6,
        swarm in any::<bool>(),
    ) {
        let diff = run(&options(seed, nodes, stack.clone(), swarm, Bypass::Diff));
        // A run that panicked has no trace hash: two such runs would compare equal.
        prop_assert!(!diff.trace_hash.is_empty(), "{stack}: the run panicked: {:?}", diff.violations);
        prop_assert!(bypass_differences(&diff.violations).is_empty(), "{stack}: {:?}", diff.violations);
        // And every other oracle: stacks no preset uses hid faults the presets' swarms never met
        // (a stack without `Local`, `sync` without membership, splits without `Heal`).
        prop_assert!(diff.violations.is_empty(), "{stack}, seed {seed}: {:?}", diff.violations);
        let off = run(&options(seed, nodes, stack.clone(), swarm, Bypass::Off));
        prop_assert_eq!(&diff.trace_hash, &off.trace_hash, "{}: the bypass changed the run", stack);
    }
}

#[test]
fn fault_free_runs_take_the_bypass() {
    for preset in ["fifo", "vsync", "total"] {
        let mut options = options(1, 5, StackSpec::parse(preset).unwrap(), false, Bypass::Diff);
        options.payload_max = 1000; // one fragment: larger messages take the layered path
        options.net.delay_mean_us = 0; // FIFO links: out-of-order arrivals take the layered path
        let report = run(&options);
        assert!(report.violations.is_empty(), "{preset}: {:?}", report.violations);
        let rate = report.bypass.hit_rate().unwrap();
        assert!(rate > 0.9, "{preset}: hit rate {rate} {:?}", report.bypass);
    }
}
