//! `motet member`: one group member as a process, scriptable (issue 4's contract).
//!
//! Each line on stdin is cast to the group; each event is printed, with `--json` as one JSON
//! object per line:
//!
//! ```text
//! {"type":"view","view_id":"3:e0123456789abcdef","members":["e0123456789abcdef",...],"rank":0,"primary":false,"stack":"top:...:bottom","params":{"mflow":{"window_bytes":4096}}}
//! {"type":"cast","from":"e0123456789abcdef","data":"hello"}
//! {"type":"send","from":"e0123456789abcdef","data":"hello"}
//! {"type":"block"}
//! {"type":"exit"}
//! {"type":"stats",...}            (with --stats, every --stats-interval and at exit)
//! ```
//!
//! A view's `params` are the protocol parameters the view runs (the group's) where they differ
//! from the defaults, by layer, named as in a configuration file (`{}`: all defaults).
//!
//! Endpoint ids are strings (`e` and 16 hex digits: JSON numbers lose 64-bit precision in many
//! parsers); a view id is `"<logical time>:<coordinator id>"`. The end of stdin keeps the member
//! running; SIGTERM (or SIGINT) leaves the group gracefully and exits 0 once the others have been
//! told (or after 5 s).

use clap::Args;
use motet_runtime::{Error, Event, FileConfig, GroupConfig, Handle, Runtime, RuntimeConfig};
use serde_json::json;
use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::ops::ControlFlow;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Args)]
pub(crate) struct MemberArgs {
    /// The group to join.
    #[arg(long)]
    group: Option<String>,
    /// UDP address to bind (`IP:PORT`; port 0 picks one) [default: 127.0.0.1:0]. Not a clap
    /// default, so that one given explicitly overrides a `--config` file even when it equals it.
    #[arg(long)]
    bind: Option<SocketAddr>,
    /// Address other members use to reach this one, if not the bound one (NAT, containers).
    #[arg(long)]
    advertise: Option<SocketAddr>,
    /// Seed addresses of other members, comma-separated (`IP:PORT` or `host:port`).
    #[arg(long, value_delimiter = ',')]
    peers: Vec<String>,
    /// The stack: a preset, a property set or a layer list (see `motet stack explain`)
    /// [default: vsync].
    #[arg(long)]
    stack: Option<String>,
    /// A TOML file with `[runtime]` and `[group]` tables (flags given explicitly override it).
    #[arg(long)]
    config: Option<std::path::PathBuf>,
    /// Print one JSON object per event.
    #[arg(long)]
    json: bool,
    /// Spin on the socket instead of sleeping (lowest latency; burns a CPU).
    #[arg(long)]
    busy_poll: bool,
    /// IP multicast `GROUP:PORT` (e.g. 239.255.77.1:7500): casts go there as one datagram, and
    /// members on one LAN find each other there without --peers. All members must agree.
    #[arg(long)]
    multicast: Option<std::net::SocketAddrV4>,
    /// Testing aid: drop this fraction of received datagrams at random (where `tc netem` is not
    /// available) [default: 0].
    #[arg(long)]
    inject_loss: Option<f64>,
    /// Print the protocol's and the runtime's counters every `--stats-interval` and at exit.
    #[arg(long)]
    stats: bool,
    /// Serve the counters as Prometheus text over HTTP on this address (e.g. 127.0.0.1:9464).
    #[arg(long)]
    metrics: Option<SocketAddr>,
    /// Seconds between `--stats` reports (1 to a year) [default: 5]. Implies `--stats`.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=31_536_000))]
    stats_interval: Option<u64>,
    /// Ask the group to switch to this stack (protocol switching), `--switch-after` seconds after
    /// this member first sees a view with other members. Both stacks need the `Switch` property
    /// (every membership preset has it).
    #[arg(long)]
    switch: Option<String>,
    /// Seconds to wait before `--switch`.
    #[arg(long, default_value = "0", value_parser = seconds)]
    switch_after: Duration,
    /// Join as a client (client/server groups): casts to servers only do not reach it.
    #[arg(long)]
    client: bool,
    /// Do not deliver this member's own casts back to it (RMP's Message Bus `loop-back` flag;
    /// the other members see no difference).
    #[arg(long)]
    no_loopback: bool,
    /// Read commands on stdin: a line `/switch SPEC` asks the group to switch stacks,
    /// `/migrate IP:PORT [ADVERTISE]` moves this member to a new socket (endpoint migration; the
    /// views then carry the new address), `/send ID TEXT` sends TEXT to member ID alone (an id as
    /// views print it), `/leave` leaves; another line starting with `/` is
    /// refused with a message (a mistyped command is not cast), and `//` casts the line without
    /// its first `/`; every other line is cast as usual.
    #[arg(long)]
    commands: bool,
    /// Leave the group and exit, as on SIGTERM, when the process that started this one ends
    /// (the demo's members use it: a demo killed, or ended by a closed pipe, leaves nothing
    /// running). Looked at every 200 ms.
    #[arg(long)]
    exit_with_parent: bool,
    /// With `--exit-with-parent`: the process id of the process that starts this one (the demo
    /// gives its own). A parent that ended before this process could look is then seen: without
    /// it, this process takes the reaper it was handed to for its parent, and runs on.
    #[arg(long, value_name = "PID", requires = "exit_with_parent")]
    parent_pid: Option<u32>,
}

