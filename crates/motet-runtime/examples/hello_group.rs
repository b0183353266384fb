//! Two members of one group in one process, over UDP on loopback: they merge, each casts a
//! greeting, and each prints what it delivers. Run: `cargo run -p motet-runtime --example hello_group`.

#![allow(clippy::disallowed_types)] // the project's lint keeps clocks out of the protocol; an application may wait on one

use motet_runtime::{Event, GroupConfig, Runtime, RuntimeConfig};
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (a, b) = (Runtime::start(RuntimeConfig::default())?, Runtime::start(RuntimeConfig::default())?);
    let seeds = [a.local_addr().to_string(), b.local_addr().to_string()];
    let alice = a.join(GroupConfig::new("hello").peers(seeds.clone()))?;
    let bob = b.join(GroupConfig::new("hello").peers(seeds))?;
    for (name, member) in [("alice", &alice), ("bob", &bob)] {
        // Wait for the view of both (as the events say: the first views are each alone), then
        // greet. A limit: a member that never finds the other would wait for ever.
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut both = false;
        while !both && Instant::now() < deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            if let Some(Event::View(view)) = member.recv_timeout(left)? {
                println!("{name}: view {:?} with {} members", view.id, view.members.len());
                both = view.members.len() == 2;
            }
        }
        if !both {
            return Err(format!("{name}: no view of both within 30 s").into());
        }
        member.cast(format!("hello from {name}"))?;
    }
    for (name, member) in [("alice", &alice), ("bob", &bob)] {
        let mut greetings = 0;
        while greetings < 2 {
            match member.recv_timeout(Duration::from_secs(10))? {
                Some(Event::Cast { from, data }) => {
                    greetings += 1;
                    println!("{name} delivered from {from}: {}", String::from_utf8_lossy(&data));
                }
                Some(_) => {}
                None => return Err("no greeting within 10 s".into()),
            }
        }
    }
    alice.leave()?;
    bob.leave()?;
    Ok(())
}

/// The example runs as a test too (`test = true` in the crate's manifest): it is real UDP on
/// loopback, and an example that only compiled could stop working unseen.
#[cfg(test)]
mod tests {
    #[test]
    fn the_example_runs() {
        super::main().expect("the example runs");
    }
}
