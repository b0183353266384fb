//! Forged headers that decode and reach a live stack. `hostile.rs` alters bytes of real traffic;
//! these swap whole headers, which byte mutation seldom builds.
//!
//! The unreliable cast: `mnak` passes a cast marked `Unrel` (no sequence number, no repair) up
//! as unreliable, for the headers that go that way (stability gossip, heartbeats). Every other
//! layer casts its headers reliably only, so one of its headers on an unreliable cast was forged,
//! and a forger needs no sequence number to build it: taken, it was delivered outside FIFO order
//! and the flush's cut, shifted the sequencer's queue of its origin, took a genuine cast's place
//! in `totem`, or asked for a leave, a switch or a flush (found by a review).

use bytes::Bytes;
use motet_core::testkit::Group;
use motet_core::{Action, AppEvent, Bypass, DropReason, Duration, LayerKind};
use motet_wire::datagram::{self, Mux};
use motet_wire::Header;

/// The datagrams of the group's first view in scenarios on the layered path: casts and sends
/// from every member, then a switch or a migration asked (the request and the flush it starts),
/// or a leave.
fn traffic(stack: &str) -> Vec<Bytes> {
    let mut all = Vec::new();
    for ending in 0..3 {
        let mut group = Group::with_bypass(3, stack, Bypass::Off);
        group.tap = Some(Vec::new());
        for rank in 0..3 {
            group.act(rank, Action::Cast(Bytes::from_static(b"genuine").into())).expect("cast");
            group.act(rank, Action::send((rank as u16 + 1) % 3, Bytes::from_static(b"genuine").into())).expect("send");
        }
        group.tick(Duration::from_millis(50));
        let _ = match ending {
            // Another stack (the same with state transfer), so that the request starts a flush.
            0 => group.act(1, Action::Switch(motet_core::StackSpec::parse(&format!("{stack}+Xfer")).expect("valid"))),
            1 => group.act(1, Action::Migrate(motet_core::Address::Sim(7))),
            _ => group.act(2, Action::Leave),
        };
        group.tick(Duration::from_millis(50));
        all.extend(group.tap.take().expect("tapped"));
    }
    // Those of the first view only (the forged copies go to a fresh group in that view).
    let conn = |d: &Bytes| datagram::decode(d.clone()).ok().map(|d| d.head.conn);
    let first = all.iter().find_map(conn);
    all.retain(|d| conn(d) == first);
    all
}

/// Whether `header` carries something (not a layer's pass-through header, nor `frag`'s for a
/// message in one piece).
fn carries(header: &Header) -> bool {
    !matches!(header, Header::Frag(motet_wire::hdr::frag::Header::Whole)) && !format!("{header:?}").contains("NoHdr")
}

/// `datagram`, a reliable cast, as an unreliable one (its `mnak` header made `Unrel`), if it is
/// a cast in full carrying some header above `mnak`'s: with its origin and the layer of the
/// lowest header it carries (the first to meet it).
fn unreliable(datagram: &Bytes) -> Option<(u16, &'static str, Bytes)> {
    let decoded = datagram::decode(datagram.clone()).ok()?;
    if decoded.head.mux != Mux::Cast {
        return None;
    }
    let mut hdrs: Vec<Header> = decoded.hdrs.iter().map(|h| h.into_owned()).collect();
    // Push order: the top layer's first, `bottom`'s last; `mnak`'s just above it.
    let at = hdrs.iter().position(|h| matches!(h, Header::Mnak(motet_wire::hdr::mnak::Header::Data { .. })))?;
    let lowest = hdrs[..at].iter().rev().find(|h| carries(h))?.layer_name();
    hdrs[at] = Header::Mnak(motet_wire::hdr::mnak::Header::Unrel);
    Some((decoded.head.origin, lowest, datagram::encode(&decoded.head, &hdrs, &decoded.payload)))
}

/// Drops by layer and reason at `node`.
fn drops(node: &motet_core::Node) -> Vec<(Option<LayerKind>, DropReason, u64)> {
    node.stats().drops_by_layer().collect()
}

/// Every header a stack casts reliably, forged onto an unreliable cast, is dropped
/// (`HeaderMismatch`) by its layer at a member of a fresh group of the same view, with nothing
/// delivered, on either path; and the group goes on. Returns the layers that refused.
fn forged_unreliable_casts_are_dropped(stack: &str) -> std::collections::BTreeSet<&'static str> {
    let forged: Vec<_> = traffic(stack).iter().filter_map(unreliable).collect();
    assert!(!forged.is_empty(), "`{stack}`: no reliable cast to forge");
    let mut refused = std::collections::BTreeSet::new();
    for bypass in [Bypass::On, Bypass::Off, Bypass::Diff] {
        for (origin, lowest, datagram) in &forged {
            let mut group = Group::with_bypass(3, stack, bypass);
            let to = (usize::from(*origin) + 1) % 3;
            let node = &mut group.nodes[to].0;
            let before = drops(node);
            node.handle_datagram(group.now, datagram.clone());
            let new: Vec<_> = drops(node).into_iter().filter(|d| !before.contains(d)).collect();
            assert!(
                matches!(&new[..], [(Some(layer), DropReason::HeaderMismatch, _)] if layer.name() == *lowest),
                "`{stack}` {bypass:?}: a forged unreliable cast whose lowest header is `{lowest}`'s was not \
                 refused by it: new drops {new:?}"
            );
            refused.insert(*lowest);
            while let Some((_, event)) = node.poll_event() {
                assert!(
                    !matches!(event, AppEvent::Cast { .. } | AppEvent::Block | AppEvent::View { .. }),
                    "`{stack}` {bypass:?}: a forged unreliable cast for `{lowest}` gave {event:?}"
                );
            }
            // The group goes on: a genuine cast is delivered everywhere.
            group.pump();
            let delivered = group.delivered.clone();
            group.act(*origin as usize, Action::Cast(Bytes::from_static(b"after").into())).expect("cast");
            group.tick(Duration::from_millis(10));
            assert!(group.delivered.iter().zip(&delivered).all(|(now, then)| now > then), "`{stack}`: stalled");
        }
    }
    eprintln!("`{stack}`: {} forged casts, refused by {refused:?}", forged.len());
    refused
}