impl MemberArgs {
    /// How often `--stats` reports, if at all: `--stats-interval` alone asks for them too (it
    /// did nothing without `--stats`).
    fn stats_every(&self) -> Option<Duration> {
        (self.stats || self.stats_interval.is_some()).then(|| Duration::from_secs(self.stats_interval.unwrap_or(5)))
    }
}

/// A number of seconds for a flag: finite, not negative, and at most a year (a `Duration` that a
/// clock can be moved by without overflowing).
fn seconds(text: &str) -> Result<Duration, String> {
    const YEAR: f64 = 365.0 * 24.0 * 3600.0;
    let value: f64 = text.parse().map_err(|e| format!("`{text}` is not a number of seconds ({e})"))?;
    if !(0.0..=YEAR).contains(&value) {
        return Err(format!("`{text}` seconds: give a number from 0 to {YEAR} (a year)"));
    }
    Ok(Duration::from_secs_f64(value))
}

/// A payload as one line of text for a terminal: not UTF-8 replaced (U+FFFD), and control
/// characters but the tab escaped (`\n`, `\u{1b}`), so a payload can neither forge another line
/// of the output nor drive the operator's terminal.
pub(crate) fn printable(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len());
    for c in String::from_utf8_lossy(data).chars() {
        match c {
            '\t' => out.push(c),
            c if c.is_control() => out.extend(c.escape_default()),
            c => out.push(c),
        }
    }
    out
}

/// The JSON form of an endpoint id.
pub(crate) fn id(endpoint: motet_runtime::EndpointId) -> String {
    endpoint.to_string()
}

/// The protocol parameters that differ from the defaults, by layer, as a file sets them
/// (`{"mflow": {"window_bytes": 4096}}`; `{}` for the defaults): what the view runs, shown where it differs.
fn changed_params(params: &motet_core::StackConfig) -> serde_json::Value {
    let (ours, defaults) = (serde_json::to_value(params), serde_json::to_value(motet_core::StackConfig::default()));
    let (Ok(serde_json::Value::Object(ours)), Ok(serde_json::Value::Object(defaults))) = (ours, defaults) else {
        return json!({});
    };
    let changed = ours.into_iter().filter_map(|(layer, values)| {
        let serde_json::Value::Object(values) = values else { return None };
        let default = defaults.get(&layer);
        let values: serde_json::Map<_, _> =
            values.into_iter().filter(|(key, value)| default.and_then(|d| d.get(key)) != Some(value)).collect();
        (!values.is_empty()).then_some((layer, serde_json::Value::Object(values)))
    });
    serde_json::Value::Object(changed.collect())
}

/// One event as a JSON object.
pub(crate) fn event_json(event: &Event) -> serde_json::Value {
    match event {
        Event::View(view) => json!({
            "type": "view",
            "view_id": format!("{}:{}", view.id.ltime, id(view.id.coord)),
            "members": view.members.iter().map(|&e| id(e)).collect::<Vec<_>>(),
            "rank": view.rank,
            "stack": view.stack,
            "primary": view.primary,
            "xfer": view.xfer,
            "clients": view.clients.iter().map(|&e| id(e)).collect::<Vec<_>>(),
            "addresses": view.addresses.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "params": changed_params(&view.params),
        }),
        Event::Cast { from, data } => {
            json!({"type": "cast", "from": id(*from), "data": String::from_utf8_lossy(data)})
        }
        Event::Send { from, data } => {
            json!({"type": "send", "from": id(*from), "data": String::from_utf8_lossy(data)})
        }
        Event::Block => json!({"type": "block"}),
        Event::Exit => json!({"type": "exit"}),
        Event::XferProvide { .. } => json!({"type": "xfer_provide"}),
        Event::XferChunk { data, last, .. } => json!({"type": "xfer_chunk", "bytes": data.len(), "last": last}),
    }
}

fn event_text(event: &Event) -> String {
    match event {
        Event::View(view) => {
            let members: Vec<String> = view.members.iter().map(|&e| id(e)).collect();
            format!("view {}:{} rank {} members [{}]", view.id.ltime, id(view.id.coord), view.rank, members.join(" "))
        }
        Event::Cast { from, data } => format!("cast {}: {}", id(*from), printable(data)),
        Event::Send { from, data } => format!("send {}: {}", id(*from), printable(data)),
        Event::Block => "block".into(),
        Event::Exit => "exit".into(),
        Event::XferProvide { .. } => "state transfer: providing (a member process has no state: empty)".into(),
        Event::XferChunk { data, last, .. } => {
            format!("state transfer: {} bytes{}", data.len(), if *last { ", last" } else { "" })
        }
    }
}

