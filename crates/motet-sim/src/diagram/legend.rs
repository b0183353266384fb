//! Around the plot: the run's story in the right margin, and the legend of the symbols and the
//! views below.

use super::layout::{Canvas, NOTE_LINE};
use super::text::{esc, members_label, merge_story, ms, truncate};
use super::{CAST_COLOR, CRASH_COLOR, DATAGRAM_COLOR, LOST_COLOR, MAX_NOTES, SEND_COLOR, VIEW_COLORS};
use crate::oracle::ViewKey;
use std::collections::BTreeMap;
use std::fmt::Write;

/// The story, in the right margin, pushed down so that notes do not overlap. Returns the y below
/// the last note.
pub(super) fn story(canvas: &Canvas, out: &mut String) -> f64 {
    let Canvas { report, plot_right, notes_x, ref scale, .. } = *canvas;
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
    next_y
}

/// Legend: the symbols, then the views. Returns the height of the whole diagram.
pub(super) fn legend(
    canvas: &Canvas,
    out: &mut String,
    order: &BTreeMap<ViewKey, usize>,
    labels: &BTreeMap<ViewKey, String>,
    next_y: f64,
) -> f64 {
    let Canvas { trace, plot_bottom, .. } = *canvas;
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
    (y + (views.len().min(60).div_ceil(3)) as f64 * 16.0 + 20.0).max(next_y + 20.0)
}
