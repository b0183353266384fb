#![allow(clippy::disallowed_types)] // a test of real time: it waits on the wall clock
//! Runtimes in one test process, over real UDP on loopback: members find each other through
//! their seeds, merge into one view, and deliver each other's casts and sends.

use motet_runtime::{EndpointId, Event, GroupConfig, Member, Runtime, RuntimeConfig, View};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

fn start(n: usize) -> (Vec<Runtime>, Vec<String>) {
    let runtimes: Vec<Runtime> = (0..n).map(|_| Runtime::start(RuntimeConfig::default()).unwrap()).collect();
    let addresses = runtimes.iter().map(|r| r.local_addr().to_string()).collect();
    (runtimes, addresses)
}

/// Receives until every member's latest view has all of `members`, or panics after `limit`.
fn converge(members: &[Member], limit: Duration) -> View {
    let deadline = Instant::now() + limit;
    let mut latest: BTreeMap<EndpointId, View> = BTreeMap::new();
    loop {
        for m in members {
            while let Some(event) = m.try_recv().unwrap() {
                if let Event::View(view) = event {
                    latest.insert(m.id(), *view);
                }
            }
        }
        let views: Vec<&View> = latest.values().collect();
        if views.len() == members.len() && views.iter().all(|v| v.members.len() == members.len() && v.id == views[0].id)
        {
            return views[0].clone();
        }
        assert!(Instant::now() < deadline, "no common view after {limit:?}: {latest:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn three_members_merge_then_cast_and_send() {
    let (runtimes, addresses) = start(3);
    let members: Vec<Member> =
        runtimes.iter().map(|r| r.join(GroupConfig::new("loopback").peers(addresses.clone())).unwrap()).collect();
    let view = converge(&members, Duration::from_secs(30));
    let casts = 200;
    for (i, m) in members.iter().enumerate() {
        for k in 0..casts {
            m.cast(format!("{i}:{k}")).unwrap();
        }
    }
    let to = view.members[0];
    members[1].send(to, "private").unwrap();
    // Every member delivers every cast, in each sender's order, and member 0 the send.
    for m in &members {
        let mut next: BTreeMap<EndpointId, usize> = BTreeMap::new();
        let mut sends = 0;
        let deadline = Instant::now() + Duration::from_secs(30);
        while next.values().sum::<usize>() < casts * members.len() || (m.id() == to && sends == 0) {
            let event = m.recv_timeout(Duration::from_millis(100)).unwrap();
            assert!(Instant::now() < deadline, "member {} got {next:?}", m.id());
            match event {
                Some(Event::Cast { from, data }) => {
                    let k = next.entry(from).or_default();
                    let text = String::from_utf8(data.to_vec()).unwrap();
                    assert_eq!(text.split(':').nth(1).unwrap(), k.to_string(), "FIFO from {from}");
                    *k += 1;
                }
                Some(Event::Send { from, data }) => {
                    assert_eq!(
                        (from, &data[..]),
                        (
                            view.members[view.members.iter().position(|&e| e == members[1].id()).unwrap()],
                            &b"private"[..]
                        )
                    );
                    sends += 1;
                }
                Some(Event::View(v)) => panic!("unexpected view change {v:?}"),
                _ => {}
            }
        }
    }
    let stats: Vec<_> = runtimes.iter().map(|r| r.stats().unwrap().0).collect();
    assert!(stats.iter().all(|s| s.datagrams_in > 0 && s.datagrams_out > 0), "{stats:?}");
    // 200 casts queued at once go out packed.
    assert!(stats.iter().any(|s| s.bundles_sent > 0 && s.datagrams_packed >= 2 * s.bundles_sent), "{stats:?}");
}

#[test]
fn malformed_datagrams_and_bundles_are_dropped_and_counted() {
    let runtime = Runtime::start(RuntimeConfig::default()).unwrap();
    let member = runtime.join(GroupConfig::new("garbage")).unwrap();
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = runtime.local_addr();
    socket.send_to(&[motet_wire::bundle::BUNDLE_TAG, 5, 1], to).unwrap(); // a truncated bundle
    socket.send_to(&[0xff, 1, 2, 3], to).unwrap(); // not a datagram
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (stats, protocol) = runtime.stats().unwrap();
        if stats.malformed_bundles == 1 && protocol.drops(motet_core::DropReason::Malformed) == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "{stats:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    // The member is unharmed: its own cast still comes back.
    member.cast("still here").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !matches!(member.recv_timeout(Duration::from_millis(100)).unwrap(), Some(Event::Cast { .. })) {
        assert!(Instant::now() < deadline);
    }
}

#[test]
fn a_member_that_leaves_is_excluded_and_gets_exit() {
    let (runtimes, addresses) = start(3);
    let members: Vec<Member> =
        runtimes.iter().map(|r| r.join(GroupConfig::new("leave").peers(addresses.clone())).unwrap()).collect();
    converge(&members, Duration::from_secs(30));
    let leaver = members[2].id();
    members[2].leave().unwrap();
    let events: Vec<Event> = members[2].events().collect();
    assert_eq!(events.last(), Some(&Event::Exit), "{events:?}");
    assert!(matches!(members[2].cast("late"), Err(motet_runtime::Error::Left)));
    let rest = &members[..2];
    let view = converge(rest, Duration::from_secs(30));
    assert!(!view.members.contains(&leaver));
}

#[test]
fn errors_say_what_to_do() {
    let runtime = Runtime::start(RuntimeConfig::default()).unwrap();
    let err = runtime.join(GroupConfig::new("g").stack("fifo")).err().unwrap();
    assert!(err.to_string().contains("use `vsync`"), "{err}");
    let err = runtime.join(GroupConfig::new("g").stack("vsync+Nonsense")).err().unwrap();
    assert!(err.to_string().contains("Nonsense"), "{err}");
    let member = runtime.join(GroupConfig::new("g")).unwrap();
    let err = member.send(EndpointId(42), "x").unwrap_err();
    assert!(matches!(err, motet_runtime::Error::NoView | motet_runtime::Error::NotMember(_)), "{err}");
    let big = vec![0u8; 2 << 20];
    assert!(member.cast(big).unwrap_err().to_string().contains("exceeds"));
    let err = Runtime::start(RuntimeConfig::bind("0.0.0.0:0".parse().unwrap())).err().unwrap();
    assert!(err.to_string().contains("advertise"), "{err}");
}

/// Protocol parameters from a configuration file reach the member: a smaller largest message is
/// enforced, and a smaller fragment size splits a message the default would not.
#[test]
fn protocol_parameters_from_a_file_reach_the_stack() {
    let file = motet_runtime::FileConfig::from_toml(
        "[group]\nname = \"g\"\n[group.params.appl]\nmessage_size_max = 100\n[group.params.frag]\nfrag_size = 50\n",
    )
    .unwrap();
    let runtime = Runtime::start(file.runtime).unwrap();
    let member = runtime.join(file.group).unwrap();
    let err = member.cast(vec![0u8; 101]).unwrap_err();
    assert!(err.to_string().contains("101") && err.to_string().contains("100"), "{err}");
    member.cast(vec![0u8; 100]).unwrap();
    // Delivered to itself whole (the loop-back is above `frag`), and split into fragments of 50
    // bytes on its way to the network (the default, 1,024, would not split it).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match member.recv_timeout(Duration::from_millis(100)).unwrap() {
            Some(Event::Cast { data, .. }) => break assert_eq!(data.len(), 100),
            _ => assert!(Instant::now() < deadline, "no delivery of its own cast"),
        }
    }
    let (_, protocol) = runtime.stats().unwrap();
    assert_eq!(protocol.counter(motet_core::Counter::Fragmented), 1, "{protocol:?}");
}