fn stats_json(runtime: &Runtime) -> Option<serde_json::Value> {
    let (rt, protocol) = runtime.stats().ok()?;
    let drops: serde_json::Map<String, serde_json::Value> =
        motet_core::DropReason::ALL.iter().map(|&r| (r.name().to_string(), json!(protocol.drops(r)))).collect();
    let counters: serde_json::Map<String, serde_json::Value> =
        motet_core::Counter::ALL.iter().map(|&c| (c.name().to_string(), json!(protocol.counter(c)))).collect();
    // The same by the layer that counted (`node`: the node around the stacks).
    let mut by_layer = serde_json::Map::new();
    for &c in motet_core::Counter::ALL {
        for (layer, value) in protocol.by_layer(c) {
            let layer = layer.map_or("node", |l| l.name());
            let entry = by_layer.entry(layer).or_insert_with(|| json!({}));
            entry[c.name()] = json!(value);
        }
    }
    // Drops by who dropped, then why: only those above zero.
    let mut drops_by_layer = serde_json::Map::new();
    for (layer, reason, value) in protocol.drops_by_layer() {
        let layer = layer.map_or("node", |l| l.name());
        let entry = drops_by_layer.entry(layer).or_insert_with(|| json!({}));
        entry[reason.name()] = json!(value);
    }
    // Every runtime figure, from the list the metrics endpoint renders too (six counters were
    // in neither, `injected_loss` in this one only: a review's finding).
    let mut stats = serde_json::Map::new();
    stats.insert("type".into(), json!("stats"));
    for figure in rt.figures() {
        let value = match figure.kind {
            motet_runtime::metrics::Kind::Flag => json!(figure.value != 0),
            _ => json!(figure.value),
        };
        stats.insert(figure.field.into(), value);
    }
    stats.insert("counters".into(), json!(counters));
    stats.insert("counters_by_layer".into(), json!(by_layer));
    stats.insert("drops".into(), json!(drops));
    stats.insert("drops_by_layer".into(), json!(drops_by_layer));
    Some(serde_json::Value::Object(stats))
}

/// The runtime and group configuration from the file and the flags: the file parsed, the flags
/// given explicitly put over it, and the result validated once. The file was validated on its
/// own first, so a value a flag replaces was refused (`advertise` with the file's default
/// loopback bind under `--bind 0.0.0.0:P`, a misspelt stack under `--stack`, a file without
/// `[group]` under `--group`: a review's finding).
fn configure(args: &MemberArgs) -> Result<(RuntimeConfig, GroupConfig), String> {
    let FileConfig { mut runtime, mut group } = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
            FileConfig::parse_toml(&text).map_err(|e| format!("{}: {e}", path.display()))?
        }
        None => FileConfig { runtime: RuntimeConfig::default(), group: GroupConfig::new("") },
    };
    // Flags given explicitly override the file, whatever their value.
    if let Some(name) = &args.group {
        group.name = name.clone();
    }
    if let Some(bind) = args.bind {
        runtime.bind = bind;
    }
    if let Some(stack) = &args.stack {
        group.stack = stack.clone();
    }
    if let Some(advertise) = args.advertise {
        runtime.advertise = Some(advertise);
    }
    runtime.busy_poll |= args.busy_poll;
    if let Some(group) = args.multicast {
        // The group and port from the flag; the interface and hop limit a configuration file set
        // are kept.
        let (interface, ttl) = runtime.multicast.as_ref().map_or((None, 1), |m| (m.interface, m.ttl));
        runtime.multicast =
            Some(motet_runtime::MulticastConfig { group: *group.ip(), port: group.port(), interface, ttl });
    }
    if let Some(loss) = args.inject_loss {
        runtime.inject_loss = loss;
    }
    // Flags override the file: `--peers` replaces its seeds (as `--stack` replaces its stack).
    if !args.peers.is_empty() {
        group.peers = args.peers.iter().map(|p| p.trim().to_string()).collect();
    }
    group.client |= args.client;
    group.loopback &= !args.no_loopback;
    if group.name.is_empty() {
        return Err(match &args.config {
            Some(path) => format!("{} names no group: give --group, or `name` in its [group] table", path.display()),
            None => "--group is required (or --config with a [group] table)".into(),
        });
    }
    // The stack on its own first, so that its error names where it came from (a parameter's
    // error is a stack error too, and may come from the file under `--stack`).
    if let Err(error) = motet_core::StackSpec::parse(&group.stack) {
        return Err(match (&args.stack, &args.config) {
            (None, Some(path)) => format!("{}: stack `{}`: {error}", path.display(), group.stack),
            _ => format!("--stack {}: {error}", group.stack),
        });
    }
    let file = FileConfig { runtime, group };
    file.validate().map_err(|e| e.to_string())?;
    // At the start, not when the switch is asked for (once a view with others arrives, maybe
    // hours later).
    if let Some(spec) = &args.switch {
        motet_runtime::switch_target(spec).map_err(|error| format!("--switch {spec}: {error}"))?;
    }
    Ok((file.runtime, file.group))
}

