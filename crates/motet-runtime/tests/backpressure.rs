#![allow(clippy::disallowed_types)] // a test of real time: it waits on the wall clock
//! Back-pressure across real UDP on loopback: senders that outrun the network or their
//! application, members that stop reading, and the bounds on what waits for them (parked casts
//! and state-transfer chunks refused at the call, never lost after it; docs/runtime.md,
//! "Back-pressure").

mod common;

use common::{converge, receive_until, start};
use motet_runtime::{Event, GroupConfig, Member, Runtime, RuntimeConfig};
use std::time::{Duration, Instant};

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
    assert_eq!(refused, motet_runtime::Queue::Parked);
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
    let (provider, view) = transfer_view(&members);
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
    assert_eq!(refused, motet_runtime::Queue::ParkedTransfer);
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

/// Waits for the state-transfer view of `members`: which of them provides, and the view.
fn transfer_view(members: &[Member]) -> (usize, motet_runtime::ViewId) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for (i, m) in members.iter().enumerate() {
            while let Some(event) = m.try_recv().unwrap() {
                if let Event::XferProvide { view } = event {
                    return (i, view);
                }
            }
        }
        assert!(Instant::now() < deadline, "no state transfer within 30 s");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A member that leaves during a state transfer, with casts that the transfer view holds, does
/// not hold the group in that view for ever (the view ends only once every member says it is
/// done, and its leave waited behind those casts). A receiver says it is done as it leaves, so
/// its casts still go, then it leaves; the provider leaves at once, its held casts refused and
/// counted, and the others go on to a view without it.
#[test]
fn a_member_that_leaves_during_a_state_transfer_does_not_hold_the_group() {
    for leaver_provides in [false, true] {
        let (runtimes, addresses) = start(2);
        let name = format!("xfer-leave-{leaver_provides}");
        let config = GroupConfig::new(&name).stack("vsync+Xfer").peers(addresses);
        let members: Vec<Member> = runtimes.iter().map(|r| r.join(config.clone()).unwrap()).collect();
        let (provider, view) = transfer_view(&members);
        let leaver = if leaver_provides { provider } else { 1 - provider };
        let (gone, staying) = (&members[leaver], &members[1 - leaver]);
        for k in 0..3u8 {
            gone.cast(vec![k]).unwrap();
        }
        gone.handle().leave().unwrap();
        if !leaver_provides {
            // The provider's state, then its end of the transfer.
            staying.xfer_chunk(view, vec![9u8], true).unwrap();
            staying.xfer_done(view).unwrap();
        }
        let mut casts = Vec::new();
        receive_until(staying, Duration::from_secs(30), |event| match event {
            Event::Cast { data, .. } => {
                casts.push(data.to_vec());
                false
            }
            Event::View(v) => !v.members.contains(&gone.id()),
            _ => false,
        });
        receive_until(gone, Duration::from_secs(10), |event| *event == Event::Exit);
        let refused = runtimes[leaver].stats().unwrap().0.actions_refused;
        if leaver_provides {
            assert!(casts.is_empty(), "the provider's held casts went: {casts:?}");
            assert_eq!(refused, 3, "its held casts, refused and counted");
        } else {
            assert_eq!(casts, [vec![0u8], vec![1], vec![2]], "the receiver's casts, in order, before it left");
            assert_eq!(refused, 0);
        }
    }
}

/// While a runtime stops, its members' leaves running out (here a peer went silent, so the leave
/// waits for the failure detector): a cast is refused with `Stopped` at once, not accepted and
/// then dropped, and statistics are still answered. Before, the loop read no commands until the
/// leaves were over: casts returned `Ok` and were lost, uncounted, and statistics waited.
#[test]
#[allow(clippy::disallowed_methods)] // the stop runs on a thread of its own, as an application's may
fn a_stopping_runtime_refuses_casts_and_still_answers_statistics() {
    let (mut runtimes, addresses) = start(2);
    let config = GroupConfig::new("stopping").peers(addresses);
    let members: Vec<Member> = runtimes.iter().map(|r| r.join(config.clone()).unwrap()).collect();
    converge(&members, Duration::from_secs(30));
    // The peer stops at once: its leave never goes out, and it falls silent.
    let silent = runtimes.pop().unwrap();
    silent.shutdown(Duration::ZERO);
    let runtime = runtimes.pop().unwrap();
    let (handle, stats) = (members[0].handle(), runtime.stats_handle());
    let started = Instant::now();
    let stopping = std::thread::spawn(move || runtime.shutdown(Duration::from_secs(10)));
    let refused = loop {
        match handle.cast(vec![1u8]) {
            Ok(()) => {}
            Err(error) => break error,
        }
        assert!(started.elapsed() < Duration::from_secs(5), "casts still accepted 5 s after the stop");
        std::thread::sleep(Duration::from_millis(1));
    };
    let refused_after = started.elapsed();
    assert!(matches!(refused, motet_runtime::Error::Stopped), "{refused}");
    // Answered by a loop still stopping: the first refusal came while the leave ran (which
    // takes the failure detector's second); before, casts were taken until the loop was gone,
    // and statistics asked then found it gone.
    let answered = stats.get();
    assert!(answered.is_ok(), "statistics {answered:?}: casts were accepted for {refused_after:?} after the stop");
    stopping.join().unwrap();
}

