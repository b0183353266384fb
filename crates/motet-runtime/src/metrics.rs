//! Counters as Prometheus text (exposition format 0.0.4), and a minimal HTTP endpoint serving
//! them: a scrape is one `GET /metrics`, answered and closed, each on a thread of its own (a
//! bounded number) so a slow or idle client delays neither the event loop nor other scrapes.

use crate::event_loop::RuntimeStats;
use crate::runtime::StatsHandle;
use motet_core::layer::Stats;
use motet_core::{Counter, DropReason};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What kind of figure a [`Figure`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A count that only grows (a Prometheus counter, named `..._total`).
    Counter,
    /// A level that goes up and down (a Prometheus gauge).
    Gauge,
    /// On or off: a gauge of 1 or 0 in Prometheus, `true` or `false` in JSON.
    Flag,
}

/// One of [`RuntimeStats`]'s figures as exported: `motet member --stats` names it `field`, the
/// metrics endpoint `motet_` and `metric`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Figure {
    /// The field of [`RuntimeStats`], and the key in `motet member --stats`.
    pub field: &'static str,
    /// The Prometheus name, without the `motet_` prefix.
    pub metric: &'static str,
    /// What it counts (the Prometheus `HELP`).
    pub help: &'static str,
    /// Counter, gauge or flag.
    pub kind: Kind,
    /// Its value (a flag's is 0 or 1).
    pub value: u64,
}