// `--switch-after` is wall-clock time of a command-line tool, not protocol time.
#[allow(clippy::disallowed_types)]
pub(crate) fn run(args: MemberArgs) -> ExitCode {
    // Read first: a parent that dies while this process starts leaves it to a reaper, whose id a
    // later read would take for the parent's, and the watch would never fire.
    let parent = args.parent_pid.unwrap_or_else(std::os::unix::process::parent_id);
    // First: a stop asked while this process starts (a supervisor's SIGTERM right after the
    // spawn) is then a leave once joined and exit status 0, not the signal's default action
    // (status 143, and a member the others must suspect).
    let stop = match stop_on_signals() {
        Ok(stop) => stop,
        Err(error) => {
            note!("motet member: {error}");
            return ExitCode::from(1);
        }
    };
    if args.exit_with_parent && args.parent_pid.is_some() {
        // From here the kernel sends SIGTERM (a leave, as a supervisor's stop) when the thread
        // that started this process ends: only for a parent that says who it is (`--parent-pid`,
        // as `motet demo` does from its main thread), since a launcher that spawns from a worker
        // thread would see its members leave when that thread returned. A parent already gone is
        // seen by its id. The 200 ms watch below stays, for a kernel that refuses the request.
        if let Err(error) = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM) {
            note!("motet member: cannot ask to be told of the parent's end ({error}); watching it instead");
        }
        if std::os::unix::process::parent_id() != parent {
            note!("motet member: the parent process {parent} is gone; not joining");
            return ExitCode::SUCCESS;
        }
    }
    let (runtime_config, group) = match configure(&args) {
        Ok(config) => config,
        Err(message) => {
            note!("motet member: {message}");
            return ExitCode::from(2);
        }
    };
    let runtime = match Runtime::start(runtime_config) {
        Ok(runtime) => runtime,
        Err(error) => {
            note!("motet member: {error}");
            // A setting refused is a configuration error like those `configure` finds (status
            // 2, as documented); a socket that cannot be made is not.
            return ExitCode::from(if matches!(error, motet_runtime::Error::Config(_)) { 2 } else { 1 });
        }
    };
    // Before joining: a port in use then ends the process before the group saw it (after, it
    // cost the group two view changes and this process a leave).
    if let Some(address) = args.metrics {
        match motet_runtime::metrics::serve(address, runtime.stats_handle()) {
            Ok(bound) => note!("motet member: metrics at http://{bound}/metrics"),
            Err(error) => {
                note!("motet member: cannot serve metrics on {address}: {error}");
                return ExitCode::from(1);
            }
        }
    }
    let member = match runtime.join(group) {
        Ok(member) => member,
        Err(error) => {
            note!("motet member: {error}");
            return ExitCode::from(2);
        }
    };
    spawn_watchdog("motet member", Arc::clone(&stop));
    if args.exit_with_parent {
        spawn_parent_watch(parent, Arc::clone(&stop));
    }
    let runtime = Arc::new(runtime);
    // A weak reference: the thread stays blocked in reading stdin until the process ends, and a
    // strong one kept the runtime from ever being dropped, so its stop (which sends what waits in
    // a full socket's backlog, a leaving coordinator's view among it) never ran (a review's
    // finding).
    spawn_stdin_caster(member.handle(), Arc::downgrade(&runtime), args.commands);
    // A closed stdout (the reader went away) is not a reason to stop being a member: nothing
    // printed may panic (`println!` does, and the panic hook would end the process unleft).
    let print_line = |line: &str| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    };
    let print = |event: &Event| {
        print_line(&if args.json { event_json(event).to_string() } else { event_text(event) });
    };
    let print_stats = || {
        if let Some(stats) = stats_json(&runtime) {
            print_line(&stats.to_string());
        }
    };
    // Deadlines by the clock, not by turns of the loop: a turn ends at once when an event waits,
    // so a busy group would make turns of microseconds.
    let stats = args.stats_every().is_some();
    // Not looked at without reports (`Duration::MAX` would overflow the clock below).
    let stats_every = args.stats_every().unwrap_or(Duration::from_secs(5));
    let mut next_stats = std::time::Instant::now() + stats_every;
    let tick = Duration::from_millis(50);
    let mut leave_by = LeaveBy::default();
    // When to ask for `--switch`: set once a view with other members arrives.
    let mut switch_at: Option<std::time::Instant> = None;
    let mut switch = args.switch.clone();
    loop {
        if switch_at.is_some_and(|at| std::time::Instant::now() >= at) {
            if let Some(spec) = switch.take() {
                if let Err(error) = member.switch(&spec) {
                    note!("motet member: switch to {spec} refused: {error}");
                }
            }
        }
        if leave_by.starts(&stop) {
            match member.leave() {
                // `Left`: a leave is already under way (a `/leave` command): wait for its exit
                // like this one's (had the exit come, the loop would have ended).
                Ok(()) | Err(Error::Left) => {}
                Err(_) => break,
            }
        }
        match member.recv_timeout(tick) {
            Ok(Some(event)) => {
                // A member process keeps no application state: with an `Xfer` stack it provides
                // an empty one and acknowledges what it receives, so transfer views end.
                let xfer = match &event {
                    Event::XferProvide { view } => {
                        member.xfer_chunk(*view, Vec::new(), true).and_then(|()| member.xfer_done(*view))
                    }
                    Event::XferChunk { view, last: true, .. } => member.xfer_done(*view),
                    _ => Ok(()),
                };
                match xfer {
                    // A later view came meanwhile: that transfer is over (the next one restarts).
                    Ok(()) | Err(Error::Api(motet_core::ApiError::NotInTransfer)) => {}
                    Err(error) => note!("motet member: state transfer: {error}"),
                }
                if let Event::View(view) = &event {
                    if view.members.len() > 1 && switch_at.is_none() {
                        switch_at = Some(std::time::Instant::now() + args.switch_after);
                    }
                }
                print(&event);
                if event == Event::Exit {
                    break;
                }
            }
            Ok(None) => {}
            Err(Error::Left) => break,
            Err(error) => {
                note!("motet member: {error}");
                return ExitCode::from(1);
            }
        }
        let now = std::time::Instant::now();
        if leave_by.overdue() {
            note!("motet member: the leave was not confirmed within {LEAVE_WAIT:?}; exiting anyway");
            if stats {
                print_stats();
            }
            // Not through the runtime's drop, which would give the leave up to 5 s more (and the
            // watchdog would end the process first, blaming its output).
            let _ = std::io::stdout().lock().flush();
            std::process::exit(0);
        }
        if stats && now >= next_stats {
            next_stats = now + stats_every;
            print_stats();
        }
    }
    if stats {
        print_stats();
    }
    ExitCode::SUCCESS
}

