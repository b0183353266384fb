//! Pictures of a run: [`render_svg`] draws a [`SimReport`] as a space-time diagram, in the manner
//! of Figure 2.1 of Hayden's thesis. Time flows downward; each member is a vertical line, ended by
//! a red ✕ where it crashed; the views it installed are colored bands behind its line (members
//! of one view share a color); application messages are lines from the sender at the time it sent
//! to the receiver at the time it delivered; the datagrams of the protocol (when the run recorded
//! them, [`SimOptions::record_datagrams`]) are fainter lines, and lost ones dashed stubs ending in
//! a small x; partitions are shaded bands across the members; the run's story is in the right
//! margin. The SVG is written by hand: it is plain text.

use crate::options::SimOptions;
use crate::world::SimReport;
use layout::{Canvas, Scale, LEFT, NOTES_W, NOTE_LINE, PLOT_H};
use motet_core::Instant;
use text::view_labels;

mod layout;
mod legend;
mod plot;
mod svg;
mod text;

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

/// Draws the run as a space-time diagram (see the module documentation). `options` must be the
/// options the run was made with. Without [`SimOptions::record_datagrams`] only application
/// messages are drawn; with more than 5,000 datagram records, only application messages and lost
/// datagrams (the caption says so), so that the file stays of bounded size.
pub fn render_svg(report: &SimReport, options: &SimOptions) -> String {
    // Restarted processes are new nodes after the first `options.nodes`.
    let n = report.trace.nodes.max(options.nodes).max(1);
    let trace = &report.trace;
    let col = (720.0 / n as f64).clamp(24.0, 150.0);
    let plot_right = LEFT + col * n as f64;
    let notes_x = plot_right + 40.0;
    let width = (notes_x + NOTES_W).max(900.0);

    // Header: title, parameters, verdict, caption.
    let log = &report.datagrams_log;
    let draw_all_datagrams = log.len() <= MAX_DATAGRAMS;
    let (verdict, caption) = svg::verdict_and_caption(report, options, log, draw_all_datagrams);
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
    let canvas = Canvas {
        report,
        options,
        trace,
        log,
        draw_all_datagrams,
        n,
        col,
        plot_right,
        notes_x,
        scale,
        axis_end,
        plot_bottom,
    };

    let mut body = String::new();
    let out = &mut body;
    // Labels go on top of everything else.
    let mut labels_layer = String::new();
    let top = &mut labels_layer;

    plot::partitions(&canvas, out, top);
    let (order, labels) = view_labels(report);
    plot::view_bands(&canvas, out, top, &order, &labels);
    plot::time_axis(&canvas, out);
    plot::datagrams(&canvas, out);
    let sent = plot::messages(&canvas, out);
    plot::members(&canvas, out, top);
    plot::sends(&canvas, out);
    plot::violations(&canvas, top, &sent);
    plot::breaks(&canvas, out);
    out.push_str(&labels_layer);

    let next_y = legend::story(&canvas, out);
    let height = legend::legend(&canvas, out, &order, &labels, next_y);
    svg::document(&canvas, width, height, &verdict, &caption, &body)
}

#[cfg(test)]
mod tests;
