//! Compiled traces, the layers' own messages, reordering, and the traces that fan out and in.

use super::*;
use crate::event::{Action, Dn};
use crate::layer::Ev;
use crate::stack::{Bypass, Transmit};
use crate::testkit::Group;
use crate::view::RankSet;
use crate::LayerKind;
use motet_wire::Mux;

fn names(stack: &Stack, trace: Trace) -> Vec<&'static str> {
    let plan = stack.plans[trace as usize].expect("compiled");
    top_down(plan.active).map(|i| stack.view.stack.layers()[i].name()).collect()
}

#[test]
fn vsync_compiles_each_trace_to_the_layers_with_work() {
    let mut stack = Stack::new(crate::testing::view_of("vsync", 3), 1, Instant::ZERO).unwrap();
    stack.compile();
    // `appl` passes a cast or send on unchanged while nothing blocks it (a send's destination
    // is checked by the stack), and `local` keeps no state: the cast's loop-back leaves from
    // `local`'s place without asking it.
    assert_eq!(names(&stack, Trace::CastDn), ["mflow", "mnak"]);
    assert_eq!(names(&stack, Trace::SendDn), ["pt2ptw", "pt2pt"]);
    let local = stack.view.stack.layers().iter().position(|&k| k == LayerKind::Local);
    assert_eq!(stack.plans[Trace::CastDn as usize].unwrap().loopback.map(usize::from), local);
    assert_eq!(stack.plans[Trace::SendDn as usize].unwrap().loopback, None);
    assert_eq!(names(&stack, Trace::CastUp), ["appl", "mflow", "mnak"]);
    assert_eq!(names(&stack, Trace::SendUp), ["appl", "pt2ptw", "pt2pt"]);
    assert_eq!(stack.plans[Trace::CastDn as usize].unwrap().len_max, 1024, "frag passes one fragment");
    assert_eq!(stack.plans[Trace::CastUp as usize].unwrap().len_max, usize::MAX);
    // The layered path runs (a failure notice): the traces recompile, and `bottom` now checks
    // each arrival's origin.
    let mut failed = RankSet::new();
    failed.insert(2);
    stack.handle_fail(Instant::ZERO, failed);
    assert!(stack.plans_stale);
    stack.compile();
    assert!(names(&stack, Trace::CastUp).contains(&"bottom"), "{:?}", names(&stack, Trace::CastUp));
    assert!(!names(&stack, Trace::CastDn).contains(&"bottom"));
}

/// The layers' own messages (heartbeats, stability rows and columns), which no compiled trace
/// takes, do not compile the traces: each runs on the layered path, which makes them stale
/// again, so a compile for each was wasted (in a large group, several per application cast).
/// The next application message compiles them once.
#[test]
fn the_layers_own_messages_do_not_compile_the_traces() {
    let mut group = Group::with_bypass(4, "vsync", Bypass::On);
    group.act(0, Action::Cast(vec![1; 8].into())).unwrap();
    let compiles = || COMPILES.with(std::cell::Cell::get);
    let (before, layered) = (compiles(), TO_LAYERED.with(std::cell::Cell::get));
    // Heartbeats and a stability round, all on the layered path.
    group.tick(crate::Duration::from_millis(200));
    assert!(TO_LAYERED.with(std::cell::Cell::get) > layered, "the layers' own casts arrived, on the layered path");
    assert_eq!(compiles(), before, "nothing on a compiled trace arrived");
    group.act(1, Action::Cast(vec![2; 8].into())).unwrap();
    assert!(compiles() > before, "an application cast compiles the stale traces");
    assert_eq!(group.delivered, vec![2; 4], "both casts delivered everywhere");
}

