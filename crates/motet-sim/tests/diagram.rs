//! Pictures of a run: recording datagrams does not change the run, and the space-time diagram of
//! a small run with a crash and loss has what it should.

use motet_core::StackSpec;
use motet_sim::{render_svg, run, Lost, SimOptions};

fn small(seed: u64) -> SimOptions {
    let mut options = SimOptions::new(seed, 4, StackSpec::parse("vsync").unwrap());
    options.net.loss = 0.1;
    options.net.dup = 0.05;
    options.crashes = 1;
    options.casts = 8;
    options.sends = 2;
    options
}

#[test]
fn recording_datagrams_does_not_change_the_run() {
    let fifo = StackSpec::parse("fifo").unwrap();
    let vsync = StackSpec::parse("vsync").unwrap();
    for seed in 1..=12 {
        for stack in [&fifo, &vsync] {
            // Swarm options: loss, duplication, reordering, crashes, partitions and leaves.
            let plain = SimOptions::swarm(seed, 4, stack.clone());
            let mut recorded = plain.clone();
            recorded.record_datagrams = true;
            let (a, b) = (run(&plain), run(&recorded));
            assert!(a.datagrams_log.is_empty(), "recording is off by default");
            assert_eq!(a.trace_hash, b.trace_hash, "seed {seed} {stack}");
            assert_eq!((a.end, a.datagrams, a.datagrams_lost), (b.end, b.datagrams, b.datagrams_lost));
            // One record per datagram, plus one per duplicate copy; every loss is recorded.
            let duplicates = b.datagrams_log.iter().filter(|d| d.duplicate).count() as u64;
            assert_eq!(b.datagrams_log.len() as u64, b.datagrams + duplicates, "seed {seed}");
            let lost = b.datagrams_log.iter().filter(|d| d.lost.is_some()).count() as u64;
            assert_eq!(lost, b.datagrams_lost, "seed {seed}");
            for d in &b.datagrams_log {
                assert!(d.delivered.is_none() || d.lost.is_none());
                assert!(d.delivered.is_none_or(|at| at >= d.sent && at <= b.end));
                if let Some(Lost::ReceiverDown { at }) = d.lost {
                    // Down: crashed, or left the group (its stack ended).
                    assert!(b.trace.crashed[d.to].is_some_and(|crash| crash <= at) || b.trace.exited[d.to]);
                }
            }
        }
    }
}

#[test]
fn the_diagram_of_a_small_run_shows_members_crash_views_and_messages() {
    let mut options = small(5);
    options.record_datagrams = true;
    let report = run(&options);
    assert_eq!(report.violations, [], "{}", options.replay_command(false));
    let svg = render_svg(&report, &options);
    assert!(svg.starts_with("<svg "), "{}", &svg[..100]);
    assert!(svg.trim_end().ends_with("</svg>"));
    assert_eq!(svg.matches("<svg").count(), 1);
    // One line and one label per member.
    assert_eq!(svg.matches(r#"class="node">"#).count(), 4);
    for node in 0..4 {
        assert!(svg.contains(&format!(r#"class="node">node {node}</text>"#)), "node {node}");
    }
    // The crash, marked and in the story.
    assert_eq!(svg.matches(r#"class="crash halo">crash "#).count(), 1);
    assert!(svg.contains("crashes (fail-stop)"));
    // View bands: the initial view at every member, and the view without the crashed member at
    // the three survivors.
    assert_eq!(svg.matches(r#"class="view halo">v0<"#).count(), 4);
    assert!(svg.matches(r#"class="view halo">v1<"#).count() >= 3);
    // Title and verdict.
    assert!(svg.contains("seed 5") && svg.contains("4 nodes") && svg.contains(">PASS<"));
    // Lost datagrams and application messages.
    assert!(report.datagrams_lost > 0);
    assert!(svg.contains(r#"<path d="M"#) && svg.contains(r##"stroke="#1d4e89""##));
    // The text elements are balanced (a rough well-formedness check, no XML crate needed).
    assert_eq!(svg.matches("<text").count(), svg.matches("</text>").count());
    assert_eq!(svg.matches("<g ").count() + svg.matches("<g>").count(), svg.matches("</g>").count());
    assert!(!svg.contains("NaN") && !svg.contains("\"inf") && !svg.contains(" inf"));
}

#[test]
fn the_diagram_marks_partitions_and_violations() {
    // A partition, drawn as a band with the cut-off side.
    let mut options = SimOptions::new(3, 4, StackSpec::parse("fifo").unwrap());
    options.partitions.push(motet_sim::Partition { start_ms: 200, end_ms: 600, side: vec![1, 3], one_way: true });
    options.record_datagrams = true;
    let report = run(&options);
    let svg = render_svg(&report, &options);
    assert!(svg.contains("partition 200–600 ms: {1, 3} cut off (one way"), "no partition label");
    assert!(svg.contains("the network partitions"));

    // A stack without reliability under loss: the violations are marked at their messages.
    let mut options = SimOptions::new(2, 3, StackSpec::parse("top:appl:local:bottom").unwrap());
    options.net.loss = 0.3;
    let report = run(&options);
    assert!(!report.violations.is_empty());
    let svg = render_svg(&report, &options);
    assert!(svg.contains(">FAIL ("), "no verdict");
    assert!(svg.contains(r#"class="viol halo">cast "#), "no violation marker");
    assert!(svg.contains("datagrams were not recorded"), "the caption says what is missing");
}
