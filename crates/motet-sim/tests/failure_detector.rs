//! The failure detector's two shapes (docs/membership.md, "Failure detection"), end to end in the
//! simulator: a quiet view's detector costs O(n) datagrams a sweep, any two failures at once are
//! found in one timeout, and three with the coordinator and its deputy among them take two (the
//! documented price), or one with `suspect.all_to_all` configured, at n(n-1) datagrams a sweep.

use motet_sim::scenario::Scenario;
use motet_sim::SimReport;

/// The scenario `script` (its lines after `nodes N` and `stack vsync`), run at `seed`, checked
/// against its expectations.
fn run(nodes: usize, script: &str, seed: u64, record: bool) -> (Scenario, SimReport) {
    run_with(nodes, script, seed, record, false)
}

/// As [`run`], with `suspect.all_to_all` set as given.
fn run_with(nodes: usize, script: &str, seed: u64, record: bool, all_to_all: bool) -> (Scenario, SimReport) {
    let text = format!("nodes {nodes}\nstack vsync\ncasts 0\nsends 0\n{script}");
    let mut scenario = Scenario::parse("failure_detector", &text).unwrap();
    scenario.options.record_datagrams = record;
    scenario.options.config.suspect.all_to_all = all_to_all;
    let report = scenario.run_seed(seed);
    let problems = scenario.check(&report);
    assert!(problems.is_empty(), "seed {seed}: {problems:?}");
    (scenario, report)
}

fn converge_ms(report: &SimReport) -> u64 {
    report.converge.expect("a run with faults that converged").as_millis()
}

#[test]
fn a_quiet_view_beats_through_the_coordinator_and_the_deputy() {
    // Nothing happens until the crash at 5 s: between 3 and 4 s the view is quiet.
    let n = 12;
    let (_, report) = run(n, "at 5000 crash 7\nexpect final: 0 1 2 3 4 5 6 8 9 10 11", 1, true);
    let in_window = |ms: u64| (3_000..4_000).contains(&ms);
    let received = report
        .datagrams_log
        .iter()
        .filter(|d| in_window(d.sent.saturating_since(motet_core::Instant::ZERO).as_millis()))
        .count();
    // Ten sweeps: two beats cast to 11 members and two pings from each of the other 10 is 42 a
    // sweep (n(n-1) = 132 with every member casting to every other), and `heal`'s hello from the
    // coordinator to its 11 peers every 500 ms adds 22: 442 in all, 1,342 all-to-all.
    assert!(received <= 10 * 5 * n, "{received} datagrams in a quiet second, n = {n}");
    assert!(received >= 10 * (4 * n - 6), "{received}: beats or pings are missing");
    // The crash of a member the others do not watch is found by the coordinator in one timeout.
    assert!(converge_ms(&report) < 1_600, "{} ms", converge_ms(&report));
}

#[test]
fn any_two_failures_at_once_are_found_in_one_timeout() {
    for pair in ["0 1", "0 3", "1 3", "3 4"] {
        for seed in 1..=3 {
            let rest: Vec<String> =
                (0..5).filter(|r| !pair.split(' ').any(|p| p == r.to_string())).map(|r| r.to_string()).collect();
            let script = format!("at 2000 crash {pair}\nexpect final: {}", rest.join(" "));
            let (_, report) = run(5, &script, seed, false);
            assert!(converge_ms(&report) < 1_600, "crash {pair}, seed {seed}: {} ms", converge_ms(&report));
        }
    }
}

#[test]
fn three_failures_with_the_coordinator_and_the_deputy_take_two_timeouts() {
    for seed in 1..=3 {
        let (_, report) = run(6, "at 2000 crash 0 1 4\nexpect final: 2 3 5", seed, false);
        // One timeout to suspect ranks 0 and 1, another for 4, whom nobody left was watching.
        assert!((2_000..3_000).contains(&converge_ms(&report)), "seed {seed}: {} ms", converge_ms(&report));
    }
}

#[test]
fn configured_all_to_all_finds_three_failures_in_one_timeout_and_costs_n_squared() {
    for seed in 1..=3 {
        let (_, report) = run_with(6, "at 2000 crash 0 1 4\nexpect final: 2 3 5", seed, false, true);
        assert!(converge_ms(&report) < 1_600, "seed {seed}: {} ms", converge_ms(&report));
    }
    let n = 12;
    let (_, report) = run_with(n, "at 5000 crash 7\nexpect final: 0 1 2 3 4 5 6 8 9 10 11", 1, true, true);
    let quiet = report
        .datagrams_log
        .iter()
        .filter(|d| (3_000..4_000).contains(&d.sent.saturating_since(motet_core::Instant::ZERO).as_millis()))
        .count();
    assert!(quiet >= 10 * n * (n - 1), "{quiet} datagrams in a quiet second, n = {n}");
}
