//! `motet member` child processes, driven through their stdin and read through their JSON
//! stdout (for `motet demo`; the multi-process test has its own copy, being outside the crate).

// Real processes: wall-clock waits and a reader thread per child.
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

use motet_sim::logcheck::{LogEvent, MemberLog};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One `motet member --json` process.
pub(crate) struct MemberProcess {
    pub(crate) name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Arc<Mutex<Vec<String>>>,
    sent: Vec<String>,
    pub(crate) killed: bool,
}

impl MemberProcess {
    pub(crate) fn spawn(name: &str, group: &str, port: u16, peers: &str) -> Result<MemberProcess, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let bind = format!("127.0.0.1:{port}");
        let parent = std::process::id().to_string();
        let mut child = Command::new(exe)
            // Nothing left running if this process ends without dropping its members (killed, or
            // ended by a closed stdout), even while a member starts (it is told this process's
            // id, and the kernel tells it of this thread's end: members are spawned from the
            // main thread).
            .args(["member", "--group", group, "--bind", &bind, "--peers", peers, "--json"])
            .args(["--exit-with-parent", "--parent-pid", &parent])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("starting a member process: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(mut lines) = sink.lock() {
                    lines.push(line);
                }
            }
        });
        let stdin = child.stdin.take();
        Ok(MemberProcess { name: name.to_string(), child, stdin, lines, sent: Vec::new(), killed: false })
    }

    pub(crate) fn cast(&mut self, line: String) -> Result<(), String> {
        let stdin = self.stdin.as_mut().ok_or("stdin closed")?;
        writeln!(stdin, "{line}").map_err(|e| format!("{}: {e}", self.name))?;
        self.sent.push(line);
        Ok(())
    }

    pub(crate) fn log(&self) -> MemberLog {
        let events = self.lines.lock().map(|l| l.iter().filter_map(|l| LogEvent::parse(l).ok().flatten()).collect());
        MemberLog {
            name: self.name.clone(),
            events: events.unwrap_or_default(),
            sent: self.sent.clone(),
            sends: Vec::new(),
            killed: self.killed,
        }
    }

    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.killed = true;
    }

    /// SIGTERM, then waits for the exit (true when it exited 0 within `limit`).
    pub(crate) fn terminate(&mut self, limit: Duration) -> bool {
        terminate(&mut self.child, limit).is_some_and(|status| status.success())
    }

    /// Casts delivered from `from`.
    pub(crate) fn delivered_from(&self, from: &str) -> usize {
        self.log().events.iter().filter(|e| matches!(e, LogEvent::Cast { from: f, .. } if f == from)).count()
    }
}

impl Drop for MemberProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends `child` SIGTERM and waits up to `limit` for it to exit: its status, or `None` if the
/// signal could not be sent or it is still running.
pub(crate) fn terminate(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    // `kill(2)` itself, not the `kill` program, which slim images may lack.
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).ok()?);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).ok()?;
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => return None,
        }
    }
}

/// The processes all end in one view whose members are exactly their endpoints.
pub(crate) fn one_view_of(procs: &[&MemberProcess]) -> Option<String> {
    let logs: Vec<MemberLog> = procs.iter().map(|p| p.log()).collect();
    let mut endpoints: Vec<&str> = logs.iter().filter_map(|l| l.endpoint()).collect();
    endpoints.sort_unstable();
    let first = logs.first()?.last_view()?.0.to_string();
    let all = logs.iter().all(|l| {
        l.last_view().is_some_and(|(id, members)| {
            let mut members: Vec<&str> = members.iter().map(String::as_str).collect();
            members.sort_unstable();
            id == first && members == endpoints
        })
    });
    (all && endpoints.len() == procs.len()).then_some(first)
}

/// Polls `done` over `procs` until it gives a value; else fails with `what` once `limit` passes,
/// or at once when a member that was not killed has exited. A member whose port was taken after
/// it was found free exits at its start: the demo waited its full 30 s and blamed the merge (a
/// review's finding). The member's own stderr, inherited, says why it exited.
pub(crate) fn wait_on<T>(
    procs: &mut [MemberProcess],
    limit: Duration,
    what: &str,
    mut done: impl FnMut(&[MemberProcess]) -> Option<T>,
) -> Result<T, String> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = done(procs) {
            return Ok(value);
        }
        for p in procs.iter_mut().filter(|p| !p.killed) {
            if let Ok(Some(status)) = p.child.try_wait() {
                return Err(format!("{what}: member {} exited ({status})", p.name));
            }
        }
        if Instant::now() > deadline {
            return Err(format!("{what} within {limit:?}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Free loopback UDP ports, outside the ephemeral range ([`crate::ports::free_ports`]).
pub(crate) fn free_ports(n: usize) -> Result<Vec<u16>, String> {
    crate::ports::free_ports(n).map_err(|e| e.to_string())
}