#[test]
fn common_traces_run_compiled_and_equal_the_layered_path() {
    let mut group = Group::with_bypass(3, "vsync", Bypass::Diff);
    for k in 0..100u8 {
        group.act(0, Action::Cast(vec![k; 8].into())).unwrap();
        group.act(1, Action::send(2, vec![k; 8].into())).unwrap();
    }
    let stats: Vec<_> = group.nodes.iter().map(|(node, _)| node.bypass_stats()).collect();
    assert!(stats.iter().all(|s| s.hits > 0 && s.compiled == s.hits), "{stats:?}");
    // A fragmented cast and send (4,000 B: 4 parts of 1,024 B at most) are interpreted: split
    // going down, each part kept by `frag` going up and the last one joined, all on the bypass.
    group.act(2, Action::Cast(vec![1; 4000].into())).unwrap();
    group.act(0, Action::send(1, vec![2; 4000].into())).unwrap();
    let after: Vec<_> = group.nodes.iter().map(|(node, _)| node.bypass_stats()).collect();
    let new = |r: usize| (after[r].hits - stats[r].hits, after[r].misses - stats[r].misses);
    assert_eq!([new(0), new(1), new(2)], [(1 + 4, 0), (4 + 4, 0), (1, 0)], "{after:?}");
    assert!(after.iter().zip(&stats).all(|(a, s)| a.compiled == s.compiled), "interpreted");
    assert_eq!(group.delivered, [101, 102, 201], "casts everywhere, sends at ranks 1 and 2");
}

#[test]
fn credit_reports_and_acknowledgements_are_absorbed_on_the_bypass() {
    let mut group = Group::with_bypass(2, "vsync", Bypass::Diff);
    // Messages of 1,000 B (one fragment each), so that 256 of each cross report boundaries of
    // both windows, which count bytes.
    const LEN: usize = 1000;
    for k in 0..256u16 {
        let payload = |k: u16| [&k.to_be_bytes()[..], &[0; LEN - 2]].concat();
        group.act(1, Action::Cast(payload(k).into())).unwrap();
        group.act(1, Action::send(0, payload(k).into())).unwrap();
    }
    assert_eq!(group.delivered, [512, 256]);
    // Rank 0 reported credit every half `mflow` window and acknowledged sends every half
    // `pt2ptw` window; rank 1 kept both on the bypass, compared with the layered path at every
    // step.
    let config = crate::StackConfig::default();
    let bytes = 256 * (LEN as u64 + crate::layers::MESSAGE_CHARGE);
    let reports = bytes / (config.mflow.window_bytes / 2) + bytes / (config.pt2ptw.window_bytes / 2);
    assert!(reports >= 2, "a report from each layer at least: {reports}");
    let sender = group.nodes[1].0.bypass_stats();
    assert!(sender.absorbed >= reports, "{reports} reports: {sender:?}");
    let (_, stack) = group.nodes[1].0.stacks().next().expect("one stack");
    assert!(stack.buffered() < 512, "acknowledgements freed the send buffer: {}", stack.buffered());
}

