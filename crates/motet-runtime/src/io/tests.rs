use super::*;

/// Receives until `n` datagrams came (bounded: the sender is on loopback).
fn receive(io: &mut UdpIo, n: usize) -> (Vec<Bytes>, Vec<Batch>) {
    let (mut got, mut batches) = (Vec::new(), Vec::new());
    for _ in 0..2_000 {
        match io.recv_batch(|datagram| got.push(datagram)) {
            Ok(batch) => batches.push(batch),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(std::time::Duration::from_millis(1)),
            Err(e) => panic!("receive: {e}"),
        }
        if got.len() >= n {
            break;
        }
    }
    (got, batches)
}

/// Two sockets on loopback, the second with receive offload wanted or not.
fn pair(offload: bool) -> (UdpIo, UdpIo) {
    let localhost = SocketAddr::from(([127, 0, 0, 1], 0));
    (UdpIo::bind(localhost, 1 << 20, true).unwrap(), UdpIo::bind(localhost, 1 << 20, offload).unwrap())
}

#[test]
fn small_and_medium_datagrams_share_chunks_and_stay_intact_and_large_ones_are_whole() {
    let (mut a, mut b) = pair(true);
    let to = b.local_addr().unwrap();
    // 300 datagrams: enough small and medium ones to fill several chunks, and some larger.
    let size = |k: usize| match k {
        k if k % 7 == 0 => MEDIUM + 100,
        k if k % 3 == 0 => SMALL + 100 + k,
        k => 20 + k % 200,
    };
    let sent: Vec<Vec<u8>> = (0..300usize).map(|k| vec![k as u8; size(k)]).collect();
    let mut got = Vec::new();
    for (k, datagram) in sent.iter().enumerate() {
        a.send(to, &[], &Payload::from(datagram.clone())).unwrap();
        if k % 50 == 49 {
            // Receive as we go (the socket buffer is bounded), keeping every datagram.
            got.extend(receive(&mut b, 50).0);
        }
    }
    assert_eq!(got.len(), sent.len());
    for (k, (got, sent)) in got.iter().zip(&sent).enumerate() {
        assert_eq!(&got[..], &sent[..], "datagram {k} intact after later receives");
    }
    // Datagrams of one tier sit side by side in their tier's chunks (no allocation each): the
    // small ones consecutively, the medium ones one after another across the small ones in
    // between. A large one has a buffer of its own.
    let adjacent = |a: &Bytes, b: &Bytes| a.as_ptr().wrapping_add(a.len()) == b.as_ptr();
    let small_pairs: Vec<&[Bytes]> = got.windows(2).filter(|w| w[0].len() <= SMALL && w[1].len() <= SMALL).collect();
    let shared = small_pairs.iter().filter(|w| adjacent(&w[0], &w[1])).count();
    assert!(shared > small_pairs.len() / 2, "small datagrams share chunks: {shared} of {}", small_pairs.len());
    let medium: Vec<&Bytes> = got.iter().filter(|d| (SMALL + 1..=MEDIUM).contains(&d.len())).collect();
    let next_to = medium.windows(2).filter(|w| adjacent(w[0], w[1])).count();
    assert!(next_to > medium.len() / 2, "medium datagrams share chunks: {next_to} of {}", medium.len());
    for (k, d) in got.iter().enumerate().filter(|(_, d)| d.len() > MEDIUM) {
        assert!(got.iter().all(|other| !adjacent(other, d) && !adjacent(d, other)), "datagram {k} has its own buffer");
    }
}

/// Receives one datagram on a plain socket, with the address it came from.
fn receive_from(socket: &std::net::UdpSocket) -> (Vec<u8>, SocketAddr) {
    socket.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = vec![0; 2048];
    let (n, from) = socket.recv_from(&mut buf).expect("a datagram within 5 s");
    (buf[..n].to_vec(), from)
}

