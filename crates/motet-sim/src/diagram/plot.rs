//! The plot: partitions, view bands, the time axis, datagrams, application messages, members and
//! their crashes, violations and breaks, each drawn into the body or the labels layer on top.

use super::layout::{tick_step_ms, Canvas, BREAK_H, LEFT};
use super::text::{esc, message_label, ms, span_label, time_label, violation_site};
use super::{
    DatagramRecord, Lost, CAST_COLOR, CRASH_COLOR, DATAGRAM_COLOR, LOST_COLOR, MAX_APP, MAX_LOST, SEND_COLOR,
    VIEW_COLORS,
};
use crate::oracle::{MsgId, ViewKey};
use motet_core::Instant;
use std::collections::BTreeMap;
use std::fmt::Write;

/// Partitions: shaded bands across the members.
pub(super) fn partitions(canvas: &Canvas, out: &mut String, top: &mut String) {
    let Canvas { report, options, plot_right, ref scale, .. } = *canvas;
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
}

/// Views: a band behind each member's line per view it installed.
pub(super) fn view_bands(
    canvas: &Canvas,
    out: &mut String,
    top: &mut String,
    order: &BTreeMap<ViewKey, usize>,
    labels: &BTreeMap<ViewKey, String>,
) {
    let Canvas { trace, n, col, ref scale, .. } = *canvas;
    let x = |node: usize| canvas.x(node);
    let line_end = |node: usize| canvas.line_end(node);
    let mut per_node: Vec<Vec<&crate::oracle::Installed>> = vec![Vec::new(); n];
    for v in &trace.views {
        if v.node < n {
            per_node[v.node].push(v);
        }
    }
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
}

/// Time axis, with faint grid lines, ticks in the linear stretches and a mark at each break.
pub(super) fn time_axis(canvas: &Canvas, out: &mut String) {
    let Canvas { report, trace, plot_right, ref scale, plot_bottom, .. } = *canvas;
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
}

/// Protocol datagrams (faint), then lost ones (dashed stubs ending in an x).
pub(super) fn datagrams(canvas: &Canvas, out: &mut String) {
    let Canvas { log, draw_all_datagrams, n, ref scale, .. } = *canvas;
    let x = |node: usize| canvas.x(node);
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
}

/// Application messages: from the sender when it sent to the receiver when it delivered.
pub(super) fn messages(canvas: &Canvas, out: &mut String) -> BTreeMap<MsgId, Instant> {
    let Canvas { trace, n, ref scale, .. } = *canvas;
    let x = |node: usize| canvas.x(node);
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
    sent
}

/// Members: a line while alive (from the first view a node installs: a node that starts or
/// restarts later begins there), a red ✕ at the crash.
pub(super) fn members(canvas: &Canvas, out: &mut String, top: &mut String) {
    let Canvas { trace, n, col, ref scale, .. } = *canvas;
    let x = |node: usize| canvas.x(node);
    let line_end = |node: usize| canvas.line_end(node);
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
}

/// Sends: a dot on the sender's line.
pub(super) fn sends(canvas: &Canvas, out: &mut String) {
    let Canvas { trace, n, ref scale, .. } = *canvas;
    let x = |node: usize| canvas.x(node);
    let _ = writeln!(out, r#"<g fill="{CAST_COLOR}">"#);
    for s in trace.sent.iter().filter(|s| s.id.origin < n).take(MAX_APP) {
        let _ = writeln!(out, r#"<circle cx="{:.1}" cy="{:.1}" r="1.8"/>"#, x(s.id.origin), scale.y(s.time));
    }
    let _ = writeln!(out, "</g>");
}

/// Violations that name a message or a member.
pub(super) fn violations(canvas: &Canvas, top: &mut String, sent: &BTreeMap<MsgId, Instant>) {
    let Canvas { report, n, ref scale, .. } = *canvas;
    let x = |node: usize| canvas.x(node);
    let line_end = |node: usize| canvas.line_end(node);
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
}

/// Breaks: compressed stretches of time, drawn over the lines that cross them.
pub(super) fn breaks(canvas: &Canvas, out: &mut String) {
    let Canvas { options, log, plot_right, ref scale, .. } = *canvas;
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
}