/// Rank 1 casts five times; the network hands rank 0 casts 0, 2, 3, 2 again, then 1. With
/// `nak_delay` zero the gap is NAKed at once, as the trace's reply; with a delay, when the
/// timer finds it still open.
fn a_cast_ahead_of_a_gap_is_kept_on_the_bypass(nak_delay: crate::Duration) {
    let mut config = crate::StackConfig::default();
    config.mnak.nak_delay = nak_delay;
    let mut group = Group::with_config(2, "vsync", Bypass::Diff, config);
    let (sender, id) = &mut group.nodes[1];
    let mut datagrams = Vec::new();
    for k in 0..5u8 {
        sender.handle_action(group.now, *id, Action::Cast(vec![k; 8].into())).unwrap();
        while let Some(out) = sender.poll_transmit() {
            datagrams.push(out.to_bytes());
        }
    }
    assert_eq!(datagrams.len(), 5);
    let now = group.now;
    let receiver = &mut group.nodes[0].0;
    let deliver = |receiver: &mut crate::Node, k: usize| {
        let before = receiver.bypass_stats();
        receiver.handle_datagram(now, datagrams[k].clone());
        let after = receiver.bypass_stats();
        let transmits: Vec<_> = std::iter::from_fn(|| receiver.poll_transmit()).collect();
        (after.hits - before.hits, after.misses - before.misses, transmits)
    };
    let the_nak = |transmits: &[crate::Outgoing]| {
        assert_eq!(transmits.len(), 1, "one NAK");
        let nak = motet_wire::datagram::decode(transmits[0].to_bytes()).unwrap();
        assert_eq!(nak.head.mux, Mux::Send { dest: 1 });
        let expected = motet_wire::hdr::mnak::Header::Nak { origin: 1, lo: 1, hi: 1 };
        assert!(nak.hdrs.iter().any(|h| *h == expected), "{:?}", nak.hdrs);
    };
    assert_eq!(deliver(receiver, 0).0, 1, "in order: the bypass");
    // Ahead of the gap: kept on the bypass, and the gap (cast 1) is NAKed to the origin, at
    // once or later.
    let (hits, _, transmits) = deliver(receiver, 2);
    assert_eq!(hits, 1);
    match nak_delay.is_zero() {
        true => the_nak(&transmits),
        false => assert!(transmits.is_empty(), "the NAK waits for the gap to last"),
    }
    // Further ahead: kept on the bypass, nothing new to NAK.
    let (hits, _, transmits) = deliver(receiver, 3);
    assert_eq!((hits, transmits.len()), (1, 0));
    // A duplicate of a held cast is the layered path's (dropped there).
    let (hits, misses, _) = deliver(receiver, 2);
    assert_eq!((hits, misses), (0, 1));
    if !nak_delay.is_zero() {
        let due = receiver.poll_alarm().expect("the NAK's alarm");
        assert_eq!(due, now + nak_delay);
        receiver.handle_timeout(due);
        the_nak(&std::iter::from_fn(|| receiver.poll_transmit()).collect::<Vec<_>>());
    }
    // The cast that fills the gap takes the bypass too, and releases the run held behind it
    // (casts 2 and 3, each going on up on the bypass); the diff compares every step with the
    // layered twin.
    let (hits, misses, _) = deliver(receiver, 1);
    assert_eq!((hits, misses), (1, 0));
    receiver.settle();
    let delivered =
        std::iter::from_fn(|| receiver.poll_event()).filter(|(_, e)| matches!(e, crate::AppEvent::Cast { .. }));
    assert_eq!(delivered.count(), 4);
    receiver.check_invariants();
}

#[test]
fn a_cast_ahead_of_a_gap_is_kept_on_the_bypass_and_nak_ed_when_the_gap_lasts() {
    a_cast_ahead_of_a_gap_is_kept_on_the_bypass(crate::StackConfig::default().mnak.nak_delay);
}

#[test]
fn a_cast_ahead_of_a_gap_is_kept_on_the_bypass_with_its_nak() {
    a_cast_ahead_of_a_gap_is_kept_on_the_bypass(crate::Duration(0));
}

/// `pt2pt` on the bypass, as `mnak` above: rank 0 gets sends 0, 2, 3, 2 again, then 1 (of 0-4).
#[test]
fn a_send_ahead_of_a_gap_is_kept_on_the_bypass_and_the_send_that_fills_it_releases_the_run() {
    let mut group = Group::with_bypass(2, "vsync", Bypass::Diff);
    let (sender, id) = &mut group.nodes[1];
    let mut datagrams = Vec::new();
    for k in 0..5u8 {
        sender.handle_action(group.now, *id, Action::send(0, vec![k; 8].into())).unwrap();
        datagrams.extend(std::iter::from_fn(|| sender.poll_transmit()).map(|out| out.to_bytes()));
    }
    assert_eq!(datagrams.len(), 5);
    let receiver = &mut group.nodes[0].0;
    let outcomes: Vec<_> = [0, 2, 3, 2, 1]
        .into_iter()
        .map(|k| {
            let before = receiver.bypass_stats();
            receiver.handle_datagram(group.now, datagrams[k].clone());
            let after = receiver.bypass_stats();
            (after.hits - before.hits, after.misses - before.misses)
        })
        .collect();
    // The duplicate is the layered path's (dropped and answered with an ack there).
    assert_eq!(outcomes, [(1, 0), (1, 0), (1, 0), (0, 1), (1, 0)]);
    receiver.settle();
    let delivered: Vec<u8> = std::iter::from_fn(|| receiver.poll_event())
        .filter_map(|(_, e)| match e {
            crate::AppEvent::Send { payload, .. } => Some(payload.to_bytes()[0]),
            _ => None,
        })
        .collect();
    assert_eq!(delivered, [0, 1, 2, 3]);
    receiver.check_invariants();
}