/// An empty datagram reaches the caller (which counts it as malformed), not nothing.
#[test]
fn an_empty_datagram_is_handed_over() {
    let (a, mut b) = pair(false);
    let to = b.local_addr().unwrap();
    let sender = std::net::UdpSocket::bind(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    sender.send_to(&[], to).unwrap();
    sender.send_to(&[1, 2, 3], to).unwrap();
    let (got, _) = receive(&mut b, 2);
    assert_eq!(got, vec![Bytes::new(), Bytes::from_static(&[1, 2, 3])]);
    drop(a);
}

#[test]
fn connected_sends_leave_from_a_socket_per_destination_and_a_full_table_uses_the_shared_one() {
    let localhost = SocketAddr::from(([127, 0, 0, 1], 0));
    let mut a = UdpIo::bind(localhost, 1 << 20, true).unwrap();
    a.connect_sends(a.local_addr().unwrap(), 1 << 20);
    a.connected().unwrap().set_limit(2);
    let own = a.local_addr().unwrap();
    let peers: Vec<std::net::UdpSocket> = (0..3).map(|_| std::net::UdpSocket::bind(localhost).unwrap()).collect();
    let send = |a: &mut UdpIo, k: usize, tag: u8| {
        a.send(peers[k].local_addr().unwrap(), &[tag, k as u8], &Payload::from(vec![7u8; 10])).unwrap();
        let (data, from) = receive_from(&peers[k]);
        assert_eq!((data[..2].to_vec(), data.len()), (vec![tag, k as u8], 12), "head and payload, whole");
        assert_eq!(from.ip(), own.ip());
        from.port()
    };
    // Two destinations fill the table: each gets a socket of its own, on another port.
    let (p0, p1) = (send(&mut a, 0, 1), send(&mut a, 1, 1));
    assert!(p0 != own.port() && p1 != own.port() && p0 != p1);
    assert_eq!((send(&mut a, 0, 2), send(&mut a, 1, 2)), (p0, p1), "and keeps it");
    // A third, while both are in use, sends from the shared socket (no thrashing).
    assert_eq!(a.connected_stats(), (2, 0));
    assert_eq!(send(&mut a, 2, 3), own.port());
    assert_eq!(a.connected().unwrap().len(), 2);
    assert_eq!(a.connected_stats(), (2, 1), "counted as a fallback");
    // Once one has been idle long enough, the third takes its place.
    for _ in 0..crate::connected::IDLE_EVICT {
        a.send(peers[0].local_addr().unwrap(), b"busy", &Payload::new()).unwrap();
    }
    let p2 = send(&mut a, 2, 4);
    assert!(p2 != own.port() && p2 != p0, "a socket of its own: {p2}");
    assert_eq!(a.connected().unwrap().len(), 2);
    // A large payload goes scatter-gather, through the connected socket too.
    let big = Payload::from(vec![9u8; MEDIUM + 10]);
    a.send(peers[2].local_addr().unwrap(), b"h", &big).unwrap();
    let (data, from) = receive_from(&peers[2]);
    assert_eq!((data.len(), from.port()), (1 + MEDIUM + 10, p2));
}

#[test]
fn a_failed_connected_send_closes_the_socket_unless_it_reported_an_icmp_error() {
    let localhost = SocketAddr::from(([127, 0, 0, 1], 0));
    let mut connected = Connected::new(localhost, 1 << 16);
    let to = SocketAddr::from(([127, 0, 0, 1], 9));
    assert!(connected.get(to).is_some());
    let refused = io::Error::from_raw_os_error(nix::errno::Errno::ECONNREFUSED as i32);
    connected.failed(to, &refused);
    assert_eq!(connected.len(), 1, "an ICMP report is consumed; the socket stays");
    let gone = io::Error::from_raw_os_error(nix::errno::Errno::EPERM as i32);
    connected.failed(to, &gone);
    assert_eq!(connected.open(), 0, "anything else closes it");
    // An error that lasts (a firewall's) does not make a socket per datagram: the shared socket
    // sends until a new one is tried.
    for _ in 1..crate::connected::RETRY_AFTER {
        assert!(connected.get(to).is_none(), "the shared socket sends for a while");
    }
    assert!(connected.get(to).is_some(), "then a new socket is tried");
    assert_eq!(connected.fallbacks(), 2 + crate::connected::RETRY_AFTER - 1);
}

#[test]
fn a_closed_socket_leaves_the_other_destinations_theirs() {
    // A destination whose socket failed keeps its slot (without a socket, for a while): the
    // others are found with the sockets they had (no second socket, no fallback). How a removed
    // slot's hole is filled is `slots.rs`'s test.
    let localhost = SocketAddr::from(([127, 0, 0, 1], 0));
    let mut connected = Connected::new(localhost, 1 << 16);
    let to: Vec<SocketAddr> = (9..12).map(|port| SocketAddr::from(([127, 0, 0, 1], port))).collect();
    let port =
        |c: &mut Connected, k: usize| c.get(to[k]).expect("a socket").local_addr().unwrap().as_socket().unwrap().port();
    let before: Vec<u16> = (0..3).map(|k| port(&mut connected, k)).collect();
    let gone = io::Error::from_raw_os_error(nix::errno::Errno::EADDRNOTAVAIL as i32);
    connected.failed(to[0], &gone);
    assert_eq!((connected.len(), connected.open()), (3, 2));
    assert_eq!(
        (port(&mut connected, 2), port(&mut connected, 1), port(&mut connected, 2)),
        (before[2], before[1], before[2])
    );
    assert_eq!(connected.len(), 3, "found, not made again");
    assert_eq!(connected.fallbacks(), 1, "only the failed send fell back");
}

#[test]
fn a_connected_send_to_a_member_that_stopped_and_came_back_gets_through() {
    let localhost = SocketAddr::from(([127, 0, 0, 1], 0));
    let mut a = UdpIo::bind(localhost, 1 << 20, true).unwrap();
    a.connect_sends(a.local_addr().unwrap(), 1 << 20);
    let peer = std::net::UdpSocket::bind(localhost).unwrap();
    let to = peer.local_addr().unwrap();
    a.send(to, b"1", &Payload::new()).unwrap();
    assert_eq!(receive_from(&peer).0, b"1");
    drop(peer);
    // The port is closed: each datagram draws an ICMP refusal, which the connected socket
    // reports on the next send, failing it; the shared socket sends that one instead.
    let plain = std::net::UdpSocket::bind(localhost).unwrap();
    plain.connect(to).unwrap();
    let refused = (0..3).any(|_| plain.send(b"lost").is_err_and(|e| crate::connected::is_reported_icmp(&e)));
    assert!(refused, "a plain connected socket reports the refusal (what the fallback is for)");
    for _ in 0..5 {
        a.send(to, b"lost", &Payload::new()).unwrap();
    }
    // Each refusal the connected socket reported sent that datagram from the shared socket.
    let (open, fallbacks) = a.connected_stats();
    assert_eq!(open, 1, "an ICMP report keeps the socket");
    assert!((1..=5).contains(&fallbacks), "fell back {fallbacks} times");
    // The member restarts on the same port: the next datagram arrives.
    let Ok(peer) = std::net::UdpSocket::bind(to) else {
        skipped!("io test: port {} was taken meanwhile; the restart is not tested", to.port());
        return;
    };
    a.send(to, b"2", &Payload::new()).unwrap();
    assert_eq!(receive_from(&peer).0, b"2");
}

#[test]
fn multicast_destinations_use_the_shared_socket() {
    let mut a = UdpIo::bind(SocketAddr::from(([127, 0, 0, 1], 0)), 1 << 20, true).unwrap();
    a.connect_sends(a.local_addr().unwrap(), 1 << 20);
    let connected = a.connected().unwrap();
    assert!(connected.get(SocketAddr::from(([239, 255, 77, 1], 7000))).is_none());
    assert!(connected.get("[::1]:7000".parse().unwrap()).is_none(), "the other address family");
    assert!(connected.get(SocketAddr::from(([127, 0, 0, 1], 7000))).is_some());
}

#[test]
fn a_batch_that_is_not_full_says_the_socket_is_drained() {
    let (mut a, mut b) = pair(true);
    let to = b.local_addr().unwrap();
    a.send(to, b"x", &Payload::new()).unwrap();
    let (got, batches) = receive(&mut b, 1);
    assert_eq!(got.len(), 1);
    assert!(batches.last().is_some_and(|batch| batch.drained && batch.datagrams == 1), "{batches:?}");
    // Quiet now: the next call offers a small batch; a full one makes the one after offer all.
    assert_eq!(b.batch, QUIET_BATCH);
    // Growing sizes: receive offload (GRO) never merges them into one slot.
    for k in 1..=QUIET_BATCH {
        a.send(to, &vec![b'y'; k], &Payload::new()).unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(20));
    let batch = b.recv_batch(|_| {}).unwrap();
    assert_eq!((batch.datagrams, batch.drained), (QUIET_BATCH, false), "full: maybe more waiting");
    assert_eq!(b.batch, BATCH_SIZE);
}

/// Two sockets on loopback, segmentation offload at the first and receive offload on at the
/// second (made busy), and the second's address; `None`, said, where the kernel has neither.
fn offloading_pair() -> Option<(UdpIo, UdpIo, SocketAddr)> {
    let (mut a, mut b) = pair(true);
    if a.max_segments() == 1 || !gro_supported() {
        skipped!("io test: this kernel has no UDP segmentation or receive offload; runs are not tested");
        return None;
    }
    let to = b.local_addr().unwrap();
    make_busy(&mut a, &mut b);
    Some((a, b, to))
}

/// A run sent with segmentation offload arrives as one coalesced buffer and is split at its
/// segment size, also when the same headers just took datagrams that were not runs (the
/// kernel then shortened their control-buffer lengths: a reused header would have lost the
/// segment size and handed the run over as one datagram).
#[test]
fn coalesced_runs_are_split_after_single_datagrams_in_batches_and_waits() {
    let Some((mut a, mut b, to)) = offloading_pair() else { return };
    let run = |round: u8| -> Vec<u8> { (0..5).flat_map(|k| vec![round * 10 + k; 100]).collect() };
    for round in 0..4u8 {
        // Single datagrams first, in every slot the batch offers.
        for k in 0..BATCH_SIZE {
            a.send(to, &[round, k as u8], &Payload::new()).unwrap();
        }
        let (singles, _) = receive(&mut b, BATCH_SIZE);
        assert!(singles.iter().all(|d| d.len() == 2), "round {round}");
        // Then a run of five 100-byte datagrams, as one send.
        let contents = run(round);
        if a.send_segments(to, &contents, 100).is_err() {
            assert_eq!(a.max_segments(), 1, "a refusal turns offload off");
            skipped!("io test: segmentation offload refused at round {round}; runs split in {round} rounds only");
            return;
        }
        let got = if round % 2 == 0 {
            receive(&mut b, 5).0
        } else {
            let mut got = Vec::new();
            b.recv_wait(Some(Duration::from_secs(5)), |d| got.push(d)).unwrap();
            got
        };
        let expected: Vec<Vec<u8>> = contents.chunks(100).map(<[u8]>::to_vec).collect();
        assert_eq!(got.iter().map(|d| d.to_vec()).collect::<Vec<_>>(), expected, "round {round}");
    }
}

/// A coalesced run whose segment size does not fit the control buffer (`MSG_CTRUNC`; the buffer
/// has room for it, so here it is taken away) is dropped and counted, not handed over as one
/// message with its neighbours' bytes in it; with the room back, the next run is split again.
#[test]
fn a_run_whose_control_message_was_cut_short_is_dropped_and_counted() {
    let Some((mut a, mut b, to)) = offloading_pair() else { return };
    let contents: Vec<u8> = (0..5u8).flat_map(|k| vec![k; 100]).collect();
    let room = std::mem::take(&mut b.control);
    a.send_segments(to, &contents, 100).unwrap();
    let mut got = Vec::new();
    let batch = b.recv_wait(Some(Duration::from_secs(5)), |d| got.push(d)).unwrap();
    assert!(got.is_empty(), "nothing handed over: {} buffers", got.len());
    assert_eq!((batch.datagrams, batch.truncated), (0, 1));
    b.control = room;
    a.send_segments(to, &contents, 100).unwrap();
    let batch = b.recv_wait(Some(Duration::from_secs(5)), |d| got.push(d)).unwrap();
    assert_eq!((batch.datagrams, batch.truncated), (5, 0));
    assert!(got.iter().all(|d| d.len() == 100), "split into its datagrams");

    // The same in a batch read (`recvmmsg`): headers without control room, then made again.
    let offered = b.batch.min(b.slots.len());
    HEADERS.with(|h| {
        h.borrow_mut()[1] =
            Headers { headers: Some(MultiHeaders::preallocate(offered, None)), slots: offered, stale: false }
    });
    a.send_segments(to, &contents, 100).unwrap();
    std::thread::sleep(Duration::from_millis(5));
    got.clear();
    let batch = b.recv_batch(|d| got.push(d)).unwrap();
    assert_eq!((got.len(), batch.datagrams, batch.truncated), (0, 0, 1), "dropped in a batch too");
    a.send_segments(to, &contents, 100).unwrap();
    let (got, _) = receive(&mut b, 5);
    assert!(got.len() == 5 && got.iter().all(|d| d.len() == 100), "split again");
}

/// On a path whose packets are smaller than the segments (an MTU of 1500, segments of 2000
/// bytes), the kernel refuses the segmented send (`EMSGSIZE` here); the caller then sends the
/// datagrams one per call, and offload stays on for segments that fit. Before, the refusal
/// dropped the run (or, as `EINVAL`, turned offload off for good). It needs a network
/// namespace of its own, where the loopback device gets that MTU: root.
#[test]
#[allow(clippy::disallowed_methods)] // a thread of its own moves to a network namespace
fn segments_larger_than_the_path_fall_back_without_turning_offload_off() {
    let tried = std::thread::spawn(|| {
        // This thread alone moves to a namespace of its own, and the `ip` it runs with it.
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).ok()?;
        let up = std::process::Command::new("ip").args(["link", "set", "lo", "up", "mtu", "1500"]).status();
        if !up.is_ok_and(|s| s.success()) {
            return None;
        }
        let localhost = SocketAddr::from(([127, 0, 0, 1], 0));
        let (mut a, b) =
            (UdpIo::bind(localhost, 1 << 20, false).unwrap(), UdpIo::bind(localhost, 1 << 20, false).unwrap());
        if a.max_segments() == 1 {
            return None;
        }
        let to = b.local_addr().unwrap();
        let refused = a.send_segments(to, &[1u8; 4000], 2000).expect_err("segments over the MTU");
        assert_eq!((a.max_segments(), a.segment_max()), (GSO_SEGMENTS, 1999), "{refused}");
        assert_eq!(
            a.send_segments(to, &[1u8; 4000], 2000).unwrap_err().kind(),
            io::ErrorKind::InvalidInput,
            "not tried again"
        );
        a.send_segments(to, &[2u8; 2800], 1400).expect("segments that fit still go in one call");
        // A path under Ethernet's MTU (VXLAN's 1450): full bundles (1,452 bytes) are refused by
        // the path, not by the offload, which stays on for what fits. Before, the refusal
        // (`EMSGSIZE`) changed nothing, and the event loop dropped every such run.
        let lower = std::process::Command::new("ip").args(["link", "set", "lo", "mtu", "1450"]).status();
        assert!(lower.is_ok_and(|s| s.success()));
        let below = a.send_segments(to, &[3u8; 2904], 1452).expect_err("segments over a 1450 MTU");
        assert_eq!((a.max_segments(), a.segment_max()), (GSO_SEGMENTS, 1451), "{below}");
        a.send_segments(to, &[4u8; 2844], 1422).expect("segments that fit a 1450 MTU");
        Some(refused)
    });
    match tried.join().unwrap() {
        None => skipped!(
            "io test: skipped: a network namespace of its own needs root (and `ip`, and a kernel with UDP_SEGMENT)"
        ),
        Some(refused) => assert!(
            matches!(refused.raw_os_error(), Some(e) if e == nix::errno::Errno::EMSGSIZE as i32 || e == nix::errno::Errno::EINVAL as i32),
            "{refused}"
        ),
    }
}

