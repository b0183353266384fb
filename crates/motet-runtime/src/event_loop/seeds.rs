//! A group's seeds: the addresses where its other partitions may be found, kept per endpoint
//! (the node has the union of a group's endpoints' in this process), and their DNS names looked
//! up again every `resolve_interval`, off the loop thread ([`super::resolve`]).

use super::{resolve, EventLoop};
use crate::config::GroupConfig;
use motet_core::{Address, EndpointId, GroupName};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// DNS names among a group's peers, re-resolved periodically, off the loop thread
/// ([`resolve`]).
#[derive(Debug)]
pub(super) struct Seeds {
    /// Names the lookups' answers ([`resolve::Answer::id`]).
    id: u64,
    /// A lookup was asked and not answered yet (at most one at a time).
    in_flight: bool,
    /// The lookup in flight has outlasted the interval, and a warning said so.
    slow_told: bool,
    /// The endpoint that joined with them (they go when it exits).
    endpoint: EndpointId,
    group: GroupName,
    peers: Vec<String>,
    interval: Duration,
    next: crate::clock::Deadline,
    /// Each name's addresses at its last successful lookup: a lookup that fails (a DNS server
    /// restarting) keeps them instead of dropping the name from the peers until the next one.
    last: BTreeMap<String, resolve::Known>,
}

impl EventLoop {
    /// Starts keeping `endpoint`'s seeds in `group` (named `name`) and gives the node the group's,
    /// before the stack is built (its first gossip may go to them): the IP literals at once, the
    /// names once their first lookup answers, asked now without waiting for it (`resolve`).
    /// Returns the endpoint's seed addresses so far.
    pub(super) fn ask_seeds(&mut self, endpoint: EndpointId, name: &GroupName, group: &GroupConfig) -> Vec<Address> {
        let mut last = BTreeMap::new();
        let seeds = resolve::seed_addresses(&group.peers, self.advertise, &mut last, Vec::new());
        self.node.set_peers(name.clone(), self.group_peers(name, &seeds));
        let names = resolve::names(&group.peers);
        if !names.is_empty() {
            self.next_seeds += 1;
            let id = self.next_seeds;
            self.resolver.ask(id, names, Arc::clone(&self.waker));
            self.seeds.push(Seeds {
                id,
                in_flight: true,
                slow_told: false,
                endpoint,
                group: name.clone(),
                peers: group.peers.clone(),
                interval: group.resolve_interval,
                next: crate::clock::Deadline::after(&self.clock, group.resolve_interval),
                last,
            });
        }
        seeds
    }

    /// When the next group's names are due for a lookup. A group whose lookup is in flight waits
    /// for its answer (which wakes the loop), not for its interval: a lookup that outlasts the
    /// interval would otherwise make every wait zero.
    pub(super) fn next_lookup(&self) -> Option<crate::clock::Deadline> {
        self.seeds.iter().filter(|s| !s.in_flight).map(|s| s.next).min()
    }

    /// `endpoint` is gone (or never joined): its names are looked up no more.
    pub(super) fn forget_seeds(&mut self, endpoint: EndpointId) {
        for seeds in self.seeds.iter().filter(|seeds| seeds.endpoint == endpoint) {
            self.resolver.forget(seeds.id);
        }
        self.seeds.retain(|seeds| seeds.endpoint != endpoint);
    }

    /// The seeds of `group` here: those of each of its endpoints in this process, and `extra`,
    /// each address once, in that order.
    fn group_peers(&self, group: &GroupName, extra: &[Address]) -> Vec<Address> {
        let mut peers: Vec<Address> = Vec::new();
        let endpoints = self.groups.get(group).into_iter().flatten();
        let theirs = endpoints.filter_map(|e| self.members.get(e)).flat_map(|m| &m.seeds);
        for &address in theirs.chain(extra) {
            if !peers.contains(&address) {
                peers.push(address);
            }
        }
        peers
    }

    /// Gives the node `group`'s seeds: the union of its endpoints' here (two members of one
    /// group in a process may be configured with different seeds, and one that exits must not
    /// take the other's with it); none once its last endpoint here is gone.
    pub(super) fn publish_peers(&mut self, group: &GroupName) {
        if self.groups.contains_key(group) {
            let peers = self.group_peers(group, &[]);
            self.node.set_peers(group.clone(), peers);
        } else {
            self.node.forget_peers(group);
        }
    }

    /// Takes the answers of seed lookups, and asks again for the seeds whose interval has
    /// passed (one lookup in flight per group; the interval counts from the asking).
    pub(super) fn reresolve(&mut self, now: motet_core::Instant) {
        if self.seeds.is_empty() && self.resolver.idle() {
            return;
        }
        // Read even when no group is left to take them: an answer holds a waker, and a loop
        // whose waker someone holds never waits in the receive call.
        let answers = self.resolver.answers();
        for answer in answers {
            // The seeds of an endpoint that has exited since are gone: nothing to update.
            let Some(seeds) = self.seeds.iter_mut().find(|s| s.id == answer.id) else { continue };
            seeds.in_flight = false;
            seeds.slow_told = false;
            self.stats.seed_lookups_failed += answer.found.iter().filter(|(_, result)| result.is_err()).count() as u64;
            let peers = resolve::seed_addresses(&seeds.peers, self.advertise, &mut seeds.last, answer.found);
            if let Some(retry) = resolve::retry_after(&seeds.last, seeds.interval) {
                seeds.next = seeds.next.min(crate::clock::Deadline::after(&self.clock, retry));
            }
            if let Some(member) = self.members.get_mut(&seeds.endpoint) {
                member.seeds = peers;
            }
            let group = seeds.group.clone();
            self.publish_peers(&group);
        }
        for seeds in &mut self.seeds {
            let due = seeds.next.from(now).is_zero();
            // A lookup that has taken a whole interval: a name whose servers do not answer (or
            // a stuck resolver), holding a lookup thread, and the later lookups if it holds all
            // of them. Said once per lookup.
            if seeds.in_flight && due && !seeds.slow_told {
                seeds.slow_told = true;
                tracing::warn!(group = ?seeds.group, peers = ?seeds.peers, interval = ?seeds.interval, "seed names asked of DNS a whole interval ago are not resolved yet: a name's servers do not answer, and it holds one of the lookup threads");
            }
            if seeds.in_flight || !due {
                continue;
            }
            seeds.in_flight = true;
            seeds.next = crate::clock::Deadline::after(&self.clock, seeds.interval);
            self.resolver.ask(seeds.id, resolve::names(&seeds.peers), Arc::clone(&self.waker));
        }
    }
}
