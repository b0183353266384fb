//! Text: escaping for SVG, and the labels of times, probabilities, durations, views, members,
//! messages and violations, and the story merged into notes.

use crate::oracle::{Channel, MsgId, ViewKey, Violation};
use crate::world::SimReport;
use motet_core::Instant;
use std::collections::BTreeMap;

/// Escapes text for SVG.
pub(super) fn esc(text: &str) -> String {
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

pub(super) fn ms(t: Instant) -> f64 {
    t.0 as f64 / 1e6
}

pub(super) fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        let mut cut: String = text.chars().take(max - 1).collect();
        cut.push('…');
        cut
    }
}

/// A time, in ms below 10 s and in s above, with as many decimals as the step needs.
pub(super) fn time_label(t_ms: f64, step_ms: f64) -> String {
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
pub(super) fn probability(p: f64) -> String {
    let text = format!("{p:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A duration, briefly.
pub(super) fn span_label(ns: u64) -> String {
    let ms = ns as f64 / 1e6;
    if ms >= 10_000.0 {
        format!("{:.1} s", ms / 1000.0)
    } else {
        format!("{ms:.0} ms")
    }
}

/// The label of each view: `v<ltime>`, with a letter when concurrent views share a logical time.
pub(super) fn view_labels(report: &SimReport) -> (BTreeMap<ViewKey, usize>, BTreeMap<ViewKey, String>) {
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
pub(super) fn members_label(members: &[usize]) -> String {
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
pub(super) fn describe(violation: &Violation) -> String {
    truncate(&format!("{violation:?}"), 150)
}

/// A message, briefly: `cast 2#1` (origin 2, its cast 1), `send 2→0#1` (its send 1 to node 0).
pub(super) fn message_label(id: MsgId) -> String {
    match id.channel {
        Channel::Cast => format!("cast {}#{}", id.origin, id.index),
        Channel::Send { dest } => format!("send {}→{dest}#{}", id.origin, id.index),
    }
}

/// Merges consecutive notes `node N <what>` with the same `<what>` that happen within `window` ns
/// of the first (all members installing a view, say) into one.
pub(super) fn merge_story(story: &[(Instant, String)], window: u64) -> Vec<(Instant, String)> {
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
pub(super) fn violation_site(violation: &Violation) -> Option<(Option<MsgId>, usize, &'static str)> {
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