/// Whether this kernel has receive offload (`UDP_GRO`, Linux 5.0 on): set on a throwaway
/// socket.
fn gro_supported() -> bool {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sock::setsockopt(&socket.as_fd(), sock::sockopt::UdpGroSegment, &true).is_ok()
}

/// Sends `b` five datagrams at a time from `a`, [`OFFLOAD_AFTER`] times, each time reading
/// until the socket is drained: a full quiet batch of four, then a read of one that goes on
/// with the same drain (no reason to start the count again). That turns on the receive
/// offload `b` wants.
fn make_busy(a: &mut UdpIo, b: &mut UdpIo) {
    let to = b.local_addr().unwrap();
    for round in 0..OFFLOAD_AFTER {
        assert!(!b.offload_on(), "on after {round} busy drains");
        b.batch = QUIET_BATCH;
        for k in 0..=QUIET_BATCH {
            a.send(to, &[k as u8], &Payload::new()).unwrap();
        }
        std::thread::sleep(Duration::from_millis(5));
        let (first, second) = (b.recv_batch(|_| {}).unwrap(), b.recv_batch(|_| {}).unwrap());
        assert_eq!((first.datagrams, second.datagrams), (QUIET_BATCH, 1), "the datagrams sent are queued");
    }
    assert!(b.offload_on(), "busy drains in a row turn wanted offload on");
}

