//! `suspect`: the heartbeat failure detector (thesis Fig 2.3, Table 2.1 `Suspect`).
//!
//! Provides: [`Service::FailureDetection`]. Requires below: [`Service::Transport`].
//! Header: `Heartbeat` (cast unreliably every sweep) and `NoHdr`.
//!
//! Every `sweep_interval` each member casts a heartbeat; a member not heard from (heartbeat or any
//! message passing this layer) for `timeout` is suspected, and `Suspect` goes up to the membership
//! layers. Suspicion is never withdrawn within a view: the next view decides. The timeout is a
//! trade-off measured in the simulator (docs/membership.md): with the defaults a member must miss
//! about ten consecutive heartbeats, which at 20% loss happens with probability 0.2^10 ≈ 1e-7.

use crate::event::{Counter, Dn, Up};
use crate::event::{Msg, Qos};
use crate::layer::{Layer, LayerSpec, Outbox, Service};
use crate::time::{Duration, Instant};
use crate::view::{RankSet, ViewState};
use crate::Rank;
use motet_wire::hdr::suspect::Header;

/// `suspect` parameters.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Heartbeat period. Default 100 ms.
    #[serde(
        rename = "sweep_interval_ms",
        deserialize_with = "crate::time::millis",
        serialize_with = "crate::time::ser_millis"
    )]
    pub sweep_interval: Duration,
    /// Silence after which a member is suspected. Default 1 s.
    #[serde(
        rename = "timeout_ms",
        deserialize_with = "crate::time::millis",
        serialize_with = "crate::time::ser_millis"
    )]
    pub timeout: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config { sweep_interval: Duration::from_millis(100), timeout: Duration::from_millis(1_000) }
    }
}

/// Static description.
pub static SPEC: LayerSpec = LayerSpec {
    name: "suspect",
    summary: "heartbeat failure detector: suspects members silent for longer than the timeout",
    provides: &[Service::FailureDetection],
    requires_below: &[Service::Transport],
    requires_above: &[],
};

/// `suspect` state.
#[derive(Debug, PartialEq)]
pub struct Suspect {
    config: Config,
    rank: Rank,
    /// When each member was last heard from.
    last_heard: Vec<Instant>,
    /// Suspected or failed: no longer watched.
    suspected: RankSet,
}

impl Suspect {
    /// A `suspect` for `view`.
    pub fn new(config: &Config, view: &ViewState, rank: Rank) -> Suspect {
        Suspect { config: config.clone(), rank, last_heard: vec![Instant::ZERO; view.len()], suspected: RankSet::new() }
    }
}

impl Layer for Suspect {
    fn handle_up(&mut self, ev: Up, out: &mut Outbox<'_>) {
        match ev {
            Up::Init => {
                self.last_heard.iter_mut().for_each(|t| *t = out.now());
                out.alarm(out.now() + self.config.sweep_interval);
                out.up(Up::Init);
            }
            Up::Cast { origin, ref msg, .. } | Up::Send { origin, ref msg } => {
                self.last_heard[usize::from(origin)] = out.now();
                if msg.hdrs.last().as_deref() == Some(&Header::Heartbeat.into()) {
                    return; // consumed: a heartbeat carries nothing else
                }
                out.pass_up(ev, Header::NoHdr);
            }
            other => out.up(other),
        }
    }

    fn handle_dn(&mut self, ev: Dn, out: &mut Outbox<'_>) {
        if let Dn::Fail(ranks) = &ev {
            self.suspected.union_with(ranks);
        }
        out.pass_dn(ev, Header::NoHdr);
    }

    fn handle_timer(&mut self, out: &mut Outbox<'_>) {
        let now = out.now();
        out.dn(Dn::Cast { msg: Msg::default().with(Header::Heartbeat), qos: Qos::Unreliable });
        let mut newly = RankSet::new();
        for (rank, &heard) in self.last_heard.iter().enumerate() {
            let rank = rank as Rank;
            if rank != self.rank && !self.suspected.contains(rank) && now - heard > self.config.timeout {
                newly.insert(rank);
            }
        }
        if !newly.is_empty() {
            for _ in newly.iter() {
                out.count(Counter::Suspected);
            }
            self.suspected.union_with(&newly);
            tracing::info!(suspected = ?newly, "no heartbeat within the timeout: suspected");
            out.up(Up::Suspect(newly));
        }
        out.alarm(now + self.config.sweep_interval);
    }

    fn check_invariants(&self) {
        assert!(!self.suspected.contains(self.rank), "a member never suspects itself");
    }
}
