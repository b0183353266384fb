//! `motet kv`: a replicated key-value store, the example application of issue 5 (state machine
//! replication on `total` + `Xfer`).
//!
//! Every replica applies the same updates in the same order (total order), so replicas that
//! delivered the same casts hold the same state. A new or restarted process joins as a singleton
//! partition and merges in; the merged view is a state-transfer view: rank 0 streams its whole
//! state in 64 KiB chunks, the others stage them and install the state when the last arrives, and
//! updates (which wait during the transfer view) resume in the next view with every replica
//! equal.
//!
//! stdin: `set KEY VALUE`, `del KEY` (cast as updates), `digest` (print the state's digest at
//! once, from this replica: updates cast and not yet delivered here are not in it). Any other
//! line (a blank one aside) is refused here with the list of commands, not cast: every replica
//! would ignore it, and the typist would not know.
//! stdout (`--json`): the view events of `motet member`, plus
//! `{"type":"digest","keys":N,"bytes":B,"applied":U,"digest":"<hex>"}` (`applied`: the updates
//! this process applied itself, a local count: not part of the state, so not transferred, and
//! replicas with equal digests may differ in it),
//! `{"type":"xfer_provided","bytes":B,"chunks":C,"ms":T}` and
//! `{"type":"xfer_installed","bytes":B,"ms":T,"mb_per_s":R}` (time from the transfer view's
//! installation to the installed state).

#![allow(clippy::disallowed_types, clippy::disallowed_methods)] // a real process: wall-clock timings, a stdin thread

use crate::member::event_json;
use crate::Failure;
use bytes::Bytes;
use clap::Args;
use motet_runtime::{Event, GroupConfig, Runtime, RuntimeConfig};
use serde_json::json;
use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// Bytes per state-transfer chunk.
const CHUNK: usize = 64 * 1024;

#[derive(Args)]
pub(crate) struct KvArgs {
    /// The group to join.
    #[arg(long)]
    group: String,
    /// UDP address to bind.
    #[arg(long, default_value = "127.0.0.1:0")]
    bind: SocketAddr,
    /// The address other replicas reach this one at, when it is not `--bind`'s (a wildcard
    /// bind, NAT, containers).
    #[arg(long)]
    advertise: Option<SocketAddr>,
    /// Seed addresses of other replicas, comma-separated.
    #[arg(long, value_delimiter = ',')]
    peers: Vec<String>,
    /// The stack: it needs total order and state transfer.
    #[arg(long, default_value = "total+Xfer")]
    stack: String,
    /// Start with this many bytes of generated state (keys `pre-N`, 4 KiB values), the same at
    /// every replica given the same number: for measuring large state transfers.
    #[arg(long, default_value_t = 0)]
    preload_bytes: usize,
    /// The largest state this replica starts with (`--preload-bytes`) or receives by transfer, in
    /// bytes (1 GiB by default): a larger transfer is refused, and this process exits, rather
    /// than take memory without bound. Updates applied one by one are not counted.
    #[arg(long, default_value_t = 1 << 30)]
    state_max: usize,
    /// Print one JSON object per event.
    #[arg(long)]
    json: bool,
}

/// The replicated state and what happened to it.
#[derive(Default)]
struct Store {
    map: BTreeMap<String, Bytes>,
    /// Updates this process applied itself (not transferred with the state).
    applied: u64,
}

/// An update as every replica reads it: words separated by single spaces, the value the rest of
/// the line (spaces and all). One reading for the replicas and for the line refused before it is
/// cast, so that what is refused is exactly what the replicas would have ignored.
#[derive(Debug, PartialEq, Eq)]
enum Update<'a> {
    Set(&'a str, &'a str),
    Del(&'a str),
}

impl Update<'_> {
    fn parse(text: &str) -> Option<Update<'_>> {
        let mut words = text.splitn(3, ' ');
        match (words.next(), words.next(), words.next()) {
            (Some("set"), Some(key), Some(value)) => Some(Update::Set(key, value)),
            (Some("del"), Some(key), None) => Some(Update::Del(key)),
            _ => None,
        }
    }
}

