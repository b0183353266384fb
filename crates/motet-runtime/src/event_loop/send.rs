//! The sending half of the event loop: packing a turn's datagrams per destination into bundles,
//! segmentation offload for runs of whole datagrams, and the bounded backlog for a full socket
//! buffer (docs/runtime.md, "Packing", "Segmentation offload", "A full socket buffer").

use super::{EventLoop, SOCKET};
use crate::slots::AddrSlots;
use motet_core::{DatagramHead, Payload};
use std::io;
use std::net::SocketAddr;

/// What one turn has produced for one destination: small datagrams still being packed into a
/// bundle, and whole datagrams (bundles, and messages too large to pack) waiting to leave together.
#[derive(Debug, Default)]
pub(super) struct Packing {
    pub(super) items: Vec<(DatagramHead, Payload)>,
    pub(super) bytes: usize,
    pub(super) sealed: Vec<(DatagramHead, Payload)>,
}

/// The packing buffers of every destination, kept between turns (no allocation per turn), each
/// found once per datagram (`crate::slots`: most turns send where the one before did): the turn
/// lists the slots it wrote to, and the end of the turn goes through that list without searching
/// again.
#[derive(Debug, Default)]
pub(super) struct Packings {
    slots: AddrSlots<Packing>,
    /// The slots this turn has written to ([`EventLoop::send_packed`]); one that was emptied and
    /// written again is listed twice and found empty.
    written: Vec<usize>,
}

impl Packings {
    /// The slot of `to`, listed as written by this turn when it was empty.
    fn slot(&mut self, to: SocketAddr) -> usize {
        let slot = match self.slots.find(to) {
            Some(slot) => slot,
            None => self.slots.insert(to, Packing::default()),
        };
        let packing = &self.slots[slot].1;
        if packing.items.is_empty() && packing.sealed.is_empty() {
            self.written.push(slot);
        }
        slot
    }
}

/// Largest buffer handed to one segmented send (a UDP datagram's limit, less IP and UDP headers,
/// rounded down).
const SEGMENTED_MAX: usize = 65_000;

impl EventLoop {
    /// Queues a datagram for `to`: packed with the others of this turn, or alone when it is too
    /// large to pack (after what is already packed for `to`, to keep the order).
    pub(super) fn send_one(&mut self, to: SocketAddr, head: DatagramHead, payload: Payload) {
        let framed = motet_wire::bundle::framed_len(head.len() + payload.len());
        let pack_max = self.config.pack_max;
        let slot = self.packing.slot(to);
        if pack_max == 0 || 1 + framed > pack_max {
            self.seal(slot);
            return self.push_sealed(slot, head, payload);
        }
        if 1 + self.packing.slots[slot].1.bytes + framed > pack_max {
            self.seal(slot);
        }
        let packing = &mut self.packing.slots[slot].1;
        packing.bytes += framed;
        packing.items.push((head, payload));
    }

    /// Closes the bundle being packed in `slot`: one datagram as it is (no copy), several as a
    /// bundle.
    fn seal(&mut self, slot: usize) {
        let packing = &mut self.packing.slots[slot].1;
        let bytes = std::mem::take(&mut packing.bytes);
        let sealed = match packing.items.len() {
            0 => return,
            1 => packing.items.pop().expect("one item"),
            n => {
                let chunks: Vec<Vec<&[u8]>> = packing
                    .items
                    .iter()
                    .map(|(head, payload)| {
                        std::iter::once(&head[..]).chain(payload.chunks().iter().map(|c| &c[..])).collect()
                    })
                    .collect();
                let mut bundle = Vec::with_capacity(1 + bytes);
                motet_wire::bundle::encode(chunks.iter().map(Vec::as_slice), &mut bundle);
                packing.items.clear();
                self.stats.bundles_sent += 1;
                self.stats.datagrams_packed += n as u64;
                (DatagramHead::from_vec(bundle), Payload::new())
            }
        };
        self.push_sealed(slot, sealed.0, sealed.1);
    }

    /// Adds a whole datagram for `slot`'s destination; they leave at the end of the turn, or now
    /// when as many are waiting as one system call can carry.
    fn push_sealed(&mut self, slot: usize, head: DatagramHead, payload: Payload) {
        let limit = if self.config.segment_offload { self.io.max_segments() } else { 1 };
        let packing = &mut self.packing.slots[slot].1;
        packing.sealed.push((head, payload));
        if packing.sealed.len() >= limit {
            self.send_sealed(slot);
        }
    }

    /// Sends everything this turn produced, bundles closed.
    pub(super) fn send_packed(&mut self) {
        if self.packing.written.is_empty() {
            return;
        }
        // Only the slots this turn wrote to (listed as it wrote, in a vector kept between turns).
        let mut written = std::mem::take(&mut self.packing.written);
        for &slot in &written {
            // The common case of a quiet turn, one datagram for a destination: sent as it is,
            // without sealing it and then sending what was sealed.
            let (to, packing) = &mut self.packing.slots[slot];
            if packing.items.len() == 1 && packing.sealed.is_empty() {
                let (head, payload) = packing.items.pop().expect("one item");
                packing.bytes = 0;
                let to = *to;
                self.transmit(to, &head, &payload);
                continue;
            }
            self.seal(slot);
            self.send_sealed(slot);
        }
        written.clear();
        self.packing.written = written;
        // Buffers stay allocated for the next turn; members that come and go (restarts take new
        // ports) must not grow the table for ever. Every slot is empty now (a datagram that
        // waits for a full socket waits in the backlog).
        if self.packing.slots.len() > 1024 {
            self.packing.slots.clear();
        }
    }

