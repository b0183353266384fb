//! Zero allocation on the common path (issue 6, point 4): with the bypass on, a cast or send
//! handed to a node, encoded, decoded at a peer and delivered there makes no heap allocation
//! (bar a few per run from buffer growth; see `amortised`). `allocation_counter` (a counting global allocator, per thread) counts the
//! allocations of the loop; the test's own "network" (copying a datagram into one buffer) and the
//! application's actions are left out, as a real driver receives into buffers it owns.
//!
//! The same loop with the bypass off is counted too: it does allocate, which shows the counter
//! works (a test that cannot fail proves nothing).

use allocation_counter::{measure, opt_out};
use motet_core::testkit::Group;
use motet_core::{Action, AppEvent, Bypass, Duration, Payload};

/// Runs `f` without counting its allocations.
fn uncounted<T>(f: impl FnOnce() -> T) -> T {
    let mut out = None;
    opt_out(|| out = Some(f()));
    out.expect("ran")
}

/// Allocations counted in one run.
#[derive(Debug, Default)]
struct Count {
    /// In the sender's calls (the action, its transmits, its events).
    sender: u64,
    /// In the receiver's calls for datagrams that made no reply.
    receiver: u64,
    /// Receipts that also sent a reply (an acknowledgement or a credit report) ...
    replies: u64,
    /// ... and the allocations counted in those calls.
    with_reply: u64,
}

/// `count` messages from rank 1 to rank 0 (casts, or sends when `send`), each one taken down
/// the sender's node, carried, and delivered at the receiver. The receiver's replies are carried
/// back uncounted, and every 64 messages the group's timers run, uncounted (stability, gossip):
/// that is the layers' own traffic, not the common trace, and it keeps the buffers in steady
/// state.
fn run(stack: &str, bypass: Bypass, send: bool, count: u64) -> Count {
    let mut group = Group::with_bypass(2, stack, bypass);
    let payload = Payload::from(vec![7u8; 64]);
    let mut n = Count::default();
    let mut delivered = 0;
    // The first pass warms up: queues, buffers and maps reach their steady sizes for this
    // cadence. The second is the one counted.
    for k in 0..2 * count {
        if k == count {
            (n, delivered) = (Count::default(), 0);
        }
        // The action is counted too: a send's one destination is inline in it.
        let act = counted(&mut n.sender, || action(send, &payload));
        let now = group.now;
        let (sender, id) = &mut group.nodes[1];
        let id = *id;
        n.sender += measure(|| {
            sender.handle_action(now, id, act).unwrap();
        })
        .count_total;
        while let Some(out) = counted(&mut n.sender, || group.nodes[1].0.poll_transmit()) {
            // The network: one contiguous datagram in a shared buffer, as a driver receives it.
            let (datagram, keep) = uncounted(|| {
                let datagram = out.to_bytes();
                let keep = datagram.clone();
                (datagram, keep)
            });
            if out.to.addresses().into_iter().any(|a| a == motet_core::Address::Sim(0)) {
                let allocations = measure(|| group.nodes[0].0.handle_datagram(now, datagram)).count_total;
                let mut replied = false;
                uncounted(|| {
                    while let Some(reply) = group.nodes[0].0.poll_transmit() {
                        replied = true;
                        group.nodes[1].0.handle_datagram(now, reply.to_bytes());
                    }
                });
                if replied {
                    n.replies += 1;
                    n.with_reply += allocations;
                } else {
                    n.receiver += allocations;
                }
            }
            uncounted(|| drop((keep, out)));
        }
        while let Some((_, event)) = counted(&mut n.sender, || group.nodes[1].0.poll_event()) {
            assert!(!matches!(event, AppEvent::View { .. }), "no view change");
        }
        while let Some((_, event)) = counted(&mut n.receiver, || group.nodes[0].0.poll_event()) {
            delivered += u64::from(matches!(event, AppEvent::Cast { .. } | AppEvent::Send { .. }));
        }
        if k % 64 == 63 {
            uncounted(|| {
                group.pump();
                group.tick(Duration::from_millis(1));
            });
        }
    }
    assert_eq!(delivered, count, "every message delivered at the receiver");
    eprintln!("`{stack}` {bypass:?}, {count} {}: {n:?}", if send { "sends" } else { "casts" });
    n
}

/// Runs `f`, adding its allocations to `into`.
fn counted<T>(into: &mut u64, f: impl FnOnce() -> T) -> T {
    let mut out = None;
    *into += measure(|| out = Some(f())).count_total;
    out.expect("ran")
}

fn action(send: bool, payload: &Payload) -> Action {
    if send {
        Action::send(0, payload.clone())
    } else {
        Action::Cast(payload.clone())
    }
}

/// What the common trace may allocate in `count` messages: nothing per message. A handful of
/// allocations remain over a run, from buffers growing past a size they had not reached and
/// from periodic bookkeeping (measured: at most 5 in 2,048 messages); the bound is one per 256
/// messages, where the layered path makes about 3 per message.
fn amortised(count: u64) -> u64 {
    count / 256
}

#[test]
fn casts_on_the_bypass_allocate_nothing_per_message() {
    // Enough casts for several credit reports: `mflow` reports every half window, 256 KiB,
    // which is 2,048 casts of 64 B (each counted as its bytes and 64).
    const CASTS: u64 = 16_384;
    for stack in ["fifo", "vsync", "causal"] {
        let n = run(stack, Bypass::On, false, CASTS);
        assert!(n.sender + n.receiver <= amortised(CASTS), "`{stack}`: {n:?}");
        // The credit report `mflow` owes every half window is a message of its own: its header
        // vector, and the copy `pt2pt` keeps for retransmission.
        assert!(n.replies >= 4, "the reports were measured: `{stack}`: {n:?}");
        assert!(n.replies <= CASTS / 16 && n.with_reply <= 3 * n.replies, "`{stack}`: {n:?}");
    }
}

#[test]
fn sends_on_the_bypass_allocate_nothing_per_message() {
    // `pt2ptw` acknowledges every half window, 32 KiB: 256 sends of 64 B.
    let n = run("vsync", Bypass::On, true, 2048);
    assert!(n.sender + n.receiver <= amortised(2048), "{n:?}");
    assert!(n.replies >= 4, "the acknowledgements were measured: {n:?}");
    assert!(n.replies <= 2048 / 8 && n.with_reply <= 3 * n.replies, "{n:?}");
}

#[test]
fn the_layered_path_allocates_so_the_counter_counts() {
    let n = run("vsync", Bypass::Off, false, 256);
    assert!(n.sender >= 2 * 256, "the layered path allocates per message: {n:?}");
}
