//! `motet perf throughput`: M member processes all casting, in blocks that take turns with
//! blocks of raw UDP datagrams between the same processes (see the parent module).

use super::*;

/// Checks `motet perf throughput`'s command line, and where its processes run.
pub(super) fn throughput_placement(args: &ThroughputArgs) -> Result<Placement, String> {
    if args.members < 2 {
        return Err("--members must be at least 2".into());
    }
    if args.blocks == 0 || args.seconds == 0 {
        return Err("--blocks and --seconds must be at least 1: a ratio needs a block of each path".into());
    }
    check_size(args.size)?;
    // Here, not at the join: the peer processes are spawned first, and each printed the error.
    crate::check_stack_flag(&args.stack)?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    match args.pin.as_str() {
        "none" => Ok((None, None)),
        "split" if cpus >= 2 => Ok((Some(0), Some(1))),
        "split" => Err(format!("--pin split needs two CPUs; this machine has {cpus}")),
        other => Err(format!("--pin {other}: expected none or split")),
    }
}

pub(super) fn throughput(args: &ThroughputArgs, (my_cpu, their_cpu): Placement) -> Result<(), String> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    // Pinned, the other members all spin on CPU 1.
    let (spinning, on) = if their_cpu.is_some() { (args.members - 1, 1) } else { (args.members, cpus) };
    if args.busy_poll && spinning > on {
        eprintln!(
            "motet perf: warning: {spinning} spinning processes on {on} CPUs starve each other; busy-poll figures here measure the scheduler, not Motet"
        );
    }
    let addresses = free_addresses(2 * args.members)?;
    // Not before: the ports are free until bound, and none is handed out to a socket bound to port
    // 0 meanwhile (`crate::ports`).
    let (members, udps) = addresses.split_at(args.members);
    let group = format!("perf-throughput-{}", std::process::id());
    let raw = UdpSocket::bind(udps[0]).map_err(|e| e.to_string())?;
    match args.busy_poll {
        true => raw.set_nonblocking(true),
        false => raw.set_read_timeout(Some(Duration::from_millis(1))),
    }
    .map_err(|e| e.to_string())?;
    let mut peers = Vec::new();
    for i in 1..args.members {
        let mut peer_args = vec![
            "--role".to_string(),
            "blast".into(),
            "--group".into(),
            group.clone(),
            "--stack".into(),
            args.stack.clone(),
            "--bind".into(),
            members[i].to_string(),
            "--peers".into(),
            members.iter().map(|m| m.to_string()).collect::<Vec<_>>().join(","),
            "--udp-bind".into(),
            udps[i].to_string(),
            "--udp-target".into(),
            udps[0].to_string(),
            "--size".into(),
            args.size.to_string(),
            "--rate".into(),
            args.rate.to_string(),
        ];
        peer_args.extend(mode_args(args.busy_poll, args.receive_offload));
        if let Some(cpu) = their_cpu {
            peer_args.extend(["--cpu".into(), cpu.to_string()]);
        }
        peers.push(PeerProcess::spawn(&peer_args)?);
    }
    pin(my_cpu)?;
    let config = runtime_config(members[0], args.busy_poll, args.receive_offload);
    let offload = config.receive_offload_on();
    let (mut event_loop, me) = join(config, &group, &args.stack, &members[1..], true, Some(throughput_params()))?;
    wait_for_view(&mut event_loop, args.members, Duration::from_secs(60))?;
    // Blocks take turns as in `perf latency` (raw, Motet, Motet, raw, ...), so that a drift of
    // the machine's speed, or a placement the scheduler keeps for a while, weighs on both paths
    // alike: measured one after the other, the raw rate moved by half between runs. The first
    // block of each path also warms it up.
    let length = Duration::from_secs_f64(args.seconds as f64 / args.blocks as f64);
    let (mut udp, mut motet) = (Tally::default(), Tally::default());
    // Every cast carries the same bytes, as every raw datagram does: the application's cost of
    // making a message is not Motet's (the change was within the runs' noise, three each).
    let payload = Bytes::from(stamp(args.size, 0));
    let mut buf = vec![0u8; 65536];
    let raw_at = |block: u32| block.is_multiple_of(4) || block % 4 == 3;
    for block in 0..2 * args.blocks {
        let is_raw = raw_at(block);
        let first = if is_raw { udp.blocks.is_empty() } else { motet.blocks.is_empty() };
        let settle = if first { Duration::from_secs(1) } else { BLOCK_SETTLE };
        if is_raw {
            // The peers blast raw datagrams at our raw socket until we say otherwise (two raw
            // blocks in a row need no switch between them); we stop casting meanwhile.
            if block == 0 || !raw_at(block - 1) {
                if args.rate > 0 {
                    // Offered load: every member stops offering and empties its parked casts
                    // first, while nobody blasts raw datagrams.
                    stop_offering(&mut event_loop, me, args.members - 1)?;
                }
                event_loop.cast(me, TO_RAW.into()).map_err(|e| e.to_string())?;
            }
            udp.add(raw_block(&raw, &mut event_loop, me, settle, length, &mut buf)?);
            if block + 1 < 2 * args.blocks && !raw_at(block + 1) {
                event_loop.cast(me, TO_MOTET.into()).map_err(|e| e.to_string())?;
            }
        } else {
            motet.add(motet_block(&mut event_loop, me, args, settle, length, &payload)?);
        }
        all_alive(&mut peers)?;
    }
    drop(peers);
    let (rate, udp_rate) = (motet.rate(), udp.rate());
    let (mb, others) = (motet.bytes as f64 / motet.secs / 1e6, motet.from_others as f64 / motet.secs);
    let report = json!({
        "stack": args.stack,
        "members": args.members,
        "size": args.size,
        "busy_poll": args.busy_poll,
        "receive_offload": offload,
        "receive_offload_on": event_loop.runtime_stats().receive_offload,
        "offered_per_member": args.rate,
        "offered_msgs_per_s": (motet.offered as f64 / motet.secs).round(),
        "refused_msgs_per_s": (motet.refused as f64 / motet.secs).round(),
        "pin": args.pin,
        "blocks": args.blocks,
        "msgs_per_s": rate.round(),
        "mb_per_s": round(mb),
        "msgs_per_s_from_others": others.round(),
        "udp_msgs_per_s": udp_rate.round(),
        "ratio": round(rate / udp_rate),
        "ratio_from_others": round(others / udp_rate),
        "bypass_hit_rate": event_loop.bypass_stats().hit_rate().map(round),
        "bypass_refused_by": event_loop.bypass_stats().refused_by,
        "msgs_per_s_blocks": motet.blocks.iter().map(|r| r.round()).collect::<Vec<_>>(),
        "udp_msgs_per_s_blocks": udp.blocks.iter().map(|r| r.round()).collect::<Vec<_>>(),
    });
    if args.json {
        println!("{report}");
    } else {
        println!(
            "throughput at one member, {} members casting {} B on `{}`: {:.0} msgs/s ({:.2} MB/s), {:.0} of them from the others; raw UDP from {} senders: {:.0} msgs/s; ratio {:.2} counting this member's own casts, {:.2} like for like (from the others: the raw baseline has no own messages), {} blocks of each",
            args.members,
            args.size,
            args.stack,
            rate,
            mb,
            others,
            args.members - 1,
            udp_rate,
            rate / udp_rate,
            others / udp_rate,
            args.blocks
        );
        if args.rate > 0 {
            println!(
                "offered by this member: {:.0} casts/s of the {} asked, {:.0} of them refused (its parked lot full)",
                motet.offered as f64 / motet.secs,
                args.rate,
                motet.refused as f64 / motet.secs
            );
        }
    }
    Ok(())
}