/// How long a member asked to stop (SIGTERM, SIGINT) waits for its leave to be confirmed (its
/// `exit` event) before it exits anyway.
pub(crate) const LEAVE_WAIT: Duration = Duration::from_secs(5);

/// From now on, SIGTERM, SIGINT and SIGHUP (unless inherited ignored, as under `nohup`; read on
/// Linux, elsewhere taken as not ignored) set the flag returned instead of ending the process: the
/// tools (`member`, `chat`, `kv`) turn it into a leave once joined, and exit status 0, not the
/// signal's default action (status 143, or 129 when the terminal closes, and a member the others
/// must suspect).
pub(crate) fn stop_on_signals() -> Result<Arc<AtomicBool>, String> {
    // One flag for the process, registered once: `main` registers it before parsing the command
    // line (a SIGTERM in that window took the default action: status 143 and no leave), and the
    // command takes the same flag here.
    static STOP: std::sync::OnceLock<Result<Arc<AtomicBool>, String>> = std::sync::OnceLock::new();
    STOP.get_or_init(|| {
        let stop = Arc::new(AtomicBool::new(false));
        let mut signals = vec![signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT];
        // SIGHUP only where it was not ignored: under `nohup` a closed terminal must not end the
        // member (a review's finding: registering a handler overrode the inherited ignore).
        if !sighup_ignored() {
            signals.push(signal_hook::consts::SIGHUP);
        }
        for signal in signals {
            signal_hook::flag::register(signal, Arc::clone(&stop))
                .map_err(|error| format!("cannot handle signal {signal}: {error}"))?;
        }
        Ok(stop)
    })
    .clone()
}

/// Whether this process inherited SIGHUP ignored (`nohup`), read from the kernel's mask of ignored
/// signals (`SigIgn` in `/proc/self/status`; SIGHUP is signal 1, its lowest bit). Where that
/// cannot be read, not ignored.
fn sighup_ignored() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    sighup_in_mask(&status)
}

fn sighup_in_mask(status: &str) -> bool {
    let mask = status.lines().find_map(|line| line.strip_prefix("SigIgn:")).map(str::trim);
    mask.and_then(|hex| u64::from_str_radix(hex, 16).ok()).is_some_and(|mask| mask & 1 != 0)
}

/// Until when a leave asked on a stop may take to be confirmed ([`LEAVE_WAIT`]).
#[derive(Default)]
#[allow(clippy::disallowed_types)] // wall-clock time of a command-line tool
pub(crate) struct LeaveBy(Option<std::time::Instant>);

