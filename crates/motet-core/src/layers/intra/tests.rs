//! Unit tests of `intra` (kept apart: the layer's file holds its protocol).

use super::*;
use crate::layer::harness::{Harness, Out};

/// A flush report of rank `from` of a 4-member view for `round`, with nothing failed.
fn report(from: Rank, round: u64) -> Up {
    Up::FlushOk { from, round, counts: vec![0; 4].into(), failed: RankSet::new() }
}

/// `ms` milliseconds after the start.
fn at(ms: u64) -> crate::time::Instant {
    crate::time::Instant::ZERO + crate::time::Duration::from_millis(ms)
}

/// The member installed a view (in these tests: went on alone).
fn alone(out: &[Out]) -> bool {
    out.iter().any(|o| matches!(o, Out::Up(Up::NewView(_))))
}

/// The flush rounds started among `out`: (round, ranks failed).
fn flushes(out: &[Out]) -> Vec<(u64, Vec<Rank>)> {
    out.iter()
        .filter_map(|o| match o {
            Out::Dn(Dn::SyncFlush { round, failed }) => Some((*round, failed.iter().collect())),
            _ => None,
        })
        .collect()
}

/// The cut is the survivors' alone: a flush report from a member the round excludes (stale,
/// or a faulty member's inflated counts) is ignored, or it could name casts no survivor can
/// ever get and stall the view change.
#[test]
fn the_cut_takes_no_counts_from_an_excluded_member() {
    let view = crate::testing::view(3);
    let mut h = Harness::new(Intra::new(&Config::default(), &view, 0), 0);
    let out = h.up(Up::Suspect([2].into_iter().collect()));
    let round = out
        .iter()
        .find_map(|o| match o {
            Out::Dn(Dn::SyncFlush { round, .. }) => Some(*round),
            _ => None,
        })
        .expect("the coordinator starts a round excluding rank 2");
    let report =
        |from: Rank, counts: &[u64]| Up::FlushOk { from, round, counts: counts.into(), failed: RankSet::new() };
    assert!(h.up(report(2, &[0, 0, 1_000_000])).is_empty(), "the excluded member's report");
    assert!(h.up(report(0, &[3, 1, 5])).is_empty(), "waits for rank 1");
    let out = h.up(report(1, &[2, 4, 6]));
    let cut = out
        .iter()
        .find_map(|o| match o {
            Out::Dn(Dn::SyncCut { cut, .. }) => Some(cut.to_vec()),
            _ => None,
        })
        .expect("every survivor reported: the cut");
    assert_eq!(cut, [3, 4, 6], "the survivors' maximum per origin");
}

/// A view of this partition alone, cast whole (`inter`'s after a merge that failed), carries
/// over what a view of the survivors would: a state transfer not finished yet (every member
/// derives it from the same cut) and a switch asked in this view. Before, the full view came
/// without either, and a receiver that had not installed the state went on with its own.
#[test]
fn a_lone_partitions_view_after_a_failed_merge_keeps_the_transfer_and_the_switch() {
    let view = Arc::new(ViewState { xfer_view: true, ..ViewState::clone(&crate::testing::view(3)) });
    let install = |complete: bool, switch: bool| {
        let mut h = Harness::new(Intra::new(&Config::default(), &view, 1), 1);
        if complete {
            h.up(Up::XferComplete);
        }
        if switch {
            let spec = crate::StackSpec::parse("total+Xfer").unwrap();
            h.up(Up::Switch { origin: 2, spec });
        }
        h.up(Up::CutDone { coord: 0, round: 1 });
        let mut alone = ViewState::clone(&view);
        alone.view_id = ViewId { ltime: view.view_id.ltime + 1, coord: view.members[0] };
        alone.prev_ids = vec![view.view_id];
        alone.xfer_view = false;
        let msg = Msg::default().with(Header::Full { round: 1, view: Box::new(alone.to_full()) });
        let out = h.up(Up::Cast { origin: 0, msg, qos: Qos::Reliable });
        out.iter()
            .find_map(|o| match o {
                Out::Up(Up::NewView(v)) => Some((v.xfer_view, v.stack.to_string())),
                _ => None,
            })
            .expect("the view is installed")
    };
    let (xfer, stack) = install(false, false);
    assert!(xfer, "the transfer is still owed");
    assert_eq!(stack, view.stack.to_string());
    assert!(!install(true, false).0, "every member was done");
    let (_, stack) = install(false, true);
    assert_eq!(stack, crate::StackSpec::parse("total+Xfer").unwrap().to_string(), "the switch asked");
}