#[cfg(feature = "tokio")]
#[tokio::test(flavor = "current_thread")]
async fn async_members_merge_and_stream_events() {
    use futures_util::StreamExt;
    let (runtimes, addresses) = start(2);
    let mut members: Vec<motet_runtime::AsyncMember> =
        runtimes.iter().map(|r| r.join_async(GroupConfig::new("async").peers(addresses.clone())).unwrap()).collect();
    // Both reach the view of two.
    for m in members.iter_mut() {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let event = tokio::time::timeout_at(deadline, m.next()).await.expect("a view of two").unwrap();
            if matches!(&event, Event::View(v) if v.members.len() == 2) {
                break;
            }
        }
    }
    members[0].cast("ping").unwrap();
    for m in members.iter_mut() {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let event = tokio::time::timeout_at(deadline, m.recv()).await.expect("the cast").unwrap();
            if let Event::Cast { data, .. } = event {
                assert_eq!(&data[..], b"ping");
                break;
            }
        }
    }
    members[1].leave().unwrap();
    let rest: Vec<Event> = tokio::time::timeout(Duration::from_secs(30), members.pop().unwrap().collect::<Vec<_>>())
        .await
        .expect("the stream ends after the exit");
    assert_eq!(rest.last(), Some(&Event::Exit));
}

#[test]
fn seeds_may_be_dns_names() {
    // `localhost` goes through the resolver (the same path as a container's service name).
    let (runtimes, addresses) = start(2);
    let by_name: Vec<String> = addresses.iter().map(|a| a.replace("127.0.0.1", "localhost")).collect();
    let members: Vec<Member> =
        runtimes.iter().map(|r| r.join(GroupConfig::new("dns").peers(by_name.clone())).unwrap()).collect();
    converge(&members, Duration::from_secs(30));
}

#[test]
fn a_member_may_bind_one_address_and_advertise_another() {
    let port = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let wildcard = RuntimeConfig::bind(format!("0.0.0.0:{port}").parse().unwrap())
        .advertise(format!("127.0.0.1:{port}").parse().unwrap());
    let runtimes = [Runtime::start(wildcard).unwrap(), Runtime::start(RuntimeConfig::default()).unwrap()];
    assert_eq!(runtimes[0].advertised_addr().to_string(), format!("127.0.0.1:{port}"));
    let seeds = [runtimes[0].advertised_addr().to_string(), runtimes[1].local_addr().to_string()];
    let members: Vec<Member> =
        runtimes.iter().map(|r| r.join(GroupConfig::new("advertise").peers(seeds.clone())).unwrap()).collect();
    let view = converge(&members, Duration::from_secs(30));
    assert!(view.addresses.contains(&runtimes[0].advertised_addr()), "{view:?}");
}