/// Wanted receive offload stays off while the socket is quiet, so that single reads are the
/// cheaper `recv`: a run that arrives meanwhile is split by the kernel, and reads whole.
/// Busy reads that are not in a row leave it off; enough in a row turn it on, for good.
#[test]
fn wanted_receive_offload_goes_on_when_reads_keep_finding_more_queued() {
    if !gro_supported() {
        skipped!("io test: this kernel has no UDP receive offload (UDP_GRO); not tested");
        return;
    }
    let (mut a, mut b) = pair(true);
    let to = b.local_addr().unwrap();
    assert!(!b.offload_on(), "off until the socket is busy");
    let contents: Vec<u8> = (0..5).flat_map(|k| vec![k; 100]).collect();
    if a.max_segments() == 1 || a.send_segments(to, &contents, 100).is_err() {
        contents.chunks(100).for_each(|d| a.send(to, d, &Payload::new()).unwrap());
    }
    let mut got = Vec::new();
    for _ in 0..5 {
        b.recv_wait(Some(Duration::from_secs(5)), |d| got.push(d.to_vec())).unwrap();
    }
    assert_eq!(got, contents.chunks(100).map(<[u8]>::to_vec).collect::<Vec<_>>(), "split on arrival");
    // A batch of one that starts a drain starts the count again.
    for _ in 0..2 * OFFLOAD_AFTER {
        b.count_read(2);
        assert_eq!(receive_after(&mut a, &mut b, 1).0, 1);
    }
    assert!(!b.offload_on(), "a read of one starts the count again");
    // So does an empty read.
    for _ in 0..2 * OFFLOAD_AFTER {
        b.count_read(2);
        b.batch = QUIET_BATCH;
        let empty = b.recv_batch(|_| panic!("nothing was sent"));
        assert_eq!(empty.map(|_| ()).unwrap_err().kind(), io::ErrorKind::WouldBlock);
    }
    assert!(!b.offload_on(), "an empty read starts the count again");
    make_busy(&mut a, &mut b);
    let (_, batches) = receive_after(&mut a, &mut b, 1);
    assert!(batches.iter().all(|batch| batch.drained), "{batches:?}");
    assert!(b.offload_on(), "it stays on when the socket is quiet again");
}

