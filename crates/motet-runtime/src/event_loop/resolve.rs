//! DNS lookups of seed names, off the loop thread.
//!
//! A lookup (`getaddrinfo`) blocks for as long as the DNS server takes to answer: with glibc's
//! defaults, up to 5 s per attempt and two attempts when a server does not answer. On the loop
//! thread that stalled every group of the process, and its members were suspected by everyone
//! after a second of silence (`suspect.timeout_ms`). So the loop hands names to a thread of its
//! own and goes on; the answer comes back through a channel, and the thread wakes the loop with
//! its waker.
//!
//! Bounds: a group asks again only once its answer is in (`Seeds::in_flight`), and a group that is
//! gone takes its waiting request with it ([`Resolver::forget`]): however fast groups come and go
//! while a lookup hangs, the work queued is at most one request per live group, and the answers
//! at most one per request. Up to [`LOOKUP_THREADS`] threads serve the requests in the order
//! asked, so a name whose servers do not answer holds up the groups seeded by it and one thread,
//! not every group's: a thread starts when a request finds none idle, and each ends when the loop
//! is dropped (after the lookup it may be in, which is not waited for). A name is looked up once
//! for every group that asks for it meanwhile, and its answer serves those that ask within
//! [`SHARED_FOR`]. A request that needs a name another thread is looking up is parked, holding no
//! thread, and goes back to the head of the queue when that answer is in: however many groups
//! share a name that hangs, they hold one thread between them.

use std::collections::BTreeMap;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::{mpsc, Arc, Condvar, Mutex};

use crate::clock::{Clock, Deadline};
use motet_core::Address;

/// How a name is looked up: the system resolver, or a stand-in in tests.
pub(super) type Lookup = fn(&str) -> io::Result<Vec<SocketAddr>>;

/// The system resolver (`getaddrinfo`, through the standard library).
fn system(name: &str) -> io::Result<Vec<SocketAddr>> {
    name.to_socket_addrs().map(Iterator::collect)
}

/// How long a name's answer serves the other requests for it: a process in many groups seeded
/// by one name (a container platform's service name) looks it up once in this, not once per
/// group (10^5 groups re-resolving every 30 s asked its DNS server 3,000 times a second). The
/// shortest `resolve_interval` there is.
const SHARED_FOR: std::time::Duration = std::time::Duration::from_secs(1);

/// Threads that look names up at most: each lookup that hangs (a name's servers do not answer;
/// glibc gives up after 10 s) holds one, and the others go on serving the other groups.
pub(super) const LOOKUP_THREADS: usize = 4;

/// One group's names to look up.
struct Request {
    names: Vec<String>,
    /// The answers so far, in the order of `names` (a parked request keeps what it had).
    found: Found,
    /// Held from the asking until the loop has read the answer: a loop whose waker nobody else
    /// holds may wait in its receive call, which a wake-up would not interrupt.
    waker: Arc<mio::Waker>,
}

/// The answer to a request: each name with its addresses or the lookup's error.
pub(super) struct Answer {
    pub(super) id: u64,
    pub(super) found: Found,
    /// The request's waker, dropped with the answer once the loop has read it.
    _waker: Arc<mio::Waker>,
}

/// Each name of a request with its addresses or the lookup's error.
pub(super) type Found = Vec<(String, io::Result<Vec<SocketAddr>>)>;

/// What the lookup threads have to do: the requests in the order asked (a group asking often
/// cannot starve the others).
#[derive(Default)]
struct Wanted {
    requests: std::collections::VecDeque<(u64, Request)>,
    /// Requests waiting for the answer of the name another thread is looking up (the name, the
    /// request), in the order they were parked.
    parked: Vec<(String, u64, Request)>,
    /// The loop is gone: the threads end.
    closed: bool,
    /// Threads waiting for a request.
    idle: usize,
    /// Names being looked up, and answers that still serve (for [`SHARED_FOR`]).
    names: BTreeMap<String, Shared>,
    /// `names` is pruned of answers that serve no more once it has this many entries (then twice
    /// what is left, so pruning costs a constant per name).
    prune_at: usize,
}

/// A name's lookup, shared by the requests that ask for it meanwhile.
enum Shared {
    /// A thread is looking it up: the others asking for it wait for its answer.
    Pending,
    /// Its answer, and until when it serves (an error as its kind and text).
    Known { until: Deadline, result: Result<Vec<SocketAddr>, (io::ErrorKind, String)> },
}

