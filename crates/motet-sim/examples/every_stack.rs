//! Runs swarm seeds on every distinct stack that a set of properties builds (about 1,300), all
//! oracles on and the bypass checked against the layered path, and prints the replay command of
//! each failing run. Stacks no preset uses (without `Local`, `Heal`, `Slander` or flow control)
//! hid two faults that preset swarms never met (docs/membership.md, docs/simulator.md).
//!
//! `cargo run --release -p motet-sim --example every_stack -- 1 5` (seeds 1 to 5 each: about a
//! minute and a half on two cores: seeds 1 to 8 took 2 min 20 s).

use motet_core::{Bypass, Property, StackSpec};
use motet_sim::{run, SimOptions};
use std::collections::BTreeSet;

fn main() {
    let seeds: Vec<u64> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let [first, last] = seeds[..] else {
        eprintln!("usage: every_stack FIRST_SEED LAST_SEED");
        std::process::exit(2);
    };
    let n = Property::ALL.len();
    let mut seen = BTreeSet::new();
    let stacks: Vec<StackSpec> = (0u32..1 << n)
        .map(|mask| (0..n).filter(|i| mask & (1 << i) != 0).map(|i| Property::ALL[i]).collect::<Vec<_>>())
        .filter_map(|properties| StackSpec::choose(&properties).ok())
        .filter(|stack| seen.insert(stack.to_string()))
        .collect();
    eprintln!("{} distinct stacks, seeds {first} to {last}", stacks.len());
    let (mut failed, mut timed_out) = (0, 0);
    for (k, stack) in stacks.iter().enumerate() {
        for seed in first..=last {
            let mut options = SimOptions::swarm(seed, 3 + (seed as usize + k) % 3, stack.clone());
            options.bypass = Bypass::Diff;
            let report = run(&options);
            // A flush timeout rescues a round that would otherwise wait for ever, an overdue
            // acknowledgement a safe cast, and overdue credit a blocked sender (members here are
            // honest): the run passes, but names a
            // liveness bug the timeout papered over.
            let rescues = [
                motet_core::Counter::FlushTimedOut,
                motet_core::Counter::AckOverdue,
                motet_core::Counter::CreditOverdue,
            ];
            if let Some(counter) = rescues.into_iter().find(|&c| report.stats.counter(c) > 0) {
                timed_out += 1;
                println!("{} | {}", options.replay_command(true), counter.name());
            }
            if !report.violations.is_empty() {
                failed += 1;
                let shown = &report.violations[..report.violations.len().min(2)];
                println!("{} | {shown:?}", options.replay_command(true));
            }
        }
    }
    eprintln!("{failed} failing runs; {timed_out} runs rescued by a flush, acknowledgement or credit timeout");
    std::process::exit(i32::from(failed > 0));
}
