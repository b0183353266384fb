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
    assert!(report["bypass_hit_rate"].as_f64().unwrap() > 0.9, "the echoes took the bypass: {report}");
    assert_eq!(report["receive_offload_on"], false, "round trips keep the cheaper read: {report}");
}

/// The contract's keys, and blocks of both paths taking turns, each of which measured something
/// (a raw block after a raw block, and a Motet block after a switch back, included: four blocks
/// of each run raw, Motet, Motet, raw, raw, Motet, Motet, raw).
#[test]
fn throughput_reports_the_contract_keys_from_interleaved_blocks() {
    let report = perf(&["throughput", "--members", "2", "--size", "100", "--seconds", "1", "--blocks", "4", "--json"]);
    for key in ["msgs_per_s", "mb_per_s", "udp_msgs_per_s"] {
        assert!(report[key].as_f64().unwrap() > 0.0, "{key}: {report}");
    }
    assert_eq!(report["blocks"], 4);
    assert!(report["bypass_hit_rate"].as_f64().unwrap() > 0.5, "{report}");
    for key in ["msgs_per_s_blocks", "udp_msgs_per_s_blocks"] {
        let blocks = report[key].as_array().unwrap();
        assert_eq!(blocks.len(), 4, "{key}: {report}");
        assert!(blocks.iter().all(|b| b.as_f64().unwrap() > 0.0), "{key}: every block measured something: {report}");
    }
    assert!(refused(&["throughput", "--blocks", "0"]).contains("at least 1"));
}

/// Offered load beyond what the group takes (issue 4: under overload, throughput levels off
/// instead of collapsing, measured with offered load beyond saturation): the generator offers
/// open loop, what a member has no room for in its parked lot is refused and counted, and the
/// member goes on delivering. How far it levels off is measured, not judged here
/// (docs/PERFORMANCE.md).
#[test]
fn throughput_under_offered_load_beyond_saturation_counts_what_is_refused() {
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        // Straight to the process's stderr, which the harness does not capture: seen in every run.
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"SKIPPED the overload run: it needs two CPUs (the measured member pinned apart from the others)\n",
        );
        return;
    }
    // One block of each path: raw first, after the members stopped offering and emptied their
    // parked casts (`STOP`, answered by each), then the overloaded one. The measured member has
    // a CPU of its own and the two others share the other (`--pin split`), so that what it offers
    // outruns what they take. Unpinned and alike, each member's generator shares its CPU with
    // its protocol work, so it offers only what the group takes once the windows are large
    // enough to ride out the scheduler (512 KiB: two members unpinned took all of the 671,000
    // casts a second this debug build offered, and refused none).
    let args = ["throughput", "--members", "3", "--pin", "split", "--size", "64", "--seconds", "1", "--blocks", "1"];
    let report = perf(&[&args[..], &["--rate", "5000000", "--json"]].concat());
    let figure = |key: &str| report[key].as_f64().unwrap_or_else(|| panic!("{key}: {report}"));
    assert_eq!(report["offered_per_member"], 5_000_000);
    assert!(figure("refused_msgs_per_s") > 0.0, "a load no group takes is refused in part: {report}");
    assert!(figure("offered_msgs_per_s") > figure("refused_msgs_per_s"), "some of it is taken: {report}");
    assert!(figure("msgs_per_s") > 0.0 && figure("udp_msgs_per_s") > 0.0, "both paths measured: {report}");
    // Without a rate, the generator keeps just ahead of flow control: nothing is refused.
    let report = perf(&[&args[..], &["--json"]].concat());
    assert_eq!(report["refused_msgs_per_s"], 0.0, "{report}");
    assert!(report["offered_msgs_per_s"].as_f64().unwrap() > 0.0, "{report}");
}

/// The stderr of a `motet perf` run that must fail.
fn refused(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_motet")).arg("perf").args(args).output().unwrap();
    assert!(!out.status.success(), "{args:?} was accepted");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Pinned, the measured process and the others keep their CPUs in both phases.
#[test]
fn throughput_pinned_runs_both_phases_on_the_same_cpus() {
    assert!(refused(&["throughput", "--pin", "same"]).contains("expected none or split"));
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        // Straight to the process's stderr, which the harness does not capture: seen in every run.
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"SKIPPED the pinned throughput run: it needs two CPUs\n",
        );
        return;
    }
    let report = perf(&["throughput", "--members", "2", "--size", "64", "--seconds", "1", "--pin", "split", "--json"]);
    assert_eq!(report["pin"], "split");
    assert!(report["msgs_per_s"].as_f64().unwrap() > 0.0 && report["udp_msgs_per_s"].as_f64().unwrap() > 0.0);
}

#[test]
fn busy_poll_on_one_cpu_is_refused_with_a_reason() {
    assert!(refused(&["latency", "--busy-poll", "--pin", "same"]).contains("--pin split"));
}

/// No round trip would make a ratio of nothing (it printed `null`).
#[test]
fn a_latency_run_of_no_samples_is_refused_with_a_reason() {
    assert!(refused(&["latency", "--samples", "0"]).contains("at least one round trip"));
}