/// `vsync`'s properties without flow control: its casts go in full (a compressed datagram needs
/// a window to bound its sequence number), so the application's headers can be forged too.
const UNBOUNDED: &str = "Gmp+Sync+Heal+Suspect+Slander+Frag+Local+Switch+Migrate";

#[test]
fn forged_unreliable_casts_are_dropped_in_vsync() {
    let mut refused = forged_unreliable_casts_are_dropped("vsync");
    refused.extend(forged_unreliable_casts_are_dropped(UNBOUNDED));
    for layer in ["appl", "intra", "leave", "migrate", "switch", "sync"] {
        assert!(refused.contains(layer), "no forged cast reached `{layer}`: {refused:?}");
    }
}

#[test]
fn forged_unreliable_casts_are_dropped_in_ordered_stacks() {
    let mut refused = forged_unreliable_casts_are_dropped("total");
    refused.extend(forged_unreliable_casts_are_dropped(&format!("{UNBOUNDED}+Total")));
    refused.extend(forged_unreliable_casts_are_dropped("vsync+Token"));
    refused.extend(forged_unreliable_casts_are_dropped(&format!("{UNBOUNDED}+Token")));
    refused.extend(forged_unreliable_casts_are_dropped("causal"));
    refused.extend(forged_unreliable_casts_are_dropped("safe"));
    for layer in ["sequencer", "totem", "causal", "safe"] {
        assert!(refused.contains(layer), "no forged cast reached `{layer}`: {refused:?}");
    }
}

/// A stack with nothing below `appl` to make casts reliable delivers what arrives: its
/// application's casts all come unreliable.
#[test]
fn a_stack_without_reliable_casts_delivers_unreliable_ones() {
    let mut group = Group::with_bypass(2, "top:appl:bottom", Bypass::Off);
    group.act(0, Action::Cast(Bytes::from_static(b"plain").into())).expect("cast");
    assert_eq!(group.delivered[1], 1, "the unreliable stack's cast was refused");
}

/// A message no layer claims (every header a pass-through one) reaches `top`, which counts it as
/// dropped (`HeaderMismatch`) as every layer counts what it refuses (found by a review: it
/// vanished uncounted).
#[test]
fn a_message_no_layer_claims_is_counted_at_the_top() {
    let leave = |h: &Header| matches!(h, Header::Leave(motet_wire::hdr::leave::Header::Leave));
    let request = traffic("vsync")
        .into_iter()
        .filter_map(|d| datagram::decode(d).ok())
        .find(|d| d.hdrs.iter().any(|h| leave(&h)))
        .expect("a leave request was cast");
    // The pass-through headers of the layers above `leave` too (`vsync`'s `inter`, `heal`,
    // `intra`), which a cast from `leave` does not carry: without them, `intra` finds none.
    let above = [
        Header::Inter(motet_wire::hdr::inter::Header::NoHdr),
        Header::Heal(motet_wire::hdr::heal::Header::NoHdr),
        Header::Intra(motet_wire::hdr::intra::Header::NoHdr),
    ];
    let hdrs: Vec<Header> = above
        .into_iter()
        .chain(request.hdrs.iter().map(|h| h.into_owned()))
        .map(|h| match h {
            h if leave(&h) => Header::Leave(motet_wire::hdr::leave::Header::NoHdr),
            // The first cast of its origin that a fresh group's member expects.
            Header::Mnak(motet_wire::hdr::mnak::Header::Data { .. }) => {
                Header::Mnak(motet_wire::hdr::mnak::Header::Data { seqno: 0 })
            }
            h => h,
        })
        .collect();
    let unclaimed = datagram::encode(&request.head, &hdrs, &request.payload);
    for bypass in [Bypass::On, Bypass::Off, Bypass::Diff] {
        let mut group = Group::with_bypass(3, "vsync", bypass);
        let node = &mut group.nodes[0].0;
        node.handle_datagram(group.now, unclaimed.clone());
        let new: Vec<_> = drops(node);
        assert!(
            matches!(&new[..], [(Some(LayerKind::Top), DropReason::HeaderMismatch, 1)]),
            "{bypass:?}: drops {new:?}"
        );
        while let Some((_, event)) = node.poll_event() {
            assert!(!matches!(event, AppEvent::Cast { .. }), "{bypass:?}: delivered {event:?}");
        }
    }
}
