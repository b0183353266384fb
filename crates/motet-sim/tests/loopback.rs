//! Applications that discard their own casts (`Action::Loopback(false)`, RMP's Message Bus
//! `loop-back`) and a turn's datagrams handled as one batch (`Node::handle_datagrams`, as the
//! runtime reads a bundle), under loss, reordering, a crash and a restart, with the bypass checked
//! against the layered path on every input.

use motet_core::{Bypass, StackSpec};
use motet_sim::options::SimOptions;
use motet_sim::oracle::{self, Channel};
use motet_sim::Violation;

fn options(seed: u64, stack: &str, no_loopback: Vec<usize>) -> SimOptions {
    let mut options = SimOptions::new(seed, 5, StackSpec::parse(stack).unwrap());
    options.net.loss = 0.05;
    options.net.reorder = 0.2;
    options.crashes = 1;
    options.restart = true;
    options.no_loopback = no_loopback;
    options.bundles = true;
    options.bypass = Bypass::Diff;
    options
}

#[test]
fn members_that_discard_their_own_casts_keep_every_guarantee_with_bundles() {
    for stack in ["vsync", "total", "causal"] {
        for seed in 1..=6 {
            let report = motet_sim::run(&options(seed, stack, vec![1, 3]));
            assert!(report.violations.is_empty(), "{stack} seed {seed}: {:?}", report.violations);
            assert!(report.bundled > 0, "{stack} seed {seed}: no datagram arrived in a bundle");
            let trace = &report.trace;
            let own = |node: usize| trace.deliveries.iter().filter(|d| d.node == node && d.origin == node).count();
            let others = |node: usize| trace.deliveries.iter().filter(|d| d.node == node && d.origin != node).count();
            let sent = |node: usize| trace.sent.iter().filter(|s| s.id.origin == node).count();
            for node in [1, 3].into_iter().filter(|&n| trace.crashed[n].is_none()) {
                assert!(sent(node) > 0 && others(node) > 0, "{stack} seed {seed}: node {node} took no part");
                // Its sends to itself aside (none: sends go to other members), nothing of its own.
                assert_eq!(own(node), 0, "{stack} seed {seed}: node {node} delivered its own casts");
            }
            assert!(own(0) > 0, "{stack} seed {seed}: node 0 takes its casts back");
        }
    }
}

/// The oracle sees a member's own casts delivered against its setting: the same kind of run with
/// every member taking them back, its trace then said to be of members that discard them.
#[test]
fn own_casts_delivered_against_the_setting_are_caught() {
    let mut report = motet_sim::run(&options(1, "vsync", vec![]));
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    report.trace.no_loopback = vec![false, true];
    let violations = oracle::check(&report.trace);
    assert!(!violations.is_empty());
    assert!(
        violations.iter().all(|v| matches!(v, Violation::OwnCast { node: 1, id } if id.channel == Channel::Cast)),
        "{violations:?}"
    );
}

/// A crashed process restarts as a new node with its application's setting: the restarted
/// endpoint discards its own casts too, and the oracles hold it to that.
#[test]
fn a_restarted_member_keeps_its_setting() {
    for (discards, seed) in [(true, 1), (true, 2), (false, 1)] {
        let mut options = options(seed, "vsync", if discards { vec![1] } else { vec![] });
        (options.crashes, options.crash_nodes) = (0, vec![1]);
        let report = motet_sim::run(&options);
        assert!(report.violations.is_empty(), "seed {seed}: {:?}", report.violations);
        assert_eq!(report.trace.nodes, 6, "seed {seed}: node 1 restarted as node 5");
        assert_eq!(report.trace.no_loopback.get(5).copied(), Some(discards), "seed {seed}");
        let merged = report.trace.views.iter().any(|v| v.node == 5 && v.members.len() > 1);
        assert!(merged, "seed {seed}: the restarted member merged back");
    }
}
