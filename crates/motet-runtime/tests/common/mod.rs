//! Helpers shared by the tests that run runtimes over real UDP on loopback (`loopback.rs`,
//! `backpressure.rs`).
#![allow(clippy::disallowed_types)] // a test of real time: it waits on the wall clock

use motet_runtime::{EndpointId, Event, Member, Runtime, RuntimeConfig, View};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// `n` runtimes with the default configuration, and their addresses (each other's seeds).
pub fn start(n: usize) -> (Vec<Runtime>, Vec<String>) {
    let runtimes: Vec<Runtime> = (0..n).map(|_| Runtime::start(RuntimeConfig::default()).unwrap()).collect();
    let addresses = runtimes.iter().map(|r| r.local_addr().to_string()).collect();
    (runtimes, addresses)
}

/// Receives until every member's latest view has all of `members`, or panics after `limit`.
pub fn converge(members: &[Member], limit: Duration) -> View {
    let deadline = Instant::now() + limit;
    let mut latest: BTreeMap<EndpointId, View> = BTreeMap::new();
    loop {
        for m in members {
            while let Some(event) = m.try_recv().unwrap() {
                if let Event::View(view) = event {
                    latest.insert(m.id(), *view);
                }
            }
        }
        let views: Vec<&View> = latest.values().collect();
        if views.len() == members.len() && views.iter().all(|v| v.members.len() == members.len() && v.id == views[0].id)
        {
            return views[0].clone();
        }
        assert!(Instant::now() < deadline, "no common view after {limit:?}: {latest:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Receives at `m`, handing each event to `each`, until it returns true; panics after `limit`.
pub fn receive_until(m: &Member, limit: Duration, mut each: impl FnMut(&Event) -> bool) {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(event) = m.recv_timeout(Duration::from_millis(50)).unwrap() {
            if each(&event) {
                return;
            }
        }
        assert!(Instant::now() < deadline, "member {} did not finish within {limit:?}", m.id());
    }
}
