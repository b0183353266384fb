//! Every scripted scenario in `tests/scenarios/` passes: no oracle violation and the expected
//! views (issue 3, item 7).

use motet_sim::scenario::Scenario;

#[test]
fn scripted_scenarios_pass() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(files.len() >= 6, "scenarios missing: {files:?}");
    let mut failures = Vec::new();
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let scenario = Scenario::parse(&name, &std::fs::read_to_string(&path).unwrap()).unwrap();
        failures.extend(scenario.failures(1..=5));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_scenario_expecting_the_wrong_views_fails() {
    let scenario = Scenario::parse("wrong", "nodes 3\nat 500 crash 2\nexpect final: 0 1 2\n").unwrap();
    let problems = scenario.check(&motet_sim::run(&scenario.options));
    assert!(problems.iter().any(|p| p.contains("expected")), "{problems:?}");
    assert!(Scenario::parse("bad", "nodes three").unwrap_err().contains("bad:1"));
    // Without the Primary property no view after the first is primary.
    let scenario = Scenario::parse("flags", "nodes 3\nat 500 crash 2\nexpect primary 0: yes\n").unwrap();
    let problems = scenario.check(&motet_sim::run(&scenario.options));
    assert!(problems.iter().any(|p| p.contains("primary [false]")), "{problems:?}");
    // Two nodes a partition separates were not together.
    let scenario = Scenario::parse("apart", "nodes 3\nat 200 partition 0\nexpect together: 0 1\n").unwrap();
    let problems = scenario.check(&motet_sim::run(&scenario.options));
    assert!(problems.iter().any(|p| p.contains("without all of {0, 1}")), "{problems:?}");
}