/// A view of this partition alone after a failed merge moves the members that asked to
/// migrate, as a view of the survivors does (found by a review: the move was dropped, and the
/// member asked again in a later view).
#[test]
fn a_lone_partitions_view_after_a_failed_merge_keeps_the_migrations() {
    let view = crate::testing::view(3);
    let mut h = Harness::new(Intra::new(&Config::default(), &view, 1), 1);
    h.up(Up::Migrate { origin: 2, address: crate::Address::Sim(9) });
    h.up(Up::CutDone { coord: 0, round: 1 });
    let mut alone = ViewState::clone(&view);
    alone.view_id = ViewId { ltime: view.view_id.ltime + 1, coord: view.members[0] };
    alone.prev_ids = vec![view.view_id];
    let msg = Msg::default().with(Header::Full { round: 1, view: Box::new(alone.to_full()) });
    let out = h.up(Up::Cast { origin: 0, msg, qos: Qos::Reliable });
    let installed = out
        .iter()
        .find_map(|o| match o {
            Out::Up(Up::NewView(v)) => Some(v.addresses.clone()),
            _ => None,
        })
        .expect("the view is installed");
    assert_eq!(installed, vec![crate::Address::Sim(0), crate::Address::Sim(1), crate::Address::Sim(9)]);
}

/// A migration to another member's address, to one another member moves to, or to an
/// address of another kind, is refused (found by a review: the group's traffic for the member
/// went to someone else, or nowhere).
#[test]
fn a_migration_to_a_taken_address_or_another_kind_is_refused() {
    let view = crate::testing::view(3);
    let mut h = Harness::new(Intra::new(&Config::default(), &view, 1), 1);
    let inet = crate::Address::Inet("127.0.0.1:7001".parse().unwrap());
    for address in [crate::Address::Sim(0), inet] {
        h.up(Up::Migrate { origin: 2, address });
        assert!(h.layer.moves.is_empty(), "{address:?}");
    }
    h.up(Up::Migrate { origin: 2, address: crate::Address::Sim(9) });
    h.up(Up::Migrate { origin: 1, address: crate::Address::Sim(9) });
    assert_eq!(h.layer.moves.len(), 1, "two members to one address");
    h.up(Up::Migrate { origin: 2, address: crate::Address::Sim(2) });
    assert!(h.layer.moves.is_empty(), "moving back");
}

/// A switch to the stack the view already runs starts no view change; one to another does
/// (found by a review: each such request flushed the group and rebuilt every stack).
#[test]
fn a_switch_to_the_same_stack_starts_no_view_change() {
    let view = crate::testing::view(3);
    let mut h = Harness::new(Intra::new(&Config::default(), &view, 0), 0);
    assert!(flushes(&h.up(Up::Switch { origin: 2, spec: view.stack.clone() })).is_empty());
    // A lower rank's request for another stack still goes ahead.
    let other = crate::StackSpec::parse("total").unwrap();
    assert_eq!(flushes(&h.up(Up::Switch { origin: 1, spec: other })).len(), 1);
}

