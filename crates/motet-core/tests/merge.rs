//! Two partitions merge although the granter's one `Granted` answer is lost: the requester repeats
//! its request, and the granter's replaced stack, which lingers after the merged view (for
//! retransmissions), answers the repeat with the grant it kept (`merge`).

use bytes::Bytes;
use motet_core::testkit::Group;
use motet_core::Duration;
use motet_wire::hdr::merge::Header as MergeHeader;
use motet_wire::{bundle, datagram, Header};

/// Whether `datagram` (or a part of a bundle) carries `merge`'s `Granted`.
fn carries_grant(datagram: &Bytes) -> bool {
    let parts = match bundle::is_bundle(datagram) {
        true => bundle::decode(datagram).unwrap_or_default(),
        false => vec![datagram.clone()],
    };
    parts.into_iter().filter(|part| !datagram::is_compressed(part)).filter_map(|part| datagram::decode(part).ok()).any(
        |decoded| {
            (0..decoded.hdrs.len())
                .any(|i| matches!(decoded.hdrs.get(i).as_deref(), Some(Header::Merge(MergeHeader::Granted { .. }))))
        },
    )
}

/// Four `vsync` members split in two partitions of two, each of which installs its own view. The
/// network heals, and the first `Granted` is lost. Every member must install one view of all
/// four, the same at every member, within 1.5 s: half the requester's `merge_timeout` (3 s), after
/// which its partition would go on as itself, be excluded from the granter's view and merge at a
/// later gossip. (The merged view's own stack ignores the repeats: their members are its own.)
#[test]
fn a_lost_grant_is_answered_again_by_the_merged_views_coordinator() {
    let mut group = Group::new(4, "vsync");
    group.partition = Some(vec![2, 3]);
    let split = |group: &Group| group.views.iter().all(|v| v.as_ref().is_some_and(|v| v.members.len() == 2));
    for _ in 0..100 {
        if split(&group) {
            break;
        }
        group.tick(Duration::from_millis(100));
    }
    assert!(split(&group), "two partitions of two: {:?}", group.views);
    group.partition = None;
    let mut drop_grants = 1;
    let whole = |group: &Group| {
        let first = group.views[0].as_ref().map(|v| (v.view_id, v.members.len()));
        first.is_some_and(|(_, n)| n == 4)
            && group.views.iter().all(|v| v.as_ref().map(|v| (v.view_id, v.members.len())) == first)
    };
    let mut waited_ms = 0;
    while !whole(&group) && waited_ms < 1_500 {
        group.now = group.now + Duration::from_millis(10);
        waited_ms += 10;
        for (node, _) in &mut group.nodes {
            node.handle_timeout(group.now);
        }
        group.pump_dropping(|_, _, datagram| {
            let lost = drop_grants > 0 && carries_grant(datagram);
            drop_grants -= usize::from(lost);
            lost
        });
    }
    assert_eq!(drop_grants, 0, "a grant was sent, and lost");
    let views: Vec<_> = group.views.iter().flatten().map(|v| (v.view_id, v.members.clone())).collect();
    assert!(whole(&group), "one view of all four after {waited_ms} ms: {views:?}");
}
