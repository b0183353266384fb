//! The diagram's tests: the compressed time scale, the labels and the merged story, and a run with
//! too many datagrams to draw.

use super::text::{esc, members_label, merge_story, probability, time_label};
use super::*;
use crate::oracle::Trace;
use motet_core::layer::Stats;
use motet_core::StackSpec;

#[test]
fn long_quiet_stretches_are_compressed_and_time_still_flows_down() {
    let s = 1_000_000_000;
    // Activity in the first 5 s, then nothing until 120 s.
    let scale = Scale::new(100.0, 120 * s, &[0, s, 3 * s, 5 * s, 120 * s]);
    assert_eq!(scale.breaks.len(), 1);
    let (from, to) = scale.breaks[0];
    assert!(from > 5 * s && to < 120 * s && to - from > 100 * s);
    let mut previous = f64::MIN;
    for t in (0..=121).map(|i| Instant(i * s)) {
        let y = scale.y(t);
        assert!(y >= previous, "{t:?}");
        previous = y;
    }
    assert!((scale.y(Instant(scale.end)) - (100.0 + PLOT_H)).abs() < 1e-6);
    // Most of the height goes to the first 5 s.
    assert!(scale.y(Instant(5 * s)) > 100.0 + PLOT_H * 0.8);
    // No break in a busy run, or for short gaps.
    let busy = Scale::new(0.0, 2 * s, &[0, s / 2, s, 2 * s]);
    assert!(busy.breaks.is_empty());
    assert!((busy.y(Instant(s)) - PLOT_H / 2.0 / 1.04).abs() < 1.0);
}

#[test]
fn labels() {
    assert_eq!(members_label(&[4, 0, 1, 2, 3, 7, 9, 10]), "0–4, 7, 9, 10");
    assert_eq!(members_label(&[]), "");
    assert_eq!(time_label(1500.0, 100.0), "1500 ms");
    assert_eq!(time_label(120_000.0, 5000.0), "120 s");
    assert_eq!(time_label(0.5, 0.1), "0.5 ms");
    assert_eq!([probability(0.1), probability(0.0), probability(0.007345)], ["0.1", "0", "0.007"]);
    assert_eq!(esc("a<b & \"c\">"), "a&lt;b &amp; &quot;c&quot;&gt;");
    let story = [
        (Instant(10), "node 3 crashes".to_string()),
        (Instant(20), "node 0 installs view 1 of [0, 1, 2]".to_string()),
        (Instant(21), "node 2 installs view 1 of [0, 1, 2]".to_string()),
        (Instant(22), "node 1 installs view 1 of [0, 1, 2]".to_string()),
        (Instant(900), "node 4 installs view 1 of [0, 1, 2]".to_string()),
        (Instant(950), "the network heals".to_string()),
    ];
    let merged: Vec<String> = merge_story(&story, 100).into_iter().map(|(_, text)| text).collect();
    assert_eq!(
        merged,
        [
            "node 3 crashes",
            "nodes 0, 2, 1: installs view 1 of [0, 1, 2]",
            "node 4 installs view 1 of [0, 1, 2]",
            "the network heals"
        ]
    );
}

#[test]
fn many_datagrams_are_left_out_and_the_caption_says_so() {
    let options = SimOptions::new(1, 2, StackSpec::parse("fifo").unwrap());
    let record = |i: u64| DatagramRecord {
        from: (i % 2) as usize,
        to: 1 - (i % 2) as usize,
        sent: Instant(i * 1_000),
        delivered: (!i.is_multiple_of(10)).then_some(Instant(i * 1_000 + 500)),
        duplicate: false,
        lost: i.is_multiple_of(10).then_some(Lost::Network),
    };
    let report = |records: u64| SimReport {
        seed: 1,
        trace_hash: "0123456789abcdef".into(),
        violations: Vec::new(),
        cast_deliveries: 0,
        send_deliveries: 0,
        datagrams: records,
        datagrams_lost: records / 10,
        bundled: 0,
        end: Instant(records * 1_000 + 1_000),
        stats: Stats::default(),
        story: Vec::new(),
        views_installed: 0,
        bypass: motet_core::BypassStats::default(),
        converge: None,
        trace: Trace { nodes: 2, crashed: vec![None, None], ..Trace::default() },
        datagrams_log: (0..records).map(record).collect(),
    };
    let mut options = options;
    options.record_datagrams = true;
    // Lost stubs end in an x (`l5 5M`, also once in the legend); delivered datagrams are the
    // lines of the datagram group.
    let lost = |svg: &str| svg.matches("l5 5M").count() - 1;
    let datagram_lines = |svg: &str| {
        svg.split_once(&format!(r#"<g stroke="{DATAGRAM_COLOR}""#))
            .map_or(0, |(_, rest)| rest.split_once("</g>").unwrap().0.matches("<line ").count())
    };
    let few = render_svg(&report(1_000), &options);
    assert!(few.contains("1000 datagrams, 100 lost"));
    assert_eq!((datagram_lines(&few), lost(&few)), (900, 100));
    let many = render_svg(&report(20_000), &options);
    assert!(many.contains("20000 datagrams recorded (more than 5000): only application messages and lost datagrams"));
    assert_eq!((datagram_lines(&many), lost(&many)), (0, 2_000));
    assert!(many.len() < 1_000_000, "{} bytes", many.len());
}