/// Runs a merge flush at rank 0 of a 4-member view until `MergeReady`.
fn merge_ready() -> Harness<Intra> {
    let view = crate::testing::view(4);
    let mut h = Harness::new(Intra::new(&Config::default(), &view, 0), 0);
    assert_eq!(flushes(&h.dn(Dn::MergeFlush)), [(1, vec![])]);
    for from in 0..4 {
        h.up(report(from, 1));
    }
    h.up(Up::CutDone { coord: 0, round: 1 });
    let mut ready = false;
    for from in 0..4 {
        ready |= h.up(Up::CutOk { from, round: 1 }).iter().any(|o| matches!(o, Out::Up(Up::MergeReady { .. })));
    }
    assert!(ready, "the merge flush is done");
    h
}

/// Once a merge round's flush is done (`MergeReady`), no other round starts before `inter`
/// ends it, and its grant is cast. Before, a leave (or a suspicion) meanwhile started a round,
/// and the grant that came next was dropped while the granter installed a view listing this
/// whole partition.
#[test]
fn a_merge_round_that_is_ready_waits_for_its_answer() {
    let mut h = merge_ready();
    assert!(flushes(&h.up(Up::LeaveReq(2))).is_empty(), "no round while the answer is awaited");
    assert!(flushes(&h.up(Up::Suspect([3].into_iter().collect()))).is_empty());
    let merged = Arc::new(ViewState::clone(&crate::testing::view(6)));
    let out = h.dn(Dn::CastFull { round: 1, view: merged });
    assert!(matches!(&out[..], [Out::Dn(Dn::Cast { .. })]), "the grant is cast: {out:?}");
}

/// A coordinator that is leaving does not start a merge flush: the request would name it as
/// the partition's contact though the partition's view leaves it out.
#[test]
fn a_leaving_coordinator_does_not_merge() {
    let view = crate::testing::view(4);
    let mut h = Harness::new(Intra::new(&Config::default(), &view, 0), 0);
    assert_eq!(flushes(&h.up(Up::LeaveReq(0))), [(1, vec![])]);
    assert!(flushes(&h.dn(Dn::MergeFlush)).is_empty(), "its leave round goes on");
}

/// A member installs a view only from survivors in rank order: a coordinator's list with a
/// rank twice (or out of order) is dropped, not made into a view with a member twice.
#[test]
fn a_view_that_lists_a_rank_twice_is_dropped() {
    let view = crate::testing::view(3);
    let cast = |survivors: Vec<u64>| Up::Cast {
        origin: 0,
        msg: Msg::default().with(Header::View { round: 1, survivors }),
        qos: Qos::Reliable,
    };
    let installs = |survivors: Vec<u64>| {
        let mut h = Harness::new(Intra::new(&Config::default(), &view, 1), 1);
        h.up(Up::CutDone { coord: 0, round: 1 });
        let out = h.up(cast(survivors));
        out.iter().any(|o| matches!(o, Out::Up(Up::NewView(_))))
    };
    assert!(installs(vec![0, 1]));
    assert!(!installs(vec![0, 1, 1]), "a rank twice");
    assert!(!installs(vec![1, 0]), "out of order");
    assert!(!installs(vec![0, 1, 3]), "out of range");
}

