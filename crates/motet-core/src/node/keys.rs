//! Connection ids and keys: how a node tells its stacks apart, and the keys of stacks it removed
//! lately (docs/bypass.md, "Connection ids").

use crate::time::{Duration, Instant};
use crate::view::ViewState;
use motet_wire::ConnId;
use smallvec::SmallVec;
use std::collections::{BTreeMap, BTreeSet};

/// The connection identifier of a view's stack: a 64-bit hash of the addressing that is the same
/// at every member and changes with every view (group, view id, stack). Old and new stacks get
/// distinct ids, so they never receive each other's messages (thesis §2.3.4). The original used
/// MD5; BLAKE3 is faster and as collision resistant for this purpose. Compressed datagrams carry
/// only its low 32 bits ([`ConnId::key`]), which other views' stacks here may share.
pub fn conn_id(view: &ViewState) -> ConnId {
    let mut hasher = blake3::Hasher::new();
    hasher.update(view.group.0.as_bytes());
    hasher.update(&[0]);
    hasher.update(&view.view_id.ltime.to_le_bytes());
    hasher.update(&view.view_id.coord.0.to_le_bytes());
    hasher.update(view.stack.to_string().as_bytes());
    short_keys(first_64(&hasher))
}

/// The connection id of a group's gossip channel, shared by all its views and partitions.
pub fn gossip_conn_id(group: &crate::view::GroupName) -> ConnId {
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"motet gossip\0");
    hasher.update(group.0.as_bytes());
    short_keys(first_64(&hasher))
}

fn first_64(hasher: &blake3::Hasher) -> u64 {
    let bytes = *hasher.finalize().as_bytes();
    u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"))
}

/// `id` as it is, or with its key (the low 32 bits) cut to 2 bits under the seeded fault
/// `crate::faults::short_keys`, so that a simulated node's successive views share keys often.
fn short_keys(id: u64) -> ConnId {
    #[cfg(feature = "fault-injection")]
    if SHORT_KEYS.with(std::cell::Cell::get) {
        return ConnId(id & !0xffff_fffc);
    }
    ConnId(id)
}

/// How long the keys of a removed stack are remembered at least: longer than its view's
/// datagrams stay on their way (a member cut off in that view goes on casting in it until it
/// suspects the others, a few seconds by default; with a longer failure timeout, twice that and
/// the linger: [`held`]).
const GONE_FOR: Duration = Duration::from_millis(30_000);

/// How long the keys of a removed stack of a view with `params` are remembered.
pub(super) fn held(params: &crate::StackConfig) -> Duration {
    let held = params.suspect.timeout.0.saturating_mul(2).saturating_add(params.top.linger.0);
    Duration(held.max(GONE_FOR.0))
}

/// A key of a removed stack.
#[derive(Clone, Copy, Debug)]
struct Gone {
    /// The stack's connection id.
    conn: ConnId,
    /// Its view's key (casts), or else its send key.
    cast: bool,
    /// Until when it is remembered.
    until: Instant,
}

/// The keys of stacks removed lately, each removed stack's and of its kind.
#[derive(Debug, Default)]
pub(super) struct Removed {
    by_key: BTreeMap<u32, SmallVec<[Gone; 1]>>,
    /// The keys by when they expire.
    order: BTreeSet<(Instant, u32)>,
}

impl Removed {
    /// Remembers the `keys` (each with whether it is a view's key, for casts) of a stack of
    /// connection `conn`, until `until`.
    pub(super) fn remember(&mut self, conn: ConnId, keys: [(u32, bool); 2], until: Instant) {
        for (key, cast) in keys {
            self.by_key.entry(key).or_default().push(Gone { conn, cast, until });
            self.order.insert((until, key));
        }
    }

    /// Forgets the keys whose time is up at `now`.
    pub(super) fn forget(&mut self, now: Instant) {
        while let Some(&(until, key)) = self.order.first().filter(|&&(until, _)| until <= now) {
            self.order.pop_first();
            if let Some(gone) = self.by_key.get_mut(&key) {
                gone.retain(|g| g.until > until);
                if gone.is_empty() {
                    self.by_key.remove(&key);
                }
            }
        }
    }

    /// Whether any removed stack had `key` (and may not be forgotten yet).
    pub(super) fn contains(&self, key: u32) -> bool {
        self.by_key.contains_key(&key)
    }

    /// The ids of the removed stacks that had `key`, of the kind `cast`, still remembered at
    /// `now`.
    pub(super) fn ids(&self, key: u32, cast: bool, now: Instant) -> impl Iterator<Item = ConnId> + '_ {
        let gone = self.by_key.get(&key).into_iter().flatten();
        gone.filter(move |g| g.cast == cast && g.until > now).map(|g| g.conn)
    }
}

#[cfg(feature = "fault-injection")]
thread_local! {
    /// Testing shared keys: every connection id's key is cut to 2 bits, so that a node's stacks
    /// share keys often (`crate::faults::short_keys`).
    static SHORT_KEYS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Sets `SHORT_KEYS` on this thread (`crate::faults`).
#[cfg(feature = "fault-injection")]
pub(crate) fn set_short_keys(on: bool) {
    SHORT_KEYS.with(|u| u.set(on));
}