/// A busy-polling loop's spins switch to batch reads after two found a datagram; such a batch
/// read that finds one datagram is not the rest of a full batch, and starts the count again: a
/// busy read now and then among spins that find one datagram at a time does not turn wanted
/// offload on. (The count once took the spins' switch to the full batch size for a drain that
/// goes on: a few busy reads at any time, a view change's, turned offload on for good.) A round
/// whose datagrams were not all queued in time (a loaded machine) reads what came and is not
/// counted; at least [`OFFLOAD_AFTER`] rounds must go as planned.
#[test]
fn busy_polling_spins_that_find_one_datagram_at_a_time_leave_wanted_offload_off() {
    let (mut a, mut b) = pair(true);
    let to = b.local_addr().unwrap();
    let mut planned = 0;
    for round in 0..4 * OFFLOAD_AFTER {
        // A busy read: two datagrams queued, one quiet batch.
        b.batch = QUIET_BATCH;
        a.send(to, &[1], &Payload::new()).unwrap();
        a.send(to, &[2], &Payload::new()).unwrap();
        std::thread::sleep(Duration::from_millis(10));
        let mut as_planned = b.recv_batch(|_| {}).is_ok_and(|read| read.datagrams == 2);
        // Spins: one datagram each, the third read a batch after the switch.
        b.spin_found = false;
        for k in 0..3u8 {
            a.send(to, &[k], &Payload::new()).unwrap();
            std::thread::sleep(Duration::from_millis(5));
            as_planned &= b.recv_spin(|_| {}).is_ok_and(|read| read.datagrams == 1);
        }
        if !as_planned {
            // Whatever came late, read before the next round.
            std::thread::sleep(Duration::from_millis(20));
            while b.recv_batch(|_| {}).is_ok() {}
        }
        planned += u32::from(as_planned);
        // Still wanted, the count not reached: on any kernel (on one without `UDP_GRO`,
        // `offload_on` stays false whatever the count does).
        assert!(b.offload_pending(), "counted out after {round} rounds of spins that found one datagram at a time");
        assert!(!b.offload_on(), "on after {round} rounds of spins that found one datagram at a time");
        if planned > OFFLOAD_AFTER {
            return;
        }
    }
    panic!("only {planned} rounds went as planned");
}

