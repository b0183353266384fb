//! Layout and geometry: the dimensions of the diagram, the scale that maps virtual time to pixels
//! (with its compressed breaks and round ticks), and the canvas the drawing functions share.

use super::DatagramRecord;
use crate::options::SimOptions;
use crate::oracle::Trace;
use crate::world::SimReport;
use motet_core::Instant;
use std::cmp::Reverse;

/// Height of the time axis, in pixels, for the whole run.
pub(super) const PLOT_H: f64 = 1200.0;
pub(super) const LEFT: f64 = 112.0;
pub(super) const NOTES_W: f64 = 440.0;
pub(super) const NOTE_LINE: f64 = 12.5;

/// Height of a compressed stretch of time, in pixels.
pub(super) const BREAK_H: f64 = 44.0;
/// A stretch without application messages, views or faults is compressed when it is longer than
/// this (in ns) and than half the run.
pub(super) const BREAK_MIN: u64 = 1_000_000_000;

/// Maps virtual time to pixels: linear, except that long stretches in which nothing of interest
/// happens (no application message, view or fault: a run that failed to converge, say) are
/// compressed into breaks of [`BREAK_H`] pixels, so that the interesting part fits.
pub(super) struct Scale {
    pub(super) top: f64,
    pub(super) end: u64,
    /// Compressed stretches `[from, to)`, in order.
    pub(super) breaks: Vec<(u64, u64)>,
    /// Pixels per nanosecond outside the breaks.
    pub(super) k: f64,
}

impl Scale {
    /// `interesting`: the times of everything worth seeing, sorted.
    pub(super) fn new(top: f64, run_end: u64, interesting: &[u64]) -> Scale {
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

    pub(super) fn y(&self, t: Instant) -> f64 {
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
    pub(super) fn in_break(&self, t: Instant) -> Option<usize> {
        self.breaks.iter().position(|&(from, to)| from < t.0 && t.0 < to)
    }

    /// The linear stretches `[from, to]`.
    pub(super) fn segments(&self) -> Vec<(u64, u64)> {
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
pub(super) fn tick_step_ms(px_per_ms: f64, min_px: f64) -> f64 {
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

/// The run being drawn and the geometry every part of the drawing shares.
pub(super) struct Canvas<'a> {
    pub(super) report: &'a SimReport,
    pub(super) options: &'a SimOptions,
    pub(super) trace: &'a Trace,
    pub(super) log: &'a [DatagramRecord],
    /// Whether every datagram is drawn (at most [`MAX_DATAGRAMS`](super::MAX_DATAGRAMS) records).
    pub(super) draw_all_datagrams: bool,
    /// Members, restarted processes included.
    pub(super) n: usize,
    /// Width of a member's column, in pixels.
    pub(super) col: f64,
    pub(super) plot_right: f64,
    pub(super) notes_x: f64,
    pub(super) scale: Scale,
    pub(super) axis_end: Instant,
    pub(super) plot_bottom: f64,
}

impl Canvas<'_> {
    /// The x of a member's line.
    pub(super) fn x(&self, node: usize) -> f64 {
        LEFT + self.col * (node as f64 + 0.5)
    }

    /// Where a member's line ends: at its crash, or at the end of the axis.
    pub(super) fn line_end(&self, node: usize) -> Instant {
        self.trace.crashed.get(node).copied().flatten().unwrap_or(self.axis_end)
    }
}