/// The commands, for a line that is none of them.
const USAGE: &str = "commands: `set KEY VALUE`, `del KEY`, `digest` (words separated by one space)";

impl Store {
    fn preload(bytes: usize) -> Store {
        let mut store = Store::default();
        let value_len = 4096;
        for i in 0..bytes.div_ceil(value_len) {
            let value: Vec<u8> = (0..value_len).map(|j| (i.wrapping_mul(31) ^ j) as u8).collect();
            store.map.insert(format!("pre-{i:08}"), Bytes::from(value));
        }
        store
    }

    fn apply(&mut self, update: &[u8]) {
        match Update::parse(&String::from_utf8_lossy(update)) {
            Some(Update::Set(key, value)) => {
                self.map.insert(key.to_string(), Bytes::copy_from_slice(value.as_bytes()));
            }
            Some(Update::Del(key)) => {
                self.map.remove(key);
            }
            // Not an update: every replica ignores it alike (this one refuses to cast such a
            // line, but another process may).
            None => return,
        }
        self.applied += 1;
    }

    fn bytes(&self) -> usize {
        self.map.iter().map(|(k, v)| k.len() + v.len()).sum()
    }

    /// Length-prefixed entries in key order: the transfer format, and what the digest covers.
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.bytes() + 8 * self.map.len());
        for (key, value) in &self.map {
            out.extend_from_slice(&(key.len() as u32).to_le_bytes());
            out.extend_from_slice(key.as_bytes());
            out.extend_from_slice(&(value.len() as u32).to_le_bytes());
            out.extend_from_slice(value);
        }
        out
    }

    fn decode(bytes: &[u8]) -> Option<BTreeMap<String, Bytes>> {
        let mut map = BTreeMap::new();
        let mut rest = bytes;
        let take = |rest: &mut &[u8]| -> Option<Vec<u8>> {
            let len = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
            let item = rest.get(4..4 + len)?.to_vec();
            *rest = &rest[4 + len..];
            Some(item)
        };
        while !rest.is_empty() {
            let key = String::from_utf8(take(&mut rest)?).ok()?;
            let value = take(&mut rest)?;
            map.insert(key, Bytes::from(value));
        }
        Some(map)
    }

    fn digest(&self) -> String {
        blake3::hash(&self.encode()).to_hex()[..16].to_string()
    }
}

pub(crate) fn run(args: KvArgs) -> ExitCode {
    match serve(args) {
        Ok(()) => ExitCode::SUCCESS,
        // 2 for a command line that cannot work (as `member`), 1 for the rest.
        Err(failure) => failure.exit("motet kv"),
    }
}

