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
    let candidates = outside(low, high);
    if candidates.len() < n {
        // Every port is ephemeral (a tuned host): ports the kernel hands out, as before.
        let sockets: Vec<UdpSocket> = (0..n).map(|_| UdpSocket::bind("127.0.0.1:0")).collect::<Result<_, _>>()?;
        return sockets.iter().map(|s| s.local_addr().map(|a| a.port())).collect();
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

/// The unprivileged ports outside the ephemeral range `low..=high`.
fn outside(low: u16, high: u16) -> Vec<u16> {
    let below = 1024..low.max(1024);
    let above = high.checked_add(1).map_or(1..1, |first| first.max(1024)..u16::MAX);
    let top = (high < u16::MAX).then_some(u16::MAX);
    below.chain(above).chain(top).collect()
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

#[cfg(test)]
mod tests {
    #[test]
    fn ports_outside_the_ephemeral_range() {
        let usual = super::outside(32_768, 60_999);
        assert_eq!(usual.len(), (32_768 - 1_024) + (65_535 - 60_999));
        assert!(
            usual.contains(&1_024) && usual.contains(&32_767) && usual.contains(&61_000) && usual.contains(&65_535)
        );
        assert!(!usual.contains(&32_768) && !usual.contains(&60_999) && !usual.contains(&1_023));
        assert!(super::outside(1_024, 65_535).is_empty(), "every unprivileged port is ephemeral");
        assert_eq!(super::outside(2_000, 65_535), (1_024..2_000).collect::<Vec<_>>());
        assert_eq!(super::outside(1_024, 1_024).len(), 65_535 - 1_024);
    }
}