/// The blocks take turns and each path gets its share: the samples count, and the blocks asked
/// for (fewer when there are fewer samples than blocks).
#[test]
fn latency_interleaves_blocks_of_both_paths() {
    let report = perf(&["latency", "--samples", "30", "--blocks", "4", "--json"]);
    assert_eq!((report["samples"].as_u64(), report["blocks"].as_u64()), (Some(30), Some(4)));
    assert!(report["udp_rtt_us_p50"].as_f64().unwrap() > 0.0, "{report}");
    let report = perf(&["latency", "--samples", "3", "--blocks", "10", "--json"]);
    assert_eq!((report["samples"].as_u64(), report["blocks"].as_u64()), (Some(3), Some(3)));
}

/// A peer process ends its role's loop on SIGTERM and exits 0, as processes do: a profiling
/// runtime then writes its profile (`scripts/pgo` trains on both ends of a round trip). Killed by
/// the signal's default action, it exited with no status and wrote nothing.
#[test]
#[allow(clippy::disallowed_types)] // a wall-clock bound on the wait for the exit
fn a_peer_exits_cleanly_on_sigterm() {
    use std::io::BufRead;
    let free = || std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let (bind, peer, udp_bind, udp_target) = (free(), free(), free(), free());
    for role in ["echo", "blast"] {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_motet"))
            .args(["perf", "peer", "--role", role, "--group", "sigterm", "--stack", "vsync", "--bind", &bind])
            .args(["--peers", &peer, "--udp-bind", &udp_bind, "--udp-target", &udp_target])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready", "{role}");
        // Into its loop before the signal: a signal that came first would be seen at once.
        std::thread::sleep(std::time::Duration::from_millis(300));
        let pid = child.id().to_string();
        assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("the {role} peer did not exit within 10 s of SIGTERM");
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        assert!(status.success(), "the {role} peer exited with {status} on SIGTERM");
    }
}

/// Sizes the measurement cannot honour are refused: under 8 bytes (each message carries its
/// sequence number; they were measured as 8 and reported as asked), and above one
/// datagram, for both (throughput's raw baseline reported 0 with a ratio of `null`, latency's failed
/// with the OS's "Message too long").
#[test]
fn sizes_the_measurement_cannot_honour_are_refused() {
    assert!(refused(&["latency", "--size", "4"]).contains("at least 8 bytes"));
    assert!(refused(&["throughput", "--size", "4"]).contains("at least 8 bytes"));
    assert!(refused(&["throughput", "--size", "70000"]).contains("at most 65507 bytes"));
    assert!(refused(&["latency", "--size", "70000"]).contains("at most 65507 bytes"));
}

/// The peer processes end with the measuring process, even when it is killed before it can stop
/// them (SIGKILL here; a Ctrl-C's SIGINT likewise): before, they ran for ever, blocked in a raw
/// read or spinning.
#[test]
#[allow(clippy::disallowed_types)] // wall-clock waits for real processes
fn the_peers_end_with_the_measuring_process() {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_motet"))
        .args(["perf", "latency", "--samples", "50000000", "--blocks", "1", "--json"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let group = format!("perf-latency-{}", child.id());
    // The peers of this run: processes whose command line names its group.
    let pids = || -> Vec<String> {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|entry| {
                let path = entry.ok()?.path();
                let cmdline = std::fs::read(path.join("cmdline")).ok()?;
                String::from_utf8_lossy(&cmdline)
                    .contains(&group)
                    .then(|| path.file_name()?.to_str().map(String::from))?
            })
            .collect()
    };
    let peers = || pids().len();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while peers() == 0 {
        assert!(std::time::Instant::now() < deadline, "no peer started");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // Measuring by now (its view is formed within a few seconds).
    std::thread::sleep(std::time::Duration::from_secs(3));
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while peers() > 0 {
        if std::time::Instant::now() > deadline {
            let left = pids();
            let _ = std::process::Command::new("kill").arg("-9").args(&left).status();
            panic!("peers {left:?} outlived the measuring process");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A peer that dies during a throughput run fails the run: before, the measuring process went on
/// counting what the others still sent (the dead member stays in the view until suspected, and
/// flow control stalls on it) and printed those figures with status 0.
#[test]
#[allow(clippy::disallowed_types)] // wall-clock waits for real processes
fn a_throughput_run_whose_peer_dies_fails() {
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_motet"))
        .args(["perf", "throughput", "--members", "3", "--size", "64", "--seconds", "8", "--blocks", "4", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The measuring process's children are its peers.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut peers: Vec<String> = Vec::new();
    while peers.len() < 2 {
        assert!(std::time::Instant::now() < deadline, "the peers did not start");
        std::thread::sleep(std::time::Duration::from_millis(50));
        peers = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", child.id()))
            .unwrap_or_default()
            .split_whitespace()
            .map(String::from)
            .collect();
    }
    // Measuring by now (the view forms within a few seconds).
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert!(std::process::Command::new("kill").args(["-9", &peers[0]]).status().unwrap().success());
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "the run succeeded: {}", String::from_utf8_lossy(&output.stdout));
    assert!(stderr.contains("ended during the measurement"), "{stderr}");
}