fn serve(args: KvArgs) -> Result<(), Failure> {
    crate::check_stack_flag(&args.stack).map_err(Failure::usage)?;
    let stack = motet_core::StackSpec::parse(&args.stack)
        .map_err(|e| Failure::usage(format!("--stack {}: {e}", args.stack)))?;
    if !stack.layers().contains(&motet_core::LayerKind::Sequencer)
        || !stack.layers().contains(&motet_core::LayerKind::Xfer)
    {
        return Err(Failure::usage(format!(
            "--stack {}: a replicated store needs total order and state transfer (total+Xfer)",
            args.stack
        )));
    }
    if args.preload_bytes > args.state_max {
        return Err(Failure::usage(format!(
            "--preload-bytes {} is above --state-max {}",
            args.preload_bytes, args.state_max
        )));
    }
    // Before the join: a state too large to build must end the process before it is a member.
    let mut store = Store::preload(args.preload_bytes);
    // First, as `member` and `chat` do: SIGTERM or SIGINT is a leave, once joined, not an exit the
    // other replicas must find by suspicion (a view change and a transfer a timeout later).
    let stop = crate::member::stop_on_signals()?;
    let config = RuntimeConfig { advertise: args.advertise, ..RuntimeConfig::bind(args.bind) };
    let runtime = Runtime::start(config)?;
    let member = runtime.join(GroupConfig::new(&args.group).stack(&args.stack).peers(args.peers.iter().cloned()))?;
    // A stop the loop below cannot act on, because it is blocked writing to a pipe nobody reads
    // or waiting for room for a chunk, still ends the process (as for `member` and `chat`).
    crate::member::spawn_watchdog("motet kv", Arc::clone(&stop));
    let (digest_tx, digest_rx) = mpsc::channel::<()>();
    let handle = member.handle();
    std::thread::Builder::new()
        .name("stdin".into())
        .spawn(move || {
            // Byte-wise: `lines()` ends at a line that is not UTF-8, and every later update would
            // be lost (such a line is cast as it is: every replica reads it alike).
            crate::member::stdin_lines("motet kv", |line| {
                if line.trim_ascii() == b"digest" {
                    if digest_tx.send(()).is_err() {
                        return std::ops::ControlFlow::Break(());
                    }
                } else if line.trim_ascii().is_empty() {
                    // A blank line: nothing asked, nothing said.
                } else if Update::parse(&String::from_utf8_lossy(line)).is_none() {
                    // Cast, it reached every replica and each ignored it, without a word to the
                    // one who typed it (`sett b 2`, a bare `set`).
                    note!("motet kv: not a command: `{}`; not cast ({USAGE})", crate::member::printable(line));
                } else if let Err(error) = crate::member::cast_when_room(&handle, Bytes::copy_from_slice(line)) {
                    note!("motet kv: update refused: {error}");
                }
                std::ops::ControlFlow::Continue(())
            });
        })
        .map_err(|e| format!("cannot read stdin: {e}"))?;
    let json = args.json;
    let print = |value: serde_json::Value| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", if json { value.to_string() } else { human(&value) });
        let _ = out.flush();
    };
    let mut staging: Vec<u8> = Vec::new();
    let mut view_started = Instant::now();
    // A state's chunks fit the view's largest message (one datagram on a stack without `frag`).
    let mut chunk = CHUNK;
    let mut leave_by = crate::member::LeaveBy::default();
    loop {
        if leave_by.starts(&stop) {
            let _ = member.leave();
        }
        if leave_by.overdue() {
            note!("motet kv: left without a confirmation within {:?}", crate::member::LEAVE_WAIT);
            // Not through the runtime's drop, which would give the leave up to 5 s more.
            std::process::exit(0);
        }
        while digest_rx.try_recv().is_ok() {
            print(
                json!({"type": "digest", "keys": store.map.len(), "bytes": store.bytes(), "applied": store.applied, "digest": store.digest()}),
            );
        }
        let event = match member.recv_timeout(Duration::from_millis(20)) {
            Ok(Some(event)) => event,
            Ok(None) => continue,
            Err(motet_runtime::Error::Left) => return Ok(()),
            Err(e) => return Err(Failure::from(e.to_string())),
        };
        match &event {
            Event::View(view) => {
                chunk = CHUNK.min(view.message_size_max).max(1);
                staging.clear(); // a transfer cut short by a view change starts over
                view_started = Instant::now();
                print(event_json(&event));
            }
            Event::Cast { data, .. } => store.apply(data),
            Event::XferProvide { view } => {
                let state = Bytes::from(store.encode());
                let chunks = state.len().div_ceil(chunk).max(1);
                let mut sent = 0;
                for i in 0..chunks {
                    let piece = state.slice((i * chunk).min(state.len())..((i + 1) * chunk).min(state.len()));
                    // Chunks held at their bound (`QueueFull`) go as the receivers acknowledge.
                    match crate::member::when_room(|| member.xfer_chunk(*view, piece.clone(), i + 1 == chunks)) {
                        Ok(()) => sent += 1,
                        Err(e) if transfer_over(&e) => break,
                        Err(e) => return Err(Failure::from(e.to_string())),
                    }
                }
                if sent < chunks {
                    // A later view came meanwhile (a member joined or failed): it transfers again.
                    print(json!({"type": "xfer_abandoned", "chunks_sent": sent, "chunks": chunks}));
                    continue;
                }
                member.xfer_done(*view).or_else(transfer_over_is_fine).map_err(|e| e.to_string())?;
                let ms = view_started.elapsed().as_secs_f64() * 1e3;
                print(json!({"type": "xfer_provided", "bytes": state.len(), "chunks": chunks, "ms": ms}));
            }
            Event::XferChunk { view, data, last } => {
                if staging.len() + data.len() > args.state_max {
                    return Err(Failure::from(format!(
                        "a state transfer is larger than --state-max ({} bytes): give this replica a larger --state-max",
                        args.state_max
                    )));
                }
                staging.extend_from_slice(data);
                if *last {
                    let map = Store::decode(&staging).ok_or("a state transfer did not decode")?;
                    let bytes = std::mem::take(&mut staging).len();
                    store.map = map;
                    // Installed; a later view already handed over needs no word of it.
                    member.xfer_done(*view).or_else(transfer_over_is_fine).map_err(|e| e.to_string())?;
                    let secs = view_started.elapsed().as_secs_f64();
                    print(
                        json!({"type": "xfer_installed", "bytes": bytes, "ms": secs * 1e3, "mb_per_s": bytes as f64 / secs / 1e6}),
                    );
                }
            }
            Event::Exit => return Ok(()),
            Event::Send { .. } | Event::Block => {}
        }
    }
}

