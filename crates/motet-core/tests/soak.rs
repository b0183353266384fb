//! Nothing grows with the number of views: a process lives through millions of view changes
//! (failures, merges, protocol switches), and any per-view leftover (a slot, a route, a map
//! entry, a timer) is a leak that ends it. `allocation_counter` (a counting global allocator)
//! measures the live heap bytes a run of view changes leaves behind: after the first ones have
//! grown every buffer to its working size, twice as many view changes must not leave more.

use allocation_counter::measure;
use motet_core::testkit::Group;
use motet_core::{Action, Duration, StackSpec};

/// `views` protocol switches (each a view change with every member in it, a new stack per view,
/// the old one lingering then exiting), with casts and sends in every view. Returns the live
/// heap bytes the run left behind.
fn switches(group: &mut Group, views: usize) -> i64 {
    switches_keeping(group, views, &mut Vec::new(), false).bytes_current
}

/// As [`switches`]; with `keep`, each installed view is also kept in `kept` (as an application that
/// never lets go of old views would: the seeded leak that shows the measure sees one).
fn switches_keeping(
    group: &mut Group,
    views: usize,
    kept: &mut Vec<std::sync::Arc<motet_core::ViewState>>,
    keep: bool,
) -> allocation_counter::AllocationInfo {
    let targets = [StackSpec::parse("total").unwrap(), StackSpec::parse("vsync").unwrap()];
    measure(|| {
        for round in 0..views {
            let ltime = group.views[0].as_ref().map(|v| v.view_id.ltime).unwrap();
            group.act(round % 3, Action::Switch(targets[round % 2].clone())).unwrap();
            // The flush, the new view, then the old stack's linger (2 s) and exit.
            for _ in 0..30 {
                group.tick(Duration::from_millis(100));
            }
            let view = group.views[0].as_ref().unwrap();
            assert_eq!(view.view_id.ltime, ltime + 1, "every switch installs a view");
            if keep {
                kept.push(std::sync::Arc::clone(view));
            }
            for k in 0..6u8 {
                let _ = group.act(usize::from(k) % 3, Action::Cast(vec![k; 100].into()));
                let _ = group.act(usize::from(k) % 3, Action::send(u16::from(k + 1) % 3, vec![k; 40].into()));
            }
        }
    })
}

#[test]
fn view_changes_leave_nothing_behind() {
    let mut group = Group::new(3, "vsync");
    // Warm-up: every buffer, map and queue reaches its working size.
    switches(&mut group, 20);
    let once = switches(&mut group, 30);
    let twice = switches(&mut group, 60);
    eprintln!("live bytes left by 30 view changes: {once}; by 60: {twice}");
    for (node, _) in &group.nodes {
        assert_eq!(node.stacks().count(), 1, "the replaced stacks have exited");
    }
    // A leak of even 100 bytes per view change per member would leave 18,000 bytes after 60.
    assert!(twice < 8_000, "60 view changes left {twice} bytes live (30 left {once}): something grows per view");
}

/// The measure is not blind: the same run, with every view kept, leaves their bytes live, and the
/// runs allocate plenty (the zero above is a balance, not an absence of counting).
#[test]
fn a_run_that_keeps_its_views_is_seen_to_grow() {
    let mut group = Group::new(3, "vsync");
    switches(&mut group, 20);
    let mut kept = Vec::new();
    let info = switches_keeping(&mut group, 30, &mut kept, true);
    group.views.iter_mut().for_each(|v| *v = None);
    assert!(info.count_total > 10_000, "the runs allocate: {info:?}");
    // Kept: 30 views of 3 members; `ViewState` alone is a few hundred bytes.
    assert!(info.bytes_current > 30 * 200, "30 kept views: {info:?}");
}