/// Sends `n` one-byte datagrams from `a` to `b` and reads them, starting a drain with a quiet
/// batch: how many it read, and the batches.
fn receive_after(a: &mut UdpIo, b: &mut UdpIo, n: usize) -> (usize, Vec<Batch>) {
    let to = b.local_addr().unwrap();
    b.batch = QUIET_BATCH;
    for k in 0..n {
        a.send(to, &[k as u8], &Payload::new()).unwrap();
    }
    std::thread::sleep(Duration::from_millis(20));
    let (got, batches) = receive(b, n);
    (got.len(), batches)
}

/// Without receive offload the kernel splits a run on arrival, and the single reads (`recv`,
/// not `recvmsg`) of a busy-polling spin and of a wait, and a batch, each get its datagrams
/// whole and in order.
#[test]
fn without_receive_offload_runs_arrive_as_their_datagrams_in_spins_waits_and_batches() {
    let (mut a, mut b) = pair(false);
    assert!(!b.offload);
    let to = b.local_addr().unwrap();
    for round in 0..3u8 {
        let contents: Vec<u8> = (0..5).flat_map(|k| vec![round * 10 + k; 100]).collect();
        if a.max_segments() == 1 || a.send_segments(to, &contents, 100).is_err() {
            // No segmentation offload here: the same datagrams one by one.
            contents.chunks(100).for_each(|d| a.send(to, d, &Payload::new()).unwrap());
        }
        a.send(to, b"single", &Payload::new()).unwrap();
        let mut got: Vec<Bytes> = Vec::new();
        for _ in 0..2_000 {
            let each = |d| got.push(d);
            let read = match round {
                0 => b.recv_spin(each),
                1 => b.recv_wait(Some(Duration::from_secs(5)), each),
                _ => b.recv_batch(each),
            };
            match read {
                Ok(batch) => assert!(round != 1 || batch.datagrams == 1, "a wait reads one datagram"),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(1)),
                Err(e) => panic!("receive: {e}"),
            }
            if got.len() >= 6 {
                break;
            }
        }
        let mut expected: Vec<Vec<u8>> = contents.chunks(100).map(<[u8]>::to_vec).collect();
        expected.push(b"single".to_vec());
        assert_eq!(got.iter().map(|d| d.to_vec()).collect::<Vec<_>>(), expected, "round {round}");
    }
}

#[test]
fn a_wait_in_the_receive_call_returns_a_datagram_or_runs_out() {
    let (mut a, mut b) = pair(true);
    let to = b.local_addr().unwrap();
    let clock = crate::clock::Clock::new();
    let started = clock.now();
    let ran_out = b.recv_wait(Some(Duration::from_millis(20)), |_| panic!("nothing was sent"));
    assert_eq!(ran_out.map(|_| ()).unwrap_err().kind(), io::ErrorKind::WouldBlock);
    assert!(crate::clock::between(started, clock.now()) >= Duration::from_millis(20), "it waited");
    a.send(to, b"hello", &Payload::new()).unwrap();
    let mut got = Vec::new();
    let batch = b.recv_wait(Some(Duration::from_secs(5)), |d| got.push(d)).unwrap();
    assert_eq!((batch.datagrams, got), (1, vec![Bytes::from_static(b"hello")]));
    // Reads that must not wait still do not, whatever the timeout: the socket is drained.
    let empty = b.recv_batch(|_| panic!("nothing left"));
    assert_eq!(empty.map(|_| ()).unwrap_err().kind(), io::ErrorKind::WouldBlock);
}