/// The runtime's answer to a state-transfer action whose view is no longer the latest: that
/// transfer is over, and the next view transfers again if it must.
fn transfer_over(error: &motet_runtime::Error) -> bool {
    // A replica leaving (asked to stop) ends its part in the transfer too.
    matches!(error, motet_runtime::Error::Api(motet_core::ApiError::NotInTransfer) | motet_runtime::Error::Left)
}

/// `Ok` for an action refused because its transfer is over ([`transfer_over`]).
fn transfer_over_is_fine(error: motet_runtime::Error) -> Result<(), motet_runtime::Error> {
    if transfer_over(&error) {
        Ok(())
    } else {
        Err(error)
    }
}

/// An output line for a person (without `--json`): the event's type, then its fields as
/// `key=value`.
fn human(value: &serde_json::Value) -> String {
    let Some(fields) = value.as_object() else { return value.to_string() };
    let kind = fields.get("type").and_then(|t| t.as_str()).unwrap_or("event");
    let rest: Vec<String> = fields.iter().filter(|(k, _)| *k != "type").map(|(k, v)| format!("{k}={v}")).collect();
    format!("{kind} {}", rest.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_transfer_format_round_trips_and_updates_apply() {
        let mut store = Store::preload(10_000);
        store.apply(b"set a 1");
        store.apply(b"set b two words");
        store.apply(b"del a");
        store.apply(b"garbage");
        assert_eq!(store.applied, 3);
        assert_eq!(store.map.get("b").map(|v| &v[..]), Some(&b"two words"[..]));
        let decoded = Store::decode(&store.encode()).unwrap();
        assert_eq!(decoded, store.map);
        assert!(Store::decode(&[1, 0, 0]).is_none(), "a truncated state is refused");
        assert_eq!(Store::preload(10_000).digest(), Store::preload(10_000).digest());
    }

    /// The lines refused before they are cast are exactly those every replica would ignore.
    #[test]
    fn a_line_is_an_update_only_as_the_replicas_read_it() {
        assert_eq!(Update::parse("set k two words"), Some(Update::Set("k", "two words")));
        assert_eq!(Update::parse("set k "), Some(Update::Set("k", "")));
        assert_eq!(Update::parse("del k"), Some(Update::Del("k")));
        for line in ["sett b 2", "set", "set k", "del", "del k v", "SET k v", "digest now", "x"] {
            assert_eq!(Update::parse(line), None, "{line}");
            let mut store = Store::default();
            store.apply(line.as_bytes());
            assert_eq!(store.applied, 0, "{line}");
        }
    }
}
