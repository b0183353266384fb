//! Scripted scenarios as readable test data (`tests/scenarios/*.txt`): a few lines set up a run
//! (members, the initial view, loss, workload) and script faults and membership events at given
//! times; `expect` lines state the views members must install. The oracles check every guarantee
//! as in any run.
//!
//! ```text
//! # thesis Figure 2.1: A, B, C merge; A fails; D starts alone; B, C, D merge
//! nodes 4
//! initial none           # every node starts alone ("none"), or a list of nodes in one view
//! at 0 start 0 1 2       # start these nodes, each alone
//! at 4000 crash 0
//! at 5000 start 3
//! expect views 1: [0 1 2] [1 2] [1 2 3]
//! expect final: 1 2 3
//! ```
//!
//! Commands: `nodes N`, `stack SPEC`, `seed S`, `loss P`, `casts K`, `sends K`, `workload_ms T`,
//! `initial all|none|N...`, `at T crash|start|leave|migrate|lag|catch-up N...`, `at T stall N... for MS` (the
//! processes stop running for `MS` milliseconds), `at T partition N... [one-way]` (the
//! listed nodes are cut off from the rest), `at T heal` (ends the open partitions), `expect views
//! N: [members]...` (the member sets, as sets, of the views node N installs after its first), and
//! `expect final: N...` (every live node ends in one view of exactly these members), `expect
//! primary N: yes|no...` (whether each view node N installs after its first is primary) and
//! `expect together: N...` (every view any of these nodes installs after its first has all of
//! them: no fault in the script separates them).

use crate::options::{Partition, ScriptAction, SimOptions};
use crate::world::SimReport;
use motet_core::StackSpec;
use std::collections::BTreeSet;

/// What a scenario expects of the views.
#[derive(Clone, Debug, PartialEq)]
pub enum Expect {
    /// The member sets of the views `node` installs after its first one, in order.
    Views {
        /// The node.
        node: usize,
        /// Member sets.
        views: Vec<BTreeSet<usize>>,
    },
    /// The stacks of the views `node` installs after its first one, in order.
    Stacks {
        /// The node.
        node: usize,
        /// Layer lists.
        stacks: Vec<String>,
    },
    /// Every live node ends in one view with exactly these members.
    Final(BTreeSet<usize>),
    /// Every view any of these nodes installs after its first one has all of them.
    Together(BTreeSet<usize>),
    /// Whether each view `node` installs after its first one is primary, in order.
    Primary {
        /// The node.
        node: usize,
        /// One flag per view.
        flags: Vec<bool>,
    },
}

/// A parsed scenario.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Its name (the file name).
    pub name: String,
    /// The run.
    pub options: SimOptions,
    /// What must happen.
    pub expect: Vec<Expect>,
}

fn numbers(words: &[&str]) -> Result<Vec<usize>, String> {
    words.iter().map(|w| w.parse::<usize>().map_err(|e| format!("`{w}`: {e}"))).collect()
}

/// `[0 1] [1 2]`: sets of nodes in brackets, nothing else (an unclosed `[`, or a number outside
/// brackets, was taken silently).
fn sets(text: &str) -> Result<Vec<BTreeSet<usize>>, String> {
    let mut sets = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let inner = rest.strip_prefix('[').ok_or_else(|| format!("`{rest}`: expected `[`"))?;
        let (inner, after) = inner.split_once(']').ok_or("unclosed `[`")?;
        sets.push(numbers(&inner.split_whitespace().collect::<Vec<_>>())?.into_iter().collect());
        rest = after.trim_start();
    }
    Ok(sets)
}

/// At least one node: a command or an expectation naming none did nothing and checked nothing.
fn some(nodes: Vec<usize>) -> Result<Vec<usize>, String> {
    match nodes.is_empty() {
        true => Err("no node given".into()),
        false => Ok(nodes),
    }
}