/// At the start of each throughput block after a path's first, time not counted: the other
/// path's traffic drains and this one's ramps up (the peers hear of the switch by a cast).
const BLOCK_SETTLE: Duration = Duration::from_millis(250);

/// A process serving its raw socket checks the clock once per this many datagrams (or empty
/// reads) ...
pub(super) const RAW_CHECK_EVERY: u32 = 64;
/// ... and serves its event loop (heartbeats, the switch back) once per this long: one clock
/// read per 64 receive calls and one loop turn per 5 ms are small beside the receive calls
/// themselves (not measured apart), and the switch back is heard within 5 ms.
pub(super) const RAW_LOOP_EVERY: Duration = Duration::from_millis(5);

/// Casts a throughput process offers between two turns of its loop.
const CASTS_PER_TURN: usize = 1024;

/// The protocol parameters of the throughput group: a raw block floods the loopback device, whose
/// backlog then drops the group's own datagrams as well (heartbeats included), so the failure
/// detector waits 30 s instead of 1 s before it suspects a member; otherwise each raw block
/// split the group into singletons, and a singleton's window never closes. The flush timeout
/// `safe`'s and `pt2pt`'s acknowledgement timeouts and the credit timeouts must outlast the detector's
/// (`StackConfig::validate`).
pub(super) fn throughput_params() -> StackConfig {
    let mut params = StackConfig::default();
    params.suspect.timeout = motet_core::Duration::from_millis(30_000);
    params.intra.flush_timeout = motet_core::Duration::from_millis(60_000);
    params.safe.ack_timeout = motet_core::Duration::from_millis(60_000);
    params.pt2pt.ack_timeout = motet_core::Duration::from_millis(60_000);
    params.mflow.credit_timeout = motet_core::Duration::from_millis(60_000);
    params.pt2ptw.credit_timeout = motet_core::Duration::from_millis(60_000);
    params
}

