//! The receiving half of the event loop: `recvmmsg` batches from each socket into the node.

use super::{EventLoop, RuntimeStats};
use crate::io::UdpIo;
use motet_core::Node;
use std::io;

/// Receive batches handled per [`EventLoop::poll`] before timers and actions get a turn.
const BATCHES_PER_POLL: usize = 16;

/// Where [`EventLoop::receive`] reads.
#[derive(Clone, Copy, Debug)]
pub(super) enum Source {
    Unicast,
    Multicast,
    Retired(usize),
}

impl EventLoop {
    /// Reads batches from one socket until it is empty or the application lags.
    pub(super) fn receive(&mut self, source: Source) {
        for _ in 0..BATCHES_PER_POLL {
            if self.ready.len() >= self.config.event_queue {
                return;
            }
            // Read per batch: the node's time never goes back, whatever ran in between.
            let now = self.clock.now();
            let io = match (source, self.multicast.as_mut()) {
                (Source::Unicast, _) => &mut self.io,
                (Source::Multicast, Some((io, _))) => io,
                (Source::Multicast, None) => {
                    self.multicast_readable = false;
                    return;
                }
                (Source::Retired(index), _) => &mut self.retired[index].io,
            };
            let result = receive_batch(io, &mut self.node, &mut self.stats, now, self.config.inject_loss);
            let drained = match result {
                Ok(batch) => {
                    let n = batch.datagrams as u64;
                    self.stats.datagrams_in += n;
                    self.stats.recv_batches += 1;
                    if let Source::Retired(_) = source {
                        self.stats.datagrams_in_retired += n;
                    }
                    self.drain();
                    batch.drained
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => false,
                Err(e) => {
                    // ICMP errors surface on some systems as receive errors; they say nothing
                    // the failure detector does not.
                    tracing::debug!(error = %e, "receive error");
                    self.stats.send_errors += 1;
                    false
                }
            };
            if drained {
                match source {
                    Source::Unicast => self.readable = false,
                    Source::Multicast => self.multicast_readable = false,
                    Source::Retired(index) => self.retired[index].readable = false,
                }
                return;
            }
        }
    }
}

/// One `recvmmsg` batch into the node: bundles unpacked, injected loss applied.
fn receive_batch(
    io: &mut UdpIo,
    node: &mut Node,
    stats: &mut RuntimeStats,
    now: motet_core::Instant,
    loss: f64,
) -> io::Result<crate::io::Batch> {
    io.recv_batch(|_, datagram| {
        if loss > 0.0 && rand::random::<f64>() < loss {
            stats.injected_loss += 1;
        } else if motet_wire::bundle::is_bundle(&datagram) {
            match motet_wire::bundle::decode(&datagram) {
                Ok(parts) => parts.into_iter().for_each(|part| node.handle_datagram(now, part)),
                Err(_) => stats.malformed_bundles += 1,
            }
        } else {
            node.handle_datagram(now, datagram);
        }
    })
}
