//! `motet chat GROUP`: a chat over a group, like Ensemble's `mtalk` demo. Every line typed is cast
//! to the group; every message and every membership change is printed.
//!
//! With no flags it needs no set-up on one machine: it binds the first free port of
//! 127.0.0.1:47470-47479 and looks for the others on all ten, so up to ten terminals chat at once.
//! Across machines, give `--bind`, `--peers` (and `--advertise` behind NAT).

use crate::Failure;
use clap::Args;
use motet_runtime::{Error, Event, GroupConfig, Runtime, RuntimeConfig};
use std::io::Write as _;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// The local ports tried when no address is given.
const LOCAL_PORTS: std::ops::RangeInclusive<u16> = 47470..=47479;

#[derive(Args)]
pub(crate) struct ChatArgs {
    /// The group (chat room).
    group: String,
    /// Your name (default: $USER).
    #[arg(long)]
    name: Option<String>,
    /// UDP address to bind (default: the first free port of 127.0.0.1:47470-47479).
    #[arg(long)]
    bind: Option<SocketAddr>,
    /// Address the others reach you at, if not the bound one.
    #[arg(long)]
    advertise: Option<SocketAddr>,
    /// Where others may be, comma-separated (default: 127.0.0.1:47470-47479).
    #[arg(long, value_delimiter = ',')]
    peers: Vec<String>,
}

pub(crate) fn run(args: ChatArgs) -> ExitCode {
    match chat(args) {
        Ok(()) => ExitCode::SUCCESS,
        // 2 for a setting refused (`--advertise` that cannot work, a bad `--peers`), as `member`.
        Err(failure) => failure.exit("motet chat"),
    }
}

fn start(args: &ChatArgs) -> Result<Runtime, Failure> {
    let with_advertise = |config: RuntimeConfig| match args.advertise {
        Some(a) => config.advertise(a),
        None => config,
    };
    if let Some(bind) = args.bind {
        return Ok(Runtime::start(with_advertise(RuntimeConfig::bind(bind)))?);
    }
    for port in LOCAL_PORTS {
        match Runtime::start(with_advertise(RuntimeConfig::bind(SocketAddr::from(([127, 0, 0, 1], port))))) {
            Ok(runtime) => return Ok(runtime),
            Err(Error::Io { .. }) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(Failure::from(format!(
        "ports {}-{} on 127.0.0.1 are all taken; give --bind",
        LOCAL_PORTS.start(),
        LOCAL_PORTS.end()
    )))
}

#[allow(clippy::disallowed_types)] // wall-clock time of a command-line tool
fn chat(args: ChatArgs) -> Result<(), Failure> {
    let name = args.name.clone().or_else(|| std::env::var("USER").ok()).unwrap_or_else(|| "anonymous".into());
    // First, as `member` does: a signal while starting is a leave once joined, not an exit
    // the others must find out by suspicion.
    let stop = crate::member::stop_on_signals()?;
    let runtime = start(&args)?;
    let peers = if args.peers.is_empty() {
        LOCAL_PORTS.map(|p| format!("127.0.0.1:{p}")).collect()
    } else {
        args.peers.clone()
    };
    let member = runtime.join(GroupConfig::new(&args.group).peers(peers))?;
    // A closed stdout (`motet chat ROOM | head`) must not end the process unleft: `println!`
    // panics, and the panic hook exits at once. The member leaves when its input ends.
    let say = |line: std::fmt::Arguments<'_>| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    };
    say(format_args!(
        "* {name} in `{}` at {} — type a line to send it, Ctrl-D to leave",
        args.group,
        runtime.advertised_addr()
    ));
    // A stop (a signal, or the end of input) that the loop below cannot act on, because it is
    // blocked writing to a terminal or pipe nobody reads, still ends the process.
    crate::member::spawn_watchdog("*", Arc::clone(&stop));
    let handle = member.handle();
    let typed_to_end = Arc::clone(&stop);
    std::thread::Builder::new()
        .name("stdin".into())
        .spawn(move || {
            // A line that is not UTF-8 is sent with its bad bytes replaced, not taken for the end
            // of input (which would leave the group).
            crate::member::stdin_lines("*", |line| {
                let line = String::from_utf8_lossy(line);
                if let Err(error) = crate::member::cast_when_room(&handle, format!("{name}: {line}")) {
                    note!("* not sent: {error}");
                }
                std::ops::ControlFlow::Continue(())
            });
            typed_to_end.store(true, Ordering::SeqCst);
        })
        .map_err(|e| format!("cannot read stdin: {e}"))?;
    let mut previous: Vec<motet_runtime::EndpointId> = Vec::new();
    let mut leave_by = crate::member::LeaveBy::default();
    loop {
        if leave_by.starts(&stop) {
            let _ = member.leave();
        }
        if leave_by.overdue() {
            say(format_args!("* left without a confirmation within {:?}", crate::member::LEAVE_WAIT));
            // Not through the runtime's drop, which would give the leave up to 5 s more.
            std::process::exit(0);
        }
        match member.recv_timeout(Duration::from_millis(100)) {
            Ok(Some(Event::Cast { data, .. })) => say(format_args!("{}", crate::member::printable(&data))),
            Ok(Some(Event::View(view))) => {
                let joined = view.members.iter().filter(|m| !previous.contains(m)).count();
                let left = previous.iter().filter(|m| !view.members.contains(m)).count();
                if !previous.is_empty() || view.members.len() > 1 {
                    say(format_args!("* {} here now ({joined} joined, {left} left)", view.members.len()));
                }
                previous = view.members;
            }
            Ok(Some(Event::Exit)) | Err(Error::Left) => {
                say(format_args!("* left"));
                return Ok(());
            }
            Ok(_) => {}
            Err(error) => return Err(Failure::from(error.to_string())),
        }
    }
}