/// The loop's side of the lookup threads.
pub(super) struct Resolver {
    lookup: Lookup,
    wanted: Arc<(Mutex<Wanted>, Condvar)>,
    /// Lookup threads started.
    threads: usize,
    /// The time the threads' shared answers are kept by.
    clock: Clock,
    answers_in: mpsc::Sender<Answer>,
    answers: mpsc::Receiver<Answer>,
    /// Requests asked and neither answered (the answer read) nor withdrawn.
    outstanding: usize,
}

impl Default for Resolver {
    fn default() -> Resolver {
        Resolver::with_lookup(system)
    }
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolver").field("threads", &self.threads).finish()
    }
}

impl Drop for Resolver {
    fn drop(&mut self) {
        self.lock().closed = true;
        self.wanted.1.notify_all();
    }
}

impl Resolver {
    pub(super) fn with_lookup(lookup: Lookup) -> Resolver {
        let (answers_in, answers) = mpsc::channel();
        Resolver {
            lookup,
            wanted: Arc::default(),
            threads: 0,
            clock: Clock::new(),
            answers_in,
            answers,
            outstanding: 0,
        }
    }

    /// Asks for the addresses of `names`, answered later under `id` ([`Resolver::answers`]). If
    /// no lookup thread can be started at all, the names are looked up here, at once, as a last
    /// resort.
    pub(super) fn ask(&mut self, id: u64, names: Vec<String>, waker: Arc<mio::Waker>) {
        self.outstanding += 1;
        // Requests waiting count as taking an idle thread each: a burst of asks starts threads.
        let none_idle = {
            let wanted = self.lock();
            wanted.idle <= wanted.requests.len()
        };
        if none_idle && self.threads < LOOKUP_THREADS {
            let (shared, answers, lookup, clock) =
                (Arc::clone(&self.wanted), self.answers_in.clone(), self.lookup, self.clock);
            let spawned = std::thread::Builder::new()
                .name("motet-resolve".into())
                .spawn(move || serve(&shared, &answers, lookup, clock));
            match spawned {
                Ok(_) => self.threads += 1,
                Err(error) if self.threads == 0 => {
                    tracing::warn!(%error, "no thread for DNS lookups: looking seeds up on the loop thread");
                    let found = lookups(&names, self.lookup);
                    let _ = self.answers_in.send(Answer { id, found, _waker: waker });
                    return;
                }
                // The threads already started serve it in turn.
                Err(error) => tracing::warn!(%error, threads = self.threads, "no further thread for DNS lookups"),
            }
        }
        self.lock().requests.push_back((id, Request { names, found: Vec::new(), waker }));
        self.wanted.1.notify_one();
    }

    /// Withdraws the request of `id` if it is waiting, queued or parked (its group is gone).
    pub(super) fn forget(&mut self, id: u64) {
        let mut wanted = self.lock();
        let before = wanted.requests.len() + wanted.parked.len();
        wanted.requests.retain(|(waiting, _)| *waiting != id);
        wanted.parked.retain(|(_, waiting, _)| *waiting != id);
        let withdrawn = before - wanted.requests.len() - wanted.parked.len();
        drop(wanted);
        self.outstanding -= withdrawn;
    }