/// Two members with `config` each cast `casts` messages (the `k`th of `size(k)` bytes) in one
/// burst; both deliver all of them in each sender's order. Returns the runtimes' counters.
fn burst(config: RuntimeConfig, casts: usize, size: impl Fn(usize) -> usize) -> Vec<motet_runtime::RuntimeStats> {
    let runtimes: Vec<Runtime> = (0..2).map(|_| Runtime::start(config.clone()).unwrap()).collect();
    let addresses: Vec<String> = runtimes.iter().map(|r| r.local_addr().to_string()).collect();
    let members: Vec<Member> =
        runtimes.iter().map(|r| r.join(GroupConfig::new("burst").peers(addresses.clone())).unwrap()).collect();
    converge(&members, Duration::from_secs(30));
    for (i, m) in members.iter().enumerate() {
        for k in 0..casts {
            let mut text = format!("{i}:{k}:").into_bytes();
            text.resize(size(k), b'x');
            m.cast(text).unwrap();
        }
    }
    for m in &members {
        let mut next: BTreeMap<EndpointId, usize> = BTreeMap::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while next.values().sum::<usize>() < casts * members.len() {
            assert!(Instant::now() < deadline, "member {} got {next:?}", m.id());
            if let Some(Event::Cast { from, data }) = m.recv_timeout(Duration::from_millis(100)).unwrap() {
                let k = next.entry(from).or_default();
                assert_eq!(data.len(), size(*k));
                let seq: usize = std::str::from_utf8(&data).unwrap().split(':').nth(1).unwrap().parse().unwrap();
                assert_eq!(seq, *k, "FIFO from {from}");
                *k += 1;
            }
        }
    }
    runtimes.iter().map(|r| r.stats().unwrap().0).collect()
}

#[test]
fn bursts_of_large_casts_leave_in_segmented_sends() {
    let stats = burst(RuntimeConfig::default(), 400, |_| 1000);
    // Linux has had UDP segmentation offload since 4.18; elsewhere the runtime falls back.
    if cfg!(target_os = "linux") {
        assert!(stats.iter().all(|s| s.segmented_sends > 0 && s.datagrams_segmented > s.segmented_sends), "{stats:?}");
    }
}

#[test]
fn bursts_of_small_casts_leave_as_padded_bundles_in_segmented_sends() {
    // Sizes vary, so bundles do too: only padding lets them share a segment size.
    let stats = burst(RuntimeConfig::default(), 4000, |k| 40 + k * 7 % 50);
    assert!(stats.iter().all(|s| s.bundles_sent > 0), "{stats:?}");
    if cfg!(target_os = "linux") {
        // Without padding a run of bundles ends at the first shorter one (two per call on
        // average); padded, a run takes every bundle of the turn.
        assert!(
            stats.iter().all(|s| s.segmented_sends > 0 && 2 * s.datagrams_segmented >= 5 * s.segmented_sends),
            "{stats:?}"
        );
    }
}

#[test]
fn segmentation_offload_can_be_turned_off() {
    let config = RuntimeConfig { segment_offload: false, ..RuntimeConfig::default() };
    let stats = burst(config, 400, |_| 1000);
    assert!(stats.iter().all(|s| s.segmented_sends == 0), "{stats:?}");
}

#[test]
fn a_subcast_reaches_the_named_members_only() {
    let (runtimes, addresses) = start(3);
    let members: Vec<Member> =
        runtimes.iter().map(|r| r.join(GroupConfig::new("subcast").peers(addresses.clone())).unwrap()).collect();
    converge(&members, Duration::from_secs(30));
    members[0].subcast(&[members[2].id()], "for two").unwrap();
    members[0].cast("for all").unwrap();
    for (i, m) in members.iter().enumerate() {
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !got.contains(&"for all".to_string()) {
            assert!(Instant::now() < deadline, "member {i} got {got:?}");
            if let Some(Event::Cast { data, .. }) = m.recv_timeout(Duration::from_millis(100)).unwrap() {
                got.push(String::from_utf8(data.to_vec()).unwrap());
            }
        }
        let expected: Vec<&str> = if i == 2 { vec!["for two", "for all"] } else { vec!["for all"] };
        assert_eq!(got, expected, "member {i}: FIFO with the sender's casts, and only where named");
    }
}

/// A member that joins with the loop-back off (RMP's Message Bus `loop-back` flag) gets the others'
/// casts and never its own, through the merges that built its view; the others get its casts.
#[test]
fn a_member_without_loopback_gets_only_the_others_casts() {
    let (runtimes, addresses) = start(2);
    let config = |on: bool| GroupConfig::new("no-loopback").peers(addresses.clone()).loopback(on);
    let members = [runtimes[0].join(config(false)).unwrap(), runtimes[1].join(config(true)).unwrap()];
    converge(&members, Duration::from_secs(30));
    for (i, m) in members.iter().enumerate() {
        m.cast(format!("from {i}")).unwrap();
        m.cast("end").unwrap();
    }
    for (i, m) in members.iter().enumerate() {
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while got.iter().filter(|(from, text)| *from != m.id() && text == "end").count() == 0 {
            assert!(Instant::now() < deadline, "member {i} got {got:?}");
            if let Some(Event::Cast { from, data }) = m.recv_timeout(Duration::from_millis(100)).unwrap() {
                got.push((from, String::from_utf8(data.to_vec()).unwrap()));
            }
        }
        // Member 1 sees its own casts too, in its FIFO order, before or after the other's end.
        std::thread::sleep(Duration::from_millis(200));
        while let Some(event) = m.try_recv().unwrap() {
            if let Event::Cast { from, data } = event {
                got.push((from, String::from_utf8(data.to_vec()).unwrap()));
            }
        }
        let own: Vec<&str> = got.iter().filter(|(from, _)| *from == m.id()).map(|(_, t)| t.as_str()).collect();
        let theirs: Vec<&str> = got.iter().filter(|(from, _)| *from != m.id()).map(|(_, t)| t.as_str()).collect();
        let other = 1 - i;
        assert_eq!(theirs, [format!("from {other}").as_str(), "end"], "member {i}");
        match i {
            0 => assert!(own.is_empty(), "member 0 has the loop-back off: {own:?}"),
            _ => assert_eq!(own, ["from 1", "end"], "member 1 has it on"),
        }
    }
}

