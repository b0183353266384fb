//! The simulator's guarantees, checked over what real member processes printed: the JSON event
//! logs of `motet member --json` (one per process incarnation), plus what each was given to cast.
//!
//! Real processes cannot record when the protocol accepted a cast, so the checks are those a log
//! can support: view agreement, consistent view order, virtual synchrony (same casts in a view for
//! members that move to the same next view), integrity (nothing invented, duplicated or
//! misattributed), per-sender FIFO, self-delivery, total order (the same sequence of casts in a
//! view for members that move to the same next view, when the view's stack has a total-order
//! layer), and — when asked — that the live members end in one view of exactly themselves.

use std::collections::{BTreeMap, BTreeSet};

/// One event of a member's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogEvent {
    /// `{"type":"view","view_id":..,"members":[..],"rank":..}`.
    View {
        /// The view id as printed.
        id: String,
        /// Member ids in rank order.
        members: Vec<String>,
        /// This member's rank.
        rank: usize,
        /// The view's stack as printed (empty when the log does not say).
        stack: String,
        /// Where each member is reached, in rank order (empty when the log does not say); a
        /// migration changes a member's address.
        addresses: Vec<String>,
    },
    /// `{"type":"cast","from":..,"data":..}`.
    Cast {
        /// Sender id.
        from: String,
        /// The text.
        data: String,
    },
    /// `{"type":"send",..}`.
    Send {
        /// Sender id.
        from: String,
        /// The text.
        data: String,
    },
    /// `{"type":"block"}`.
    Block,
    /// `{"type":"exit"}`.
    Exit,
}

impl LogEvent {
    /// Parses one line of `motet member --json`; `None` for lines of other types (stats).
    pub fn parse(line: &str) -> Result<Option<LogEvent>, String> {
        let value: serde_json::Value = serde_json::from_str(line).map_err(|e| format!("{e}: {line}"))?;
        let text = |key: &str| value[key].as_str().map(str::to_string).ok_or(format!("no `{key}` in {line}"));
        Ok(Some(match value["type"].as_str() {
            Some("view") => LogEvent::View {
                id: text("view_id")?,
                members: value["members"]
                    .as_array()
                    .ok_or(format!("no members in {line}"))?
                    .iter()
                    .map(|m| m.as_str().map(str::to_string).ok_or(format!("bad member in {line}")))
                    .collect::<Result<_, _>>()?,
                rank: value["rank"].as_u64().ok_or(format!("no rank in {line}"))? as usize,
                stack: value["stack"].as_str().unwrap_or_default().to_string(),
                addresses: value["addresses"]
                    .as_array()
                    .map(|a| a.iter().filter_map(|m| m.as_str().map(str::to_string)).collect())
                    .unwrap_or_default(),
            },
            Some("cast") => LogEvent::Cast { from: text("from")?, data: text("data")? },
            Some("send") => LogEvent::Send { from: text("from")?, data: text("data")? },
            Some("block") => LogEvent::Block,
            Some("exit") => LogEvent::Exit,
            _ => return Ok(None),
        }))
    }
}

/// One process incarnation: its events, what it was given to cast (in order), and whether it was
/// killed (so it owes nothing after its death).
#[derive(Clone, Debug, Default)]
pub struct MemberLog {
    /// A name for messages.
    pub name: String,
    /// Its events in order.
    pub events: Vec<LogEvent>,
    /// The lines it cast, in order.
    pub sent: Vec<String>,
    /// It was killed (no self-delivery or final-view obligations).
    pub killed: bool,
}

impl MemberLog {
    /// This incarnation's endpoint id: its own entry in its first view.
    pub fn endpoint(&self) -> Option<&str> {
        self.events.iter().find_map(|e| match e {
            LogEvent::View { members, rank, .. } => members.get(*rank).map(String::as_str),
            _ => None,
        })
    }

    /// The last view it installed.
    pub fn last_view(&self) -> Option<(&str, &[String])> {
        self.events.iter().rev().find_map(|e| match e {
            LogEvent::View { id, members, .. } => Some((id.as_str(), members.as_slice())),
            _ => None,
        })
    }
}

