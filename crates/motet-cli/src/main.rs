//! `motet`: the command-line front end.

/// `eprintln!` that cannot panic: a member whose standard error nobody reads any more (a logger
/// that died) must go on, and leave when asked (`eprintln!` panics on a closed stream, ending the
/// process unleft, or a thread such as the one that casts stdin's lines).
macro_rules! note {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

mod bench;
mod chat;
mod demo;
mod demo_udp;
mod kv;
mod member;
mod perf;
mod ports;
mod procs;
mod sim;
mod stack;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Why a command failed, with its exit status: 2 for a command line or configuration that cannot
/// work (fix it and run again), 1 for anything else. `member`, `sim` and `stack` said 2 for the
/// first and `chat`, `kv` and `perf` 1 (a review's finding): a script could not tell a typo from
/// a failure.
pub(crate) struct Failure {
    status: u8,
    message: String,
}

impl Failure {
    /// A usage or configuration error (status 2).
    pub(crate) fn usage(message: impl Into<String>) -> Failure {
        Failure { status: 2, message: message.into() }
    }

    /// Reports the failure as `who`'s on stderr and gives its status.
    pub(crate) fn exit(self, who: &str) -> ExitCode {
        note!("{who}: {}", self.message);
        ExitCode::from(self.status)
    }
}

impl From<String> for Failure {
    fn from(message: String) -> Failure {
        Failure { status: 1, message }
    }
}

impl From<&str> for Failure {
    fn from(message: &str) -> Failure {
        Failure::from(message.to_string())
    }
}

/// A runtime's refusal: a setting it refuses (`Config`, `Stack`) is a configuration error
/// (status 2), as `member` has always had it; a socket that cannot be made, or a loop that
/// failed, is not.
impl From<motet_runtime::Error> for Failure {
    fn from(error: motet_runtime::Error) -> Failure {
        let status = match error {
            motet_runtime::Error::Config(_) | motet_runtime::Error::Stack(_) => 2,
            _ => 1,
        };
        Failure { status, message: error.to_string() }
    }
}

/// Checks a `--stack` value as the runtime's join will (it parses, and the runtime can run it),
/// with the flag in the error (`--stack totl: unknown property or preset ...`): before a command
/// starts anything (`perf throughput` started its peer processes first, and each printed the
/// error again).
pub(crate) fn check_stack_flag(spec: &str) -> Result<(), String> {
    // The error's own kind (`stack: `, `configuration: `) left out: the flag says what it is.
    motet_runtime::GroupConfig::new("check").stack(spec).validate().map_err(|error| match error {
        motet_runtime::Error::Stack(error) => format!("--stack {spec}: {error}"),
        motet_runtime::Error::Config(message) => format!("--stack {spec}: {message}"),
        other => format!("--stack {spec}: {other}"),
    })
}

/// Motet: group communication with composable micro-protocol layers.
#[derive(Parser)]
#[command(name = "motet", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the deterministic simulator over one seed or a range of seeds and check the guarantees.
    Sim(sim::SimArgs),
    /// Three member processes over UDP on loopback: merge, messages, a kill and a rejoin, told as
    /// a story with the verdict (`--sim`: the simulated version).
    Demo(demo::DemoArgs),
    /// Chat over a group, like Ensemble's mtalk: no set-up needed on one machine.
    Chat(chat::ChatArgs),
    /// One group member as a process over UDP: stdin lines are cast, events are printed.
    Member(member::MemberArgs),
    /// A replicated key-value store (total order + state transfer): stdin `set KEY VALUE`, `del
    /// KEY`, and `digest`, which prints the local replica's digest at once (updates cast and not
    /// yet delivered here are not in it).
    Kv(kv::KvArgs),
    /// Measure latency and throughput between member processes over loopback, against raw UDP.
    Perf {
        #[command(subcommand)]
        command: perf::PerfCommand,
    },
    /// Measure the protocol core in process (no I/O): layered path, bypass, hand-written yardstick.
    Bench {
        #[command(subcommand)]
        command: bench::BenchCommand,
    },
    /// Inspect stack specifications.
    Stack {
        #[command(subcommand)]
        command: stack::StackCommand,
    },
}

fn main() -> ExitCode {
    quiet_on_closed_stdout();
    // The commands that stay members handle SIGTERM, SIGINT and SIGHUP (a leave, status 0; SIGHUP
    // not where it was inherited ignored) from the first
    // thing the process does, before parsing its arguments and setting up its logging: a
    // supervisor's SIGTERM right after the spawn took the default action there (status 143, and
    // a member the others had to suspect). The commands take this flag
    // (`member::stop_on_signals`); an error registering is theirs to report.
    if matches!(std::env::args_os().nth(1).as_deref().and_then(|a| a.to_str()), Some("member" | "chat" | "kv")) {
        let _ = member::stop_on_signals();
    }
    let cli = Cli::parse();
    // Diagnostics go to stderr, filtered by RUST_LOG (default: warnings only), so stdout stays
    // the machine-readable contract. The simulator's and the benchmarks' members are not this
    // process's: their protocol reports stay off unless RUST_LOG asks for them (a simulated run
    // has its own trace and diagram, in virtual time).
    let default = match cli.command {
        Command::Sim(_) | Command::Bench { .. } => "warn,motet_core=off",
        _ => "warn",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default)),
        )
        .with_writer(std::io::stderr)
        // Colours only on a terminal: a log redirected to a file or a pipe (a service manager's)
        // carried escape codes (a review's finding).
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match cli.command {
        Command::Sim(args) => sim::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Stack { command } => stack::run(command),
        Command::Member(args) => member::run(args),
        Command::Chat(args) => chat::run(args),
        Command::Kv(args) => kv::run(args),
        Command::Perf { command } => perf::run(command),
        Command::Bench { command } => bench::run(command),
    }
}

/// A reader that closes the standard output early (`motet sim ... | head`) ends the command
/// quietly with the status a Unix tool killed by `SIGPIPE` has (141), as `grep` or `cat` would.
/// Rust ignores `SIGPIPE`, so `println!` would otherwise panic and print a backtrace. Any other
/// failure to write the output ends it with one line and status 1.
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message =
            payload.downcast_ref::<String>().map(String::as_str).or_else(|| payload.downcast_ref::<&str>().copied());
        match message {
            Some(m) if m.starts_with("failed printing to stdout") && m.contains("Broken pipe") => {
                std::process::exit(141)
            }
            // Any other failure to write the output (a full disk, `> /dev/full`): one line, not a
            // panic's report.
            Some(m) if m.starts_with("failed printing to stdout") => {
                eprintln!("motet: cannot write the output: {}", m.trim_start_matches("failed printing to stdout: "));
                std::process::exit(1);
            }
            _ => {}
        }
        default(info);
    }));
}