/// Client/server groups (Ensemble's `Cltsvr`): the client role a member joins with is carried
/// through the merges into every view, and casts can be addressed to servers or clients only.
#[test]
fn casts_to_servers_only_and_clients_only() {
    let (runtimes, addresses) = start(3);
    let members: Vec<Member> = runtimes
        .iter()
        .enumerate()
        .map(|(i, r)| r.join(GroupConfig::new("cltsvr").peers(addresses.clone()).client(i == 2)).unwrap())
        .collect();
    let view = converge(&members, Duration::from_secs(30));
    assert_eq!(view.clients, vec![members[2].id()]);
    members[0].cast_to_servers("servers").unwrap();
    members[0].cast_to_clients("clients").unwrap();
    members[0].cast("everyone").unwrap();
    for (i, m) in members.iter().enumerate() {
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !got.contains(&"everyone".to_string()) {
            assert!(Instant::now() < deadline, "member {i} got {got:?}");
            if let Some(Event::Cast { data, .. }) = m.recv_timeout(Duration::from_millis(100)).unwrap() {
                got.push(String::from_utf8(data.to_vec()).unwrap());
            }
        }
        let expected = if i == 2 { ["clients", "everyone"] } else { ["servers", "everyone"] };
        assert_eq!(got, expected, "member {i}");
    }
}

/// Receives at `m` until `done` says so, or panics after `limit`; returns the latest view.
fn receive_until(m: &Member, limit: Duration, mut each: impl FnMut(&Event) -> bool) {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(event) = m.recv_timeout(Duration::from_millis(50)).unwrap() {
            if each(&event) {
                return;
            }
        }
        assert!(Instant::now() < deadline, "member {} did not finish within {limit:?}", m.id());
    }
}

#[test]
fn a_process_migrates_to_a_new_socket_with_casts_in_flight_and_loses_nothing() {
    let config = RuntimeConfig { migrate_grace_ms: 300, ..RuntimeConfig::default() };
    let runtimes: Vec<Runtime> = (0..3).map(|_| Runtime::start(config.clone()).unwrap()).collect();
    let addresses: Vec<String> = runtimes.iter().map(|r| r.local_addr().to_string()).collect();
    let members: Vec<Member> =
        runtimes.iter().map(|r| r.join(GroupConfig::new("migrate").peers(addresses.clone())).unwrap()).collect();
    let first = converge(&members, Duration::from_secs(30));
    let old = runtimes[1].advertised_addr();
    // Casts from every member before, during and after the move.
    let casts = 300;
    for k in 0..casts {
        for (i, m) in members.iter().enumerate() {
            m.cast(format!("{i}:{k}")).unwrap();
        }
        if k == casts / 3 {
            let new = runtimes[1].migrate("127.0.0.1:0".parse().unwrap(), None).unwrap();
            assert_ne!(new, old);
            assert_eq!(runtimes[1].advertised_addr(), new);
        }
    }
    let new = runtimes[1].advertised_addr();
    let mover = members[1].id();
    for m in &members {
        let mut next: BTreeMap<EndpointId, usize> = BTreeMap::new();
        let mut moved = false;
        receive_until(m, Duration::from_secs(30), |event| {
            match event {
                Event::Cast { from, data } => {
                    let k = next.entry(*from).or_default();
                    let text = String::from_utf8(data.to_vec()).unwrap();
                    assert_eq!(text.split(':').nth(1).unwrap(), k.to_string(), "FIFO and no loss from {from}");
                    *k += 1;
                }
                Event::View(view) => {
                    // Same members (nobody was excluded), the mover at its new address.
                    assert_eq!(view.members.len(), 3, "{view:?}");
                    let at = view.addresses[view.members.iter().position(|&e| e == mover).unwrap()];
                    assert!(at == new || at == old, "{view:?}");
                    moved |= at == new;
                }
                _ => {}
            }
            moved && next.values().sum::<usize>() == casts * members.len()
        });
        assert!(next.values().all(|&n| n == casts), "{next:?}");
    }
    assert!(first.addresses.contains(&old));
    // The old socket closes after the grace period.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stats = runtimes[1].stats().unwrap().0;
        if stats.migrations == 1 && stats.retired_closed == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "{stats:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The group still works at the new address.
    members[0].send(mover, "after").unwrap();
    receive_until(
        &members[1],
        Duration::from_secs(10),
        |e| matches!(e, Event::Send { data, .. } if &data[..] == b"after"),
    );
}

#[test]
fn migrating_a_stack_without_the_migrate_property_is_refused_and_changes_nothing() {
    let runtime = Runtime::start(RuntimeConfig::default()).unwrap();
    let layers = motet_core::StackSpec::parse("vsync").unwrap().to_string().replace(":migrate", "");
    let _member = runtime.join(GroupConfig::new("static").stack(&layers)).unwrap();
    let before = runtime.advertised_addr();
    let err = runtime.migrate("127.0.0.1:0".parse().unwrap(), None).unwrap_err();
    assert!(err.to_string().contains("Migrate"), "{err}");
    assert_eq!(runtime.advertised_addr(), before);
    let err = runtime.migrate("127.0.0.1:0".parse().unwrap(), Some("0.0.0.0:9".parse().unwrap())).unwrap_err();
    assert!(err.to_string().contains("advertise") || err.to_string().contains("Migrate"), "{err}");
}

