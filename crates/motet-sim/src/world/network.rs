//! The simulated network: partitions, routes of migrated addresses, and each datagram's fate
//! (loss, delay, reordering, duplication).

use super::{Event, World, MIGRATED_BASE};
use crate::diagram::{DatagramRecord, Lost};
use bytes::Bytes;
use motet_core::Duration;
use rand::Rng;

impl World<'_> {
    pub(super) fn partitioned(&self, from: usize, to: usize) -> bool {
        let now_ms = self.now.0 / 1_000_000;
        self.options.partitions.iter().any(|p| {
            let active = p.start_ms <= now_ms && now_ms < p.end_ms;
            let (a, b) = (p.side.contains(&from), p.side.contains(&to));
            active && a != b && (!p.one_way || a)
        })
    }

    /// The node an address reaches, or `Err` with the node that closed it.
    pub(super) fn route(&self, address: u32) -> Result<usize, usize> {
        let node = if address >= MIGRATED_BASE { self.routes[&address] } else { address as usize };
        match self.retired.get(&address) {
            Some(&at) if at <= self.now => Err(node),
            _ => Ok(node),
        }
    }

    /// The network: loss, partitions, delay (minimum plus exponential), reordering, duplication,
    /// of one datagram or of a bundle of them (one fate for all).
    pub(super) fn transmit(&mut self, from: usize, to: usize, datagrams: Vec<Bytes>) {
        let net = &self.options.net;
        // Counted and recorded per datagram, a bundle's parts each (with the bundle's fate).
        let parts = datagrams.len() as u64;
        self.datagrams += parts;
        // One draw, whatever the partitions: recording must not change the run.
        let now_ms = self.now.0 / 1_000_000;
        let burst = self.options.loss_bursts.iter().find(|b| b.start_ms <= now_ms && now_ms < b.end_ms);
        let dropped = self.rng.gen_bool(burst.map_or(net.loss, |b| b.loss));
        let partitioned = self.partitioned(from, to);
        let lost = dropped || partitioned;
        super::mark(&mut self.hasher, b's', &[from as u64, to as u64, lost as u64]);
        let record = self.options.record_datagrams;
        if lost {
            if record {
                let cause = if partitioned { Lost::Partition } else { Lost::Network };
                let lost =
                    DatagramRecord { from, to, sent: self.now, delivered: None, duplicate: false, lost: Some(cause) };
                self.datagrams_log.extend(std::iter::repeat_n(lost, datagrams.len()));
            }
            self.datagrams_lost += parts;
            return;
        }
        let copies = if self.rng.gen_bool(net.dup) { 2 } else { 1 };
        for copy in 0..copies {
            let uniform: f64 = self.rng.gen_range(f64::EPSILON..1.0);
            let mut delay_us = net.delay_min_us.saturating_add((-(uniform.ln()) * net.delay_mean_us as f64) as u64);
            if self.rng.gen_bool(net.reorder) {
                delay_us += self.rng.gen_range(0..=net.reorder_max_us);
            }
            self.in_flight += 1;
            let at = self.now + Duration::from_micros(delay_us);
            let record = record.then(|| {
                let sent =
                    DatagramRecord { from, to, sent: self.now, delivered: None, duplicate: copy > 0, lost: None };
                let first = self.datagrams_log.len();
                self.datagrams_log.extend(std::iter::repeat_n(sent, datagrams.len()));
                first..self.datagrams_log.len()
            });
            self.schedule(at, Event::Deliver { from, to, datagrams: datagrams.clone(), record });
        }
    }
}