    /// No request is outstanding: nothing will come back ([`Resolver::answers`] has nothing).
    pub(super) fn idle(&self) -> bool {
        self.outstanding == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Wanted> {
        locked(&self.wanted.0)
    }

    /// The answers that have come back since the last call.
    pub(super) fn answers(&mut self) -> Vec<Answer> {
        let answers: Vec<Answer> = self.answers.try_iter().collect();
        self.outstanding -= answers.len();
        answers
    }
}

/// The lookups' shared state, whatever a thread that panicked holding it left.
fn locked(lock: &Mutex<Wanted>) -> std::sync::MutexGuard<'_, Wanted> {
    lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn lookups(names: &[String], lookup: Lookup) -> Found {
    names.iter().map(|name| (name.clone(), lookup(name))).collect()
}

/// What a lookup thread does about one name of a request.
enum Next {
    /// Its answer, shared by another request within [`SHARED_FOR`].
    Known(io::Result<Vec<SocketAddr>>),
    /// Another thread is looking it up: the request is parked until that answer is in.
    Parked,
    /// Nobody is: this thread looks it up (marked pending for the others).
    Lookup,
}

/// Whether `name` is known, being looked up, or this thread's to look up (then marked so).
fn claim(state: &mut Wanted, name: &str, clock: Clock) -> Next {
    match state.names.get(name) {
        Some(Shared::Known { until, result }) if !until.until(&clock).is_zero() => {
            return Next::Known(result.clone().map_err(|(kind, text)| io::Error::new(kind, text)));
        }
        Some(Shared::Pending) => return Next::Parked,
        _ => {}
    }
    if state.names.len() >= state.prune_at {
        state.names.retain(|_, shared| match shared {
            Shared::Pending => true,
            Shared::Known { until, .. } => !until.until(&clock).is_zero(),
        });
        state.prune_at = (2 * state.names.len()).max(64);
    }
    state.names.insert(name.to_string(), Shared::Pending);
    Next::Lookup
}

/// Files the answer of `name` for the requests that ask within [`SHARED_FOR`], and sends the
/// requests parked on it back to the head of the queue, in the order they were parked.
fn answered(state: &mut Wanted, name: &str, result: &io::Result<Vec<SocketAddr>>, clock: Clock) {
    let kept = match result {
        Ok(addresses) => Ok(addresses.clone()),
        Err(e) => Err((e.kind(), e.to_string())),
    };
    let until = Deadline::after(&clock, SHARED_FOR);
    state.names.insert(name.to_string(), Shared::Known { until, result: kept });
    let (ready, waiting) = std::mem::take(&mut state.parked).into_iter().partition(|(n, ..)| n == name);
    state.parked = waiting;
    for (_, id, request) in ready.into_iter().rev() {
        state.requests.push_front((id, request));
    }
}

/// A lookup thread: answers the wanted requests in order until the loop is gone. A request that
/// needs a name another thread is looking up is parked, and this thread goes on to the next.
fn serve(wanted: &(Mutex<Wanted>, Condvar), answers: &mpsc::Sender<Answer>, lookup: Lookup, clock: Clock) {
    let (lock, changed) = wanted;
    'requests: loop {
        let (id, mut request) = {
            let mut state = locked(lock);
            loop {
                if state.closed {
                    return;
                }
                if let Some(next) = state.requests.pop_front() {
                    break next;
                }
                state.idle += 1;
                state = changed.wait(state).unwrap_or_else(std::sync::PoisonError::into_inner);
                state.idle -= 1;
            }
        };
        while let Some(name) = request.names.get(request.found.len()).cloned() {
            let mut state = locked(lock);
            let result = match claim(&mut state, &name, clock) {
                Next::Known(result) => result,
                Next::Parked => {
                    state.parked.push((name, id, request));
                    continue 'requests;
                }
                Next::Lookup => {
                    drop(state);
                    let result = lookup(&name);
                    answered(&mut locked(lock), &name, &result, clock);
                    // Parked requests are queued again: idle threads take them.
                    changed.notify_all();
                    result
                }
            };
            request.found.push((name, result));
        }
        let Request { found, waker, .. } = request;
        let wake = Arc::clone(&waker);
        if answers.send(Answer { id, found, _waker: waker }).is_err() {
            return;
        }
        // A loop that cannot be woken still reads the answer at its next turn.
        let _ = wake.wake();
    }
}

/// Lookups of a name that may fail in a row before its last addresses are dropped (5 minutes at
/// the default `resolve_interval` of 30 s): long enough to ride out a DNS server restarting,
/// short enough that a name that is gone (a scaled-down pod) stops being gossiped to, at an
/// address another deployment may have by then.
pub(super) const FAILURES_KEPT: u32 = 10;

/// What the last lookups of a name gave: its addresses, and how many lookups failed since.
#[derive(Debug, Default)]
pub(super) struct Known {
    addresses: Vec<SocketAddr>,
    failures: u32,
    /// A warning said this member's loopback address cannot reach the name's addresses (once per
    /// name: it is looked up again every interval).
    unreachable_told: bool,
}

/// When to ask again for names some of which have no address (never resolved, or dropped after
/// failing): sooner than `interval`, by doubling from a second after the first failure (1, 2, 4
/// ... 32 s, at most `interval`). Peers whose records do not exist yet (a StatefulSet's pods as
/// they start) were otherwise waited for a whole interval (30 s) before the next try (a
/// review's finding). `None` when every name has addresses.
pub(super) fn retry_after(
    last: &BTreeMap<String, Known>,
    interval: std::time::Duration,
) -> Option<std::time::Duration> {
    let failures = last.values().filter(|k| k.addresses.is_empty() && k.failures > 0).map(|k| k.failures).min()?;
    Some(std::time::Duration::from_secs(1 << (failures - 1).min(5)).min(interval))
}