/// Real datagrams, captured on their way between two runtimes: member B advertises the address
/// of a relay socket, which records what A sends to B and forwards it. The common-path casts and
/// sends of `vsync` carry at most 8 bytes of head (issue 6: header compression).
#[test]
#[allow(clippy::disallowed_methods)] // the relay is a thread of the test, not of the protocol
fn common_path_datagrams_on_the_wire_carry_at_most_8_bytes_of_head() {
    let relay = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    relay.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let b = Runtime::start(RuntimeConfig::default().advertise(relay.local_addr().unwrap())).unwrap();
    let a = Runtime::start(RuntimeConfig::default()).unwrap();
    let b_real = b.local_addr();
    let captured = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Vec<u8>>::new()));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let forwarder = {
        let (captured, stop) = (captured.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 65_536];
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                if let Ok((n, _)) = relay.recv_from(&mut buf) {
                    captured.lock().unwrap().push(buf[..n].to_vec());
                    relay.send_to(&buf[..n], b_real).unwrap();
                }
            }
        })
    };
    let seeds = [a.local_addr().to_string(), b.advertised_addr().to_string()];
    let members = [
        a.join(GroupConfig::new("wire").peers(seeds.clone())).unwrap(),
        b.join(GroupConfig::new("wire").peers(seeds)).unwrap(),
    ];
    converge(&members, Duration::from_secs(30));
    let to = members[1].id();
    let total = 60;
    for k in 0..total {
        let data = format!("payload-{k:04}");
        if k % 2 == 0 {
            members[0].cast(data).unwrap();
        } else {
            members[0].send(to, data).unwrap();
        }
        // One at a time, so each leaves alone rather than packed with others.
        receive_until(
            &members[1],
            Duration::from_secs(10),
            |e| matches!(e, Event::Cast { data, .. } | Event::Send { data, .. } if data.ends_with(format!("{k:04}").as_bytes())),
        );
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    forwarder.join().unwrap();
    let datagrams = captured.lock().unwrap().clone();
    let mut common = 0;
    for datagram in &datagrams {
        let parts = if motet_wire::bundle::is_bundle(datagram) {
            motet_wire::bundle::decode(&bytes::Bytes::from(datagram.clone())).unwrap()
        } else {
            vec![bytes::Bytes::from(datagram.clone())]
        };
        for part in parts {
            if let Some(at) = part.windows(8).position(|w| w == b"payload-") {
                assert!(at <= 8, "{at} bytes of head before the payload: {:02x?}", &part[..at]);
                assert!(motet_wire::datagram::is_compressed(&part));
                common += 1;
            }
        }
    }
    assert!(common >= total, "only {common} of {total} application datagrams captured");
}