impl Scenario {
    /// Parses a scenario; errors name the line.
    pub fn parse(name: &str, text: &str) -> Result<Scenario, String> {
        let mut options = SimOptions::new(1, 3, StackSpec::parse("vsync").expect("preset"));
        options.casts = 5;
        options.sends = 2;
        options.workload_ms = 3_000;
        let mut expect = Vec::new();
        let mut open: Vec<usize> = Vec::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let fail = |e: String| format!("{name}:{}: {e}: `{line}`", number + 1);
            let words: Vec<&str> = line.split_whitespace().collect();
            let result: Result<(), String> = (|| {
                match words.as_slice() {
                    ["nodes", n] => options.nodes = n.parse().map_err(|e| format!("{e}"))?,
                    ["stack", spec] => options.stack = StackSpec::parse(spec).map_err(|e| e.to_string())?,
                    ["seed", s] => options.seed = s.parse().map_err(|e| format!("{e}"))?,
                    ["loss", p] => options.net.loss = p.parse().map_err(|e| format!("{e}"))?,
                    ["casts", k] => options.casts = k.parse().map_err(|e| format!("{e}"))?,
                    ["sends", k] => options.sends = k.parse().map_err(|e| format!("{e}"))?,
                    ["workload_ms", t] => options.workload_ms = t.parse().map_err(|e| format!("{e}"))?,
                    ["initial", "all"] => options.initial = None,
                    ["initial", "none"] => options.initial = Some(Vec::new()),
                    ["initial", rest @ ..] => options.initial = Some(numbers(rest)?),
                    ["at", t, "heal"] => {
                        let t: u64 = t.parse().map_err(|e| format!("{e}"))?;
                        for index in open.drain(..) {
                            options.partitions[index].end_ms = t;
                        }
                    }
                    ["at", t, "partition", rest @ ..] => {
                        let one_way = rest.last() == Some(&"one-way");
                        let side = numbers(if one_way { &rest[..rest.len() - 1] } else { rest })?;
                        let start_ms = t.parse().map_err(|e| format!("{e}"))?;
                        open.push(options.partitions.len());
                        options.partitions.push(Partition { start_ms, end_ms: u64::MAX / 2, side, one_way });
                    }
                    ["at", t, "switch", node, spec] => {
                        let spec = StackSpec::parse(spec).map_err(|e| e.to_string())?;
                        let (t, node) =
                            (t.parse().map_err(|e| format!("{e}"))?, node.parse().map_err(|e| format!("{e}"))?);
                        options.script.push((t, ScriptAction::Switch(node, spec)));
                    }
                    ["at", t, "stall", rest @ ..] if rest.len() >= 3 && rest[rest.len() - 2] == "for" => {
                        let t: u64 = t.parse().map_err(|e| format!("{e}"))?;
                        let ms: u64 = rest[rest.len() - 1].parse().map_err(|e| format!("{e}"))?;
                        for node in numbers(&rest[..rest.len() - 2])? {
                            options.script.push((t, ScriptAction::Stall(node, ms)));
                        }
                    }
                    ["at", t, action, rest @ ..] => {
                        let t: u64 = t.parse().map_err(|e| format!("{e}"))?;
                        for node in some(numbers(rest)?)? {
                            let action = match *action {
                                "crash" => ScriptAction::Crash(node),
                                "start" => ScriptAction::Start(node),
                                "leave" => ScriptAction::Leave(node),
                                "migrate" => ScriptAction::Migrate(node),
                                "lag" => ScriptAction::Lag(node, true),
                                "catch-up" => ScriptAction::Lag(node, false),
                                other => return Err(format!("unknown action `{other}`")),
                            };
                            options.script.push((t, action));
                        }
                    }
                    ["expect", "final:", rest @ ..] => {
                        expect.push(Expect::Final(some(numbers(rest)?)?.into_iter().collect()))
                    }
                    ["expect", "together:", rest @ ..] => {
                        expect.push(Expect::Together(some(numbers(rest)?)?.into_iter().collect()))
                    }
                    ["expect", "primary", node, flags @ ..] => {
                        let node = node.trim_end_matches(':').parse().map_err(|e| format!("{e}"))?;
                        let flags = flags
                            .iter()
                            .map(|f| match *f {
                                "yes" => Ok(true),
                                "no" => Ok(false),
                                other => Err(format!("`{other}`: expected yes or no")),
                            })
                            .collect::<Result<_, _>>()?;
                        expect.push(Expect::Primary { node, flags });
                    }
                    ["expect", "stacks", node, specs @ ..] => {
                        let node = node.trim_end_matches(':').parse().map_err(|e| format!("{e}"))?;
                        let stacks = specs
                            .iter()
                            .map(|s| StackSpec::parse(s).map(|spec| spec.to_string()).map_err(|e| e.to_string()))
                            .collect::<Result<_, _>>()?;
                        expect.push(Expect::Stacks { node, stacks });
                    }
                    ["expect", "views", node, ..] => {
                        let node = node.trim_end_matches(':').parse().map_err(|e| format!("{e}"))?;
                        let views = sets(line.split_once(':').ok_or("expected `:`")?.1)?;
                        expect.push(Expect::Views { node, views });
                    }
                    _ => return Err("unknown command".to_string()),
                }
                Ok(())
            })();
            result.map_err(fail)?;
        }
        let scenario = Scenario { name: name.to_string(), options, expect };
        // A node out of range panicked in the world, and was reported as a broken invariant of
        // the core.
        let highest = scenario.nodes_named().max();
        if let Some(node) = highest.filter(|&n| n >= scenario.options.nodes) {
            return Err(format!("{name}: node {node} named, but the run has {} (`nodes N`)", scenario.options.nodes));
        }
        Ok(scenario)
    }

    /// Every node the script or the expectations name.
    fn nodes_named(&self) -> impl Iterator<Item = usize> + '_ {
        use crate::options::ScriptAction as A;
        let script = self.options.script.iter().map(|(_, action)| match action {
            A::Crash(n)
            | A::Start(n)
            | A::Leave(n)
            | A::Migrate(n)
            | A::Lag(n, _)
            | A::Stall(n, _)
            | A::Switch(n, _) => *n,
        });
        let initial = self.options.initial.iter().flatten().copied();
        let partitions = self.options.partitions.iter().flat_map(|p| p.side.iter().copied());
        let expected = self.expect.iter().flat_map(|e| -> Vec<usize> {
            match e {
                Expect::Views { node, views } => views.iter().flatten().copied().chain([*node]).collect(),
                Expect::Stacks { node, .. } | Expect::Primary { node, .. } => vec![*node],
                Expect::Final(nodes) | Expect::Together(nodes) => nodes.iter().copied().collect(),
            }
        });
        script.chain(initial).chain(partitions).chain(expected)
    }

    /// Runs the scenario with `seed` in place of its own.
    pub fn run_seed(&self, seed: u64) -> SimReport {
        let mut options = self.options.clone();
        options.seed = seed;
        crate::run(&options)
    }

    /// Runs the scenario with each of `seeds`: a line per seed that went wrong, naming the
    /// scenario, the seed and its first problems (empty when every seed passed).
    pub fn failures(&self, seeds: impl IntoIterator<Item = u64>) -> Vec<String> {
        seeds
            .into_iter()
            .filter_map(|seed| {
                let problems = self.check(&self.run_seed(seed));
                (!problems.is_empty())
                    .then(|| format!("{} seed {seed}: {:?}", self.name, &problems[..problems.len().min(3)]))
            })
            .collect()
    }

    /// What the run got wrong: oracle violations and unmet expectations (empty when it passed).
    pub fn check(&self, report: &SimReport) -> Vec<String> {
        let mut problems: Vec<String> = report.violations.iter().map(|v| format!("violation: {v:?}")).collect();
        let trace = &report.trace;
        for expect in &self.expect {
            match expect {
                Expect::Views { node, views } => {
                    let got: Vec<BTreeSet<usize>> = trace
                        .views
                        .iter()
                        .filter(|v| v.node == *node)
                        .skip(1)
                        .map(|v| v.members.iter().copied().collect())
                        .collect();
                    if &got != views {
                        problems.push(format!("node {node} installed {got:?}, expected {views:?}"));
                    }
                }
                Expect::Primary { node, flags } => {
                    let got: Vec<bool> =
                        trace.views.iter().filter(|v| v.node == *node).skip(1).map(|v| v.primary).collect();
                    if &got != flags {
                        problems.push(format!("node {node}'s views were primary {got:?}, expected {flags:?}"));
                    }
                }
                Expect::Stacks { node, stacks } => {
                    let got: Vec<String> =
                        trace.views.iter().filter(|v| v.node == *node).skip(1).map(|v| v.stack.clone()).collect();
                    if &got != stacks {
                        problems.push(format!("node {node} ran {got:?}, expected {stacks:?}"));
                    }
                }
                Expect::Together(nodes) => {
                    for node in nodes {
                        let apart = trace
                            .views
                            .iter()
                            .filter(|v| v.node == *node)
                            .skip(1)
                            .map(|v| v.members.iter().copied().collect::<BTreeSet<usize>>())
                            .find(|members| !nodes.is_subset(members));
                        if let Some(members) = apart {
                            problems.push(format!("node {node} installed {members:?}, without all of {nodes:?}"));
                        }
                    }
                }
                Expect::Final(members) => {
                    // Every live node (started, never crashed, not gone by a leave), listed or
                    // not, ends in one view of exactly these members, and every one listed is
                    // live: before, only the listed ones' last views were looked at.
                    let live = |node: usize| {
                        trace.crashed.get(node).is_some_and(Option::is_none)
                            && !trace.exited.get(node).copied().unwrap_or(false)
                    };
                    let started: BTreeSet<usize> = trace.views.iter().map(|v| v.node).collect();
                    for node in started.iter().copied().filter(|&n| live(n)).chain(members.iter().copied()) {
                        if !live(node) {
                            problems.push(format!("node {node} is expected in the final view, and is not live"));
                            continue;
                        }
                        let last = trace.views.iter().rev().find(|v| v.node == node);
                        let got: Option<BTreeSet<usize>> = last.map(|v| v.members.iter().copied().collect());
                        if got.as_ref() != Some(members) {
                            problems.push(format!("node {node} ended in {got:?}, expected {members:?}"));
                        }
                    }
                }
            }
        }
        problems
    }
}