/// The seeded bugs: a split that loses its last part, a release that is forgotten. The diff
/// names what differs; with the bypass on and no check, nothing notices at once.
#[test]
fn the_diff_catches_a_lost_part_and_a_forgotten_release() {
    let caught = |hook: &'static std::thread::LocalKey<std::cell::Cell<bool>>, run: fn(Bypass)| {
        hook.with(|h| h.set(true));
        let result = std::panic::catch_unwind(|| run(Bypass::Diff));
        let quiet = std::panic::catch_unwind(|| run(Bypass::On)).is_ok();
        hook.with(|h| h.set(false));
        let message = result.err().and_then(|p| p.downcast_ref::<String>().cloned()).expect("the diff catches it");
        (message, quiet)
    };
    let split = |bypass| {
        let mut group = Group::with_bypass(2, "vsync", bypass);
        group.act(1, Action::Cast(vec![7; 4000].into())).unwrap();
    };
    let (message, quiet) = caught(&SKIP_LAST_PART, split);
    assert!(message.contains("transmits differ"), "{message}");
    assert!(quiet);
    let release = |bypass| {
        let mut group = Group::with_bypass(2, "vsync", bypass);
        let (sender, id) = &mut group.nodes[1];
        let mut datagrams = Vec::new();
        for k in 0..3u8 {
            sender.handle_action(group.now, *id, Action::Cast(vec![k; 8].into())).unwrap();
            datagrams.extend(std::iter::from_fn(|| sender.poll_transmit()).map(|out| out.to_bytes()));
        }
        for k in [0, 2, 1] {
            group.nodes[0].0.handle_datagram(group.now, datagrams[k].clone());
        }
    };
    let (message, quiet) = caught(&SKIP_RELEASE, release);
    assert!(message.contains("differ"), "{message}");
    assert!(quiet);
}

#[test]
fn the_diff_catches_a_false_inert_declaration() {
    for layer in [LayerKind::Mflow, LayerKind::Local, LayerKind::Pt2ptw] {
        FORCE_INERT.with(|f| f.set(Some(layer)));
        let caught = std::panic::catch_unwind(|| {
            let mut group = Group::with_bypass(2, "vsync", Bypass::Diff);
            for k in 0..40u8 {
                group.act(0, Action::Cast(vec![k; 8].into())).unwrap();
                group.act(1, Action::send(0, vec![k; 8].into())).unwrap();
            }
        });
        FORCE_INERT.with(|f| f.set(None));
        let message = caught.expect_err("a false inert declaration went unnoticed");
        let message = message.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(message.contains("bypass diff"), "{layer:?}: {message}");
    }
}

/// Causal order on the bypass (`causal`'s declarations). Four members: rank 0 casts Q; ranks 1
/// and 3 deliver it and each cast an answer (R, T) that depends on it. Rank 2 gets R and T
/// first: each is held, on the bypass. Then Q: delivered, and it releases R then T, in the order
/// of the layered handler's `deliver_ready` (every step compared with the layered twin).
fn causal_answers_wait_for_their_question(bypass: Bypass) -> Vec<u8> {
    let mut group = Group::with_bypass(4, "causal", bypass);
    let now = group.now;
    let cast = |group: &mut Group, rank: usize, tag: u8| {
        let (node, id) = &mut group.nodes[rank];
        node.handle_action(now, *id, Action::Cast(vec![tag; 8].into())).unwrap();
        let out: Vec<_> = std::iter::from_fn(|| node.poll_transmit()).collect();
        let casts: Vec<_> = out.iter().filter(|o| matches!(o.to, crate::Destination::Cast { .. })).collect();
        assert_eq!(casts.len(), 1, "one cast datagram");
        casts[0].to_bytes()
    };
    let question = cast(&mut group, 0, 1);
    for rank in [1, 3] {
        group.nodes[rank].0.handle_datagram(now, question.clone());
    }
    let answers = [cast(&mut group, 1, 2), cast(&mut group, 3, 3)];
    let receiver = &mut group.nodes[2].0;
    let events = |receiver: &mut crate::Node| -> Vec<u8> {
        std::iter::from_fn(|| receiver.poll_event())
            .filter_map(|(_, e)| match e {
                crate::AppEvent::Cast { payload, .. } => Some(payload.to_bytes()[0]),
                _ => None,
            })
            .collect()
    };
    for answer in &answers {
        let before = receiver.bypass_stats().hits;
        receiver.handle_datagram(now, answer.clone());
        if bypass != Bypass::Off {
            assert_eq!(receiver.bypass_stats().hits, before + 1, "held on the bypass");
        }
        assert!(events(receiver).is_empty(), "an answer waits for its question");
    }
    let before = receiver.bypass_stats();
    receiver.handle_datagram(now, question);
    let after = receiver.bypass_stats();
    if bypass != Bypass::Off {
        assert_eq!((after.hits - before.hits, after.misses - before.misses), (1, 0), "{after:?}");
    }
    receiver.check_invariants();
    events(receiver)
}

