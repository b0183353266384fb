#![allow(clippy::disallowed_types)] // a test of real time: it waits on the wall clock
//! Event loops over real UDP on loopback, driven on the test's own thread as `motet perf` drives
//! them, and the loop's waiting and spinning: sleeping when idle, busy-polling (and yielding when
//! a spin finds nothing), waiting in the receive call, receive offload. The threaded runtime's
//! tests are in `loopback.rs` and `backpressure.rs`.

/// Said on the real standard error: libtest captures `eprintln!` and shows it only for a failing
/// test, so a skip said with it was seen by nobody.
macro_rules! skipped {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

use motet_runtime::{EndpointId, Event, EventLoop, GroupConfig, Runtime, RuntimeConfig};
use std::time::{Duration, Instant};

/// `n` event loops on loopback, each joined to `group` with the earlier ones as its seeds.
fn joined(n: usize, config: impl Fn() -> RuntimeConfig, group: &str) -> Vec<(EventLoop, EndpointId)> {
    let mut loops: Vec<(EventLoop, EndpointId)> = Vec::new();
    for _ in 0..n {
        let mut event_loop = EventLoop::new(config()).unwrap();
        let peers: Vec<String> = loops.iter().map(|(l, _)| l.local_addr().to_string()).collect();
        let me = event_loop.join(&GroupConfig::new(group).peers(peers)).unwrap();
        loops.push((event_loop, me));
    }
    loops
}

#[test]
fn an_idle_loop_sleeps_instead_of_spinning() {
    let mut event_loop = motet_runtime::EventLoop::new(RuntimeConfig::default()).unwrap();
    event_loop.join(&GroupConfig::new("idle")).unwrap();
    let deadline = Instant::now() + Duration::from_millis(500);
    while Instant::now() < deadline {
        event_loop.poll(Some(Duration::from_millis(50))).unwrap();
    }
    // Alone, the member's timers (heartbeats, gossip) wake it a few times per 100 ms; a loop
    // that does not sleep turns hundreds of thousands of times.
    let turns = event_loop.runtime_stats().turns;
    assert!(turns < 200, "{turns} turns in 500 ms");
}

/// Two event loops driven on this thread (as `motet perf` drives them): round trips and bursts
/// of casts, with both loops busy-polling (a spin reads one datagram; two in a row switch to
/// batches) and with both waiting in the receive call (one `recvmsg` per wait). Every cast
/// arrives, in order, the waiting loops did wait in the receive call, and the busy-polling ones
/// yielded their CPU after empty spins.
#[test]
fn event_loops_busy_polling_or_waiting_in_the_receive_call_deliver_everything() {
    for busy_poll in [true, false] {
        let mut loops = joined(2, || RuntimeConfig::default().busy_poll(busy_poll), "direct");
        // Turns, alternating, until `done` says so (bounded by the clock). A turn of a loop that
        // is not busy-polling may wait in the receive call (up to the 20 ms bound, less the
        // kernel's overshoot) for what the other loop has not sent yet.
        let bound = Duration::from_millis(20);
        let turns = |loops: &mut Vec<(EventLoop, EndpointId)>,
                     got: &mut Vec<Vec<u32>>,
                     done: &dyn Fn(&[Vec<u32>]) -> bool| {
            let deadline = Instant::now() + Duration::from_secs(60);
            while !done(got) {
                assert!(Instant::now() < deadline, "busy_poll {busy_poll}: stuck with {got:?}");
                for (k, (event_loop, _)) in loops.iter_mut().enumerate() {
                    event_loop.poll(Some(bound)).unwrap();
                    while let Some((_, event)) = event_loop.next_event() {
                        match event {
                            Event::Cast { data, .. } => got[k].push(u32::from_le_bytes(data[..4].try_into().unwrap())),
                            Event::View(view) => got[k].retain(|_| view.members.len() == 2),
                            _ => {}
                        }
                    }
                }
            }
        };
        let mut got = vec![Vec::new(), Vec::new()];
        // The first view of both is reported as one cast-free round: wait for the merge.
        let merged = |loops: &Vec<(EventLoop, EndpointId)>| {
            loops.iter().all(|(l, me)| l.view(*me).is_some_and(|v| v.members.len() == 2))
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !merged(&loops) {
            assert!(Instant::now() < deadline, "busy_poll {busy_poll}: no common view");
            for (event_loop, _) in loops.iter_mut() {
                event_loop.poll(Some(Duration::from_millis(2))).unwrap();
                while event_loop.next_event().is_some() {}
            }
        }
        // Round trips: one cast from loop 0, echoed by loop 1 once delivered there.
        for seq in 0..50u32 {
            let (event_loop, me) = &mut loops[0];
            event_loop.cast(*me, seq.to_le_bytes().to_vec().into()).unwrap();
            turns(&mut loops, &mut got, &|got| got[1].len() as u32 > seq);
        }
        // A burst from each: 300 casts, then both deliver all of them.
        for (event_loop, me) in loops.iter_mut() {
            for k in 0..300u32 {
                event_loop.cast(*me, (1000 + k).to_le_bytes().to_vec().into()).unwrap();
            }
        }
        turns(&mut loops, &mut got, &|got| got.iter().all(|g| g.len() >= 50 + 600));
        for (k, g) in got.iter().enumerate() {
            let from_0: Vec<u32> = g.iter().copied().filter(|&v| v < 1000).collect();
            assert_eq!(from_0, (0..50).collect::<Vec<u32>>(), "loop {k}: the round trips' casts, in order");
            assert_eq!(g.len(), 650, "loop {k}: every cast once");
        }
        let waits: u64 = loops.iter().map(|(l, _)| l.runtime_stats().recv_waits).sum();
        assert_eq!(waits > 0, !busy_poll, "busy_poll {busy_poll}: {waits} waits in the receive call");
        // A spin that found nothing gave the CPU up (more spinners than CPUs would otherwise
        // each hold theirs for a time slice); a loop that waits never spins.
        let yields: u64 = loops.iter().map(|(l, _)| l.runtime_stats().busy_yields).sum();
        assert_eq!(yields > 0, busy_poll, "busy_poll {busy_poll}: {yields} yields");
    }
}

/// Stability over real UDP: three loops (a coordinator and two members, whose rows reach it on
/// the group's gossip channel and whose columns come back as a cast) deliver each other's bursts,
/// and then every retransmission buffer empties while the group is quiet. Nothing else frees
/// them: a row that never reached the coordinator left every buffer full for good.
#[test]
fn stability_empties_every_buffer_once_the_group_is_quiet() {
    type Loops = [(EventLoop, EndpointId)];
    let mut loops = joined(3, RuntimeConfig::default, "stable");
    let until = |loops: &mut Loops, what: &str, done: &dyn Fn(&Loops) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !done(loops) {
            assert!(
                Instant::now() < deadline,
                "{what}: buffered {:?}",
                loops.iter().map(|(l, me)| l.buffered(*me)).collect::<Vec<_>>()
            );
            for (event_loop, _) in loops.iter_mut() {
                event_loop.poll(Some(Duration::from_millis(2))).unwrap();
                while event_loop.next_event().is_some() {}
            }
        }
    };
    until(&mut loops, "one view", &|loops| {
        loops.iter().all(|(l, me)| l.view(*me).is_some_and(|v| v.members.len() == 3))
    });
    for (event_loop, me) in loops.iter_mut() {
        for k in 0..200u32 {
            event_loop.cast(*me, k.to_le_bytes().to_vec().into()).unwrap();
        }
    }
    assert!(loops.iter().all(|(l, me)| l.buffered(*me) > 0), "the bursts are kept");
    assert!(loops.iter().all(|(l, _)| l.runtime_stats().buffered > 0), "the gauge counts them");
    until(&mut loops, "stability", &|loops| loops.iter().all(|(l, me)| l.buffered(*me) == 0));
    assert!(loops.iter().all(|(l, _)| l.runtime_stats().buffered == 0));
    let gossip: u64 = loops.iter().map(|(l, _)| l.protocol_stats().counter(motet_core::Counter::Gossip)).sum();
    assert!(gossip > 0, "rows and columns went out");
}

/// A loop that its application only ever polls without waiting (`poll(Some(Duration::ZERO))`, as
/// a game loop or another event loop checks it once per tick) still reads its socket: such a turn
/// asks `epoll` without waiting. Before, a zero timeout skipped `epoll` altogether (the turn
/// "must not wait"), so a loop polled that way never learnt that datagrams had come, and never
/// formed a view (found by `perf throughput`'s raw blocks, whose processes poll so).
#[test]
fn event_loops_polled_only_without_waiting_still_receive() {
    let mut loops = joined(2, RuntimeConfig::default, "zero-timeouts");
    let mut got = [0usize; 2];
    let mut cast = false;
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.iter().any(|&n| n < 10) {
        assert!(
            Instant::now() < deadline,
            "stuck: views {:?}, casts {got:?}",
            loops.iter().map(|(l, me)| l.view(*me).map(|v| v.members.len())).collect::<Vec<_>>()
        );
        let merged = loops.iter().all(|(l, me)| l.view(*me).is_some_and(|v| v.members.len() == 2));
        if merged && !cast {
            let (event_loop, me) = &mut loops[0];
            (0..10u8).for_each(|k| event_loop.cast(*me, vec![k].into()).unwrap());
            cast = true;
        }
        for (k, (event_loop, _)) in loops.iter_mut().enumerate() {
            event_loop.poll(Some(Duration::ZERO)).unwrap();
            while let Some((_, event)) = event_loop.next_event() {
                got[k] += usize::from(matches!(event, Event::Cast { .. }));
            }
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    assert_eq!(got, [10, 10], "every cast once at each member");
    let stats: Vec<_> = loops.iter().map(|(l, _)| l.runtime_stats()).collect();
    assert!(stats.iter().all(|s| s.bypass_hits >= 10), "the casts took the bypass, going down and arriving: {stats:?}");
}

/// An endpoint that left is forgotten once it has exited: a process that joins and leaves groups
/// all its life keeps no state for them.
#[test]
fn an_endpoint_that_exited_is_forgotten() {
    let mut event_loop = motet_runtime::EventLoop::new(RuntimeConfig::default()).unwrap();
    let me = event_loop.join(&GroupConfig::new("forget").peers(["localhost:9"])).unwrap();
    assert_eq!(event_loop.runtime_stats().endpoints, 1);
    event_loop.leave(me).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    'exit: loop {
        event_loop.poll(Some(Duration::from_millis(20))).unwrap();
        while let Some((_, event)) = event_loop.next_event() {
            if event == Event::Exit {
                break 'exit;
            }
        }
        assert!(Instant::now() < deadline, "no exit");
    }
    assert_eq!(event_loop.runtime_stats().endpoints, 0);
    assert!(matches!(event_loop.cast(me, "late".into()), Err(motet_runtime::Error::Left)));
}

/// Whether this kernel has UDP receive offload (`UDP_GRO`, Linux 5.0 on).
fn gro_supported() -> bool {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    nix::sys::socket::setsockopt(&socket, nix::sys::socket::sockopt::UdpGroSegment, &true).is_ok()
}

/// An event loop alone with its socket, and a function that sends it `n` datagrams from another
/// socket and polls it with `timeout` until it has read them all. (The datagrams are not
/// Motet's: dropped and counted, but read all the same.)
fn offload_probe() -> (motet_runtime::EventLoop, impl FnMut(&mut motet_runtime::EventLoop, u64, Duration)) {
    let event_loop = motet_runtime::EventLoop::new(RuntimeConfig::default()).unwrap();
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = event_loop.local_addr();
    let mut received = 0;
    let send_and_poll = move |event_loop: &mut motet_runtime::EventLoop, n: u64, timeout: Duration| {
        for _ in 0..n {
            socket.send_to(&[0xff, 1, 2, 3], to).unwrap();
        }
        received += n;
        let deadline = Instant::now() + Duration::from_secs(10);
        while event_loop.runtime_stats().datagrams_in < received {
            assert!(Instant::now() < deadline, "{:?}", event_loop.runtime_stats());
            event_loop.poll(Some(timeout)).unwrap();
        }
    };
    (event_loop, send_and_poll)
}

/// Receive offload goes on only once the socket is busy (docs/runtime.md, "Receive offload"):
/// datagrams that arrive one at a time (a round trip) keep the cheaper single reads, even when
/// each is queued before the loop waits for it; a loop that waits in the receive call, and keeps
/// finding datagrams queued, learns it by reading a batch now and then, and turns it on.
#[test]
fn receive_offload_goes_on_when_waits_keep_finding_several_datagrams_queued() {
    if !gro_supported() {
        skipped!("loopback test: this kernel has no UDP receive offload (UDP_GRO); not tested");
        return;
    }
    let (mut event_loop, mut send_and_poll) = offload_probe();
    for _ in 0..200 {
        send_and_poll(&mut event_loop, 1, Duration::from_millis(50));
    }
    let stats = event_loop.runtime_stats();
    assert!(stats.recv_waits >= 150, "the loop waited in the receive call: {stats:?}");
    assert!(!stats.receive_offload, "one at a time: {stats:?}");
    for _ in 0..300 {
        send_and_poll(&mut event_loop, 7, Duration::from_millis(50));
    }
    let stats = event_loop.runtime_stats();
    assert!(stats.recv_waits >= 1_000, "the loop still waited in the receive call: {stats:?}");
    assert!(stats.receive_offload, "several at a time: {stats:?}");
}

/// The same for a loop that waits in `epoll` (a timeout too short to wait in the receive call)
/// and reads batches.
#[test]
fn receive_offload_goes_on_when_batches_keep_finding_several_datagrams_queued() {
    if !gro_supported() {
        skipped!("loopback test: this kernel has no UDP receive offload (UDP_GRO); not tested");
        return;
    }
    let (mut event_loop, mut send_and_poll) = offload_probe();
    for _ in 0..200 {
        send_and_poll(&mut event_loop, 1, Duration::from_millis(1));
    }
    assert!(!event_loop.runtime_stats().receive_offload, "one at a time: {:?}", event_loop.runtime_stats());
    for _ in 0..64 {
        send_and_poll(&mut event_loop, 8, Duration::from_millis(1));
    }
    let stats = event_loop.runtime_stats();
    assert_eq!(stats.recv_waits, 0, "the loop waited in epoll: {stats:?}");
    assert!(stats.receive_offload, "several at a time: {stats:?}");
}

/// The threaded runtime's loop busy-polls in turns of one read each (its handles hold the
/// waker, so it never spins within a turn): idle, it still yields its CPU now and then, so that
/// more spinning processes than CPUs share them instead of each holding one for a time slice.
#[test]
fn a_busy_polling_runtime_that_reads_nothing_yields_its_cpu() {
    let runtime = Runtime::start(RuntimeConfig::default().busy_poll(true)).unwrap();
    let member = runtime.join(GroupConfig::new("alone")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (stats, _) = runtime.stats().unwrap();
        if stats.busy_yields > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "no yield in 10 s of an idle busy-polling loop: {stats:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(member);
}

/// The last resort: a loop whose application's events are at their bound (an `event_queue` of
/// 8, never read) stops reading the socket, and `app_backpressure` counts that stop once, however
/// many turns it lasts; reading the events lets it read again, and the next stop counts again.
/// Before, every turn of the stop counted (millions a second when busy-polling).
#[test]
fn a_loop_that_stops_reading_for_its_application_counts_the_stop_once() {
    let mut loops = joined(2, || RuntimeConfig { event_queue: 8, ..RuntimeConfig::default() }, "last-resort");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !loops.iter().all(|(l, me)| l.view(*me).is_some_and(|v| v.members.len() == 2)) {
        assert!(Instant::now() < deadline, "no common view");
        for (event_loop, _) in loops.iter_mut() {
            event_loop.poll(Some(Duration::from_millis(2))).unwrap();
            while event_loop.next_event().is_some() {}
        }
    }
    let (sender, to) = (0, 1);
    let stops = |loops: &Vec<(EventLoop, EndpointId)>| loops[to].0.runtime_stats().app_backpressure;
    for round in 1..=2 {
        let me = loops[sender].1;
        for k in 0..64u32 {
            let _ = loops[sender].0.cast(me, k.to_le_bytes().to_vec().into());
        }
        for _ in 0..50 {
            for (event_loop, _) in loops.iter_mut() {
                event_loop.poll(Some(Duration::from_millis(1))).unwrap();
            }
        }
        assert_eq!(stops(&loops), round, "one stop, 50 turns long");
        while loops[to].0.next_event().is_some() {}
        while loops[sender].0.next_event().is_some() {}
    }
}