/// What one path delivered, over all its blocks.
#[derive(Default)]
struct Tally {
    msgs: u64,
    from_others: u64,
    bytes: u64,
    /// Casts this process offered, and of them those refused (`offer`).
    offered: u64,
    refused: u64,
    secs: f64,
    /// Each block's rate, msgs/s.
    blocks: Vec<f64>,
}

impl Tally {
    fn add(&mut self, block: Tally) {
        self.blocks.push(block.msgs as f64 / block.secs);
        self.msgs += block.msgs;
        self.from_others += block.from_others;
        self.bytes += block.bytes;
        self.offered += block.offered;
        self.refused += block.refused;
        self.secs += block.secs;
    }

    fn rate(&self) -> f64 {
        self.msgs as f64 / self.secs
    }
}

/// Serves the event loop once without waiting, dropping what it delivers. Returns the last switch
/// (`TO_RAW`: true, `TO_MOTET`: false) cast by a member other than `me`, if any came.
pub(super) fn turn(event_loop: &mut EventLoop, me: EndpointId) -> Result<Option<bool>, String> {
    event_loop.poll(Some(Duration::ZERO)).map_err(|e| e.to_string())?;
    let mut switch = None;
    while let Some((_, event)) = event_loop.next_event() {
        if let Event::Cast { from, data } = event {
            if from != me && (data[..] == *TO_RAW || data[..] == *TO_MOTET) {
                switch = Some(data[..] == *TO_RAW);
            }
        }
    }
    Ok(switch)
}

/// One raw block: datagrams received on `raw` during `length` after `settle`, one `recv` each.
fn raw_block(
    raw: &UdpSocket,
    event_loop: &mut EventLoop,
    me: EndpointId,
    settle: Duration,
    length: Duration,
    buf: &mut [u8],
) -> Result<Tally, String> {
    let begin = Instant::now();
    let (mut last_turn, mut start) = (begin, None::<Instant>);
    let (mut msgs, mut reads) = (0u64, 0u32);
    loop {
        match raw.recv(buf) {
            Ok(_) => msgs += u64::from(start.is_some()),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                reads = RAW_CHECK_EVERY - 1; // nothing came: look at the clock now
            }
            Err(e) => return Err(format!("raw UDP receive: {e}")),
        }
        reads += 1;
        if reads < RAW_CHECK_EVERY {
            continue;
        }
        reads = 0;
        let now = Instant::now();
        match start {
            None if now - begin >= settle => start = Some(now),
            Some(at) if now - at >= length => {
                let secs = (now - at).as_secs_f64();
                return Ok(Tally { msgs, from_others: msgs, secs, ..Tally::default() });
            }
            _ => {}
        }
        // The group's heartbeats; the peers' last casts before the switch are dropped. While the
        // block settles, at every look at the clock: peers that were offered more than they could
        // send empty their parked casts before they switch (`drain_parked`), and they need this
        // member's credit and acknowledgements to do it (at one turn per 5 ms, a backlog of
        // 65,536 casts outlasted the block, which then measured no raw datagram at all).
        if start.is_none() || now - last_turn >= RAW_LOOP_EVERY {
            turn(event_loop, me)?;
            last_turn = now;
        }
    }
}