impl RuntimeStats {
    /// Every figure, for the exports: one list, so that the metrics endpoint and `motet member
    /// --stats` show the same ones (six counters were in neither, one in `--stats` only: a
    /// review's finding). The fields are taken apart by name, so a field added to
    /// `RuntimeStats` does not compile until it is listed here.
    pub fn figures(&self) -> Vec<Figure> {
        let RuntimeStats {
            datagrams_in,
            recv_waits,
            datagrams_out,
            recv_batches,
            send_errors,
            receive_errors,
            send_backlogged,
            send_backlog_dropped,
            app_backpressure,
            lags,
            sends_to_departed,
            injected_loss,
            views_installed,
            views_with_other_params,
            merges_changing_stack,
            actions_refused,
            endpoints,
            buffered,
            bundles_sent,
            datagrams_packed,
            segmented_sends,
            datagrams_segmented,
            malformed_bundles,
            control_truncated,
            stale_xfer,
            turns,
            busy_yields,
            migrations,
            datagrams_in_retired,
            retired_closed,
            seed_lookups_failed,
            seed_addresses,
            connected_sockets,
            connected_fallbacks,
            receive_offload,
            bypass_hits,
            bypass_misses,
        } = *self;
        let figure = |field, metric, help, kind, value| Figure { field, metric, help, kind, value };
        use Kind::{Counter as C, Flag as F, Gauge as G};
        vec![
            figure("datagrams_in", "datagrams_received_total", "UDP datagrams received", C, datagrams_in),
            figure("datagrams_out", "datagrams_sent_total", "UDP datagrams sent (one per destination)", C, datagrams_out),
            figure(
                "recv_batches",
                "recv_batches_total",
                "receive calls that returned (recvmmsg batches and single reads)",
                C,
                recv_batches,
            ),
            figure(
                "recv_waits",
                "recv_waits_total",
                "turns that waited in the receive call rather than in epoll",
                C,
                recv_waits,
            ),
            figure("turns", "turns_total", "turns of the event loop", C, turns),
            figure(
                "busy_yields",
                "busy_yields_total",
                "times a busy-polling loop found nothing to read and yielded its CPU",
                C,
                busy_yields,
            ),
            figure("send_errors", "send_errors_total", "sends that failed and were dropped", C, send_errors),
            figure(
                "receive_errors",
                "receive_errors_total",
                "receive calls that failed (ICMP errors reported there)",
                C,
                receive_errors,
            ),
            figure(
                "send_backlogged",
                "send_backlogged_total",
                "datagrams held because the socket's send buffer was full",
                C,
                send_backlogged,
            ),
            figure(
                "send_backlog_dropped",
                "send_backlog_dropped_total",
                "datagrams dropped from a full send backlog",
                C,
                send_backlog_dropped,
            ),
            figure(
                "app_backpressure",
                "app_backpressure_total",
                "times the loop stopped reading the socket because the application lagged",
                C,
                app_backpressure,
            ),
            figure("lags", "lags_total", "times a member's application fell behind and its senders waited for it", C, lags),
            figure(
                "sends_to_departed",
                "sends_to_departed_total",
                "parked sends dropped because their destination left the view",
                C,
                sends_to_departed,
            ),
            figure(
                "injected_loss",
                "injected_loss_total",
                "received datagrams dropped on purpose by inject_loss (a testing aid)",
                C,
                injected_loss,
            ),
            figure("bundles_sent", "bundles_sent_total", "datagrams that packed several messages", C, bundles_sent),
            figure("datagrams_packed", "datagrams_packed_total", "messages sent inside bundles", C, datagrams_packed),
            figure(
                "segmented_sends",
                "segmented_sends_total",
                "system calls that sent several datagrams (segmentation offload)",
                C,
                segmented_sends,
            ),
            figure(
                "datagrams_segmented",
                "datagrams_segmented_total",
                "datagrams sent by segmentation-offload calls",
                C,
                datagrams_segmented,
            ),
            figure(
                "malformed_bundles",
                "malformed_bundles_total",
                "received bundles that did not unpack (dropped)",
                C,
                malformed_bundles,
            ),
            figure(
                "control_truncated",
                "control_truncated_total",
                "received buffers dropped because their control message was cut short (MSG_CTRUNC)",
                C,
                control_truncated,
            ),
            figure(
                "connected_fallbacks",
                "connected_fallbacks_total",
                "unicast sends handed to the shared socket in place of their connected socket (tries, a retry counts again)",
                C,
                connected_fallbacks,
            ),
            figure("views_installed", "views_installed_total", "views installed by this process's endpoints", C, views_installed),
            figure(
                "views_with_other_params",
                "views_with_other_params_total",
                "views installed whose protocol parameters differ from this member's configuration",
                C,
                views_with_other_params,
            ),
            figure(
                "merges_changing_stack",
                "merges_changing_stack_total",
                "merged views installed whose stack differs from the one this member ran before (a partition running another stack)",
                C,
                merges_changing_stack,
            ),
            figure(
                "actions_refused",
                "actions_refused_total",
                "application actions refused after they were queued (see the log)",
                C,
                actions_refused,
            ),
            figure(
                "stale_xfer",
                "stale_xfer_total",
                "state-transfer actions for a view that had already ended (dropped)",
                C,
                stale_xfer,
            ),
            figure("migrations", "migrations_total", "migrations of this process to a new socket", C, migrations),
            figure(
                "datagrams_in_retired",
                "datagrams_received_retired_total",
                "datagrams that arrived at a socket given up by a migration",
                C,
                datagrams_in_retired,
            ),
            figure(
                "retired_closed",
                "retired_sockets_closed_total",
                "sockets given up by migrations and closed since",
                C,
                retired_closed,
            ),
            figure(
                "seed_lookups_failed",
                "seed_lookups_failed_total",
                "DNS lookups of seed names that failed",
                C,
                seed_lookups_failed,
            ),
            figure(
                "bypass_hits",
                "bypass_hits_total",
                "application messages that took the bypass (fused trace handlers)",
                C,
                bypass_hits,
            ),
            figure(
                "bypass_misses",
                "bypass_misses_total",
                "application messages that took the layered path (a layer's fast-path condition failed)",
                C,
                bypass_misses,
            ),
            figure(
                "seed_addresses",
                "seed_addresses",
                "seed addresses known (IP literals and resolved names, summed over endpoints)",
                G,
                seed_addresses,
            ),
            figure("connected_sockets", "connected_sockets", "sockets open for connected sends", G, connected_sockets),
            figure(
                "receive_offload",
                "receive_offload",
                "receive offload is on at the socket (1) or not (0)",
                F,
                u64::from(receive_offload),
            ),
            figure("endpoints", "endpoints", "endpoints joined and not yet exited", G, endpoints),
            figure(
                "buffered",
                "buffered_messages",
                "messages held for retransmission until stable or acknowledged",
                G,
                buffered,
            ),
        ]
    }
}

