//! Pictures of a run: [`render_svg`] draws a [`SimReport`] as a space-time diagram, in the manner
//! of Figure 2.1 of Hayden's thesis. Time flows downward; each member is a vertical line, ended by
//! a red ✕ where it crashed; the views it installed are colored bands behind its line (members
//! of one view share a color); application messages are lines from the sender at the time it sent
//! to the receiver at the time it delivered; the datagrams of the protocol (when the run recorded
//! them, [`SimOptions::record_datagrams`]) are fainter lines, and lost ones dashed stubs ending in
//! a small x; partitions are shaded bands across the members; the run's story is in the right
//! margin. The SVG is written by hand: it is plain text.

use crate::options::SimOptions;
use crate::oracle::{Channel, MsgId, ViewKey, Violation};
use crate::world::SimReport;
use motet_core::Instant;
use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::fmt::Write;

/// What happened to one copy of one datagram (one destination; a duplicated datagram has two
/// records, the second with `duplicate` set).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DatagramRecord {
    /// Sending node.
    pub from: usize,
    /// Destination node.
    pub to: usize,
    /// When the sender handed it to the network.
    pub sent: Instant,
    /// When the receiver's stack got it; `None` when it was lost, or still in flight when the run
    /// ended.
    pub delivered: Option<Instant>,
    /// Whether this is the network's second copy.
    pub duplicate: bool,
    /// Why it was lost, if it was.
    pub lost: Option<Lost>,
}

/// Why a datagram was lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lost {
    /// The network's random loss.
    Network,
    /// A partition separated the sender from the receiver.
    Partition,
    /// It was sent to an address the receiver had moved away from (endpoint migration).
    AddressClosed,
    /// It arrived after the receiver had crashed.
    ReceiverDown {
        /// When it arrived.
        at: Instant,
    },
}

/// Above this many datagram records only application messages and lost datagrams are drawn.
const MAX_DATAGRAMS: usize = 5_000;
/// At most this many lost datagrams, application message lines and story notes are drawn.
const MAX_LOST: usize = 5_000;
const MAX_APP: usize = 20_000;
const MAX_NOTES: usize = 400;

/// Height of the time axis, in pixels, for the whole run.
const PLOT_H: f64 = 1200.0;
const LEFT: f64 = 112.0;
const NOTES_W: f64 = 440.0;
const NOTE_LINE: f64 = 12.5;

/// One color per view, in the order the views first appear.
const VIEW_COLORS: &[&str] = &[
    "#9aa5b1", "#f4a259", "#5b8e7d", "#bc4b51", "#8e7dbe", "#e9c46a", "#4ea8de", "#e07a5f", "#81b29a", "#c9ada7",
    "#6d597a", "#2a9d8f",
];
const CAST_COLOR: &str = "#1d4e89";
const SEND_COLOR: &str = "#9d4edd";
const DATAGRAM_COLOR: &str = "#9fb3c8";
const LOST_COLOR: &str = "#e76f51";
const CRASH_COLOR: &str = "#c1121f";

/// Escapes text for SVG.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

fn ms(t: Instant) -> f64 {
    t.0 as f64 / 1e6
}

fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        let mut cut: String = text.chars().take(max - 1).collect();
        cut.push('…');
        cut
    }
}

/// Height of a compressed stretch of time, in pixels.
const BREAK_H: f64 = 44.0;
/// A stretch without application messages, views or faults is compressed when it is longer than
/// this (in ns) and than half the run.
const BREAK_MIN: u64 = 1_000_000_000;

/// Maps virtual time to pixels: linear, except that long stretches in which nothing of interest
/// happens (no application message, view or fault: a run that failed to converge, say) are
/// compressed into breaks of [`BREAK_H`] pixels, so that the interesting part fits.
struct Scale {
    top: f64,
    end: u64,
    /// Compressed stretches `[from, to)`, in order.
    breaks: Vec<(u64, u64)>,
    /// Pixels per nanosecond outside the breaks.
    k: f64,
}