/// A member that stays audible and never answers (its `Block` held below it) is suspected
/// `flush_timeout` after the phase it is missing in started, and the round starts again
/// without it. After the cut, only while the coordinator has not delivered the cut itself
/// (once it has, `commit_timeout` governs); a round where only the coordinator's own answer is
/// missing waits; an alarm that comes half a timeout late (this process stalled) waits again.
#[test]
fn a_member_that_never_answers_a_round_is_suspected_at_the_flush_timeout() {
    let view = crate::testing::view(4);
    let config = Config::default();
    let timeout = config.flush_timeout.as_millis();

    // Flush phase: 1 never answers.
    let mut h = Harness::new(Intra::new(&config, &view, 0), 0);
    assert_eq!(flushes(&h.up(Up::Suspect([3].into_iter().collect()))), [(1, vec![3])]);
    assert_eq!(h.alarm, Some(at(timeout)));
    h.up(report(0, 1));
    h.up(report(2, 1));
    assert!(flushes(&h.timer(at(timeout - 1))).is_empty(), "not yet");
    assert_eq!(flushes(&h.timer(at(timeout))), [(2, vec![1, 3])]);
    assert_eq!(h.stats.counter(crate::event::Counter::FlushTimedOut), 1);
    assert_eq!(h.alarm, Some(at(2 * timeout)), "the new round has its own deadline");

    // Cut phase, from the cut on: 2 never delivers it, nor (yet) the coordinator.
    h.now = at(timeout + 500);
    h.up(report(0, 2));
    assert!(h.up(report(2, 2)).iter().any(|o| matches!(o, Out::Dn(Dn::SyncCut { round: 2, .. }))));
    assert!(flushes(&h.timer(at(2 * timeout))).is_empty(), "the cut phase started later");
    h.up(Up::CutOk { from: 0, round: 2 });
    // Nobody else answered the cut: two more timeouts (its own messages may be held), then
    // every other member is suspected.
    for k in 2..4 {
        assert!(flushes(&h.timer(at(k * timeout + 500))).is_empty(), "waits: {k}");
    }
    assert_eq!(flushes(&h.timer(at(4 * timeout + 500))), [(3, vec![1, 2, 3])]);

    // Once the coordinator delivered its own cut, its commit timeout governs.
    let mut h = Harness::new(Intra::new(&config, &view, 0), 0);
    h.up(Up::Suspect([3].into_iter().collect()));
    for member in 0..3 {
        h.up(report(member, 1));
    }
    h.up(Up::CutDone { coord: 0, round: 1 });
    h.up(Up::CutOk { from: 0, round: 1 });
    assert!(flushes(&h.timer(at(timeout))).is_empty());
    assert_eq!(h.stats.counter(crate::event::Counter::FlushTimedOut), 0);

    // Only the coordinator's own answer is missing: it waits another timeout.
    let mut h = Harness::new(Intra::new(&config, &view, 0), 0);
    h.up(Up::Suspect([3].into_iter().collect()));
    h.up(report(1, 1));
    h.up(report(2, 1));
    assert!(flushes(&h.timer(at(timeout))).is_empty());
    assert_eq!(h.alarm, Some(at(2 * timeout)));

    // The alarm came half a timeout late: this process stalled; it waits half a timeout more
    // (then, nobody else having answered, two timeouts more).
    let mut h = Harness::new(Intra::new(&config, &view, 0), 0);
    h.up(Up::Suspect([3].into_iter().collect()));
    h.up(report(1, 1));
    assert!(flushes(&h.timer(at(timeout + timeout / 2))).is_empty());
    assert_eq!(h.alarm, Some(at(2 * timeout)));
    assert_eq!(flushes(&h.timer(at(2 * timeout))), [(2, vec![2, 3])]);
    assert_eq!(h.stats.counter(crate::event::Counter::FlushTimedOut), 1);
}

