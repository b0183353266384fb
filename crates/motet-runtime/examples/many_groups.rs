//! Many groups in one process: joins N groups (the default `vsync` stack), each with M members
//! in M runtimes of this process (M = 1: each member alone, with no seeds), then reports what a
//! member costs the process at rest: resident memory and the CPU the event loops spend on the
//! groups' timers (failure detection, stability, gossip) while no message is cast. Motet aims at
//! 10^5 groups a process; this measures how far that is. Linux only (it reads `/proc/self`).
//! Run: `cargo run --release -p motet-runtime --example many_groups -- N [M [SETTLE_S]]`.

#![allow(clippy::disallowed_types)] // the project's lint keeps clocks out of the protocol; a benchmark reads one

use motet_runtime::{Event, GroupConfig, Runtime, RuntimeConfig};
use std::time::{Duration, Instant};

/// Resident memory in bytes (`VmRSS`).
fn resident() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next());
    kib.and_then(|k| k.parse::<u64>().ok()).unwrap_or(0) * 1024
}

/// CPU time this process has used, user and system, in seconds.
fn cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // After the command's name in parentheses, fields 14 and 15 (utime, stime) are the 12th and
    // 13th; in clock ticks, 100 a second on Linux.
    let rest = stat.rsplit_once(") ").map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arg = |i: usize| std::env::args().nth(i).map(|a| a.parse::<usize>()).transpose();
    let n = arg(1)?.unwrap_or(1_000);
    // Members per group, each in a runtime of its own (all in this process): 1 (alone), or more,
    // every runtime joining every group, the views formed before measuring.
    let m = arg(2)?.unwrap_or(1).max(1);
    // Seconds from the views to the measurement: long enough for the timers that back off when
    // nothing happens (`heal`'s announcements reach their longest interval 4 s into a view).
    let settle = arg(3)?.unwrap_or(6) as u64;
    let runtimes = (0..m).map(|_| Runtime::start(RuntimeConfig::default())).collect::<Result<Vec<_>, _>>()?;
    let seeds: Vec<String> = runtimes.iter().map(|r| r.local_addr().to_string()).collect();
    let before = resident();
    let started = Instant::now();
    let mut members = Vec::with_capacity(n * m);
    for g in 0..n {
        for runtime in &runtimes {
            let group = GroupConfig::new(&format!("many-{g}"));
            let group = if m > 1 { group.peers(seeds.clone()) } else { group };
            members.push(runtime.join(group)?);
        }
    }
    // Each member's view of all m (at most 120 s in all).
    let deadline = Instant::now() + Duration::from_secs(120);
    for member in &members {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match member.recv_timeout(left)? {
                Some(Event::View(view)) if view.members.len() == m => break,
                Some(_) => {}
                None => return Err(format!("no view of {m} within 120 s").into()),
            }
        }
    }
    let joined = started.elapsed();
    std::thread::sleep(Duration::from_secs(settle));
    // Events that came meanwhile (blocks and views of a late merge) are not left queued.
    for member in &members {
        while member.try_recv()?.is_some() {}
    }
    let held = resident().saturating_sub(before);
    let (cpu_before, at) = (cpu(), Instant::now());
    std::thread::sleep(Duration::from_secs(5));
    let idle = (cpu() - cpu_before) / at.elapsed().as_secs_f64();
    let stacks = (n * m).max(1);
    println!(
        "{n} groups of {m} in {m} runtime(s), formed in {:.2} s; resident {} KiB more ({} B a member); at rest the process uses {:.1}% of a CPU ({:.2} µs of CPU a member a second)",
        joined.as_secs_f64(),
        held / 1024,
        held / stacks as u64,
        idle * 100.0,
        idle * 1e6 / stacks as f64,
    );
    Ok(())
}