/// The addresses of `peers` (IP literals as they are, names from `found` or, when their lookup
/// failed or has not been answered yet, from `last`), leaving out `own` and any address of the
/// other IP family than `own` (an IPv4 socket cannot send to `::1`, which `localhost` also
/// gives: every send there failed). A name's successful lookup replaces its entry in `last`; a
/// lookup that fails (a DNS server restarting) keeps the name's last addresses, for
/// [`FAILURES_KEPT`] failures in a row.
pub(super) fn seed_addresses(
    peers: &[String],
    own: SocketAddr,
    last: &mut BTreeMap<String, Known>,
    found: Found,
) -> Vec<Address> {
    for (name, result) in found {
        match result {
            Ok(addresses) => {
                let (usable, other): (Vec<_>, Vec<_>) =
                    addresses.into_iter().partition(|a| a.is_ipv4() == own.is_ipv4());
                if usable.is_empty() && !other.is_empty() {
                    let family = if own.is_ipv4() { "IPv4" } else { "IPv6" };
                    tracing::warn!(peer = %name, ?other, "seed name has no {family} address, which this member's socket needs: it is no seed");
                }
                // The default bind is loopback: a name of other hosts' addresses (a service name)
                // then gave seeds every send to which the kernel refuses, and the member sat alone
                // without a word. An IP literal is refused at the join instead.
                let mut unreachable_told = last.get(&name).is_some_and(|k| k.unreachable_told);
                let remote: Vec<_> = usable.iter().filter(|a| !a.ip().is_loopback()).collect();
                if own.ip().is_loopback() && !remote.is_empty() && !unreachable_told {
                    unreachable_told = true;
                    tracing::warn!(peer = %name, ?remote, %own, "seed name resolves to addresses on other hosts, which this member's loopback address cannot reach: it will sit alone; bind a reachable address (`--bind 0.0.0.0:PORT --advertise IP:PORT`, or `bind` and `advertise` in [runtime])");
                }
                last.insert(name, Known { addresses: usable, failures: 0, unreachable_told });
            }
            Err(error) => {
                let known = last.entry(name.clone()).or_default();
                known.failures = known.failures.saturating_add(1);
                if known.failures >= FAILURES_KEPT && !known.addresses.is_empty() {
                    tracing::warn!(peer = %name, %error, failures = known.failures, "seed name has not resolved for {FAILURES_KEPT} lookups in a row: its last addresses are dropped");
                    known.addresses.clear();
                } else {
                    let kept = known.addresses.len();
                    tracing::warn!(peer = %name, %error, kept, "seed address does not resolve (yet); keeping its last addresses");
                }
            }
        }
    }
    let mut out = std::collections::BTreeSet::new();
    for peer in peers {
        match peer.parse::<SocketAddr>() {
            Ok(address) if address.is_ipv4() != own.is_ipv4() => {
                tracing::warn!(%peer, %own, "seed of the other IP family than this member's socket: ignored");
            }
            Ok(address) => {
                out.insert(address);
            }
            Err(_) => out.extend(last.get(peer).into_iter().flat_map(|k| k.addresses.iter().copied())),
        }
    }
    out.remove(&own);
    out.into_iter().map(Address::Inet).collect()
}