/// Offers casts of `payload`, at most `CASTS_PER_TURN` before the loop gets a turn (a member alone
/// in its view has no window to stop it):
/// - with a rate (`interval`), every cast due from `next_cast` on, open loop: what the member
///   cannot send yet waits parked, and what its parked lot has no room for is refused
///   (`Error::QueueFull`, the runtime's back-pressure), counted and dropped. Offered load beyond
///   saturation is then really offered: a generator that waited for the lot to empty offered only
///   what the group took, and could not show whether throughput levels off or collapses;
/// - without one, as long as fewer than 64 wait parked: just ahead of flow control.
pub(super) fn offer(
    event_loop: &mut EventLoop,
    me: EndpointId,
    payload: &Bytes,
    interval: Option<Duration>,
    next_cast: &mut Instant,
) -> Result<Offered, String> {
    let mut offered = Offered::default();
    while offered.casts < CASTS_PER_TURN as u64 {
        match interval {
            Some(interval) if Instant::now() >= *next_cast => *next_cast += interval,
            Some(_) => break,
            None if event_loop.parked(me) < 64 => {}
            None => break,
        }
        offered.casts += 1;
        match event_loop.cast(me, payload.clone()) {
            Ok(()) => {}
            Err(motet_runtime::Error::QueueFull(_)) => offered.refused += 1,
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(offered)
}

/// Casts offered by [`offer`], and of them those refused for want of room.
#[derive(Clone, Copy, Default)]
pub(super) struct Offered {
    pub(super) casts: u64,
    pub(super) refused: u64,
}

/// How long the members may take to empty their parked casts after offered load stops: up to
/// 65,536 each, in a debug build on a loaded machine.
const DRAIN_LIMIT: Duration = Duration::from_secs(120);

/// After a block of offered load: waits, offering nothing, until `me`'s parked casts are taken
/// (at most [`DRAIN_LIMIT`]), so that the raw block after it does not share the processes and the
/// loopback device with a backlog of casts. Returns the last switch another member cast
/// meanwhile, as [`turn`] does.
pub(super) fn drain_parked(event_loop: &mut EventLoop, me: EndpointId) -> Result<Option<bool>, String> {
    let deadline = Instant::now() + DRAIN_LIMIT;
    let mut switch = None;
    while event_loop.parked(me) > 0 {
        if Instant::now() > deadline {
            return Err(format!(
                "{} casts still parked {DRAIN_LIMIT:?} after the offered load stopped",
                event_loop.parked(me)
            ));
        }
        event_loop.poll(Some(Duration::from_millis(1))).map_err(|e| e.to_string())?;
        while let Some((_, event)) = event_loop.next_event() {
            if let Event::Cast { from, data } = event {
                if from != me && (data[..] == *TO_RAW || data[..] == *TO_MOTET) {
                    switch = Some(data[..] == *TO_RAW);
                }
            }
        }
    }
    Ok(switch)
}

/// Before a raw block with offered load: casts `STOP` (once its parked lot has room for it), and
/// waits until its own parked casts are taken and `others` members have answered `STOPPED` (each
/// casts it once its own parked casts are taken: delivered after all of them, as casts of one
/// sender are). Then nobody's backlog shares the raw block.
fn stop_offering(event_loop: &mut EventLoop, me: EndpointId, others: usize) -> Result<(), String> {
    let deadline = Instant::now() + DRAIN_LIMIT;
    let mut stopped = std::collections::BTreeSet::new();
    let mut asked = false;
    while !asked || event_loop.parked(me) > 0 || stopped.len() < others {
        if !asked {
            match event_loop.cast(me, STOP.into()) {
                Ok(()) => asked = true,
                Err(motet_runtime::Error::QueueFull(_)) => {} // its parked casts go first
                Err(e) => return Err(e.to_string()),
            }
        }
        if Instant::now() > deadline {
            return Err(format!(
                "after {DRAIN_LIMIT:?}, {} of {others} members had stopped offering and {} casts were still parked here",
                stopped.len(),
                event_loop.parked(me)
            ));
        }
        event_loop.poll(Some(Duration::from_millis(1))).map_err(|e| e.to_string())?;
        while let Some((_, event)) = event_loop.next_event() {
            if let Event::Cast { from, data } = event {
                if from != me && data[..] == *STOPPED {
                    stopped.insert(from);
                }
            }
        }
    }
    Ok(())
}

/// One Motet block: casts offered (at `args.rate`, or just ahead of flow control) and deliveries
/// counted during `length` after `settle`.
fn motet_block(
    event_loop: &mut EventLoop,
    me: EndpointId,
    args: &ThroughputArgs,
    settle: Duration,
    length: Duration,
    payload: &Bytes,
) -> Result<Tally, String> {
    let mut tally = Tally::default();
    let begin = Instant::now();
    let mut start: Option<Instant> = None;
    let interval = (args.rate > 0).then(|| Duration::from_secs_f64(1.0 / args.rate as f64));
    let mut next_cast = Instant::now();
    loop {
        let now = Instant::now();
        match start {
            None if now - begin >= settle => start = Some(now),
            Some(at) if now - at >= length => {
                tally.secs = (now - at).as_secs_f64();
                return Ok(tally);
            }
            _ => {}
        }
        let offered = offer(event_loop, me, payload, interval, &mut next_cast)?;
        if start.is_some() {
            tally.offered += offered.casts;
            tally.refused += offered.refused;
        }
        event_loop.poll(Some(Duration::from_millis(1))).map_err(|e| e.to_string())?;
        while let Some((_, event)) = event_loop.next_event() {
            // Stamps only: the switches between the paths are shorter.
            if let Event::Cast { from, data } = event {
                if start.is_some() && data.len() >= 8 {
                    tally.msgs += 1;
                    tally.from_others += u64::from(from != me);
                    tally.bytes += data.len() as u64;
                }
            }
        }
    }
}