/// Members whose parameters differ run the group's: those of the view they are in, which a merge
/// takes from the granting partition, not each its own (before, each ran its own and this test
/// stalled at 8 casts). A sender whose own `mflow` window is 8, in a group whose window
/// is the default (256: receivers report credit every 128 casts), is not held after 8 casts
/// waiting for a report that its receivers, counting to 128, would never send.
#[test]
fn members_run_the_parameters_of_their_view() {
    let (runtimes, addresses) = start(2);
    let mut small = motet_core::StackConfig::default();
    small.mflow.window = 8;
    small.appl.message_size_max = 100;
    let group = |params| GroupConfig::new("params").peers(addresses.clone()).params(params);
    let members =
        [runtimes[0].join(group(motet_core::StackConfig::default())).unwrap(), runtimes[1].join(group(small)).unwrap()];
    let view = converge(&members, Duration::from_secs(30));
    let casts = 100;
    for k in 0..casts {
        members[1].cast(format!("{k}")).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut got = 0;
    while got < casts {
        if let Some(Event::Cast { .. }) = members[0].recv_timeout(Duration::from_millis(100)).unwrap() {
            got += 1;
        }
        assert!(Instant::now() < deadline, "{got} of {casts} casts delivered: the sender waits for credit");
    }
    // The member that did not make the view says that it runs parameters other than its own.
    let other: u64 = runtimes.iter().map(|r| r.stats().unwrap().0.views_with_other_params).sum();
    assert!(other >= 1, "one member runs the other's parameters");
    // Both take messages up to the view's limit, whichever member's it is, and refuse larger.
    assert!(
        [100, motet_core::StackConfig::default().appl.message_size_max].contains(&view.params.appl.message_size_max)
    );
    for m in &members {
        let fits = m.cast(vec![0u8; 150]);
        match view.params.appl.message_size_max >= 150 {
            true => assert!(fits.is_ok(), "{fits:?}"),
            false => assert!(fits.unwrap_err().to_string().contains("100"), "the view's limit"),
        }
    }
}

/// A sender that casts as fast as it can, from its own thread, does not starve its loop of the
/// network: the loop still receives, sends and runs its timers between batches of commands, so
/// the other member gets the casts and the sender is not suspected.
#[test]
#[allow(clippy::disallowed_methods)] // senders on threads of their own, as an application has
fn a_sender_casting_in_a_tight_loop_does_not_starve_the_network() {
    // The receiving process (its loop, and this thread, which reads) on one CPU; the sending
    // process's loop and its busy senders on the other, as two machines would have them. Sharing
    // both CPUs, the busy threads starved the receiving loop of the same test process now and
    // then (no heartbeat for a second: the sender suspected it and went on alone), and the test
    // measured the scheduler instead of the sender's loop. Threads take the CPUs of the thread
    // that starts them.
    let cpus = core_affinity::get_core_ids().unwrap_or_default();
    let pin = move |k: usize| {
        if cpus.len() >= 2 {
            core_affinity::set_for_current(cpus[k]);
        }
    };
    pin(1);
    let sending = Runtime::start(RuntimeConfig::default()).unwrap();
    pin(0);
    let runtimes = [Runtime::start(RuntimeConfig::default()).unwrap(), sending];
    let addresses: Vec<String> = runtimes.iter().map(|r| r.local_addr().to_string()).collect();
    let members: Vec<Member> =
        runtimes.iter().map(|r| r.join(GroupConfig::new("tight").peers(addresses.clone())).unwrap()).collect();
    converge(&members, Duration::from_secs(30));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Several threads keep the loop's command queue full. (The sending member never reads its
    // own casts, delivered back to it: once its channel is full it lags, and its casts are held
    // from then on. What is measured comes before.)
    let senders: Vec<_> = (0..3)
        .map(|_| {
            let (stop, handle) = (std::sync::Arc::clone(&stop), members[1].handle());
            let pin = pin.clone();
            std::thread::spawn(move || {
                pin(1);
                let mut sent = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) && handle.cast(vec![1u8; 16]).is_ok() {
                    sent += 1;
                }
                sent
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut got = 0u64;
    while Instant::now() < deadline {
        if let Some(Event::Cast { .. }) = members[0].recv_timeout(Duration::from_millis(50)).unwrap() {
            got += 1;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let sent: u64 = senders.into_iter().map(|s| s.join().unwrap()).sum();
    assert!(got > 1000, "{got} of {sent} casts delivered in 3 s: the sender's loop is starved");
    // Nobody was suspected: no view other than the one of two.
    while let Some(event) = members[0].try_recv().unwrap() {
        assert!(!matches!(&event, Event::View(v) if v.members.len() != 2), "{event:?}");
    }
}

/// A member dropped just before its runtime (the usual order at the end of a program) leaves the
/// group: the others install a view without it and never suspect it. Before, the stopping loop
/// returned at once, the leave was never sent, and the others suspected the member a second later.
#[test]
fn a_runtime_dropped_right_after_its_member_leaves_the_group_gracefully() {
    let (mut runtimes, addresses) = start(3);
    let mut members: Vec<Member> =
        runtimes.iter().map(|r| r.join(GroupConfig::new("drop").peers(addresses.clone())).unwrap()).collect();
    converge(&members, Duration::from_secs(30));
    // Suspicions while the group formed (a loaded machine) are not this test's business.
    let suspected = |runtimes: &[Runtime]| -> u64 {
        runtimes[..2].iter().map(|r| r.stats().unwrap().1.counter(motet_core::Counter::Suspected)).sum()
    };
    let before = suspected(&runtimes);
    let leaver = members.pop().unwrap();
    let gone = leaver.id();
    drop(leaver);
    drop(runtimes.pop().unwrap());
    let view = converge(&members, Duration::from_secs(30));
    assert!(!view.members.contains(&gone));
    assert_eq!(suspected(&runtimes), before, "the others saw a leave, not a failure");
}

/// A member whose application stops reading holds up only its own group's senders: the loop goes
/// on serving the process's other groups, nobody is suspected, and once the application reads
/// again every cast arrives, in order. Before, the loop stopped reading the socket once that
/// member's channel was full: every group of the process stalled, and the others suspected its
/// members a second later (Ensemble test 26, RMP test 32: a slow receiver throttles its senders
/// and is not declared dead).
#[test]
fn a_member_that_stops_reading_holds_up_its_senders_but_not_the_process() {
    let slow = RuntimeConfig { event_queue: 32, ..RuntimeConfig::default() };
    let runtimes = [Runtime::start(RuntimeConfig::default()).unwrap(), Runtime::start(slow).unwrap()];
    let addresses: Vec<String> = runtimes.iter().map(|r| r.local_addr().to_string()).collect();
    let join = |group: &str| -> Vec<Member> {
        runtimes.iter().map(|r| r.join(GroupConfig::new(group).peers(addresses.clone())).unwrap()).collect()
    };
    let (a, b) = (join("lag-a"), join("lag-b"));
    converge(&a, Duration::from_secs(30));
    converge(&b, Duration::from_secs(30));
    let suspected =
        || -> u64 { runtimes.iter().map(|r| r.stats().unwrap().1.counter(motet_core::Counter::Suspected)).sum() };
    let before = suspected();
    // a[1]'s application stops reading, and a[0] casts far more than its channel holds.
    const CASTS: u32 = 2_000;
    for k in 0..CASTS {
        a[0].cast(k.to_le_bytes().to_vec()).unwrap();
    }
    // Meanwhile the other group of the same process goes on: b[1] receives b[0]'s casts.
    let deadline = Instant::now() + Duration::from_secs(3);
    let (mut sent, mut got) = (0u32, 0u32);
    while Instant::now() < deadline {
        b[0].cast(vec![7u8; 8]).unwrap();
        sent += 1;
        while let Some(event) = b[1].recv_timeout(Duration::from_millis(10)).unwrap() {
            got += u32::from(matches!(event, Event::Cast { .. }));
        }
    }
    assert!(got + 20 >= sent, "the other group stalled: {got} of {sent} casts delivered");
    assert_eq!(suspected(), before, "a member that stopped reading was suspected");
    assert!(runtimes[1].stats().unwrap().0.lags >= 1, "the lag was said");
    // a[1] reads again: every cast, in order, in the one view of two.
    let mut next = 0u32;
    receive_until(&a[1], Duration::from_secs(30), |event| {
        match event {
            Event::Cast { data, .. } => {
                assert_eq!(&data[..], &next.to_le_bytes()[..], "FIFO across the lag");
                next += 1;
            }
            Event::View(view) => assert_eq!(view.members.len(), 2, "{view:?}"),
            _ => {}
        }
        next == CASTS
    });
    assert_eq!(next, CASTS);
    assert_eq!(suspected(), before);
}

/// An application that casts and never reads its events is refused with `QueueFull` once its
/// parked casts reach the loop's bound, at `cast`, and loses none: before, `cast` returned `Ok`
/// and the loop refused the casts past 65,536 (`actions_refused`), which were then lost. Once
/// it reads, every accepted cast arrives, once, in order.
#[test]
fn a_member_that_casts_without_reading_is_refused_at_cast_and_loses_nothing() {
    casts_without_reading(RuntimeConfig::default(), Duration::from_secs(60), true);
}

/// The same with an `event_queue` of 8: once the member reads, its parked casts go 8 at a time,
/// each batch once the application has taken half of the last. The loop waited before taking
/// them (it did not count parked actions to retry as due), so each batch came a timer's tick
/// later: about 100 casts a second (measured), at which this test's casts would take longer than
/// ten minutes.
#[test]
fn parked_casts_go_at_the_end_of_each_lag() {
    casts_without_reading(RuntimeConfig { event_queue: 8, ..RuntimeConfig::default() }, Duration::from_secs(60), false);
}

/// The same in payload bytes, with messages of 1 MiB: refused at 64 MiB parked (a channel of
/// 1 MiB, `event_queue_bytes`, fills first, then the member's overflow); every accepted cast
/// arrives, then the `Exit` of a leave asked at the bound.
#[test]
fn a_member_is_refused_at_cast_at_its_parked_bytes() {
    let config = RuntimeConfig { event_queue_bytes: 1 << 20, ..RuntimeConfig::default() };
    let runtime = Runtime::start(config).unwrap();
    let member = runtime.join(GroupConfig::new("park-bytes")).unwrap();
    receive_until(&member, Duration::from_secs(10), |event| matches!(event, Event::View(_)));
    let accepted = cast_until_refused(&member, 1 << 20);
    assert!((60..200).contains(&accepted), "refused after {accepted} casts of 1 MiB");
    member.handle().leave().unwrap();
    let mut next = 0u32;
    receive_until(&member, Duration::from_secs(60), |event| {
        if let Event::Cast { data, .. } = event {
            assert_eq!(&data[..4], &next.to_le_bytes()[..], "once, in order");
            next += 1;
        }
        *event == Event::Exit
    });
    assert_eq!(next, accepted);
    assert_eq!(runtime.stats().unwrap().0.actions_refused, 0, "the loop refused an accepted action");
}

/// Casts of `size` bytes (numbered in their first four) until `cast` refuses them for the
/// member's parked messages; how many it accepted. The loop refused none of them.
fn cast_until_refused(member: &Member, size: usize) -> u32 {
    let mut accepted = 0u32;
    let refused = loop {
        let mut data = vec![0u8; size.max(4)];
        data[..4].copy_from_slice(&accepted.to_le_bytes());
        match member.cast(data) {
            Ok(()) => accepted += 1,
            Err(motet_runtime::Error::QueueFull(what)) => break what,
            Err(other) => panic!("cast {accepted}: {other}"),
        }
        assert!(accepted < 300_000, "never refused: the parked casts are not bounded at cast");
    };
    assert_eq!(refused, "parked actions");
    accepted
}

/// `leave`: the member then leaves, with its parked casts at their bound (65,536 of them), which
/// must not refuse the leave (the handles count only messages; refused, it would leave the member
/// in its group); every accepted cast arrives, then `Exit`. Else it casts once more, once it has
/// read them.
fn casts_without_reading(config: RuntimeConfig, limit: Duration, leave: bool) {
    let runtime = Runtime::start(config).unwrap();
    let member = runtime.join(GroupConfig::new("park-bound")).unwrap();
    receive_until(&member, Duration::from_secs(10), |event| matches!(event, Event::View(_)));
    let accepted = cast_until_refused(&member, 4);
    assert!(accepted >= 60_000, "refused after only {accepted} casts");
    let (stats, _) = runtime.stats().unwrap();
    assert_eq!(stats.actions_refused, 0, "the loop refused casts that cast had accepted");
    if leave {
        member.handle().leave().unwrap();
    }
    let mut next = 0u32;
    receive_until(&member, limit, |event| {
        if let Event::Cast { data, .. } = event {
            assert_eq!(&data[..], &next.to_le_bytes()[..], "once, in order");
            next += 1;
        }
        if leave {
            *event == Event::Exit
        } else {
            next == accepted
        }
    });
    assert_eq!(next, accepted);
    assert_eq!(runtime.stats().unwrap().0.actions_refused, 0, "the loop refused an accepted action");
    if !leave {
        // With room again, casts are taken.
        member.cast(accepted.to_le_bytes().to_vec()).unwrap();
    }
}

/// A member that lags and is then dropped leaves gracefully and promptly: its group is no longer
/// told that it lags once nobody listens to it, so its leave (a layer's own cast) and the flush
/// that follows go at the others' pace, and nobody suspects it.
#[test]
fn a_lagging_member_that_is_dropped_leaves_without_being_suspected() {
    let slow = RuntimeConfig { event_queue: 16, ..RuntimeConfig::default() };
    let runtimes = [Runtime::start(RuntimeConfig::default()).unwrap(), Runtime::start(slow).unwrap()];
    let addresses: Vec<String> = runtimes.iter().map(|r| r.local_addr().to_string()).collect();
    let mut a: Vec<Member> =
        runtimes.iter().map(|r| r.join(GroupConfig::new("lag-drop").peers(addresses.clone())).unwrap()).collect();
    converge(&a, Duration::from_secs(30));
    let suspected =
        || -> u64 { runtimes.iter().map(|r| r.stats().unwrap().1.counter(motet_core::Counter::Suspected)).sum() };
    let before = suspected();
    for k in 0..500u32 {
        a[0].cast(k.to_le_bytes().to_vec()).unwrap();
    }
    // a[1] lags (it reads nothing), then its application drops it.
    let deadline = Instant::now() + Duration::from_secs(10);
    while runtimes[1].stats().unwrap().0.lags == 0 {
        assert!(Instant::now() < deadline, "a[1] never lagged");
        std::thread::sleep(Duration::from_millis(10));
    }
    let gone = a.pop().unwrap();
    let (id, dropped) = (gone.id(), Instant::now());
    drop(gone);
    receive_until(&a[0], Duration::from_secs(10), |event| matches!(event, Event::View(v) if !v.members.contains(&id)));
    assert!(dropped.elapsed() < Duration::from_secs(5), "the leave took {:?}", dropped.elapsed());
    assert_eq!(suspected(), before, "the others saw a leave, not a failure");
}

/// State transfer through the threaded runtime: a provider that streams its chunks (64 KiB each)
/// without pausing, to a receiver that does not read yet, is refused at `xfer_chunk` once its
/// held chunks are at their bound (64 MiB), and loses none: the loop refuses nothing it
/// accepted, and the receiver gets every chunk once, in order. Before chunks were counted at the
/// handle, `xfer_chunk` accepted chunks past the loop's bound and the loop dropped them.
#[test]
fn a_provider_is_refused_at_xfer_chunk_and_loses_nothing() {
    const CHUNK: usize = 64 << 10;
    let (runtimes, addresses) = start(2);
    let config = GroupConfig::new("xfer-bound").stack("vsync+Xfer").peers(addresses);
    let members: Vec<Member> = runtimes.iter().map(|r| r.join(config.clone()).unwrap()).collect();
    // The transfer view: whoever is told to provide streams, the other receives.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (provider, view) = 'found: loop {
        for (i, m) in members.iter().enumerate() {
            while let Some(event) = m.try_recv().unwrap() {
                if let Event::XferProvide { view } = event {
                    break 'found (i, view);
                }
            }
        }
        assert!(Instant::now() < deadline, "no state transfer within 30 s");
        std::thread::sleep(Duration::from_millis(10));
    };
    let (provider, receiver) = (&members[provider], &members[1 - provider]);
    let chunk = |n: u32| {
        let mut data = vec![0u8; CHUNK];
        data[..4].copy_from_slice(&n.to_le_bytes());
        data
    };
    let mut accepted = 0u32;
    let refused = loop {
        match provider.xfer_chunk(view, chunk(accepted), false) {
            Ok(()) => accepted += 1,
            Err(motet_runtime::Error::QueueFull(what)) => break what,
            Err(other) => panic!("chunk {accepted}: {other}"),
        }
        assert!(accepted < 5_000, "never refused: the held chunks are not bounded at xfer_chunk");
    };
    assert_eq!(refused, "parked state-transfer actions");
    assert!(accepted >= 1_000, "refused after only {accepted} chunks of 64 KiB");
    // The receiver reads; the provider retries until its last chunk is taken, then is done.
    let (mut next, mut last_sent) = (0u32, false);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if !last_sent {
            match provider.xfer_chunk(view, chunk(accepted), true) {
                Ok(()) => (accepted, last_sent) = (accepted + 1, true),
                Err(motet_runtime::Error::QueueFull(_)) => {}
                Err(other) => panic!("the last chunk: {other}"),
            }
        }
        if let Some(Event::XferChunk { data, last, .. }) = receiver.recv_timeout(Duration::from_millis(1)).unwrap() {
            assert_eq!(&data[..4], &next.to_le_bytes()[..], "once, in order");
            next += 1;
            if last {
                break;
            }
        }
        assert!(Instant::now() < deadline, "{next} of {accepted} chunks within 120 s");
    }
    assert_eq!(next, accepted);
    for runtime in &runtimes {
        assert_eq!(runtime.stats().unwrap().0.actions_refused, 0, "the loop refused an accepted action");
    }
    // Both done: the group leaves the transfer view for a normal one.
    provider.xfer_done(view).unwrap();
    receiver.xfer_done(view).unwrap();
    receive_until(receiver, Duration::from_secs(30), |event| matches!(event, Event::View(v) if !v.xfer));
}