/// The names among `peers` (what is not an IP literal with a port).
pub(super) fn names(peers: &[String]) -> Vec<String> {
    peers.iter().filter(|p| p.parse::<SocketAddr>().is_err()).cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inet(addresses: &[Address]) -> Vec<String> {
        addresses
            .iter()
            .filter_map(|a| match a {
                Address::Inet(a) => Some(a.to_string()),
                Address::Sim(_) => None,
            })
            .collect()
    }

    /// A seed that does not resolve keeps the addresses of its last lookup that did; its own
    /// address is never a seed; a name not answered yet has no addresses.
    #[test]
    fn a_seed_that_stops_resolving_keeps_its_last_addresses() {
        let own: SocketAddr = "127.0.0.1:7000".parse().unwrap();
        let peers = ["127.0.0.1:7001".to_string(), "127.0.0.1:7000".to_string(), "seed.example:7002".to_string()];
        assert_eq!(names(&peers), ["seed.example:7002"]);
        let mut last = BTreeMap::new();
        assert_eq!(inet(&seed_addresses(&peers, own, &mut last, Vec::new())), ["127.0.0.1:7001"], "not answered yet");
        let failed = || vec![(peers[2].clone(), Err(io::Error::other("no answer")))];
        assert_eq!(inet(&seed_addresses(&peers, own, &mut last, failed())), ["127.0.0.1:7001"], "first time: not yet");
        let found = vec![(peers[2].clone(), Ok(vec!["127.0.0.9:7002".parse().unwrap(), own]))];
        let both = ["127.0.0.1:7001", "127.0.0.9:7002"];
        assert_eq!(inet(&seed_addresses(&peers, own, &mut last, found)), both);
        assert_eq!(inet(&seed_addresses(&peers, own, &mut last, failed())), both, "kept");
        assert_eq!(inet(&seed_addresses(&peers, own, &mut last, Vec::new())), both, "kept between lookups");
        // Kept through FAILURES_KEPT - 1 more failures in a row, then dropped; found again later.
        for _ in 2..FAILURES_KEPT {
            assert_eq!(inet(&seed_addresses(&peers, own, &mut last, failed())), both, "kept");
        }
        assert_eq!(inet(&seed_addresses(&peers, own, &mut last, failed())), ["127.0.0.1:7001"], "dropped");
        let found = vec![(peers[2].clone(), Ok(vec!["127.0.0.9:7002".parse().unwrap()]))];
        assert_eq!(inet(&seed_addresses(&peers, own, &mut last, found)), both, "found again");
    }

    /// A member on a loopback address whose seed name resolves to other hosts' addresses is
    /// told once per name (its sends there are all refused: it sits alone), not at every lookup;
    /// a member on a reachable address, or a name of loopback addresses, is not told at all.
    #[test]
    fn a_loopback_member_is_told_once_of_a_seed_name_on_other_hosts() {
        let peers = ["seeds.example:7001".to_string(), "localhost:7002".to_string()];
        let found = || {
            vec![
                (peers[0].clone(), Ok(vec!["10.0.0.6:7001".parse().unwrap()])),
                (peers[1].clone(), Ok(vec!["127.0.0.1:7002".parse().unwrap()])),
            ]
        };
        let told = |last: &BTreeMap<String, Known>, name: &str| last.get(name).is_some_and(|k| k.unreachable_told);
        let own: SocketAddr = "127.0.0.1:7000".parse().unwrap();
        let mut last = BTreeMap::new();
        seed_addresses(&peers, own, &mut last, found());
        assert!(told(&last, &peers[0]) && !told(&last, &peers[1]));
        // Kept through the next lookups, failed or answered: not said again.
        seed_addresses(&peers, own, &mut last, vec![(peers[0].clone(), Err(io::Error::other("no answer")))]);
        seed_addresses(&peers, own, &mut last, found());
        assert!(told(&last, &peers[0]));
        let reachable: SocketAddr = "10.0.0.5:7000".parse().unwrap();
        let mut last = BTreeMap::new();
        seed_addresses(&peers, reachable, &mut last, found());
        assert!(!told(&last, &peers[0]) && !told(&last, &peers[1]));
    }

    /// An IPv4 member takes no IPv6 seed (`localhost` gives `::1` too), literal or resolved.
    #[test]
    fn seeds_of_the_other_ip_family_are_left_out() {
        let own: SocketAddr = "127.0.0.1:7000".parse().unwrap();
        let peers = ["[::1]:7001".to_string(), "localhost:7002".to_string()];
        let mut last = BTreeMap::new();
        let found =
            vec![(peers[1].clone(), Ok(vec!["[::1]:7002".parse().unwrap(), "127.0.0.1:7002".parse().unwrap()]))];
        assert_eq!(inet(&seed_addresses(&peers, own, &mut last, found)), ["127.0.0.1:7002"]);
        let v6: SocketAddr = "[::1]:7000".parse().unwrap();
        let found =
            vec![(peers[1].clone(), Ok(vec!["[::1]:7002".parse().unwrap(), "127.0.0.1:7002".parse().unwrap()]))];
        assert_eq!(inet(&seed_addresses(&peers, v6, &mut BTreeMap::new(), found)), ["[::1]:7001", "[::1]:7002"]);
    }
}