#[allow(clippy::disallowed_types)]
impl LeaveBy {
    /// Whether a stop is asked now for the first time (the caller asks to leave then).
    pub(crate) fn starts(&mut self, stop: &AtomicBool) -> bool {
        let first = stop.load(Ordering::SeqCst) && self.0.is_none();
        if first {
            self.0 = Some(std::time::Instant::now() + LEAVE_WAIT);
        }
        first
    }

    /// Whether the leave was asked longer than [`LEAVE_WAIT`] ago (the process then exits
    /// without its confirmation, not through the runtime's drop, which would give it 5 s more).
    pub(crate) fn overdue(&self) -> bool {
        self.0.is_some_and(|by| std::time::Instant::now() >= by)
    }
}

/// Ends the process a little after [`LEAVE_WAIT`] once asked to stop, if the main loop has not
/// ended it: the loop may be blocked writing to a stdout whose reader stopped reading (a full
/// pipe), where the signal's flag is never looked at (the write restarts after the handler).
/// The leave may then not have been taken either (the runtime holds actions while the
/// application is behind on its events), and the others find the member gone by its silence, as
/// after a crash. Exits 0, as the main loop's own limit does: the process did as asked.
#[allow(clippy::disallowed_types)] // wall-clock time of a command-line tool
pub(crate) fn spawn_watchdog(who: &'static str, stop: Arc<AtomicBool>) {
    let spawned = std::thread::Builder::new().name("watchdog".into()).spawn(move || {
        while !stop.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(LEAVE_WAIT + Duration::from_secs(1));
        note!("{who}: still running after a stop was asked (is its output being read?); exiting");
        // `exit` only tries the standard output's lock, which the blocked writer holds.
        std::process::exit(0);
    });
    if let Err(error) = spawned {
        note!("{who}: cannot watch for a stop that does not end the process: {error}");
    }
}

/// `--exit-with-parent`: sets `stop` (as SIGTERM does) once this process's parent is no longer
/// the one that started it (it ended, and the process was given to another).
/// Stops the member once its parent is no longer `parent` (read when the process started).
fn spawn_parent_watch(parent: u32, stop: Arc<AtomicBool>) {
    let spawned = std::thread::Builder::new().name("parent".into()).spawn(move || {
        while std::os::unix::process::parent_id() == parent {
            std::thread::sleep(Duration::from_millis(200));
        }
        stop.store(true, Ordering::SeqCst);
    });
    if let Err(error) = spawned {
        note!("motet member: cannot watch the parent process: {error}");
    }
}

/// `/migrate BIND [ADVERTISE]`: moves the process to a new socket.
fn migrate(runtime: &Runtime, args: &str) -> Result<(), Error> {
    let mut words = args.split_whitespace();
    let parse = |word: Option<&str>| -> Result<Option<SocketAddr>, Error> {
        word.map(|w| w.parse().map_err(|e| Error::Config(format!("/migrate: `{w}` is not IP:PORT ({e})")))).transpose()
    };
    let bind = parse(words.next())?.ok_or_else(|| Error::Config("/migrate needs IP:PORT to bind".into()))?;
    let advertise = parse(words.next())?;
    if let Some(extra) = words.next() {
        return Err(Error::Config(format!("/migrate takes IP:PORT [ADVERTISE], not `{extra}` as well")));
    }
    let address = runtime.migrate(bind, advertise)?;
    note!("motet member: migrating to {address}");
    Ok(())
}

/// Casts `data`, waiting while the member's parked casts are at their bound (`QueueFull`: the
/// member's events are read on another thread, which lets them go): a line read is never lost.
pub(crate) fn cast_when_room(member: &Handle, data: impl Into<bytes::Bytes>) -> Result<(), Error> {
    let data = data.into();
    when_room(|| member.cast(data.clone()))
}

/// Runs `act` until it is not refused for a full queue (`QueueFull`), 1 ms apart: what the
/// runtime holds goes meanwhile (casts as the member's events are read, state-transfer chunks as
/// the receivers acknowledge them).
pub(crate) fn when_room(mut act: impl FnMut() -> Result<(), Error>) -> Result<(), Error> {
    loop {
        match act() {
            Err(Error::QueueFull(_)) => std::thread::sleep(Duration::from_millis(1)),
            other => return other,
        }
    }
}