/// Casts delivered in one view, as (sender, text).
type Delivered<'a> = BTreeSet<(&'a str, &'a str)>;

/// One member's view as it left it: which log, the casts it delivered there, and their order.
type Left<'a> = (usize, Delivered<'a>, Vec<(&'a str, &'a str)>);

/// The logical time of a printed view id (`"<ltime>:<coordinator>"`).
fn ltime(id: &str) -> Option<u64> {
    id.split(':').next()?.parse().ok()
}

/// Stands for the next view of the view a converged run ends in.
const FINAL: &str = "(the end of the run)";

/// Checks `logs`; with `converged`, the live (not killed) members must end in one view of exactly
/// themselves, having delivered the same casts in it. Returns one line per problem (empty: every
/// check passed).
pub fn check(logs: &[MemberLog], converged: bool) -> Vec<String> {
    let mut problems = Vec::new();
    // Who sent what: endpoint -> (log index, line -> position).
    let mut senders: BTreeMap<&str, (usize, BTreeMap<&str, usize>)> = BTreeMap::new();
    for (i, log) in logs.iter().enumerate() {
        match log.endpoint() {
            Some(endpoint) => {
                let lines = log.sent.iter().enumerate().map(|(k, s)| (s.as_str(), k)).collect();
                senders.insert(endpoint, (i, lines));
            }
            None => problems.push(format!("{}: installed no view", log.name)),
        }
    }
    let mut views: BTreeMap<&str, (&[String], &[String])> = BTreeMap::new();
    // (view, next view) -> (log, casts delivered in the view, and in which order).
    let mut moves: BTreeMap<(&str, &str), Vec<Left<'_>>> = BTreeMap::new();
    // Views whose stack orders casts totally.
    let mut total: BTreeSet<&str> = BTreeSet::new();
    for (i, log) in logs.iter().enumerate() {
        let mut current: Option<&str> = None;
        let mut in_view: Delivered<'_> = BTreeSet::new();
        let mut sequence: Vec<(&str, &str)> = Vec::new();
        let mut seen: BTreeSet<(&str, &str)> = BTreeSet::new();
        // Each sender's last cast delivered: its position among the sender's casts, and the view.
        let mut last_index: BTreeMap<&str, (usize, Option<&str>)> = BTreeMap::new();
        for event in &log.events {
            match event {
                LogEvent::View { id, members, stack, addresses, .. } => {
                    // Any layer that orders casts totally (`sequencer`, `totem`), as the
                    // simulator's own oracle decides (`Service::TotalOrder`).
                    let orders_totally = |name: &str| {
                        motet_core::LayerKind::from_name(name)
                            .is_some_and(|kind| kind.spec().provides.contains(&motet_core::layer::Service::TotalOrder))
                    };
                    if stack.split(':').any(orders_totally) {
                        total.insert(id);
                    }
                    let installed = (members.as_slice(), addresses.as_slice());
                    match views.get(id.as_str()) {
                        Some(known) if *known != installed => problems.push(format!(
                            "view agreement: {} installed {id} as {installed:?}, others as {known:?}",
                            log.name
                        )),
                        _ => drop(views.insert(id, installed)),
                    }
                    // Each member's views rise in logical time; so any two views two members
                    // both install come in the same order at both (the oracle's reasoning,
                    // `oracle/views.rs`): a pairwise comparison of members could find nothing
                    // this does not, and was removed. An id without a logical time is itself
                    // wrong (it escaped this check before).
                    if ltime(id).is_none() {
                        problems.push(format!("view order: {} installed {id}, an id without a logical time", log.name));
                    }
                    if let (Some(prev), Some(next)) = (current.and_then(ltime), ltime(id)) {
                        if next <= prev {
                            problems.push(format!(
                                "view order: {} went from {} to {id}",
                                log.name,
                                current.unwrap_or("")
                            ));
                        }
                    }
                    if let Some(prev) = current {
                        let delivered = (i, std::mem::take(&mut in_view), std::mem::take(&mut sequence));
                        moves.entry((prev, id)).or_default().push(delivered);
                    }
                    in_view.clear();
                    sequence.clear();
                    current = Some(id);
                }
                LogEvent::Cast { from, data } | LogEvent::Send { from, data } => {
                    let cast = matches!(event, LogEvent::Cast { .. });
                    if !seen.insert((from, data)) {
                        problems.push(format!("duplicate: {} delivered {data:?} from {from} twice", log.name));
                    }
                    match senders.get(from.as_str()).and_then(|(_, lines)| lines.get(data.as_str())) {
                        None => problems
                            .push(format!("integrity: {} delivered {data:?} from {from}, who never sent it", log.name)),
                        Some(&k) => {
                            if cast {
                                match last_index.get(from.as_str()) {
                                    Some(&(before, _)) if k <= before => problems.push(format!(
                                        "fifo: {} delivered {data:?} from {from} after a later cast",
                                        log.name
                                    )),
                                    // Two casts delivered in one view were both sent in it (virtual
                                    // synchrony), so every cast the sender made between them was
                                    // too, and is delivered between them (the simulator's oracle
                                    // checks the same gap; a member that missed casts in the middle
                                    // of a view passed before).
                                    Some(&(before, view)) if view == current && k != before + 1 => {
                                        problems.push(format!(
                                            "fifo: {} delivered {data:?} from {from} without the {} cast(s) {from} made before it in that view",
                                            log.name,
                                            k - before - 1
                                        ))
                                    }
                                    _ => {}
                                }
                                last_index.insert(from, (k, current));
                            }
                        }
                    }
                    if cast {
                        in_view.insert((from, data));
                        sequence.push((from, data));
                    }
                }
                LogEvent::Block | LogEvent::Exit => {}
            }
        }
        // The last view too, when the run converged: members that end in it (not killed, not
        // gone) have delivered all of its casts, so they must agree on them as on any view's.
        let gone = log.killed || matches!(log.events.last(), Some(LogEvent::Exit));
        if let (true, false, Some(last)) = (converged, gone, current) {
            moves.entry((last, FINAL)).or_default().push((i, in_view, sequence));
        }
        // Self-delivery: a member that was not killed delivers each of its own casts.
        if !log.killed {
            if let Some(me) = log.endpoint() {
                for line in &log.sent {
                    if !seen.contains(&(me, line.as_str())) {
                        problems.push(format!("self-delivery: {} never delivered its own cast {line:?}", log.name));
                    }
                }
            }
        }
    }
    // Virtual synchrony.
    for ((from, to), group) in &moves {
        for pair in group.windows(2) {
            if total.contains(from) && pair[0].1 == pair[1].1 && pair[0].2 != pair[1].2 {
                let (a, b) = (&logs[pair[0].0].name, &logs[pair[1].0].name);
                let at = pair[0].2.iter().zip(&pair[1].2).position(|(x, y)| x != y).unwrap_or(0);
                problems.push(format!(
                    "total order: {a} and {b} both moved from {from} to {to} but delivered its casts in different orders (first difference at position {at})"
                ));
            }
            if pair[0].1 != pair[1].1 {
                let (a, b) = (&logs[pair[0].0].name, &logs[pair[1].0].name);
                let only_a: Vec<_> = pair[0].1.difference(&pair[1].1).take(3).collect();
                let only_b: Vec<_> = pair[1].1.difference(&pair[0].1).take(3).collect();
                problems.push(format!(
                    "virtual synchrony: {a} and {b} both moved from {from} to {to} but delivered different casts in it (only {a}: {only_a:?}; only {b}: {only_b:?})"
                ));
            }
        }
    }
    if converged {
        // Not killed, and not gone by a leave (its log ends with `Exit`, in the view it left):
        // one that left was counted live, and its old view reported as a split (a review's
        // finding). No member left to check: nothing to report.
        let live: Vec<&MemberLog> =
            logs.iter().filter(|l| !l.killed && !matches!(l.events.last(), Some(LogEvent::Exit))).collect();
        let endpoints: BTreeSet<&str> = live.iter().filter_map(|l| l.endpoint()).collect();
        let finals: BTreeSet<Option<(&str, &[String])>> = live.iter().map(|l| l.last_view()).collect();
        match finals.iter().next() {
            None => {}
            Some(Some((id, members))) if finals.len() == 1 => {
                let members: BTreeSet<&str> = members.iter().map(String::as_str).collect();
                if members != endpoints {
                    problems.push(format!(
                        "liveness: the final view {id} has {members:?}, the live members are {endpoints:?}"
                    ));
                }
            }
            _ => problems.push(format!("liveness: the live members ended in different views: {finals:?}")),
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(id: &str, members: &[&str], rank: usize) -> LogEvent {
        let members = members.iter().map(|m| m.to_string()).collect();
        LogEvent::View { id: id.into(), members, rank, stack: String::new(), addresses: Vec::new() }
    }

    fn cast(from: &str, data: &str) -> LogEvent {
        LogEvent::Cast { from: from.into(), data: data.into() }
    }

    /// Two members, a shared view, each casts twice, both deliver everything, then a common view.
    fn good() -> Vec<MemberLog> {
        let member = |name: &str, me: &str, rank: usize| MemberLog {
            name: name.into(),
            events: vec![
                view("0:ea", &["ea", "eb"], rank),
                cast("ea", "a1"),
                cast("eb", "b1"),
                cast("ea", "a2"),
                cast("eb", "b2"),
                view("1:ea", &["ea", "eb"], rank),
            ],
            sent: vec![format!("{}1", &me[1..]), format!("{}2", &me[1..])],
            killed: false,
        };
        vec![member("A", "ea", 0), member("B", "eb", 1)]
    }

    #[test]
    fn a_good_history_passes() {
        assert_eq!(check(&good(), true), Vec::<String>::new());
    }

    /// The view a converged run ends in is checked as the others are: two members that end in it
    /// and delivered different casts there are reported (before, the last view went unchecked,
    /// and in real-process tests it is where most casts are).
    #[test]
    fn the_last_view_of_a_converged_run_is_checked() {
        let mut logs = good();
        for log in logs.iter_mut() {
            log.events.pop(); // both end in 0:ea
        }
        assert_eq!(check(&logs, true), Vec::<String>::new());
        logs[1].events.remove(3); // B never delivered a2
        let problems = check(&logs, true);
        assert!(
            problems.iter().any(|p| p.starts_with("virtual synchrony") && p.contains("(the end of the run)")),
            "{problems:?}"
        );
        // A run that has not converged may still have casts in flight there.
        assert!(!check(&logs, false).iter().any(|p| p.starts_with("virtual synchrony")));
    }

    /// The logs' views run `stack`, and one member delivers two casts of different senders in
    /// the other order: a1 a2 b1 b2, FIFO kept, total order not.
    fn swapped_under(logs: &mut [MemberLog], stack: &str) {
        for log in logs.iter_mut() {
            if let LogEvent::View { stack: s, .. } = &mut log.events[0] {
                *s = stack.into();
            }
        }
        logs[1].events.swap(2, 3);
    }

    /// A member that left (its log ends with `Exit` in the view it left) is not live: the others'
    /// final view without it passes. Before, it was counted live, and the run reported as split.
    #[test]
    fn a_member_that_left_is_not_expected_in_the_final_view() {
        let mut logs = good();
        logs[1].events.push(LogEvent::Exit);
        logs[0].events.push(view("2:ea", &["ea"], 0));
        assert_eq!(check(&logs, true), Vec::<String>::new());
        // The one left is still checked: in a view of one, with the other gone.
        logs[0].events.pop();
        let problems = check(&logs, true);
        assert!(problems.iter().any(|p| p.starts_with("liveness")), "{problems:?}");
    }

    #[test]
    fn each_seeded_bug_is_caught() {
        type Bug = Box<dyn Fn(&mut Vec<MemberLog>)>;
        let cases: Vec<(&str, Bug)> = vec![
            ("view agreement", Box::new(|l| l[1].events[5] = view("1:ea", &["ea"], 0))),
            ("duplicate", Box::new(|l| l[1].events.insert(2, cast("ea", "a1")))),
            ("integrity", Box::new(|l| l[1].events.insert(2, cast("ea", "zz")))),
            ("fifo", Box::new(|l| l[1].events.swap(1, 3))),
            // A gap: B misses a2 but delivers a3, all in one view.
            (
                "fifo",
                Box::new(|l| {
                    l.iter_mut().for_each(|m| m.events.insert(5, cast("ea", "a3")));
                    l[0].sent.push("a3".into());
                    l[1].events.remove(3);
                }),
            ),
            ("self-delivery", Box::new(|l| drop(l[0].events.remove(1)))),
            ("virtual synchrony", Box::new(|l| drop(l[1].events.remove(4)))),
            ("view order", Box::new(|l| l[0].events[5] = view("0:ez", &["ea", "eb"], 0))),
            ("view order", Box::new(|l| l[0].events[5] = view("ez", &["ea", "eb"], 0))),
            ("liveness", Box::new(|l| drop(l[1].events.pop()))),
            ("total order", Box::new(|l| swapped_under(l, "top:appl:sequencer:local:mnak:bottom"))),
            // The rotating token orders totally as well.
            ("total order", Box::new(|l| swapped_under(l, "top:appl:totem:local:mnak:bottom"))),
        ];
        for (name, bug) in cases {
            let mut logs = good();
            bug(&mut logs);
            let problems = check(&logs, true);
            assert!(problems.iter().any(|p| p.starts_with(name)), "{name} not caught: {problems:?}");
        }
    }

    /// The checks the table above does not reach: a member with no view, views that differ in
    /// their addresses alone, a send that was never sent or came twice, and a line credited to a
    /// member other than its sender.
    #[test]
    fn each_other_seeded_bug_is_caught() {
        type Bug = Box<dyn Fn(&mut Vec<MemberLog>)>;
        let send = |from: &str, data: &str| LogEvent::Send { from: from.into(), data: data.into() };
        let cases: Vec<(&str, Bug)> = vec![
            ("B: installed no view", Box::new(|l| l[1].events.retain(|e| !matches!(e, LogEvent::View { .. })))),
            (
                "view agreement",
                Box::new(|l| {
                    if let LogEvent::View { addresses, .. } = &mut l[1].events[0] {
                        *addresses = vec!["127.0.0.1:1".into(), "127.0.0.1:2".into()];
                    }
                }),
            ),
            ("integrity", Box::new(move |l| l[1].events.insert(2, send("ea", "zz")))),
            ("duplicate", Box::new(move |l| l[1].events.insert(2, send("ea", "a1")))),
            ("integrity", Box::new(|l| l[1].events[1] = cast("eb", "a1"))),
        ];
        for (name, bug) in cases {
            let mut logs = good();
            bug(&mut logs);
            let problems = check(&logs, true);
            assert!(problems.iter().any(|p| p.contains(name)), "{name} not caught: {problems:?}");
        }
        let line = r#"{"type":"send","from":"e01","data":"x"}"#;
        assert_eq!(LogEvent::parse(line).unwrap(), Some(send("e01", "x")));
    }

    #[test]
    fn parses_the_member_contract() {
        let line = r#"{"type":"view","view_id":"2:e01","members":["e01","e02"],"rank":1,"primary":false}"#;
        assert_eq!(LogEvent::parse(line).unwrap(), Some(view("2:e01", &["e01", "e02"], 1)));
        assert_eq!(LogEvent::parse(r#"{"type":"stats"}"#).unwrap(), None);
        assert!(LogEvent::parse("not json").is_err());
        // Without a total-order stack, the same reordering is fine.
        let mut logs = good();
        logs[1].events.swap(2, 3);
        assert_eq!(check(&logs, true), Vec::<String>::new());
    }
}
