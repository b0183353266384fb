//! The SVG document: the header's verdict and caption, and the document itself (its size, patterns
//! and styles, title, verdict and caption) around the drawn body.

use super::layout::{Canvas, NOTE_LINE};
use super::text::{describe, esc, ms, probability, truncate};
use super::{DatagramRecord, MAX_APP, MAX_DATAGRAMS};
use crate::options::SimOptions;
use crate::world::SimReport;
use std::fmt::Write;

/// The header's text: the verdict (PASS, or FAIL with the first violation) and the caption (the
/// run's parameters, then what is drawn and what is left out).
pub(super) fn verdict_and_caption(
    report: &SimReport,
    options: &SimOptions,
    log: &[DatagramRecord],
    draw_all_datagrams: bool,
) -> (String, Vec<String>) {
    let trace = &report.trace;
    let verdict = match report.violations.first() {
        None => "PASS".to_string(),
        Some(first) => format!(
            "FAIL ({} violation{}): {}",
            report.violations.len(),
            if report.violations.len() == 1 { "" } else { "s" },
            describe(first)
        ),
    };
    let mut caption = Vec::new();
    let net = &options.net;
    caption.push(format!(
        "loss {} · dup {} · reorder {} · delay {}+exp({}) µs · {} crash(es) · {} partition(s) · end {:.1} ms{} · trace {}",
        probability(net.loss),
        probability(net.dup),
        probability(net.reorder),
        net.delay_min_us,
        net.delay_mean_us,
        trace.crashed.iter().flatten().count(),
        options.partitions.len(),
        ms(report.end),
        if trace.quiesced { " (quiet)" } else { " (time limit)" },
        if report.trace_hash.is_empty() { "-" } else { &report.trace_hash },
    ));
    let lost_total = log.iter().filter(|d| d.lost.is_some()).count();
    if !options.record_datagrams {
        caption.push("datagrams were not recorded (record_datagrams is off): application messages only".into());
    } else if draw_all_datagrams {
        caption.push(format!(
            "{} datagrams, {} lost; {} casts and {} sends delivered",
            log.len(),
            lost_total,
            report.cast_deliveries,
            report.send_deliveries
        ));
    } else {
        caption.push(format!(
            "{} datagrams recorded (more than {MAX_DATAGRAMS}): only application messages and lost datagrams are drawn",
            log.len()
        ));
    }
    if trace.deliveries.len() > MAX_APP {
        caption
            .push(format!("only the first {MAX_APP} of {} application deliveries are drawn", trace.deliveries.len()));
    }
    (verdict, caption)
}

/// The SVG document: its size, patterns and styles, the title, verdict and caption, then `body`.
pub(super) fn document(
    canvas: &Canvas,
    width: f64,
    height: f64,
    verdict: &str,
    caption: &[String],
    body: &str,
) -> String {
    let Canvas { report, options, n, .. } = *canvas;
    let mut svg = String::with_capacity(body.len() + 2_000);
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif">"#
    );
    let _ = writeln!(
        svg,
        r##"<defs><pattern id="hatch" width="8" height="8" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="8" height="8" fill="#f2f2f2"/><line x1="0" y1="0" x2="0" y2="8" stroke="#d0d0d0" stroke-width="3"/></pattern></defs>
<style>
text {{ font-size: 11px; fill: #222; }}
.halo {{ paint-order: stroke; stroke: white; stroke-width: 3px; stroke-linejoin: round; }}
.title {{ font-size: 17px; font-weight: bold; }}
.pass {{ font-size: 14px; font-weight: bold; fill: #2d6a4f; }}
.fail {{ font-size: 14px; font-weight: bold; fill: #c1121f; }}
.caption {{ font-size: 11.5px; fill: #555; }}
.node {{ font-size: 12px; font-weight: bold; text-anchor: middle; }}
.tick {{ font-size: 10px; text-anchor: end; fill: #444; }}
.view {{ font-size: 10px; font-weight: bold; }}
.crash {{ font-size: 10px; font-weight: bold; fill: #c1121f; text-anchor: middle; }}
.viol {{ font-size: 10px; font-weight: bold; fill: #c1121f; }}
.brk {{ font-size: 11px; font-style: italic; fill: #444; text-anchor: middle; }}
.part {{ font-size: 10.5px; font-style: italic; fill: #555; }}
.note {{ font-size: 10.5px; }}
.at {{ fill: #888; }}
.head {{ font-size: 12px; font-weight: bold; }}
.legend {{ font-size: 11px; }}
</style>
<rect width="100%" height="100%" fill="white"/>"##
    );
    let _ = writeln!(
        svg,
        r#"<text x="20" y="28" class="title">motet sim — seed {} · stack {} · {} nodes</text>"#,
        options.seed,
        esc(&truncate(&options.stack.to_string(), 90)),
        n
    );
    let _ = writeln!(
        svg,
        r#"<text x="20" y="50" class="{}">{}</text>"#,
        if report.violations.is_empty() { "pass" } else { "fail" },
        esc(verdict)
    );
    for (i, line) in caption.iter().enumerate() {
        let _ = writeln!(
            svg,
            r#"<text x="20" y="{:.1}" class="caption">{}</text>"#,
            68.0 + NOTE_LINE * i as f64,
            esc(line)
        );
    }
    svg.push_str(body);
    svg.push_str("</svg>\n");
    svg
}
