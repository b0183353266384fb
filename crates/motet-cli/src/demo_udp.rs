//! The real-process demo: three `motet member` processes over UDP on loopback.

// Real time: the story's timestamps.
#![allow(clippy::disallowed_types)]

use crate::procs::{free_ports, one_view_of, wait_on, MemberProcess};
use motet_sim::logcheck;
use std::time::{Duration, Instant};

const CASTS: usize = 5;

/// Tells the story; `Ok(true)` when every check passed.
pub(crate) fn run() -> Result<bool, String> {
    let start = Instant::now();
    let say = |text: &str| println!("  {:>8.3} s  {text}", start.elapsed().as_secs_f64());
    let ports = free_ports(3)?;
    let peers: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let peers = peers.join(",");
    let group = format!("demo-{}", std::process::id());
    println!("Motet demo: three member processes on this machine, over UDP on loopback");
    println!("  stack    vsync (membership with virtual synchrony, reliable FIFO multicast)");
    println!("  members  A, B, C at {peers}; each starts alone and finds the others through that list\n");
    println!("What happened:");
    let names = ["A", "B", "C"];
    let mut procs: Vec<MemberProcess> = names
        .iter()
        .zip(&ports)
        .map(|(name, &port)| MemberProcess::spawn(name, &group, port, &peers))
        .collect::<Result<_, _>>()?;
    say("A, B and C start, each alone in a view of its own");
    let view = wait_on(&mut procs, Duration::from_secs(30), "the three never merged", |p| one_view_of(&all(p)))?;
    say(&format!("they found each other and merged: all three installed view {view}"));
    for round in 0..CASTS {
        for p in procs.iter_mut() {
            let line = format!("hello {round} from {}", p.name);
            p.cast(line)?;
        }
    }
    say(&format!("each cast {CASTS} messages"));
    let everyone = |procs: &[MemberProcess], n: usize| {
        procs.iter().all(|r| {
            procs.iter().filter_map(|s| s.log().endpoint().map(str::to_string)).all(|from| r.delivered_from(&from) >= n)
        })
    };
    wait_on(&mut procs, Duration::from_secs(30), "messages were not delivered", |p| everyone(p, CASTS).then_some(()))?;
    say(&format!("every member delivered all {} messages, each sender's in order", CASTS * 3));

    procs[2].kill();
    let killed_at = Instant::now();
    say("C is killed (SIGKILL): no goodbye");
    let view = wait_on(&mut procs[..2], Duration::from_secs(30), "A and B never excluded C", |p| one_view_of(&all(p)))?;
    say(&format!(
        "A and B suspected C, flushed, and installed view {view} without it ({:.2} s after the kill)",
        killed_at.elapsed().as_secs_f64()
    ));
    let dead = std::mem::replace(&mut procs[2], MemberProcess::spawn("C'", &group, ports[2], &peers)?);
    say("C restarts on the same port: a new endpoint, C', alone at first");
    let view = wait_on(&mut procs, Duration::from_secs(30), "C' never merged in", |p| one_view_of(&all(p)))?;
    say(&format!("C' merged back in: all three installed view {view}"));
    for p in procs.iter_mut() {
        let line = format!("welcome back, from {}", p.name);
        p.cast(line)?;
    }
    let last_lines_everywhere = |procs: &[MemberProcess]| {
        procs.iter().all(|r| {
            let log = r.log();
            procs.iter().all(|s| {
                let (sender, line) = (s.log(), format!("welcome back, from {}", s.name));
                let Some(from) = sender.endpoint() else { return false };
                log.events
                    .iter()
                    .any(|e| matches!(e, logcheck::LogEvent::Cast { from: f, data } if f == from && *data == line))
            })
        })
    };
    wait_on(&mut procs, Duration::from_secs(30), "the last messages were not delivered", |p| {
        last_lines_everywhere(p).then_some(())
    })?;
    say("each cast one more message; all delivered everywhere");
    let mut clean = true;
    for p in procs.iter_mut() {
        clean &= p.terminate(Duration::from_secs(10));
    }
    say("all leave gracefully (SIGTERM) and exit");

    let mut logs: Vec<logcheck::MemberLog> = procs.iter().map(MemberProcess::log).collect();
    logs.push(dead.log());
    let problems = logcheck::check(&logs, false);
    println!("\nWhat each member delivered:");
    for log in &logs {
        let casts = log.events.iter().filter(|e| matches!(e, logcheck::LogEvent::Cast { .. })).count();
        let views = log.events.iter().filter(|e| matches!(e, logcheck::LogEvent::View { .. })).count();
        let status = if log.killed { "killed" } else { "left gracefully" };
        println!("  {:<3} {casts:>3} casts in {views} views  ({status})", log.name);
    }
    println!("\nVerdict:");
    println!("  checks over every member's log: view agreement and order, virtual synchrony, integrity");
    println!("  (nothing invented or duplicated), per-sender FIFO, self-delivery, and clean exits");
    if problems.is_empty() && clean {
        println!("  PASS");
        Ok(true)
    } else {
        for problem in &problems {
            println!("  FAIL: {problem}");
        }
        if !clean {
            println!("  FAIL: a member did not exit cleanly after SIGTERM");
        }
        Ok(false)
    }
}

fn all(procs: &[MemberProcess]) -> Vec<&MemberProcess> {
    procs.iter().collect()
}