#[test]
fn causal_casts_are_held_and_released_on_the_bypass_in_the_layered_order() {
    assert_eq!(causal_answers_wait_for_their_question(Bypass::Off), [1, 2, 3]);
    assert_eq!(causal_answers_wait_for_their_question(Bypass::Diff), [1, 2, 3]);
    // A release in another order than the handler's is caught by the diff.
    REVERSE_RELEASE.with(|b| b.set(true));
    let caught = std::panic::catch_unwind(|| causal_answers_wait_for_their_question(Bypass::Diff));
    let quiet = causal_answers_wait_for_their_question(Bypass::On);
    REVERSE_RELEASE.with(|b| b.set(false));
    let message = caught.err().and_then(|p| p.downcast_ref::<String>().cloned()).expect("the diff catches it");
    assert!(message.contains("bypass diff"), "{message}");
    assert_eq!(quiet, [1, 3, 2], "unnoticed without the diff, and not causal-order-breaking either");
}

/// Safe delivery on the bypass (`safe`'s declarations): rank 0 casts five times in one turn;
/// every member holds them (on the bypass) and acknowledges all five at the end of its turn; the
/// acknowledgement that makes them stable releases the five in order, on the bypass too.
fn safe_casts_wait_for_every_acknowledgement(bypass: Bypass) -> crate::testkit::Group {
    let mut group = Group::with_bypass(3, "safe", bypass);
    let (node, id) = &mut group.nodes[0];
    for k in 0..5u8 {
        node.handle_action(group.now, *id, Action::Cast(vec![k; 8].into())).unwrap();
    }
    group.pump();
    for k in 0..30u8 {
        group.act(usize::from(k % 3), Action::Cast(vec![k; 8].into())).unwrap();
    }
    group
}

#[test]
fn safe_casts_are_held_and_released_on_the_bypass_in_the_layered_order() {
    let layered = safe_casts_wait_for_every_acknowledgement(Bypass::Off);
    assert_eq!(layered.delivered, [35, 35, 35]);
    let group = safe_casts_wait_for_every_acknowledgement(Bypass::Diff);
    assert_eq!(group.delivered, [35, 35, 35]);
    for (node, _) in &group.nodes {
        let stats = node.bypass_stats();
        // Every cast, sent and received, and every acknowledgement took the bypass.
        assert!(stats.misses == 0 && stats.hits > 35 && stats.absorbed > 0, "{stats:?}");
    }
    // A release in another order than the handler's is caught by the diff.
    REVERSE_RELEASE.with(|b| b.set(true));
    let caught = std::panic::catch_unwind(|| safe_casts_wait_for_every_acknowledgement(Bypass::Diff));
    let quiet = std::panic::catch_unwind(|| safe_casts_wait_for_every_acknowledgement(Bypass::On)).is_ok();
    REVERSE_RELEASE.with(|b| b.set(false));
    let message = caught.err().and_then(|p| p.downcast_ref::<String>().cloned()).expect("the diff catches it");
    assert!(message.contains("bypass diff"), "{message}");
    assert!(quiet, "unnoticed without the diff");
}