/// Renders the runtime's and the protocol's counters.
pub fn render(runtime: &RuntimeStats, protocol: &Stats) -> String {
    let mut out = String::new();
    for Figure { metric, help, kind, value, .. } in runtime.figures() {
        let kind = if kind == Kind::Counter { "counter" } else { "gauge" };
        let _ = writeln!(out, "# HELP motet_{metric} {help}\n# TYPE motet_{metric} {kind}\nmotet_{metric} {value}");
    }
    let _ = writeln!(
        out,
        "# HELP motet_protocol_events_total protocol activity by kind and by the layer that counted it (`node`: the node around the stacks)\n# TYPE motet_protocol_events_total counter"
    );
    // One series per layer that counts a kind (mnak's retransmissions of casts apart from pt2pt's
    // of sends): a kind's total is their sum, `sum by (kind)`.
    for &c in Counter::ALL {
        for (layer, value) in protocol.by_layer(c) {
            let layer = layer.map_or("node", |l| l.name());
            let _ = writeln!(out, "motet_protocol_events_total{{layer=\"{layer}\",kind=\"{}\"}} {value}", c.name());
        }
    }
    let _ = writeln!(
        out,
        "# HELP motet_drops_total inputs dropped by the protocol, by reason\n# TYPE motet_drops_total counter"
    );
    for &r in DropReason::ALL {
        let _ = writeln!(out, "motet_drops_total{{reason=\"{}\"}} {}", r.name(), protocol.drops(r));
    }
    // Who dropped: only the layers (and the node) that dropped anything, since any of some 30
    // layers may drop for any reason; `sum by (reason)` gives `motet_drops_total` back.
    let _ = writeln!(
        out,
        "# HELP motet_drops_by_layer_total inputs dropped by the protocol, by the layer that dropped (`node`: the node around the stacks) and reason; only those above zero\n# TYPE motet_drops_by_layer_total counter"
    );
    for (layer, reason, value) in protocol.drops_by_layer() {
        let layer = layer.map_or("node", |l| l.name());
        let _ = writeln!(out, "motet_drops_by_layer_total{{layer=\"{layer}\",reason=\"{}\"}} {value}", reason.name());
    }
    out
}

/// At most this many scrapes are served at once; a connection past them is closed unanswered. A
/// client that connects and sends nothing holds its slot for [`IO_TIMEOUT`] at most, so a few
/// idle connections no longer hold every scrape behind them (one connection at a time, two idle
/// ones outlasted a Prometheus scrape timeout).
pub const CONNECTIONS_MAX: usize = 16;
/// The largest request read: headers beyond it get `431`.
pub const REQUEST_MAX: usize = 8 * 1024;
/// How long a connection may take to send its request, and to take the answer.
pub const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the listener looks for a connection, and for its runtime having stopped.
const ACCEPT_POLL: Duration = Duration::from_millis(20);

/// At most this many of the [`CONNECTIONS_MAX`] connections come from one client address.
pub const PER_CLIENT_MAX: usize = 4;

/// A scrape within this long of the last one that asked the event loop gets that one's text.
/// Each question makes the loop merge every stack's counters, on the thread that runs the
/// protocol: a client looping `GET /metrics` kept it busy (a review's finding; in a process of
/// many groups, heartbeats would wait). Prometheus scrapes every 15 s or so.
pub const RENDER_INTERVAL: Duration = Duration::from_secs(1);

/// The text of the last scrape that asked the event loop, and when ([`RENDER_INTERVAL`]).
#[derive(Default)]
struct Rendered(std::sync::Mutex<Option<(motet_core::Instant, Arc<str>)>>);