impl Scale {
    /// `interesting`: the times of everything worth seeing, sorted.
    fn new(top: f64, run_end: u64, interesting: &[u64]) -> Scale {
        let run_end = run_end.max(1);
        let mut gaps: Vec<(u64, u64)> = interesting
            .windows(2)
            .map(|w| (w[0], w[1]))
            .filter(|&(a, b)| b - a > BREAK_MIN && b - a > run_end / 2)
            .collect();
        gaps.sort_by_key(|&(a, b)| Reverse(b - a));
        gaps.truncate(8);
        let mut breaks: Vec<(u64, u64)> = gaps
            .into_iter()
            .map(|(a, b)| {
                let margin = ((b - a) / 20).min(BREAK_MIN / 4);
                (a + margin, b - margin)
            })
            .collect();
        breaks.sort_unstable();
        let compressed: u64 = breaks.iter().map(|(a, b)| b - a).sum();
        let linear = run_end - compressed;
        // A little room after the end of the run, so that the final views show as bands.
        let end = run_end + linear / 25;
        let k = (PLOT_H - BREAK_H * breaks.len() as f64) / (end - compressed) as f64;
        Scale { top, end, breaks, k }
    }

    fn y(&self, t: Instant) -> f64 {
        let t = t.0.min(self.end);
        let (mut y, mut previous) = (self.top, 0);
        for &(from, to) in &self.breaks {
            if t <= from {
                break;
            }
            y += (from - previous) as f64 * self.k;
            if t < to {
                return y + BREAK_H * (t - from) as f64 / (to - from) as f64;
            }
            y += BREAK_H;
            previous = to;
        }
        y + (t - previous) as f64 * self.k
    }

    /// Whether `t` is inside a break (and which).
    fn in_break(&self, t: Instant) -> Option<usize> {
        self.breaks.iter().position(|&(from, to)| from < t.0 && t.0 < to)
    }

    /// The linear stretches `[from, to]`.
    fn segments(&self) -> Vec<(u64, u64)> {
        let mut segments = Vec::new();
        let mut previous = 0;
        for &(from, to) in &self.breaks {
            segments.push((previous, from));
            previous = to;
        }
        segments.push((previous, self.end));
        segments
    }
}

/// A round tick step (1, 2 or 5 times a power of ten, in ms) with ticks at least `min_px` apart.
fn tick_step_ms(px_per_ms: f64, min_px: f64) -> f64 {
    let mut step = 1e-3;
    loop {
        for m in [1.0, 2.0, 5.0] {
            if step * m * px_per_ms >= min_px {
                return step * m;
            }
        }
        step *= 10.0;
    }
}

/// A time, in ms below 10 s and in s above, with as many decimals as the step needs.
fn time_label(t_ms: f64, step_ms: f64) -> String {
    let decimals = |step: f64| {
        if step >= 1.0 {
            0
        } else if step >= 0.1 {
            1
        } else if step >= 0.01 {
            2
        } else {
            3
        }
    };
    if t_ms >= 10_000.0 {
        format!("{:.*} s", decimals(step_ms / 1000.0), t_ms / 1000.0)
    } else {
        format!("{:.*} ms", decimals(step_ms), t_ms)
    }
}