/// A line without its line ending (`\n` or `\r\n`, as `BufRead::lines` takes them off).
fn strip_newline(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// Hands `each` every line of stdin as bytes, without its line ending, until it breaks or stdin
/// ends. As bytes: `lines()` ends at a line that is not UTF-8, and every later line is lost. A
/// read error is reported as `who`'s and ends the reading (`read_until` retries interrupted
/// reads itself).
pub(crate) fn stdin_lines(who: &str, mut each: impl FnMut(&[u8]) -> ControlFlow<()>) {
    let mut stdin = std::io::stdin().lock();
    let mut buf = Vec::new();
    loop {
        buf.clear();
        // At most a line's limit and its newline: a stream without newlines (a binary file piped
        // in) must not grow the buffer until the process runs out of memory.
        match std::io::Read::take(&mut stdin, LINE_MAX as u64 + 1).read_until(b'\n', &mut buf) {
            Ok(0) => return,
            Ok(_) if buf.len() > LINE_MAX && buf.last() != Some(&b'\n') => {
                note!("{who}: a line longer than {LINE_MAX} bytes was skipped");
                if !skip_line(who, &mut stdin) {
                    return;
                }
            }
            Ok(_) if each(strip_newline(&buf)).is_break() => return,
            Ok(_) => {}
            Err(error) => {
                note!("{who}: reading stdin: {error}; no more lines are read");
                return;
            }
        }
    }
}

/// The longest stdin line taken (16 MiB, more than a stack takes in one message by default:
/// such a line is refused by the stack, with its reason).
pub(crate) const LINE_MAX: usize = 16 << 20;

/// Reads on to the end of the current line, keeping nothing; false if stdin ended or failed.
fn skip_line(who: &str, stdin: &mut impl BufRead) -> bool {
    loop {
        let (done, used) = match stdin.fill_buf() {
            Ok([]) => return false,
            Ok(bytes) => match bytes.iter().position(|&b| b == b'\n') {
                Some(end) => (true, end + 1),
                None => (false, bytes.len()),
            },
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(error) => {
                note!("{who}: reading stdin: {error}; no more lines are read");
                return false;
            }
        };
        stdin.consume(used);
        if done {
            return true;
        }
    }
}

/// `--commands`: each command's word and its form, for the messages that refuse a line.
const COMMAND_USAGE: [(&str, &str); 4] = [
    ("switch", "/switch SPEC"),
    ("migrate", "/migrate IP:PORT [ADVERTISE]"),
    ("send", "/send ID TEXT"),
    ("leave", "/leave"),
];

/// Casts each stdin line on a thread of its own (reading stdin blocks). The end of stdin ends
/// the thread, not the member. A line that is not UTF-8 is cast as it is.
fn spawn_stdin_caster(member: Handle, runtime: std::sync::Weak<Runtime>, commands: bool) {
    let spawned = std::thread::Builder::new().name("stdin".into()).spawn(move || {
        stdin_lines("motet member", |line| {
            // `//` escapes a line that starts with `/`: cast without its first `/`.
            let escaped = commands && line.starts_with(b"//");
            let line = if escaped { &line[1..] } else { line };
            let command = std::str::from_utf8(line).ok().and_then(|l| l.strip_prefix('/')).filter(|_| commands && !escaped);
            let result = match command.map(str::trim) {
                Some(command) => {
                    // The command's word, and what follows it.
                    let (word, rest) = command.split_once(char::is_whitespace).map_or((command, ""), |(w, r)| (w, r.trim()));
                    let Some(&(_, usage)) = COMMAND_USAGE.iter().find(|(known, _)| *known == word) else {
                        let known: Vec<&str> = COMMAND_USAGE.iter().map(|(_, usage)| *usage).collect();
                        note!(
                            "motet member: not a command: /{command} (known: {}; start a line with // to cast it); not cast",
                            known.join(", ")
                        );
                        return ControlFlow::Continue(());
                    };
                    match word {
                        "leave" if rest.is_empty() => member.leave(),
                        // A bare `/send` or `/migrate` was "not a command": its form says what
                        // it lacks.
                        _ if rest.is_empty() || word == "leave" => {
                            note!("motet member: usage: {usage}; nothing done");
                            return ControlFlow::Continue(());
                        }
                        "switch" => member.switch(rest),
                        "migrate" => match runtime.upgrade() {
                            Some(runtime) => migrate(&runtime, rest),
                            None => Err(Error::Stopped),
                        },
                        // `/send`: the text is the rest of the line after the id's one
                        // separator, as typed.
                        _ => match rest.split_once(char::is_whitespace) {
                            Some((to, text)) => match to.parse::<motet_runtime::EndpointId>() {
                                Ok(to) => member.send(to, bytes::Bytes::copy_from_slice(text.as_bytes())),
                                Err(why) => Err(Error::Config(format!("/send: {why}"))),
                            },
                            None => {
                                note!("motet member: usage: {usage} (no text after the id); nothing sent");
                                return ControlFlow::Continue(());
                            }
                        },
                    }
                }
                None => cast_when_room(&member, bytes::Bytes::copy_from_slice(line)),
            };
            match result {
                Ok(()) => ControlFlow::Continue(()),
                Err(Error::Left | Error::Stopped | Error::Failed(_)) => ControlFlow::Break(()),
                Err(error) => {
                    note!("motet member: refused: {error}");
                    ControlFlow::Continue(())
                }
            }
        });
    });
    if let Err(error) = spawned {
        note!("motet member: cannot read stdin: {error}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        member: MemberArgs,
    }

    /// SIGHUP is read as ignored from the kernel's mask (`nohup` sets it), and only then.
    #[test]
    fn an_ignored_sighup_is_read_from_the_mask() {
        assert!(sighup_in_mask("Name:\tmotet\nSigIgn:\t0000000000000001\nSigCgt:\t0\n"));
        assert!(sighup_in_mask("SigIgn:\t0000000000001001\n"));
        assert!(!sighup_in_mask("SigIgn:\t0000000000001000\n"));
        assert!(!sighup_in_mask("no mask here"));
    }

    /// The configuration from `file` (written to a temporary path) and the flags.
    fn configured(file: &str, flags: &[&str]) -> Result<(RuntimeConfig, GroupConfig), String> {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let path = std::env::temp_dir().join(format!("motet-configure-{}-{n}.toml", std::process::id()));
        std::fs::write(&path, file).unwrap();
        let args = ["motet", "--config", path.to_str().unwrap()].into_iter().chain(flags.iter().copied());
        let result = configure(&Cli::parse_from(args).member);
        std::fs::remove_file(&path).unwrap();
        result
    }

    /// The file is validated once the flags are over it, not before: a value a flag replaces is
    /// not refused (a review's finding: each of these was), and what is left wrong still is,
    /// saying where it came from.
    #[test]
    fn flags_override_a_config_file_before_it_is_validated() {
        let (runtime, _) = configured(
            "[runtime]\nadvertise = \"10.1.2.3:47911\"\n[group]\nname = \"g\"\n",
            &["--bind", "0.0.0.0:47911"],
        )
        .unwrap();
        assert_eq!(runtime.bind, "0.0.0.0:47911".parse().unwrap());
        let (_, group) = configured("[group]\nname = \"g\"\nstack = \"vsnyc\"\n", &["--stack", "vsync"]).unwrap();
        assert_eq!(group.stack, "vsync");
        let (runtime, group) = configured("[runtime]\nbusy_poll = true\n", &["--group", "g"]).unwrap();
        assert!(runtime.busy_poll);
        assert_eq!(group.name, "g");
        // Still wrong after the flags: refused, naming the source.
        let err = configured("[group]\nname = \"g\"\nstack = \"vsnyc\"\n", &[]).unwrap_err();
        assert!(err.contains(".toml: stack `vsnyc`: unknown property or preset"), "{err}");
        let err = configured("[group]\nname = \"g\"\n", &["--stack", "totl"]).unwrap_err();
        assert!(err.starts_with("--stack totl: unknown property or preset"), "{err}");
        let err = configured("[runtime]\nbusy_poll = true\n", &[]).unwrap_err();
        assert!(err.contains("names no group: give --group"), "{err}");
        let err = configured("[runtime]\nadvertise = \"10.1.2.3:47911\"\n[group]\nname = \"g\"\n", &[]).unwrap_err();
        assert!(err.contains("bind the address to advertise"), "{err}");
        // A parameter's error is the file's even under `--stack`.
        let err = configured("[group]\nname = \"g\"\n[group.params.mnak]\nretransmit_max = 0\n", &["--stack", "vsync"])
            .unwrap_err();
        assert!(err.contains("mnak.retransmit_max must be at least 1") && !err.contains("--stack"), "{err}");
    }

    /// `--stats-interval` alone asks for the reports (it did nothing without `--stats`).
    #[test]
    fn a_stats_interval_implies_stats() {
        let args = |flags: &[&str]| Cli::parse_from(["motet", "--group", "g"].iter().chain(flags)).member;
        assert_eq!(args(&["--stats-interval", "3"]).stats_every(), Some(Duration::from_secs(3)));
        assert_eq!(args(&["--stats"]).stats_every(), Some(Duration::from_secs(5)));
        assert_eq!(args(&[]).stats_every(), None);
    }

    /// `--peers` replaces the seeds of a `--config` file, as every explicit flag overrides the
    /// file (before, it added to them); without it the file's seeds stay.
    #[test]
    fn peers_given_on_the_command_line_replace_the_config_files() {
        let path = std::env::temp_dir().join(format!("motet-peers-{}.toml", std::process::id()));
        std::fs::write(&path, "[group]\nname = \"seeds\"\npeers = [\"127.0.0.1:1\"]\n").unwrap();
        let seeds = |extra: &[&str]| {
            let args = ["motet", "--config", path.to_str().unwrap()].into_iter().chain(extra.iter().copied());
            configure(&Cli::parse_from(args).member).unwrap().1.peers
        };
        let (given, kept) = (seeds(&["--peers", "127.0.0.1:2,127.0.0.1:3"]), seeds(&[]));
        std::fs::remove_file(&path).unwrap();
        assert_eq!(given, ["127.0.0.1:2", "127.0.0.1:3"]);
        assert_eq!(kept, ["127.0.0.1:1"]);
    }
}