    /// Sends the whole datagrams waiting in `slot`, in order. A run of datagrams of one size (the
    /// last may be shorter) goes in one segmented system call: copying a run into one buffer costs
    /// far less than the system calls it saves (the x-kernel lesson: count crossings, not bytes).
    fn send_sealed(&mut self, slot: usize) {
        let (to, packing) = &mut self.packing.slots[slot];
        let to = *to;
        let sealed = std::mem::take(&mut packing.sealed);
        let mut rest = &sealed[..];
        while !rest.is_empty() {
            let mut segment = datagram_len(&rest[0]);
            let mut run = 1;
            // Segments larger than the path takes (`segment_max`, learnt from a refusal) are not
            // gathered into a run: the run would be copied, refused without a system call, and
            // sent one datagram at a time anyway, every turn, on exactly the low-MTU paths the
            // fallback is for.
            let segment_max = self.io.segment_max();
            if self.config.segment_offload && self.backlog.is_empty() && segment <= segment_max {
                let limit = self.io.max_segments();
                if is_bundle(&rest[0]) {
                    // Bundles vary in length; each is padded to the longest of its run.
                    while run < rest.len() && run < limit && is_bundle(&rest[run]) {
                        let longest = segment.max(datagram_len(&rest[run]));
                        if longest > segment_max || longest * (run + 1) > SEGMENTED_MAX {
                            break;
                        }
                        segment = longest;
                        run += 1;
                    }
                } else {
                    while run < rest.len() && run < limit {
                        let len = datagram_len(&rest[run]);
                        if len > segment || segment * (run + 1) > SEGMENTED_MAX {
                            break;
                        }
                        run += 1;
                        if len < segment {
                            break; // only the last segment may be shorter
                        }
                    }
                }
            }
            let (now, later) = rest.split_at(run);
            rest = later;
            if let [(head, payload)] = now {
                self.transmit(to, head, payload);
                continue;
            }
            let mut contents = Vec::with_capacity(segment * run);
            for (i, (head, payload)) in now.iter().enumerate() {
                let start = contents.len();
                contents.extend_from_slice(head);
                payload.chunks().iter().for_each(|chunk| contents.extend_from_slice(chunk));
                if i + 1 < run {
                    motet_wire::bundle::pad(&mut contents, start, segment);
                }
                debug_assert!(contents.len() - start == segment || i + 1 == run, "segments are equal but the last");
            }
            match self.io.send_segments(to, &contents, segment) {
                Ok(()) => {
                    self.stats.segmented_sends += 1;
                    self.stats.datagrams_segmented += run as u64;
                    self.stats.datagrams_out += run as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    now.iter().for_each(|(head, payload)| self.backlog_push(to, head, payload));
                }
                // The kernel or device refused segmentation offload (`max_segments` is now 1),
                // or segments of this size (larger than the path's packets): send the run one
                // datagram per call (before, a refused size dropped the run, for retransmission
                // to recover).
                Err(_) if self.io.max_segments() == 1 || segment > self.io.segment_max() => {
                    now.iter().for_each(|(head, payload)| self.transmit(to, head, payload));
                }
                Err(e) => {
                    tracing::debug!(%to, error = %e, "segmented send failed");
                    self.stats.send_errors += run as u64;
                }
            }
        }
        // Give the vector back, so a busy destination does not allocate one per turn.
        let mut sealed = sealed;
        sealed.clear();
        let packing = &mut self.packing.slots[slot].1;
        if packing.sealed.is_empty() {
            packing.sealed = sealed;
        }
    }

    fn transmit(&mut self, to: SocketAddr, head: &DatagramHead, payload: &Payload) {
        if !self.backlog.is_empty() {
            return self.backlog_push(to, head, payload);
        }
        match self.io.send(to, head, payload) {
            Ok(()) => self.stats.datagrams_out += 1,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.backlog_push(to, head, payload),
            Err(e) => {
                tracing::debug!(%to, error = %e, "send failed");
                self.stats.send_errors += 1;
            }
        }
    }

    fn backlog_push(&mut self, to: SocketAddr, head: &DatagramHead, payload: &Payload) {
        self.stats.send_backlogged += 1;
        if self.backlog.len() >= self.config.send_backlog {
            self.backlog.pop_front();
            self.stats.send_backlog_dropped += 1;
        }
        self.backlog.push_back((to, head.clone(), payload.clone()));
        if !self.writable_interest {
            self.writable_interest = true;
            let interest = mio::Interest::READABLE | mio::Interest::WRITABLE;
            if let Err(e) = self.poll.registry().reregister(self.io.source(), SOCKET, interest) {
                tracing::warn!(error = %e, "cannot wait for the socket to be writable");
            }
        }
    }

    pub(super) fn drain_backlog(&mut self) {
        while let Some((to, head, payload)) = self.backlog.front() {
            match self.io.send(*to, head, payload) {
                Ok(()) => self.stats.datagrams_out += 1,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => self.stats.send_errors += 1,
            }
            self.backlog.pop_front();
        }
        self.writable_interest = false;
        if let Err(e) = self.poll.registry().reregister(self.io.source(), SOCKET, mio::Interest::READABLE) {
            tracing::warn!(error = %e, "cannot reregister the socket");
        }
    }
}

fn datagram_len((head, payload): &(DatagramHead, Payload)) -> usize {
    head.len() + payload.len()
}

/// A sealed bundle (built by [`EventLoop::seal`]: all in `head`), which may be padded.
fn is_bundle((head, payload): &(DatagramHead, Payload)) -> bool {
    payload.is_empty() && motet_wire::bundle::is_bundle(head)
}
