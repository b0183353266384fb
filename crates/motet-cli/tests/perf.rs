//! `motet perf` keeps its contract (issue 4): the JSON keys scripts rely on, with figures from a
//! real measurement (positive), at a small size so the suite stays fast. Figures are not judged
//! here: they are measured and reported (docs/PERFORMANCE.md).

fn perf(args: &[&str]) -> serde_json::Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_motet")).arg("perf").args(args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn latency_reports_the_contract_keys() {
    let report = perf(&["latency", "--samples", "200", "--json"]);
    for key in ["rtt_us_p50", "rtt_us_p99", "udp_rtt_us_p50", "ratio_p50"] {
        assert!(report[key].as_f64().unwrap() > 0.0, "{key}: {report}");
    }
    assert_eq!(report["samples"], 200);
}

#[test]
fn throughput_reports_the_contract_keys() {
    let report = perf(&["throughput", "--members", "2", "--size", "100", "--seconds", "1", "--json"]);
    for key in ["msgs_per_s", "mb_per_s", "udp_msgs_per_s"] {
        assert!(report[key].as_f64().unwrap() > 0.0, "{key}: {report}");
    }
}

#[test]
fn busy_poll_on_one_cpu_is_refused_with_a_reason() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_motet"))
        .args(["perf", "latency", "--busy-poll", "--pin", "same"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--pin split"));
}