/// While a runtime stops, a member whose leave is done gets `Exit` and then the end of its
/// events at once, not once every other member's leave has run out (here another group's, whose
/// peer went silent, so that leave waits for the failure detector). Before, the loop handed the
/// `Exit` but kept the channel open until it was gone: `recv` after `Exit` blocked that long.
/// A review's finding.
#[test]
#[allow(clippy::disallowed_methods)] // the stop runs on a thread of its own, as an application's may
fn a_member_that_left_while_the_runtime_stops_sees_its_events_end_at_once() {
    let (mut runtimes, addresses) = start(2);
    let config = GroupConfig::new("slow-leave").peers(addresses);
    let members: Vec<Member> = runtimes.iter().map(|r| r.join(config.clone()).unwrap()).collect();
    converge(&members, Duration::from_secs(30));
    let alone = runtimes[0].join(GroupConfig::new("quick-leave")).unwrap();
    receive_until(&alone, Duration::from_secs(10), |event| matches!(event, Event::View(_)));
    let silent = runtimes.pop().unwrap();
    silent.shutdown(Duration::ZERO);
    let runtime = runtimes.pop().unwrap();
    let stopping = std::thread::spawn(move || runtime.shutdown(Duration::from_secs(10)));
    receive_until(&alone, Duration::from_secs(10), |event| *event == Event::Exit);
    let after = alone.recv_timeout(Duration::from_secs(10));
    assert!(after.is_err(), "{after:?}");
    // It ended before the other member's leave (waiting for the failure detector) was over.
    let others: Vec<Event> = std::iter::from_fn(|| members[0].try_recv().ok().flatten()).collect();
    assert!(!others.contains(&Event::Exit), "the events ended only with the other leave: {others:?}");
    stopping.join().unwrap();
}

/// Actions the loop would refuse are refused at the call, with the typed error that says why:
/// a switch from a stack that cannot switch (or, in a transfer view, to one that cannot finish
/// the transfer), a chunk from a member that does not provide, a state-transfer action for a
/// view that is not the latest or not a transfer view. Before, each
/// returned `Ok` and the loop dropped it (counted in `actions_refused` or `stale_xfer`), and a
/// transfer could wait for a chunk that never came.
#[test]
fn actions_the_loop_would_refuse_are_refused_at_the_call() {
    use motet_core::ApiError;
    use motet_runtime::Error;
    let (runtimes, addresses) = start(2);
    let config = GroupConfig::new("refused-up-front").stack("vsync+Xfer").peers(addresses);
    let members: Vec<Member> = runtimes.iter().map(|r| r.join(config.clone()).unwrap()).collect();
    let (provider, view) = transfer_view(&members);
    let (provider, receiver) = (&members[provider], &members[1 - provider]);
    // The provider heard of the transfer view first; the receiver's handle may not have been
    // given it yet, and refuses its actions for it until then (the test raced so once, under the
    // whole suite's load). The transfer view is the first of both members.
    let deadline = Instant::now() + Duration::from_secs(10);
    while receiver.view().is_none_or(|members| members.len() < 2) {
        assert!(Instant::now() < deadline, "the receiver was not given the transfer view");
        std::thread::sleep(Duration::from_millis(5));
    }
    let not_in_transfer = |result: Result<(), Error>| matches!(result, Err(Error::Api(ApiError::NotInTransfer)));
    assert!(not_in_transfer(receiver.xfer_chunk(view, vec![1u8], true)), "a receiver's chunk");
    let stale = motet_runtime::ViewId { ltime: view.ltime + 7, coord: view.coord };
    assert!(not_in_transfer(provider.xfer_chunk(stale, vec![1u8], true)), "another view's chunk");
    assert!(not_in_transfer(receiver.xfer_done(stale)), "another view's end");
    // A switch that would leave the transfer to a stack without `Xfer`.
    let err = provider.switch("vsync").unwrap_err();
    assert!(matches!(&err, Error::Api(ApiError::SwitchInTransfer(_))), "{err}");
    // The genuine actions still go.
    provider.xfer_chunk(view, vec![1u8], true).unwrap();
    provider.xfer_done(view).unwrap();
    receiver.xfer_done(view).unwrap();

    // A stack without `switch` (vsync's layers but that one) cannot be switched from.
    let layers = "top:inter:heal:intra:leave:migrate:elect:merge:slander:sync:suspect:stable:appl:local:frag:pt2ptw:mflow:pt2pt:mnak:bottom";
    let fixed = runtimes[0].join(GroupConfig::new("no-switch").stack(layers)).unwrap();
    let mut first = None;
    receive_until(&fixed, Duration::from_secs(10), |event| match event {
        Event::View(v) => {
            first = Some(v.id);
            true
        }
        _ => false,
    });
    let err = fixed.switch("vsync").unwrap_err();
    assert!(matches!(&err, Error::Api(ApiError::NoSwitch(_))) && err.to_string().contains("+Switch"), "{err}");
    assert!(not_in_transfer(fixed.xfer_done(first.expect("a view"))), "not a transfer view");
    for runtime in &runtimes {
        let stats = runtime.stats().unwrap().0;
        assert_eq!((stats.actions_refused, stats.stale_xfer), (0, 0), "nothing refused in the loop");
    }
}
