//! A copy of a compressed cast that the network delivers very late is a duplicate, not the next
//! message: compressed datagrams carry 24 bits of the sequence number, read as at most 2^15
//! ahead of the expected one (`motet_wire::datagram::expand_seqno`). With 16 bits, a copy 65,536
//! casts late was read as the one expected next and delivered in its place (a review's finding).

use bytes::Bytes;
use motet_core::testkit::Group;
use motet_core::Action;
use motet_wire::datagram;

/// The low 24 bits of the sequence number of the last compressed cast in `tap` (as on the wire:
/// shifted by the view's, which a difference cancels), and the datagram.
fn last_compressed_cast(tap: &[Bytes]) -> (u32, Bytes) {
    let datagram = tap
        .iter()
        .rev()
        .find(|d| datagram::is_compressed(d) && d[0] & 0x80 != 0)
        .expect("a compressed cast on the wire")
        .clone();
    let (head, _) = datagram::decode_compressed(datagram.clone()).expect("decodes");
    (head.shifted, datagram)
}

#[test]
fn a_copy_of_a_cast_65536_casts_late_is_not_delivered() {
    let mut group = Group::new(2, "vsync");
    let cast =
        |group: &mut Group, text: &str| group.act(0, Action::Cast(Bytes::copy_from_slice(text.as_bytes()).into()));
    group.tap = Some(Vec::new());
    cast(&mut group, "old").unwrap();
    let (old_seqno, old) = last_compressed_cast(group.tap.as_ref().unwrap());
    group.tap = None;
    // 65,535 more: the receiver then expects the old one's number plus 65,536, whose low 16 bits
    // are the old one's.
    for i in 0..65_534 {
        cast(&mut group, &format!("cast {i}")).unwrap();
    }
    group.tap = Some(Vec::new());
    cast(&mut group, "the last before").unwrap();
    let (last_seqno, _) = last_compressed_cast(group.tap.as_ref().unwrap());
    group.tap = None;
    assert_eq!(last_seqno.wrapping_sub(old_seqno) & 0xff_ffff, 65_535, "no other cast of rank 0 on the way");
    let delivered = group.delivered[1];
    group.nodes[1].0.handle_datagram(group.now, old);
    group.pump();
    assert_eq!(group.delivered[1], delivered, "the late copy was delivered");
    cast(&mut group, "the genuine one").unwrap();
    assert_eq!(group.delivered[1], delivered + 1, "the genuine cast of that number is delivered");
}
