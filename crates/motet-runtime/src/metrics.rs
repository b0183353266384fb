//! Counters as Prometheus text (exposition format 0.0.4), and a minimal HTTP endpoint serving
//! them: a scrape is one `GET`, answered and closed, on a thread of its own so a slow scraper
//! never delays the event loop.

use crate::event_loop::RuntimeStats;
use crate::runtime::StatsHandle;
use motet_core::layer::Stats;
use motet_core::{Counter, DropReason};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

/// Renders the runtime's and the protocol's counters.
pub fn render(runtime: &RuntimeStats, protocol: &Stats) -> String {
    let mut out = String::new();
    let mut counter = |name: &str, help: &str, value: u64| {
        let _ = writeln!(out, "# HELP motet_{name} {help}\n# TYPE motet_{name} counter\nmotet_{name} {value}");
    };
    counter("datagrams_received_total", "UDP datagrams received", runtime.datagrams_in);
    counter("datagrams_sent_total", "UDP datagrams sent (one per destination)", runtime.datagrams_out);
    counter("recv_batches_total", "recvmmsg calls that returned data", runtime.recv_batches);
    counter("send_errors_total", "sends that failed and were dropped", runtime.send_errors);
    counter("send_backlog_dropped_total", "datagrams dropped from a full send backlog", runtime.send_backlog_dropped);
    counter(
        "app_backpressure_total",
        "loop turns that left the socket unread because the application lagged",
        runtime.app_backpressure,
    );
    counter("lags_total", "times a member's application fell behind and its senders waited for it", runtime.lags);
    counter("bundles_sent_total", "datagrams that packed several messages", runtime.bundles_sent);
    counter(
        "segmented_sends_total",
        "system calls that sent several datagrams (segmentation offload)",
        runtime.segmented_sends,
    );
    counter("malformed_bundles_total", "received bundles that did not unpack (dropped)", runtime.malformed_bundles);
    counter(
        "connected_fallbacks_total",
        "unicast datagrams the shared socket sent in place of their connected socket",
        runtime.connected_fallbacks,
    );
    counter("views_installed_total", "views installed by this process's endpoints", runtime.views_installed);
    counter(
        "busy_yields_total",
        "times a busy-polling loop found nothing to read and yielded its CPU",
        runtime.busy_yields,
    );
    counter(
        "bypass_hits_total",
        "application messages that took the bypass (fused trace handlers)",
        runtime.bypass_hits,
    );
    counter(
        "bypass_misses_total",
        "application messages that took the layered path (a layer's fast-path condition failed)",
        runtime.bypass_misses,
    );
    counter(
        "actions_refused_total",
        "application actions refused after they were queued (see the log)",
        runtime.actions_refused,
    );
    counter(
        "views_with_other_params_total",
        "views installed whose protocol parameters differ from this member's configuration",
        runtime.views_with_other_params,
    );
    let _ = writeln!(
        out,
        "# HELP motet_connected_sockets sockets open for connected sends\n# TYPE motet_connected_sockets gauge\nmotet_connected_sockets {}",
        runtime.connected_sockets
    );
    let _ = writeln!(
        out,
        "# HELP motet_receive_offload receive offload is on at the socket (1) or not (0)\n# TYPE motet_receive_offload gauge\nmotet_receive_offload {}",
        u8::from(runtime.receive_offload)
    );
    let _ = writeln!(
        out,
        "# HELP motet_endpoints endpoints joined and not yet exited\n# TYPE motet_endpoints gauge\nmotet_endpoints {}",
        runtime.endpoints
    );
    let _ = writeln!(
        out,
        "# HELP motet_buffered_messages messages held for retransmission until stable or acknowledged\n# TYPE motet_buffered_messages gauge\nmotet_buffered_messages {}",
        runtime.buffered
    );
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

/// Serves `GET /metrics` (any path) on `address` from a thread, until the runtime stops.
pub fn serve(address: SocketAddr, stats: StatsHandle) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(address)?;
    let bound = listener.local_addr()?;
    std::thread::Builder::new().name("motet-metrics".into()).spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
            let mut request = [0u8; 1024];
            // The request itself does not matter: every path gets the metrics.
            let _ = stream.read(&mut request);
            let Ok((runtime, protocol)) = stats.get() else { return };
            let body = render(&runtime, &protocol);
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    })?;
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

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