/// A round in which no other member answers waits two more flush timeouts before the
/// coordinator suspects them all: its own flush may be held in its flow control behind what
/// it had queued, drained by a lagging member's trickle for up to 17 s at the default bounds
/// (the coordinator went on alone at 10 s: a review's finding). Answers that come meanwhile
/// end the wait, and only those still missing at a timeout are suspected then.
#[test]
fn a_round_nobody_else_answers_waits_longer_before_suspecting_them_all() {
    let view = crate::testing::view(4);
    let config = Config::default();
    let timeout = config.flush_timeout.as_millis();
    let mut h = Harness::new(Intra::new(&config, &view, 0), 0);
    assert_eq!(flushes(&h.up(Up::LeaveReq(3))), [(1, vec![])]);
    h.up(report(0, 1));
    for k in 1..3 {
        assert!(flushes(&h.timer(at(k * timeout))).is_empty(), "timeout {k}: waits");
    }
    assert_eq!(h.stats.counter(crate::event::Counter::FlushTimedOut), 0);
    // The held flush got out: 1 and 3 answer, 2 still does not.
    h.now = at(2 * timeout + 1);
    h.up(report(1, 1));
    h.up(report(3, 1));
    assert_eq!(flushes(&h.timer(at(3 * timeout))), [(2, vec![2])], "only the one still missing");
    // With nobody answering for good, all are suspected at the third timeout.
    let mut h = Harness::new(Intra::new(&config, &view, 0), 0);
    h.up(Up::LeaveReq(3));
    h.up(report(0, 1));
    for k in 1..3 {
        assert!(flushes(&h.timer(at(k * timeout))).is_empty());
    }
    assert_eq!(flushes(&h.timer(at(3 * timeout))), [(2, vec![1, 2, 3])]);
    assert_eq!(h.stats.counter(crate::event::Counter::FlushTimedOut), 3);
}

/// A coordinator that delivered its own cut, then started a round again (a member suspected
/// in the cut phase), goes on with that round past the first cut's commit timeout: its wait
/// covers the new round's two phases. Its own later cut sets the usual deadline; a later
/// round stuck on the coordinator's own answer still ends alone, at the wait's end.
#[test]
fn a_later_round_of_the_coordinator_outlives_its_first_cuts_commit_timeout() {
    let view = crate::testing::view(4);
    let config = Config::default();
    let (commit, flush) = (config.commit_timeout.as_millis(), config.flush_timeout.as_millis());
    let restarted = || {
        let mut h = Harness::new(Intra::new(&config, &view, 0), 0);
        h.up(Up::Suspect([3].into_iter().collect()));
        for member in 0..3 {
            h.up(report(member, 1));
        }
        h.up(Up::CutDone { coord: 0, round: 1 });
        h.now = at(1_000);
        assert_eq!(flushes(&h.up(Up::Suspect([2].into_iter().collect()))), [(2, vec![2, 3])]);
        h
    };
    let mut h = restarted();
    assert!(!alone(&h.timer(at(commit))), "round 2 is under way");
    h.now = at(commit + 100);
    h.up(report(0, 2));
    assert!(h.up(report(1, 2)).iter().any(|o| matches!(o, Out::Dn(Dn::SyncCut { round: 2, .. }))));
    h.up(Up::CutDone { coord: 0, round: 2 });
    assert!(!alone(&h.timer(at(2 * commit))), "round 2's own commit timeout has not passed");
    assert!(alone(&h.timer(at(2 * commit + 100))), "round 2's view never came: alone");

    // Round 2 waits for the coordinator's own flush only: it re-arms, and goes on alone when
    // the wait its restart allowed is over.
    let mut h = restarted();
    h.up(report(1, 2));
    let end = 1_000 + 2 * flush + commit;
    for t in [commit, 1_000 + flush, 1_000 + 2 * flush] {
        assert!(!alone(&h.timer(at(t))), "waiting at {t} ms");
    }
    assert!(alone(&h.timer(at(end))), "alone at {end} ms");
}

