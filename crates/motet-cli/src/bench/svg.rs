//! `motet bench stack --plot`: the three sweeps side by side as line charts, one line per path
//! (plain SVG, like the simulator's diagrams).

use super::{Cost, Path, Sweeps};
use std::fmt::Write;

const W: f64 = 300.0;
const H: f64 = 220.0;
const PAD: f64 = 44.0;

/// Title, points, their x value, and whether x is drawn on a log scale.
type Chart<'a> = (&'a str, &'a [Cost], fn(&Cost) -> f64, bool);

pub(crate) fn plot(stack: &str, unit: &str, sweeps: &Sweeps) -> String {
    let mut svg = String::new();
    let width = 3.0 * (W + PAD) + PAD;
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{}" font-family="sans-serif" font-size="11">"#,
        H + 3.0 * PAD
    );
    let _ = write!(
        svg,
        r#"<text x="{PAD}" y="18" font-size="13" font-weight="bold">motet bench stack {stack}: {unit} per message</text>"#
    );
    let charts: [Chart<'_>; 3] = [
        ("message size (B), 2 members", &sweeps.size, |c| c.size as f64, true),
        ("members, 4 B (per delivery)", &sweeps.members, |c| c.members as f64, true),
        ("layers in the stack, same work per cast, 2 members, 4 B", &sweeps.layers, |c| c.layers as f64, false),
    ];
    for (i, (title, points, x, log)) in charts.into_iter().enumerate() {
        let left = PAD + i as f64 * (W + PAD);
        chart(&mut svg, left, title, points, x, log, i == 1);
    }
    svg.push_str("</svg>\n");
    svg
}

fn chart(
    svg: &mut String,
    left: f64,
    title: &str,
    points: &[Cost],
    x: fn(&Cost) -> f64,
    log: bool,
    per_delivery: bool,
) {
    let top = 2.0 * PAD;
    let y_of = |c: &Cost| if per_delivery { c.figure() / c.members as f64 } else { c.figure() };
    let scale_x = |v: f64| if log { v.log2() } else { v };
    let (x0, x1) = minmax(points.iter().map(|c| scale_x(x(c))));
    let y1 = points.iter().map(y_of).fold(0.0, f64::max) * 1.1;
    let px = |v: f64| left + if x1 > x0 { (scale_x(v) - x0) / (x1 - x0) * W } else { W / 2.0 };
    let py = |v: f64| top + H - if y1 > 0.0 { v / y1 * H } else { 0.0 };
    let _ = write!(svg, r#"<text x="{left}" y="{}">{title}</text>"#, top - 8.0);
    let _ = write!(svg, r##"<rect x="{left}" y="{top}" width="{W}" height="{H}" fill="none" stroke="#888"/>"##);
    let _ = write!(svg, r#"<text x="{left}" y="{}" text-anchor="end" dx="-3">{:.0}</text>"#, top + 4.0, y1);
    let _ = write!(svg, r#"<text x="{left}" y="{}" text-anchor="end" dx="-3">0</text>"#, top + H);
    let mut xs: Vec<f64> = points.iter().map(x).collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    for v in xs {
        let _ = write!(svg, r#"<text x="{}" y="{}" text-anchor="middle">{v}</text>"#, px(v), top + H + 14.0);
    }
    for (k, (path, color)) in
        [(Path::Layered, "#c0392b"), (Path::Bypass, "#2471a3"), (Path::Hand, "#229954")].into_iter().enumerate()
    {
        let line: Vec<String> =
            points.iter().filter(|c| c.path == path).map(|c| format!("{:.1},{:.1}", px(x(c)), py(y_of(c)))).collect();
        if line.is_empty() {
            continue;
        }
        let _ = write!(svg, r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#, line.join(" "));
        let name = format!("{path:?}").to_lowercase();
        let _ = write!(
            svg,
            r#"<text x="{}" y="{}" fill="{color}">{name}</text>"#,
            left + 8.0,
            top + 14.0 + 13.0 * k as f64
        );
    }
}

fn minmax(values: impl Iterator<Item = f64>) -> (f64, f64) {
    values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)))
}
