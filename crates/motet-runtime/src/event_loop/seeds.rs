//! A group's seeds: the addresses where its other partitions may be found, kept per endpoint
//! (the node has the union of a group's endpoints' in this process), and their DNS names looked
//! up again every `resolve_interval`, off the loop thread ([`super::resolve`]).

use super::{resolve, EventLoop};
use crate::config::GroupConfig;
use motet_core::{Address, EndpointId, GroupName};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

/// DNS names among a group's peers, re-resolved periodically, off the loop thread
/// ([`resolve`]).
#[derive(Debug)]
pub(super) struct Seeds {
    /// Names the lookups' answers ([`resolve::Answer::id`]).
    id: u64,
    /// A lookup was asked and not answered yet (at most one at a time).
    pub(super) in_flight: bool,
    /// The lookup in flight has outlasted the interval, and a warning said so.
    pub(super) slow_told: bool,
    /// The endpoint that joined with them (they go when it exits).
    endpoint: EndpointId,
    group: GroupName,
    peers: Vec<String>,
    interval: Duration,
    pub(super) next: crate::clock::Deadline,
    /// Each name's addresses at its last successful lookup: a lookup that fails (a DNS server
    /// restarting) keeps them instead of dropping the name from the peers until the next one.
    last: BTreeMap<String, resolve::Known>,
}

/// The seeds of every endpoint here, indexed (`EventLoop::seeds`).
#[derive(Debug, Default)]
pub(super) struct SeedsIndex {
    /// By the id their lookups answer with.
    pub(super) by_id: BTreeMap<u64, Seeds>,
    /// Each endpoint's (one per join).
    by_endpoint: BTreeMap<EndpointId, u64>,
    /// `(next, id)` of every entry whose `next` is still to act on: a lookup due, or the warning
    /// that a lookup in flight has taken a whole interval (not yet given).
    due: BTreeSet<(crate::clock::Deadline, u64)>,
}

impl SeedsIndex {
    pub(super) fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    fn insert(&mut self, seeds: Seeds) {
        self.by_endpoint.insert(seeds.endpoint, seeds.id);
        self.due.insert((seeds.next, seeds.id));
        self.by_id.insert(seeds.id, seeds);
    }

    fn remove(&mut self, endpoint: EndpointId) -> Option<Seeds> {
        let id = self.by_endpoint.remove(&endpoint)?;
        let seeds = self.by_id.remove(&id)?;
        self.due.remove(&(seeds.next, id));
        Some(seeds)
    }

    /// The earliest `next` to act on.
    fn first_due(&self) -> Option<crate::clock::Deadline> {
        self.due.first().map(|&(at, _)| at)
    }

    /// Checks that the index agrees with its entries (tests): each endpoint's id names its
    /// entry, and each entry's `next` is due exactly while there is still something to do at it
    /// (a lookup, or the slow-lookup warning).
    #[cfg(test)]
    pub(super) fn check(&self) {
        assert_eq!(self.by_endpoint.len(), self.by_id.len());
        for (&endpoint, id) in &self.by_endpoint {
            assert_eq!(self.by_id[id].endpoint, endpoint);
        }
        let pending = self.by_id.values().filter(|s| !(s.in_flight && s.slow_told));
        let expected: BTreeSet<_> = pending.map(|s| (s.next, s.id)).collect();
        assert_eq!(self.due, expected);
    }

    /// The id of an entry due at `now`, taken out of `due`.
    fn pop_due(&mut self, now: crate::clock::Deadline) -> Option<u64> {
        let &(at, id) = self.due.first()?;
        (at <= now).then(|| {
            self.due.pop_first();
            id
        })
    }
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
            self.seeds.insert(Seeds {
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

    /// When the next group's names are due for a lookup (or a lookup in flight has taken a
    /// whole interval, which is said once). A group whose lookup is in flight waits for its
    /// answer (which wakes the loop), not for its interval: a lookup that outlasts the interval
    /// would otherwise make every wait zero.
    pub(super) fn next_lookup(&self) -> Option<crate::clock::Deadline> {
        self.seeds.first_due()
    }

    /// `endpoint` is gone (or never joined): its names are looked up no more.
    pub(super) fn forget_seeds(&mut self, endpoint: EndpointId) {
        if let Some(seeds) = self.seeds.remove(endpoint) {
            self.resolver.forget(seeds.id);
        }
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
            let Some(seeds) = self.seeds.by_id.get_mut(&answer.id) else { continue };
            // Its `next` was due for the slow-lookup warning unless that was given.
            if !seeds.slow_told {
                self.seeds.due.remove(&(seeds.next, seeds.id));
            }
            seeds.in_flight = false;
            seeds.slow_told = false;
            self.stats.seed_lookups_failed += answer.found.iter().filter(|(_, result)| result.is_err()).count() as u64;
            let peers = resolve::seed_addresses(&seeds.peers, self.advertise, &mut seeds.last, answer.found);
            if let Some(retry) = resolve::retry_after(&seeds.last, seeds.interval) {
                seeds.next = seeds.next.min(crate::clock::Deadline::after(&self.clock, retry));
            }
            self.seeds.due.insert((seeds.next, seeds.id));
            if let Some(member) = self.members.get_mut(&seeds.endpoint) {
                member.seeds = peers;
            }
            let group = seeds.group.clone();
            self.publish_peers(&group);
        }
        let now = crate::clock::Deadline::at(now);
        while let Some(id) = self.seeds.pop_due(now) {
            let seeds = self.seeds.by_id.get_mut(&id).expect("a due entry's seeds are kept");
            // A lookup that has taken a whole interval: a name whose servers do not answer (or
            // a stuck resolver), holding a lookup thread, and the later lookups if it holds all
            // of them. Said once per lookup.
            if seeds.in_flight {
                seeds.slow_told = true;
                tracing::warn!(group = ?seeds.group, peers = ?seeds.peers, interval = ?seeds.interval, "seed names asked of DNS a whole interval ago are not resolved yet: a name's servers do not answer, and it holds one of the lookup threads");
                continue;
            }
            seeds.in_flight = true;
            seeds.next = crate::clock::Deadline::after(&self.clock, seeds.interval);
            self.seeds.due.insert((seeds.next, id));
            self.resolver.ask(id, resolve::names(&seeds.peers), Arc::clone(&self.waker));
        }
    }
}