/// A member that delivered a cut waits for its view from the coordinator's latest round: a
/// later round of the same coordinator (a member suspected in the cut phase) lengthens the
/// wait to cover that round; a round of another coordinator, or an older one, does not; a
/// suspicion of that coordinator cuts the wait back to `commit_timeout`.
#[test]
fn a_later_round_of_the_same_coordinator_restarts_a_members_wait_for_the_view() {
    let view = crate::testing::view(4);
    let config = Config::default();
    let (commit, flush) = (config.commit_timeout.as_millis(), config.flush_timeout.as_millis());
    let committed = || {
        let mut h = Harness::new(Intra::new(&config, &view, 1), 1);
        h.up(Up::CutDone { coord: 0, round: 1 });
        h.now = at(3_000);
        h.up(Up::Flushing { coord: 2, round: 2 }); // not the coordinator we committed to
        h.up(Up::Flushing { coord: 0, round: 1 }); // the round we committed to
        assert_eq!(h.alarm, Some(at(commit)));
        h.up(Up::Flushing { coord: 0, round: 2 });
        h
    };
    let mut h = committed();
    assert!(!alone(&h.timer(at(commit))), "round 2 is under way");
    let end = 3_000 + 2 * flush + commit;
    assert_eq!(h.alarm, Some(at(end)));
    assert!(!alone(&h.timer(at(end - 1))));
    assert!(alone(&h.timer(at(end))), "no view from round 2 either: alone");

    let mut h = committed();
    assert!(!alone(&h.timer(at(commit))));
    h.now = at(6_000);
    h.up(Up::Suspect([2].into_iter().collect()));
    assert_eq!(h.alarm, Some(at(end)), "another member's suspicion changes nothing");
    h.up(Up::Suspect([0].into_iter().collect()));
    assert_eq!(h.alarm, Some(at(6_000 + commit)), "its coordinator suspected: commit_timeout from then");
    assert!(alone(&h.timer(at(6_000 + commit))));

    // Suspected first, a later round heard after does not lengthen the wait again (seed 243 of
    // the `vsync` swarm: other members still relayed the suspected coordinator's casts).
    let mut h = Harness::new(Intra::new(&config, &view, 1), 1);
    h.up(Up::CutDone { coord: 0, round: 1 });
    h.now = at(3_000);
    h.up(Up::Suspect([0].into_iter().collect()));
    h.up(Up::Flushing { coord: 0, round: 2 });
    assert_eq!(h.layer.commit_deadline, Some(at(commit)), "the cut's, sooner than the suspicion's");
    assert!(alone(&h.timer(at(commit))));

    // A later round that excludes this member ends the wait at once (`sync`'s `Excluded`); one
    // of another coordinator, or not later than the cut's, does not.
    let mut h = committed();
    h.now = at(4_000);
    h.up(Up::Excluded { coord: 2, round: 3 });
    h.up(Up::Excluded { coord: 0, round: 1 });
    assert_eq!(h.layer.commit_deadline, Some(at(end)), "changes nothing");
    assert!(!alone(&h.timer(at(4_000))));
    h.up(Up::Excluded { coord: 0, round: 3 });
    assert_eq!((h.layer.commit_deadline, h.alarm), (Some(at(4_000)), Some(at(4_000))));
    assert!(alone(&h.timer(at(4_000))), "its view will never come: alone now");
}

/// A survivor that cannot hear some ranks (an earlier round it followed failed them) says so
/// in its `FlushOk`: the coordinator excludes them in a new round (seed 885). A report of an
/// older round, or from a member the round excludes, excludes no one.
#[test]
fn a_member_deaf_to_others_gets_them_excluded_by_a_report_of_the_active_round_only() {
    let view = crate::testing::view(5);
    let report = |from: Rank, round: u64, failed: &[Rank]| Up::FlushOk {
        from,
        round,
        counts: vec![0; 5].into(),
        failed: failed.iter().copied().collect(),
    };
    let mut h = Harness::new(Intra::new(&Config::default(), &view, 0), 0);
    h.up(Up::Suspect([4].into_iter().collect()));
    assert_eq!(flushes(&h.up(report(2, 1, &[3, 4]))), [(2, vec![3, 4])]);
    assert!(flushes(&h.up(report(1, 1, &[2]))).is_empty(), "a report of round 1, which is over");
    assert!(flushes(&h.up(report(3, 2, &[1]))).is_empty(), "3 is excluded in round 2");
    assert!(flushes(&h.up(report(1, 2, &[0, 4]))).is_empty(), "ranks the round fails, and ours");
}