impl Rendered {
    /// The metrics at `now`: those rendered within [`RENDER_INTERVAL`], else `ask`'s. Scrapes
    /// that come together wait for one question (the lock is held while it is asked).
    fn get(
        &self,
        now: motet_core::Instant,
        ask: impl FnOnce() -> Result<String, crate::Error>,
    ) -> Result<Arc<str>, crate::Error> {
        let mut last = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let fresh = motet_core::Duration(RENDER_INTERVAL.as_nanos() as u64);
        if let Some((_, text)) = last.as_ref().filter(|(at, _)| now < *at + fresh) {
            return Ok(Arc::clone(text));
        }
        let text: Arc<str> = ask()?.into();
        *last = Some((now, Arc::clone(&text)));
        Ok(text)
    }
}

/// The connections being served: at most [`CONNECTIONS_MAX`], at most [`PER_CLIENT_MAX`] from one
/// client address.
#[derive(Default)]
struct Slots(std::sync::Mutex<Open>);

#[derive(Default)]
struct Open {
    /// Connections by client address.
    by_client: std::collections::BTreeMap<std::net::IpAddr, usize>,
    /// Each connection, by the order it came in: its client, a handle to close it by, and
    /// whether its request has come whole.
    conns: std::collections::BTreeMap<u64, (std::net::IpAddr, Option<TcpStream>, bool)>,
    next: u64,
}

impl Open {
    /// Forgets connection `id`, giving back its client's share; its handle, if it was there.
    fn remove(&mut self, id: u64) -> Option<Option<TcpStream>> {
        let (client, stream, _) = self.conns.remove(&id)?;
        if let Some(mine) = self.by_client.get_mut(&client) {
            *mine -= 1;
            if *mine == 0 {
                self.by_client.remove(&client);
            }
        }
        Some(stream)
    }
}

impl Slots {
    /// Takes a slot for a connection from `client` (`stream` closes it), if one is free for it:
    /// when all are taken, the oldest connection whose request has not come whole is closed to
    /// make room. Idle connections from four addresses held every slot, 2 s at a time and again
    /// at once, and denied every scrape (a review's finding); a scraper sends its request at
    /// once, so it is seldom the one closed.
    fn take(&self, client: std::net::IpAddr, stream: Option<TcpStream>) -> Option<u64> {
        let mut open = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Looked at before an entry is made: a refused client left one at zero, and the map (and
        // each accept's sum over it) grew with every address ever refused.
        if open.by_client.get(&client).is_some_and(|&mine| mine >= PER_CLIENT_MAX) {
            return None;
        }
        if open.conns.len() >= CONNECTIONS_MAX {
            let idle = open.conns.iter().find(|(_, (_, _, complete))| !complete).map(|(&id, _)| id)?;
            if let Some(Some(idle)) = open.remove(idle) {
                let _ = idle.shutdown(std::net::Shutdown::Both);
            }
        }
        let id = open.next;
        open.next += 1;
        *open.by_client.entry(client).or_default() += 1;
        open.conns.insert(id, (client, stream, false));
        Some(id)
    }

    /// Connection `id`'s request came whole: it is no longer closed to make room.
    fn complete(&self, id: u64) {
        let mut open = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(conn) = open.conns.get_mut(&id) {
            conn.2 = true;
        }
    }

    /// Gives back connection `id`'s slot (nothing if it was closed to make room).
    fn give(&self, id: u64) {
        let mut open = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        open.remove(id);
    }
}

/// Serves `GET /metrics` (and `HEAD`) on `address`, each connection on a thread of its own (at
/// most [`CONNECTIONS_MAX`]), until the runtime stops. Other paths get `404`, other methods `405`.
pub fn serve(address: SocketAddr, stats: StatsHandle) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(address)?;
    let bound = listener.local_addr()?;
    let stats = Arc::new(stats);
    let open = Arc::new(Slots::default());
    let rendered = Arc::new(Rendered::default());
    let clock = crate::clock::Clock::new();
    let stopped = Arc::new(AtomicBool::new(false));
    // Not blocking, so that the thread sees the runtime stop and closes the port (an embedder
    // that starts a runtime again on the same address must be able to bind it), and does not
    // spin on a failing accept (out of descriptors).
    listener.set_nonblocking(true)?;
    std::thread::Builder::new().name("motet-metrics".into()).spawn(move || loop {
        if stopped.load(Ordering::Relaxed) || stats.stopped() {
            return;
        }
        let (stream, peer) = match listener.accept() {
            Ok(accepted) => accepted,
            Err(_) => {
                std::thread::sleep(ACCEPT_POLL);
                continue;
            }
        };
        if stream.set_nonblocking(false).is_err() {
            continue;
        }
        // At most `PER_CLIENT_MAX` of the slots per client address: one client holding them all
        // would deny every other scrape.
        let Some(id) = open.take(peer.ip(), stream.try_clone().ok()) else {
            continue; // closed: the scraper retries at its next interval
        };
        let (stats, open_now, stopped) = (Arc::clone(&stats), Arc::clone(&open), Arc::clone(&stopped));
        let rendered = Arc::clone(&rendered);
        let spawned = std::thread::Builder::new().name("motet-metrics-scrape".into()).spawn(move || {
            let metrics =
                || rendered.get(clock.now(), || stats.get().map(|(runtime, protocol)| render(&runtime, &protocol)));
            if answer(stream, || open_now.complete(id), metrics).is_err() {
                stopped.store(true, Ordering::Relaxed);
            }
            open_now.give(id);
        });
        if spawned.is_err() {
            open.give(id);
        }
    })?;
    Ok(bound)
}