/// Total order by a token on the bypass (`totem`'s declarations): the holder's casts go down
/// numbered on the bypass and are delivered on it everywhere; a member without the token asks for
/// it on the layered path. `totem` keeps every `vsync+Token` stack's casts out of compression
/// templates, since at first only rank 0 holds the token.
#[test]
fn the_token_holders_casts_take_the_bypass_and_the_others_ask_on_the_layered_path() {
    let mut group = Group::with_bypass(3, "vsync+Token", Bypass::Diff);
    for k in 0..20u8 {
        group.act(0, Action::Cast(vec![k; 8].into())).unwrap();
    }
    assert_eq!(group.delivered, [20, 20, 20]);
    let stats: Vec<_> = group.nodes.iter().map(|(node, _)| node.bypass_stats()).collect();
    assert!(stats.iter().all(|s| s.misses == 0 && s.hits >= 20), "{stats:?}");
    for (node, _) in &group.nodes {
        let (_, stack) = node.stacks().next().expect("one stack");
        assert!(stack.templates[0].is_none(), "no cast template: the token's holder differs");
        assert!(stack.templates[1].is_some(), "sends keep theirs");
    }
    group.act(1, Action::Cast(vec![9; 8].into())).unwrap();
    assert_eq!(group.delivered, [21, 21, 21]);
    let refused = group.nodes[1].0.bypass_stats().refused_by.get("totem").copied();
    assert_eq!(refused, Some(1), "no token: the layered path");
}

/// The reliable stacks' four traces have fused handlers (`fused::up_for`, `fused::dn_for`): a
/// shape the registry's property sets produce that lost its entry would fall back to the express
/// trace unseen. Their casts and sends then take them, equal to the layered path.
#[test]
fn the_reliable_stacks_traces_are_fused_and_equal_the_layered_path() {
    for preset in ["fifo", "vsync", "Frag+Flow+Local", "Local", "Frag"] {
        let spec = crate::StackSpec::parse(preset).unwrap().to_string();
        let mut stack = Stack::new(crate::testing::view_of(&spec, 3), 1, Instant::ZERO).unwrap();
        stack.compile();
        for trace in Trace::ALL {
            assert!(stack.fused[trace as usize].is_some(), "{preset}: {trace:?} {:?}", names(&stack, trace));
        }
    }
    for stack in ["vsync", "Local"] {
        let mut group = Group::with_bypass(3, stack, Bypass::Diff);
        for round in 0..50u8 {
            group.act(usize::from(round % 3), Action::Cast(vec![round].into())).unwrap();
            group.act(usize::from(round % 3), Action::send(Rank::from((round + 1) % 3), vec![round].into())).unwrap();
        }
        let stats = group.nodes[0].0.bypass_stats();
        assert!(stats.hits > 80 && stats.misses == 0, "{stack}: {stats:?}");
        // `Local` has no flow control, so its messages travel in the full form (`Stack::compress`:
        // nothing bounds the gap a compressed sequence number needs) and arrive interpreted; going
        // down (34 casts and sends at this member) they take the compiled traces as `vsync`'s do.
        match stack {
            "vsync" => assert_eq!(stats.compiled, stats.hits, "{stack}: {stats:?}"),
            _ => assert_eq!(stats.compiled, 34, "{stack}: {stats:?}"),
        }
    }
}

/// A member this sender has marked failed stays in the view until the view change excludes it,
/// and gets the sender's casts meanwhile, but no longer holds the sender's window back: nothing
/// bounds how far behind it falls, which a compressed datagram's sequence number needs. So
/// the casts go in the full form, their whole sequence number on the wire, until the next view.
#[test]
fn casts_go_in_the_full_form_while_a_member_is_marked_failed() {
    let mut stack = Stack::new(crate::testing::view_of("vsync", 3), 0, Instant::ZERO).unwrap();
    let cast = |stack: &mut Stack| {
        stack.handle_action(Instant::ZERO, Action::Cast(vec![7].into())).unwrap();
        let transmits: Vec<Transmit> = std::iter::from_fn(|| stack.poll_transmit()).collect();
        let cast = transmits.iter().find(|t| t.mux == Mux::Cast && t.msg.payload.len() == 1).expect("the cast");
        stack.compress(cast)
    };
    assert!(cast(&mut stack).is_some(), "compressed while every receiver is within the window");
    let mut failed = RankSet::new();
    failed.insert(2);
    let mflow = stack.mflow.expect("vsync has mflow");
    stack.queue.push_back((mflow, Ev::Dn(Dn::Fail(failed))));
    stack.run(Instant::ZERO);
    assert!(cast(&mut stack).is_none(), "rank 2 is marked failed: the full form");
}