/// A probability with at most three decimals: `0.1`, `0.007`, `0`.
fn probability(p: f64) -> String {
    let text = format!("{p:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A duration, briefly.
fn span_label(ns: u64) -> String {
    let ms = ns as f64 / 1e6;
    if ms >= 10_000.0 {
        format!("{:.1} s", ms / 1000.0)
    } else {
        format!("{ms:.0} ms")
    }
}

/// The label of each view: `v<ltime>`, with a letter when concurrent views share a logical time.
fn view_labels(report: &SimReport) -> (BTreeMap<ViewKey, usize>, BTreeMap<ViewKey, String>) {
    let mut order: BTreeMap<ViewKey, usize> = BTreeMap::new();
    for v in &report.trace.views {
        let next = order.len();
        order.entry(v.view).or_insert(next);
    }
    let mut by_ltime: BTreeMap<u64, Vec<(usize, ViewKey)>> = BTreeMap::new();
    for (&key, &index) in &order {
        by_ltime.entry(key.0).or_default().push((index, key));
    }
    let mut labels = BTreeMap::new();
    for (ltime, mut keys) in by_ltime {
        keys.sort_unstable();
        let many = keys.len() > 1;
        for (i, (_, key)) in keys.into_iter().enumerate() {
            let suffix = if many { char::from(b'a' + (i % 26) as u8).to_string() } else { String::new() };
            labels.insert(key, format!("v{ltime}{suffix}"));
        }
    }
    (order, labels)
}

/// A set of members, with runs of consecutive nodes as ranges: `0–3, 5, 7–9`.
fn members_label(members: &[usize]) -> String {
    let mut sorted = members.to_vec();
    sorted.sort_unstable();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j + 1 < sorted.len() && sorted[j + 1] == sorted[j] + 1 {
            j += 1;
        }
        parts.push(match j - i {
            0 => sorted[i].to_string(),
            1 => format!("{}, {}", sorted[i], sorted[j]),
            _ => format!("{}–{}", sorted[i], sorted[j]),
        });
        i = j + 1;
    }
    parts.join(", ")
}

/// A short form of a violation, for the title.
fn describe(violation: &Violation) -> String {
    truncate(&format!("{violation:?}"), 150)
}

/// A message, briefly: `cast 2#1` (origin 2, its cast 1), `send 2→0#1` (its send 1 to node 0).
fn message_label(id: MsgId) -> String {
    match id.channel {
        Channel::Cast => format!("cast {}#{}", id.origin, id.index),
        Channel::Send { dest } => format!("send {}→{dest}#{}", id.origin, id.index),
    }
}

/// Merges consecutive notes `node N <what>` with the same `<what>` that happen within `window` ns
/// of the first (all members installing a view, say) into one.
fn merge_story(story: &[(Instant, String)], window: u64) -> Vec<(Instant, String)> {
    let mut merged: Vec<(Instant, Vec<&str>, &str)> = Vec::new();
    for (at, text) in story {
        let about_a_node = text
            .strip_prefix("node ")
            .and_then(|rest| rest.split_once(' '))
            .filter(|(node, _)| node.parse::<usize>().is_ok());
        match (about_a_node, merged.last_mut()) {
            (Some((node, what)), Some((first, nodes, previous)))
                if !nodes.is_empty() && *previous == what && at.0 - first.0 <= window =>
            {
                nodes.push(node)
            }
            (Some((node, what)), _) => merged.push((*at, vec![node], what)),
            (None, _) => merged.push((*at, Vec::new(), text)),
        }
    }
    merged
        .into_iter()
        .map(|(at, nodes, what)| {
            let text = match nodes.len() {
                0 => what.to_string(),
                1 => format!("node {} {what}", nodes[0]),
                2..=4 => format!("nodes {}: {what}", nodes.join(", ")),
                many => format!("{many} nodes ({}, …): {what}", nodes[..2].join(", ")),
            };
            (at, text)
        })
        .collect()
}

/// The message and node a violation is about, when it names them.
fn violation_site(violation: &Violation) -> Option<(Option<MsgId>, usize, &'static str)> {
    match violation {
        Violation::Lost { id, node } => Some((Some(*id), *node, "lost at")),
        Violation::Duplicate { id, node } => Some((Some(*id), *node, "delivered twice at")),
        Violation::Fifo { id, node, .. } => Some((Some(*id), *node, "out of order at")),
        Violation::Corrupt { id, node } => Some((Some(*id), *node, "corrupt at")),
        Violation::SendingView { id, node } => Some((Some(*id), *node, "in another view at")),
        Violation::NotQuiescent { node, .. } => Some((None, *node, "still holds messages:")),
        _ => None,
    }
}

/// Draws the run as a space-time diagram (see the module documentation). `options` must be the
/// options the run was made with. Without [`SimOptions::record_datagrams`] only application
/// messages are drawn; with more than 5,000 datagram records, only application messages and lost
/// datagrams (the caption says so), so that the file stays of bounded size.
pub fn render_svg(report: &SimReport, options: &SimOptions) -> String {
    // Restarted processes are new nodes after the first `options.nodes`.
    let n = report.trace.nodes.max(options.nodes).max(1);
    let trace = &report.trace;
    let col = (720.0 / n as f64).clamp(24.0, 150.0);
    let x = |node: usize| LEFT + col * (node as f64 + 0.5);
    let plot_right = LEFT + col * n as f64;
    let notes_x = plot_right + 40.0;
    let width = (notes_x + NOTES_W).max(900.0);

    // Header: title, parameters, verdict, caption.
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
    let log = &report.datagrams_log;
    let draw_all_datagrams = log.len() <= MAX_DATAGRAMS;
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
    let header = 92.0 + NOTE_LINE * caption.len() as f64;
    let mut interesting: Vec<u64> = vec![0, report.end.0];
    interesting.extend(trace.sent.iter().map(|s| s.time.0));
    interesting.extend(trace.deliveries.iter().map(|d| d.time.0));
    interesting.extend(trace.views.iter().map(|v| v.time.0));
    interesting.extend(trace.crashed.iter().flatten().map(|t| t.0));
    interesting.extend(report.story.iter().map(|(t, _)| t.0));
    for p in &options.partitions {
        interesting.extend([p.start_ms, p.end_ms].map(|t| t.saturating_mul(1_000_000).min(report.end.0)));
    }
    interesting.sort_unstable();
    interesting.dedup();
    let scale = Scale::new(header, report.end.0, &interesting);
    let axis_end = Instant(scale.end);
    let plot_bottom = scale.top + PLOT_H;

    let mut body = String::new();
    let out = &mut body;
    // Labels go on top of everything else.
    let mut labels_layer = String::new();
    let top = &mut labels_layer;

    // Partitions: shaded bands across the members.
    for p in &options.partitions {
        let start = Instant(p.start_ms.saturating_mul(1_000_000));
        if start > report.end {
            continue;
        }
        let end = Instant(p.end_ms.saturating_mul(1_000_000).min(report.end.0));
        let (y0, y1) = (scale.y(start), scale.y(end));
        let _ = writeln!(
            out,
            r##"<rect x="{:.1}" y="{y0:.1}" width="{:.1}" height="{:.1}" fill="url(#hatch)" stroke="#7a7a7a" stroke-dasharray="4 3" stroke-width="0.8"/>"##,
            LEFT - 6.0,
            plot_right - LEFT + 12.0,
            (y1 - y0).max(1.0)
        );
        let side: Vec<String> = p.side.iter().map(|s| s.to_string()).collect();
        let _ = writeln!(
            top,
            r##"<text x="{:.1}" y="{:.1}" class="part halo">partition {}–{} ms: {{{}}} cut off{}</text>"##,
            LEFT - 2.0,
            y0 + 11.0,
            p.start_ms,
            p.end_ms,
            side.join(", "),
            if p.one_way { " (one way: only from them)" } else { "" }
        );
    }

    // Views: a band behind each member's line per view it installed.
    let (order, labels) = view_labels(report);
    let mut per_node: Vec<Vec<&crate::oracle::Installed>> = vec![Vec::new(); n];
    for v in &trace.views {
        if v.node < n {
            per_node[v.node].push(v);
        }
    }
    let line_end = |node: usize| trace.crashed.get(node).copied().flatten().unwrap_or(axis_end);
    for (node, installs) in per_node.iter().enumerate() {
        for (i, v) in installs.iter().enumerate() {
            let until = installs.get(i + 1).map_or(line_end(node), |next| next.time).min(line_end(node));
            let (y0, y1) = (scale.y(v.time), scale.y(until));
            let color = VIEW_COLORS[order[&v.view] % VIEW_COLORS.len()];
            let band = (col * 0.28).clamp(5.0, 11.0);
            let _ = writeln!(
                out,
                r#"<rect x="{:.1}" y="{y0:.1}" width="{:.1}" height="{:.1}" fill="{color}" fill-opacity="{}" rx="2"/>"#,
                x(node) - band,
                2.0 * band,
                (y1 - y0).max(1.0),
                if v.primary { "0.45" } else { "0.22" }
            );
            let _ = writeln!(
                out,
                r#"<line x1="{:.1}" y1="{y0:.1}" x2="{:.1}" y2="{y0:.1}" stroke="{color}" stroke-width="2"/>"#,
                x(node) - band,
                x(node) + band
            );
            if col >= 40.0 {
                let _ = writeln!(
                    top,
                    r#"<text x="{:.1}" y="{:.1}" class="view halo">{}</text>"#,
                    x(node) + band + 2.0,
                    y0 + 9.0,
                    esc(&labels[&v.view])
                );
            }
        }
    }

    // Time axis, with faint grid lines, ticks in the linear stretches and a mark at each break.
    let step = tick_step_ms(scale.k * 1e6, 70.0);
    let y_end = scale.y(report.end);
    for (from, to) in scale.segments() {
        let mut t = (from as f64 / 1e6 / step).ceil() * step;
        while t * 1e6 <= to as f64 {
            let y = scale.y(Instant((t * 1e6) as u64));
            if (y - y_end).abs() >= 12.0 {
                let _ = writeln!(
                    out,
                    r##"<line x1="{:.1}" y1="{y:.1}" x2="{plot_right:.1}" y2="{y:.1}" stroke="#e6e6e6" stroke-width="0.6"/><line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#444"/><text x="{:.1}" y="{:.1}" class="tick">{}</text>"##,
                    LEFT - 10.0,
                    LEFT - 16.0,
                    LEFT - 10.0,
                    LEFT - 19.0,
                    y + 3.5,
                    time_label(t, step)
                );
            }
            t += step;
        }
    }
    let _ = writeln!(
        out,
        r##"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{plot_bottom:.1}" stroke="#444"/>"##,
        LEFT - 10.0,
        scale.top,
        LEFT - 10.0
    );
    let _ = writeln!(
        out,
        r##"<line x1="{:.1}" y1="{y_end:.1}" x2="{:.1}" y2="{y_end:.1}" stroke="#444" stroke-dasharray="6 3"/><text x="{:.1}" y="{:.1}" class="tick" font-weight="bold">{} {}</text>"##,
        LEFT - 16.0,
        plot_right + 6.0,
        LEFT - 19.0,
        y_end + 3.5,
        if trace.quiesced { "quiet" } else { "limit" },
        time_label(ms(report.end), 100.0),
    );

    // Protocol datagrams (faint), then lost ones (dashed stubs ending in an x).
    if draw_all_datagrams {
        let _ = writeln!(out, r#"<g stroke="{DATAGRAM_COLOR}" stroke-width="0.6" stroke-opacity="0.7">"#);
        for d in log.iter().filter(|d| d.from != d.to && d.from < n && d.to < n) {
            if let Some(at) = d.delivered {
                if scale.in_break(d.sent).is_some() && scale.in_break(d.sent) == scale.in_break(at) {
                    continue;
                }
                let _ = writeln!(
                    out,
                    r#"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}"{}/>"#,
                    x(d.from),
                    scale.y(d.sent),
                    x(d.to),
                    scale.y(at),
                    if d.duplicate { r#" stroke-dasharray="1 2""# } else { "" }
                );
            }
        }
        let _ = writeln!(out, "</g>");
    }
    let _ = writeln!(out, r#"<g stroke="{LOST_COLOR}" stroke-width="0.9" fill="none">"#);
    let lost_drawn = log.iter().filter(|d| d.lost.is_some() && d.from < n && d.to < n);
    for d in lost_drawn.filter(|d| scale.in_break(d.sent).is_none()).take(MAX_LOST) {
        let (x0, y0) = (x(d.from), scale.y(d.sent));
        let (x1, y1) = match d.lost {
            Some(Lost::ReceiverDown { at }) => (x(d.to), scale.y(at)),
            _ => {
                let dx = x(d.to) - x0;
                let reach = (dx.abs() * 0.4).clamp(8.0, 42.0);
                (x0 + reach * dx.signum(), y0 + 5.0)
            }
        };
        let _ = writeln!(
            out,
            r#"<path d="M{x0:.1} {y0:.1}L{x1:.1} {y1:.1}M{:.1} {:.1}l5 5M{:.1} {:.1}l-5 5" stroke-dasharray="{}"/>"#,
            x1 - 2.5,
            y1 - 2.5,
            x1 + 2.5,
            y1 - 2.5,
            if matches!(d.lost, Some(Lost::Partition)) { "1.5 1.5" } else { "3 2" }
        );
    }
    let _ = writeln!(out, "</g>");

    // Application messages: from the sender when it sent to the receiver when it delivered.
    let sent: BTreeMap<MsgId, Instant> = trace.sent.iter().map(|s| (s.id, s.time)).collect();
    let _ = writeln!(out, r#"<g stroke-width="0.9" stroke-opacity="0.8">"#);
    for d in trace.deliveries.iter().take(MAX_APP) {
        let Some(id) = MsgId::parse(&d.payload) else { continue };
        let Some(&at) = sent.get(&id) else { continue };
        if id.origin == d.node || id.origin >= n || d.node >= n {
            continue;
        }
        let color = if d.cast { CAST_COLOR } else { SEND_COLOR };
        let _ = writeln!(
            out,
            r#"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{color}"/>"#,
            x(id.origin),
            scale.y(at),
            x(d.node),
            scale.y(d.time)
        );
    }
    let _ = writeln!(out, "</g>");

    // Members: a line while alive (from the first view a node installs: a node that starts or
    // restarts later begins there), a red ✕ at the crash.
    for node in 0..n {
        let end = line_end(node);
        let start = trace.views.iter().find(|v| v.node == node).map_or(scale.top, |v| scale.y(v.time));
        let _ = writeln!(
            out,
            r##"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#222" stroke-width="1.6"/>"##,
            x(node),
            start,
            x(node),
            scale.y(end)
        );
        let label = if col >= 60.0 { format!("node {node}") } else { node.to_string() };
        let _ = writeln!(out, r#"<text x="{:.1}" y="{:.1}" class="node">{label}</text>"#, x(node), scale.top - 8.0);
        if trace.crashed.get(node).copied().flatten().is_some() {
            let y = scale.y(end);
            let _ = writeln!(
                top,
                r#"<path d="M{:.1} {:.1}l12 12M{:.1} {:.1}l-12 12" stroke="{CRASH_COLOR}" stroke-width="3"/><text x="{:.1}" y="{:.1}" class="crash halo">crash {:.1} ms</text>"#,
                x(node) - 6.0,
                y - 6.0,
                x(node) + 6.0,
                y - 6.0,
                x(node),
                y + 20.0,
                ms(end)
            );
        }
    }
    // Sends: a dot on the sender's line.
    let _ = writeln!(out, r#"<g fill="{CAST_COLOR}">"#);
    for s in trace.sent.iter().filter(|s| s.id.origin < n).take(MAX_APP) {
        let _ = writeln!(out, r#"<circle cx="{:.1}" cy="{:.1}" r="1.8"/>"#, x(s.id.origin), scale.y(s.time));
    }
    let _ = writeln!(out, "</g>");

    // Violations that name a message or a member.
    for v in report.violations.iter().take(20) {
        let Some((id, node, what)) = violation_site(v) else { continue };
        let (px, py, text) = match id.and_then(|id| sent.get(&id).map(|&at| (id, at))) {
            Some((id, at)) => (x(id.origin), scale.y(at), format!("{} {what} node {node}", message_label(id))),
            None => (x(node.min(n - 1)), scale.y(line_end(node.min(n - 1))), format!("{what} node {node}")),
        };
        let _ = writeln!(
            top,
            r#"<circle cx="{px:.1}" cy="{py:.1}" r="6" fill="none" stroke="{CRASH_COLOR}" stroke-width="2"/><text x="{:.1}" y="{:.1}" class="viol halo">{}</text>"#,
            px + 8.0,
            py - 6.0,
            esc(&text)
        );
    }

    // Breaks: compressed stretches of time, drawn over the lines that cross them.
    for (i, &(from, to)) in scale.breaks.iter().enumerate() {
        let y0 = scale.y(Instant(from));
        let (x0, x1) = (LEFT - 16.0, plot_right + 6.0);
        let zigzag = |y: f64| {
            let mut path = format!("M{x0:.1} {y:.1}");
            let mut xz = x0;
            let mut up = true;
            while xz < x1 {
                xz = (xz + 6.0).min(x1);
                let _ = write!(path, "L{xz:.1} {:.1}", if up { y - 3.0 } else { y + 3.0 });
                up = !up;
            }
            path
        };
        let within: Vec<&DatagramRecord> = log.iter().filter(|d| scale.in_break(d.sent) == Some(i)).collect();
        let lost = within.iter().filter(|d| d.lost.is_some()).count();
        let datagrams = if options.record_datagrams {
            format!("; {} datagrams, {lost} lost, not drawn", within.len())
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            r##"<rect x="{x0:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="#fafafa"/><path d="{} {}" stroke="#777" fill="none"/><text x="{:.1}" y="{:.1}" class="brk">⋯ {} compressed: no application message, view or fault{datagrams} ⋯</text>"##,
            y0 + 3.0,
            x1 - x0,
            BREAK_H - 6.0,
            zigzag(y0 + 3.0),
            zigzag(y0 + BREAK_H - 3.0),
            (x0 + x1) / 2.0,
            y0 + BREAK_H / 2.0 + 4.0,
            span_label(to - from)
        );
    }
    out.push_str(&labels_layer);

    // The story, in the right margin, pushed down so that notes do not overlap.
    let _ = writeln!(out, r#"<text x="{notes_x:.1}" y="{:.1}" class="head">story</text>"#, scale.top - 8.0);
    let mut next_y = scale.top + 4.0;
    let story = merge_story(&report.story, (3.0 * NOTE_LINE / scale.k) as u64);
    let notes = story.len();
    for (at, text) in story.iter().take(MAX_NOTES) {
        let ty = scale.y(*at).max(next_y);
        next_y = ty + NOTE_LINE;
        let _ = writeln!(
            out,
            r##"<path d="M{:.1} {:.1}L{:.1} {:.1}L{:.1} {:.1}" stroke="#c8c8c8" stroke-width="0.6" fill="none"/><text x="{notes_x:.1}" y="{:.1}" class="note"><tspan class="at">{:.1} ms</tspan> {}</text>"##,
            plot_right + 4.0,
            scale.y(*at),
            notes_x - 16.0,
            scale.y(*at),
            notes_x - 4.0,
            ty - 3.5,
            ty,
            ms(*at),
            esc(&truncate(text, 70))
        );
    }
    if notes > MAX_NOTES {
        let _ =
            writeln!(out, r#"<text x="{notes_x:.1}" y="{next_y:.1}" class="note">… {} more</text>"#, notes - MAX_NOTES);
        next_y += NOTE_LINE;
    }

    // Legend: the symbols, then the views.
    let mut y = plot_bottom.max(next_y) + 36.0;
    let legend: [(String, &str); 6] = [
        (format!(r#"<line x1="0" y1="0" x2="26" y2="6" stroke="{CAST_COLOR}" stroke-width="1.2"/>"#), "cast (sent → delivered)"),
        (format!(r#"<line x1="0" y1="0" x2="26" y2="6" stroke="{SEND_COLOR}" stroke-width="1.2"/>"#), "send (point to point)"),
        (format!(r#"<line x1="0" y1="0" x2="26" y2="6" stroke="{DATAGRAM_COLOR}" stroke-width="1"/>"#), "protocol datagram (dotted: duplicate)"),
        (
            format!(r#"<path d="M0 0L22 5M19.5 2.5l5 5M24.5 2.5l-5 5" stroke="{LOST_COLOR}" stroke-dasharray="3 2" fill="none"/>"#),
            "lost datagram (fine dashes: partition; long: receiver crashed)",
        ),
        (format!(r#"<path d="M6 -3l12 12M18 -3l-12 12" stroke="{CRASH_COLOR}" stroke-width="3"/>"#), "crash (fail-stop)"),
        (r##"<rect x="0" y="-4" width="26" height="12" fill="url(#hatch)" stroke="#7a7a7a" stroke-dasharray="4 3"/>"##.to_string(), "partition"),
    ];
    for (i, (symbol, text)) in legend.iter().enumerate() {
        let (lx, ly) = (20.0 + (i % 2) as f64 * 420.0, y + (i / 2) as f64 * 18.0);
        let _ = writeln!(
            out,
            r#"<g transform="translate({lx:.1} {ly:.1})">{symbol}<text x="34" y="7" class="legend">{}</text></g>"#,
            esc(text)
        );
    }
    y += 66.0;
    let mut views: Vec<(&ViewKey, &usize)> = order.iter().collect();
    views.sort_by_key(|(_, &i)| i);
    for (i, (key, &index)) in views.iter().enumerate().take(60) {
        let first = trace.views.iter().find(|v| v.view == **key).expect("an installed view");
        let (lx, ly) = (20.0 + (i % 3) as f64 * 300.0, y + (i / 3) as f64 * 16.0);
        let _ = writeln!(
            out,
            r#"<rect x="{lx:.1}" y="{:.1}" width="14" height="10" fill="{}" fill-opacity="0.6"/><text x="{:.1}" y="{:.1}" class="legend">{} = {{{}}}{}</text>"#,
            ly - 8.0,
            VIEW_COLORS[index % VIEW_COLORS.len()],
            lx + 20.0,
            ly,
            esc(&labels[*key]),
            truncate(&members_label(&first.members), 40),
            if first.primary { "" } else { " (not primary)" }
        );
    }
    let height = (y + (views.len().min(60).div_ceil(3)) as f64 * 16.0 + 20.0).max(next_y + 20.0);

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
        esc(&verdict)
    );
    for (i, line) in caption.iter().enumerate() {
        let _ = writeln!(
            svg,
            r#"<text x="20" y="{:.1}" class="caption">{}</text>"#,
            68.0 + NOTE_LINE * i as f64,
            esc(line)
        );
    }
    svg.push_str(&body);
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
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
        assert!(
            many.contains("20000 datagrams recorded (more than 5000): only application messages and lost datagrams")
        );
        assert_eq!((datagram_lines(&many), lost(&many)), (0, 2_000));
        assert!(many.len() < 1_000_000, "{} bytes", many.len());
    }
}