/// Reads one request and answers it, with `metrics` for `GET /metrics`, calling `complete_now`
/// once the request has come whole. `Err` only when the runtime has stopped.
fn answer(
    mut stream: TcpStream,
    complete_now: impl FnOnce(),
    metrics: impl FnOnce() -> Result<Arc<str>, crate::Error>,
) -> Result<(), crate::Error> {
    let _ = stream.set_read_timeout(Some(IO_TIMEOUT));
    let _ = stream.set_write_timeout(Some(IO_TIMEOUT));
    let clock = crate::clock::Clock::new();
    let deadline = motet_core::Instant::ZERO + motet_core::Duration(IO_TIMEOUT.as_nanos() as u64);
    // Up to the blank line that ends the headers, however the request was split into segments.
    let mut request = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    // Where the headers end (the blank line, CRLF or bare LF), if they have.
    let end = |request: &[u8]| {
        let crlf = request.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
        let lf = request.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
        crlf.into_iter().chain(lf).min()
    };
    let complete = loop {
        if end(&request).is_some() {
            break true;
        }
        let now = clock.now();
        if request.len() > REQUEST_MAX || now > deadline {
            break false;
        }
        // Each read waits at most what is left of the request's time: a client that sends a
        // byte now and then holds its slot `IO_TIMEOUT` in all, not that per read.
        let left = Duration::from_nanos(deadline.0.saturating_sub(now.0)).max(Duration::from_millis(1));
        let _ = stream.set_read_timeout(Some(left));
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break false,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    };
    if complete {
        complete_now();
    }
    // The request line ends at LF, with or without CR before it: a client that sends bare LFs
    // (`GET /metrics\n\n`, which `end` accepts) had the whole request taken for the path.
    let line = request.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut words = line.split(|&b| b == b' ');
    let (method, path) = (words.next().unwrap_or_default(), words.next().unwrap_or_default());
    let path = path.split(|&b| b == b'?').next().unwrap_or_default();
    // Too large only if the headers themselves are (a body or a pipelined request read with them
    // does not count).
    let too_large = end(&request).map_or(request.len() > REQUEST_MAX, |end| end > REQUEST_MAX);
    let (status, body): (_, Arc<str>) = if too_large {
        ("431 Request Header Fields Too Large", "request headers too large\n".into())
    } else if !complete {
        return Ok(()); // nothing complete came in time: closed unanswered
    } else if method != b"GET" && method != b"HEAD" {
        ("405 Method Not Allowed", "only GET and HEAD\n".into())
    } else if path != b"/metrics" {
        ("404 Not Found", "the metrics are at /metrics\n".into())
    } else {
        ("200 OK", metrics()?)
    };
    let content = if status.starts_with("200") { "text/plain; version=0.0.4" } else { "text/plain" };
    let mut head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if status.starts_with("405") {
        head.push_str("Allow: GET, HEAD\r\n");
    }
    head.push_str("\r\n");
    if method != b"HEAD" {
        head.push_str(&body);
    }
    let _ = stream.write_all(head.as_bytes());
    // Closing with unread request bytes makes the kernel reset the connection, which can cost
    // the client the answer: say we are done, then read what is left (briefly).
    // At most 100 ms and 64 KiB of it: a client that keeps sending must not keep the slot.
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let _ = stream.set_read_timeout(Some(Duration::from_millis(100)));
    let drain_until = clock.now() + motet_core::Duration::from_millis(100);
    let mut drained = 0;
    while drained < 64 * 1024 && clock.now() < drain_until {
        match stream.read(&mut buf) {
            Ok(n) if n > 0 => drained += n,
            _ => break,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client at its bound is refused without leaving an entry (before, every refused address
    /// stayed in the map at zero); a full server closes the oldest connection whose request has
    /// not come whole to make room, and refuses only when every request has (found by a review:
    /// idle connections from four addresses denied every scrape).
    #[test]
    fn a_full_server_makes_room_by_closing_the_oldest_idle_connection() {
        let slots = Slots::default();
        let ip = |i: u32| std::net::IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i));
        let ids: Vec<u64> =
            (0..CONNECTIONS_MAX as u32).map(|i| slots.take(ip(i / PER_CLIENT_MAX as u32), None).unwrap()).collect();
        assert_eq!(slots.take(ip(0), None), None, "a client at its own bound");
        for i in 100..1100 {
            assert!(slots.take(ip(i), None).is_some(), "room made");
        }
        // The client bound held throughout, and nothing is kept for the closed connections.
        let open = slots.0.lock().unwrap();
        assert_eq!(open.conns.len(), CONNECTIONS_MAX);
        assert!(open.by_client.values().all(|&n| n <= PER_CLIENT_MAX));
        assert_eq!(open.by_client.values().sum::<usize>(), CONNECTIONS_MAX);
        drop(open);
        // The first ones were closed: giving them back changes nothing.
        ids.iter().for_each(|&id| slots.give(id));
        assert_eq!(slots.0.lock().unwrap().conns.len(), CONNECTIONS_MAX);
        // Once every request has come whole, a newcomer is refused.
        let open_ids: Vec<u64> = slots.0.lock().unwrap().conns.keys().copied().collect();
        open_ids.iter().for_each(|&id| slots.complete(id));
        assert_eq!(slots.take(ip(5_000), None), None);
        slots.give(open_ids[0]);
        assert!(slots.take(ip(5_000), None).is_some(), "a slot given back is taken");
    }

    /// Scrapes within `RENDER_INTERVAL` of the last question get its text: the event loop is
    /// asked once however often a client scrapes (found by a review: every scrape made the
    /// protocol thread merge every stack's counters).
    #[test]
    fn scrapes_in_a_burst_ask_the_event_loop_once() {
        let rendered = Rendered::default();
        let asked = std::cell::Cell::new(0);
        let ask = || {
            asked.set(asked.get() + 1);
            Ok(format!("metrics {}\n", asked.get()))
        };
        let at = |ms: u64| motet_core::Instant::ZERO + motet_core::Duration::from_millis(ms);
        for ms in 0..100 {
            assert_eq!(&*rendered.get(at(ms * 9), ask).unwrap(), "metrics 1\n");
        }
        assert_eq!(asked.get(), 1);
        assert_eq!(&*rendered.get(at(1_000), ask).unwrap(), "metrics 2\n", "a second later: asked again");
    }

    #[test]
    fn renders_every_counter_and_drop_reason() {
        let stats = RuntimeStats {
            datagrams_in: 7,
            connected_sockets: 2,
            connected_fallbacks: 3,
            bypass_hits: 5,
            ..RuntimeStats::default()
        };
        let mut protocol = Stats::default();
        protocol.count_by(motet_core::LayerKind::Pt2pt, Counter::Retransmit);
        protocol.count_by(motet_core::LayerKind::Pt2pt, Counter::Retransmit);
        protocol.count_by(motet_core::LayerKind::Mnak, Counter::Retransmit);
        protocol.count(Counter::CompressedIn);
        protocol.drop_by(motet_core::LayerKind::Mnak, DropReason::Duplicate);
        protocol.drop_one(DropReason::Malformed);
        let text = render(&stats, &protocol);
        assert!(text.contains("motet_datagrams_received_total 7"));
        assert!(text.contains("# TYPE motet_connected_sockets gauge\nmotet_connected_sockets 2"));
        assert!(text.contains("motet_connected_fallbacks_total 3"));
        assert!(text.contains("motet_bypass_hits_total 5\n") && text.contains("motet_bypass_misses_total 0\n"));
        // Every figure of `RuntimeStats`, each once, with its type (six counters were missing: a
        // review's finding).
        let figures = stats.figures();
        for figure in &figures {
            let kind = if figure.kind == Kind::Counter { "counter" } else { "gauge" };
            let series = format!("# TYPE motet_{0} {kind}\nmotet_{0} {1}\n", figure.metric, figure.value);
            assert!(text.contains(&series), "{series} in {text}");
            assert_eq!(figure.kind == Kind::Counter, figure.metric.ends_with("_total"), "{figure:?}");
        }
        let mut names: Vec<_> = figures.iter().map(|f| f.field).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), figures.len(), "a field listed twice");
        for metric in [
            "sends_to_departed_total",
            "stale_xfer_total",
            "send_backlogged_total",
            "migrations_total",
            "retired_sockets_closed_total",
            "datagrams_received_retired_total",
            "injected_loss_total",
            "seed_lookups_failed_total",
            "seed_addresses",
        ] {
            assert!(text.contains(&format!("\nmotet_{metric} 0\n")), "{metric} in {text}");
        }
        // By the layer that counted: casts' retransmissions (mnak) apart from sends' (pt2pt).
        assert!(text.contains("motet_protocol_events_total{layer=\"mnak\",kind=\"Retransmit\"} 1\n"), "{text}");
        assert!(text.contains("motet_protocol_events_total{layer=\"pt2pt\",kind=\"Retransmit\"} 2\n"), "{text}");
        assert!(text.contains("motet_protocol_events_total{layer=\"node\",kind=\"CompressedIn\"} 1\n"), "{text}");
        assert!(text.contains("motet_protocol_events_total{layer=\"suspect\",kind=\"Suspected\"} 0\n"), "{text}");
        let series = text.lines().filter(|l| l.starts_with("motet_protocol_events_total{")).count();
        assert_eq!(series, Counter::ALL.iter().map(|c| c.layers().len().max(1)).sum::<usize>());
        assert!(text.contains("motet_drops_total{reason=\"Malformed\"} 1"));
        assert!(text.contains("motet_drops_total{reason=\"Duplicate\"} 1"));
        assert!(text.contains("motet_drops_total{reason=\"Orphan\"} 0"));
        assert_eq!(text.lines().filter(|l| l.starts_with("motet_drops_total")).count(), DropReason::ALL.len());
        // Who dropped: the two that did, and nothing else.
        let by_layer: Vec<_> = text.lines().filter(|l| l.starts_with("motet_drops_by_layer_total")).collect();
        assert_eq!(
            by_layer,
            [
                "motet_drops_by_layer_total{layer=\"mnak\",reason=\"Duplicate\"} 1",
                "motet_drops_by_layer_total{layer=\"node\",reason=\"Malformed\"} 1"
            ]
        );
    }
}
