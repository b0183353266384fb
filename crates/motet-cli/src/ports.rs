//! Loopback UDP ports for processes started later (`motet demo`, the multi-process tests; the
//! tests include this file by path).

use std::net::UdpSocket;

/// `n` UDP ports of 127.0.0.1 that are free now and outside the kernel's ephemeral range
/// (`/proc/sys/net/ipv4/ip_local_port_range`, 32768-60999 by default).
///
/// A port the kernel handed out for `127.0.0.1:0` and that was then released can be handed out
/// again to any socket bound to port 0 before the process meant for it binds it: the members'
/// own sockets for connected sends are such sockets, and a member restarted on its port after a
/// few seconds of traffic found it taken ("Address already in use"). A port outside the range is
/// never handed out that way. The search starts at a random place, so processes looking at once
/// rarely try the same ports, and each port is checked free.
pub fn free_ports(n: usize) -> std::io::Result<Vec<u16>> {
    let (low, high) = ephemeral_range();
    let below = 10_000..low.max(10_000);
    let above = high.saturating_add(1).max(10_000)..=u16::MAX;
    let candidates: Vec<u16> = below.chain(above).collect();
    if candidates.is_empty() {
        return Err(std::io::Error::other("no port outside the ephemeral range"));
    }
    let start = rand::random::<usize>() % candidates.len();
    let ports: Vec<u16> = (0..candidates.len())
        .map(|k| candidates[(start + k) % candidates.len()])
        .filter(|&port| UdpSocket::bind(("127.0.0.1", port)).is_ok())
        .take(n)
        .collect();
    match ports.len() == n {
        true => Ok(ports),
        false => Err(std::io::Error::other(format!("fewer than {n} free ports outside the ephemeral range"))),
    }
}

/// The kernel's ephemeral port range (Linux's default when it cannot be read).
fn ephemeral_range() -> (u16, u16) {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
    let mut bounds = range.split_whitespace().filter_map(|b| b.parse::<u16>().ok());
    match (bounds.next(), bounds.next()) {
        (Some(low), Some(high)) if low <= high => (low, high),
        _ => (32_768, 60_999),
    }
}
