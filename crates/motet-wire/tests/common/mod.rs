//! Proptest strategies shared by the integration tests: one per layer header, one for [`Header`],
//! one for whole datagrams, plus a fixed-seed corpus builder.
//!
//! Each test file compiles this module separately and uses a different subset of it.
#![allow(dead_code)]

use bytes::Bytes;
use motet_wire::hdr::{
    appl, bottom, causal, elect, frag, heal, inter, intra, leave, local, merge, mflow, migrate, mnak, primary, pt2pt,
    pt2ptw, safe, sequencer, slander, stable, suspect, switch, sync, totem, xfer,
};
use motet_wire::WireAddress;
use motet_wire::{ConnId, Head, Header, Mux, Payload, Rank, Seqno, HEADER_COUNT_MAX, RANKS_MAX};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use std::sync::Arc;

/// Longest Gossip vector generated. Far below `RANKS_MAX`: the decoder's limit is tested
/// separately in `malformed.rs`, and long vectors would only slow the round trips down.
pub const GOSSIP_LEN_MAX: usize = 64;

/// Longest payload generated for round-trip tests.
pub const PAYLOAD_LEN_MAX: usize = 2000;

/// A `u64` drawn from the full range, but spread over magnitudes: a uniform `u64` almost always
/// needs 9 or 10 varint bytes, so shifting by a random amount makes every varint length (and the
/// 7-bit boundaries between them) likely. The extremes are added explicitly.
pub fn u64_any() -> impl Strategy<Value = u64> {
    prop_oneof![
        1 => Just(0u64),
        1 => Just(u64::MAX),
        1 => prop::sample::select(vec![127u64, 128, 16_383, 16_384, (1 << 63) - 1, 1 << 63]),
        8 => (any::<u64>(), 0u32..64).prop_map(|(value, shift)| value >> shift),
    ]
}

/// A `u32` over the full range, spread over magnitudes like [`u64_any`].
pub fn u32_any() -> impl Strategy<Value = u32> {
    prop_oneof![
        1 => Just(0u32),
        1 => Just(u32::MAX),
        8 => (any::<u32>(), 0u32..32).prop_map(|(value, shift)| value >> shift),
    ]
}

/// A rank over the full `u16` range (one, two and three varint bytes).
pub fn rank() -> impl Strategy<Value = Rank> {
    prop_oneof![
        1 => Just(0u16),
        1 => Just(u16::MAX),
        8 => (any::<u16>(), 0u32..16).prop_map(|(value, shift)| value >> shift),
    ]
}

/// A sequence number over the full `u64` range.
pub fn seqno() -> impl Strategy<Value = Seqno> {
    u64_any()
}

pub fn bottom_hdr() -> impl Strategy<Value = bottom::Header> {
    prop_oneof![Just(bottom::Header::NoHdr), Just(bottom::Header::Full)]
}

pub fn mnak_hdr() -> impl Strategy<Value = mnak::Header> {
    prop_oneof![
        Just(mnak::Header::NoHdr),
        seqno().prop_map(|seqno| mnak::Header::Data { seqno }),
        Just(mnak::Header::Unrel),
        (rank(), seqno(), seqno()).prop_map(|(origin, lo, hi)| mnak::Header::Nak { origin, lo, hi }),
        (rank(), seqno()).prop_map(|(origin, seqno)| mnak::Header::Retrans { origin, seqno }),
    ]
}

pub fn pt2pt_hdr() -> impl Strategy<Value = pt2pt::Header> {
    prop_oneof![
        Just(pt2pt::Header::NoHdr),
        seqno().prop_map(|seqno| pt2pt::Header::Data { seqno }),
        seqno().prop_map(|seqno| pt2pt::Header::Retrans { seqno }),
        seqno().prop_map(|next| pt2pt::Header::Ack { next }),
        (seqno(), seqno()).prop_map(|(lo, hi)| pt2pt::Header::Nak { lo, hi }),
    ]
}

pub fn stable_hdr() -> impl Strategy<Value = stable::Header> {
    let vector = || prop::collection::vec(u64_any(), 0..=GOSSIP_LEN_MAX);
    prop_oneof![
        Just(stable::Header::NoHdr),
        (u64_any(), vector(), vector(), vector()).prop_map(|(seq, stable, max, failed)| {
            stable::Header::Columns(Arc::new(stable::Columns { seq, stable, max, failed }))
        }),
        (u64_any(), u64_any(), u64_any(), vector()).prop_map(|(view_ltime, view_coord, rank, counts)| {
            stable::Header::Row(Arc::new(stable::Row { view_ltime, view_coord, rank, counts }))
        }),
    ]
}

pub fn frag_hdr() -> impl Strategy<Value = frag::Header> {
    // The wire does not enforce `index < count`, so neither does the strategy: any pair must
    // round-trip, and the layer is the one to reject nonsense.
    prop_oneof![
        Just(frag::Header::Whole),
        (u32_any(), u32_any()).prop_map(|(index, count)| frag::Header::Part { index, count }),
    ]
}

pub fn pt2ptw_hdr() -> impl Strategy<Value = pt2ptw::Header> {
    prop_oneof![Just(pt2ptw::Header::NoHdr), u64_any().prop_map(|count| pt2ptw::Header::Ack { count })]
}

pub fn mflow_hdr() -> impl Strategy<Value = mflow::Header> {
    prop_oneof![Just(mflow::Header::NoHdr), u64_any().prop_map(|count| mflow::Header::Credit { count })]
}

pub fn local_hdr() -> impl Strategy<Value = local::Header> {
    Just(local::Header::NoHdr)
}

pub fn appl_hdr() -> impl Strategy<Value = appl::Header> {
    prop_oneof![
        Just(appl::Header::Data),
        Just(appl::Header::NoHdr),
        prop::collection::btree_set(rank(), 0..6).prop_map(|ranks| appl::Header::Subset(ranks.into_iter().collect())),
    ]
}

fn vec_any() -> impl Strategy<Value = Vec<u64>> {
    prop::collection::vec(u64_any(), 0..=GOSSIP_LEN_MAX)
}

pub fn suspect_hdr() -> impl Strategy<Value = suspect::Header> {
    prop_oneof![
        Just(suspect::Header::NoHdr),
        Just(suspect::Header::Heartbeat),
        Just(suspect::Header::Beat),
        (u64_any(), u64_any(), u64_any()).prop_map(|(view_ltime, view_coord, rank)| suspect::Header::Ping(
            suspect::Ping { view_ltime, view_coord, rank }
        )),
        (u64_any(), u64_any(), u64_any(), u64_any()).prop_map(|(view_ltime, view_coord, rank, to)| {
            suspect::Header::Excluded { ping: suspect::Ping { view_ltime, view_coord, rank }, to }
        }),
    ]
}

pub fn slander_hdr() -> impl Strategy<Value = slander::Header> {
    prop_oneof![Just(slander::Header::NoHdr), vec_any().prop_map(|ranks| slander::Header::Slander { ranks })]
}

pub fn elect_hdr() -> impl Strategy<Value = elect::Header> {
    Just(elect::Header::NoHdr)
}

pub fn sync_hdr() -> impl Strategy<Value = sync::Header> {
    prop_oneof![
        Just(sync::Header::NoHdr),
        (u64_any(), vec_any()).prop_map(|(round, failed)| sync::Header::Flush { round, failed }),
        (u64_any(), vec_any(), vec_any()).prop_map(|(round, counts, failed)| sync::Header::FlushOk {
            round,
            counts: counts.into(),
            failed: failed.into(),
        }),
        (u64_any(), vec_any()).prop_map(|(round, cut)| sync::Header::Cut { round, cut }),
        u64_any().prop_map(|round| sync::Header::CutOk { round }),
    ]
}

pub fn address() -> impl Strategy<Value = WireAddress> {
    prop_oneof![
        any::<u32>().prop_map(WireAddress::Sim),
        (any::<[u8; 4]>(), any::<u16>()).prop_map(|(ip, port)| WireAddress::V4(ip, port)),
        (any::<[u8; 16]>(), any::<u16>()).prop_map(|(ip, port)| WireAddress::V6(ip, port)),
    ]
}

pub fn full_view() -> impl Strategy<Value = intra::FullView> {
    (
        u64_any(),
        u64_any(),
        // Distinct members: a view naming an endpoint twice does not decode.
        prop::collection::btree_map(u64_any(), address(), 1..8),
        prop::collection::vec((u64_any(), u64_any()), 0..3),
        any::<bool>(),
        prop::collection::vec(any::<u8>(), 0..40),
    )
        .prop_map(|(ltime, coord, members, prev, primary, params)| intra::FullView {
            stack: "top:appl:bottom".into(),
            clients: Vec::new(),
            params,
            ltime: ltime.min(intra::LTIME_MAX),
            coord,
            addresses: members.values().copied().collect(),
            members: members.into_keys().collect(),
            prev,
            primary,
        })
}

pub fn intra_hdr() -> impl Strategy<Value = intra::Header> {
    prop_oneof![
        Just(intra::Header::NoHdr),
        (u64_any(), vec_any()).prop_map(|(round, survivors)| intra::Header::View { round, survivors }),
        (u64_any(), full_view()).prop_map(|(round, view)| intra::Header::Full { round, view: Box::new(view) }),
    ]
}

pub fn heal_hdr() -> impl Strategy<Value = heal::Header> {
    prop_oneof![
        Just(heal::Header::NoHdr),
        (any::<bool>(), u64_any(), u64_any(), any::<bool>(), address(), 0..=RANKS_MAX as u16, 0..=heal::KEEPS_MAX)
            .prop_map(|(answer, ltime, coord, primary, contact, members, keeps)| {
                let ltime = ltime.min(intra::LTIME_MAX);
                heal::Header::Hello(Box::new(heal::Hello { answer, ltime, coord, primary, contact, members, keeps }))
            }),
    ]
}

pub fn merge_hdr() -> impl Strategy<Value = merge::Header> {
    prop_oneof![
        Just(merge::Header::NoHdr),
        full_view().prop_map(|view| merge::Header::Request { view: Box::new(view) }),
        full_view().prop_map(|view| merge::Header::Forwarded { view: Box::new(view) }),
        (u64_any(), u64_any()).prop_map(|(l, c)| merge::Header::Denied { request: (l, c) }),
        (u64_any(), u64_any(), full_view())
            .prop_map(|(l, c, view)| merge::Header::Granted { request: (l, c), view: Box::new(view) }),
    ]
}

pub fn inter_hdr() -> impl Strategy<Value = inter::Header> {
    Just(inter::Header::NoHdr)
}

pub fn primary_hdr() -> impl Strategy<Value = primary::Header> {
    Just(primary::Header::NoHdr)
}

pub fn leave_hdr() -> impl Strategy<Value = leave::Header> {
    prop_oneof![Just(leave::Header::NoHdr), Just(leave::Header::Leave)]
}

pub fn sequencer_hdr() -> impl Strategy<Value = sequencer::Header> {
    prop_oneof![
        Just(sequencer::Header::NoHdr),
        Just(sequencer::Header::Data),
        prop::collection::vec((rank(), any::<u32>()), 0..6).prop_map(|runs| sequencer::Header::Order(runs.into())),
    ]
}

pub fn causal_hdr() -> impl Strategy<Value = causal::Header> {
    prop_oneof![
        Just(causal::Header::NoHdr),
        prop::collection::vec((rank(), u64_any()), 0..6).prop_map(|entries| causal::Header::Data(entries.into())),
        prop::collection::vec((rank(), u64_any()), 0..6).prop_map(|entries| causal::Header::Stamp(entries.into())),
    ]
}

pub fn safe_hdr() -> impl Strategy<Value = safe::Header> {
    prop_oneof![
        Just(safe::Header::NoHdr),
        Just(safe::Header::Data),
        vec_any().prop_map(|counts| safe::Header::Ack(counts.into())),
    ]
}

pub fn switch_hdr() -> impl Strategy<Value = switch::Header> {
    prop_oneof![Just(switch::Header::NoHdr), "[a-z:+]{0,40}".prop_map(switch::Header::Request)]
}

pub fn xfer_hdr() -> impl Strategy<Value = xfer::Header> {
    prop_oneof![
        Just(xfer::Header::NoHdr),
        Just(xfer::Header::Chunk),
        Just(xfer::Header::Last),
        Just(xfer::Header::Done)
    ]
}

pub fn totem_hdr() -> impl Strategy<Value = totem::Header> {
    prop_oneof![
        Just(totem::Header::NoHdr),
        u64_any().prop_map(|seq| totem::Header::Data { seq }),
        Just(totem::Header::Unordered),
        u64_any().prop_map(|seq| totem::Header::Token { seq }),
        Just(totem::Header::Request),
    ]
}

pub fn migrate_hdr() -> impl Strategy<Value = migrate::Header> {
    prop_oneof![Just(migrate::Header::NoHdr), address().prop_map(migrate::Header::Request)]
}

/// A header of any layer, every layer equally likely.
pub fn header() -> impl Strategy<Value = Header> {
    prop_oneof![
        bottom_hdr().prop_map(Header::from),
        mnak_hdr().prop_map(Header::from),
        pt2pt_hdr().prop_map(Header::from),
        stable_hdr().prop_map(Header::from),
        frag_hdr().prop_map(Header::from),
        pt2ptw_hdr().prop_map(Header::from),
        mflow_hdr().prop_map(Header::from),
        local_hdr().prop_map(Header::from),
        appl_hdr().prop_map(Header::from),
        suspect_hdr().prop_map(Header::from),
        slander_hdr().prop_map(Header::from),
        elect_hdr().prop_map(Header::from),
        sync_hdr().prop_map(Header::from),
        intra_hdr().prop_map(Header::from),
        leave_hdr().prop_map(Header::from),
        heal_hdr().prop_map(Header::from),
        merge_hdr().prop_map(Header::from),
        inter_hdr().prop_map(Header::from),
        primary_hdr().prop_map(Header::from),
        sequencer_hdr().prop_map(Header::from),
        causal_hdr().prop_map(Header::from),
        safe_hdr().prop_map(Header::from),
        switch_hdr().prop_map(Header::from),
        xfer_hdr().prop_map(Header::from),
        totem_hdr().prop_map(Header::from),
        migrate_hdr().prop_map(Header::from),
    ]
}

pub fn head() -> impl Strategy<Value = Head> {
    let mux = prop_oneof![Just(Mux::Cast), rank().prop_map(|dest| Mux::Send { dest }), Just(Mux::Gossip)];
    (any::<u64>(), mux, rank()).prop_map(|(conn, mux, origin)| Head { conn: ConnId(conn), mux, origin })
}

/// A datagram as a sender holds it: typed head and headers, and a payload in several chunks.
#[derive(Debug, Clone)]
pub struct Datagram {
    pub head: Head,
    /// In push order (top layer first), as `encode` takes them.
    pub hdrs: Vec<Header>,
    pub payload: Payload,
}

impl Datagram {
    /// The payload as one contiguous buffer, for comparisons (`Payload`'s `==` also compares the
    /// chunk boundaries, which the wire does not preserve).
    pub fn payload_bytes(&self) -> Bytes {
        self.payload.to_bytes()
    }

    /// The datagram on the wire.
    pub fn encode(&self) -> Bytes {
        motet_wire::datagram::encode(&self.head, &self.hdrs, &self.payload)
    }
}

/// Splits `bytes` at the given cut points into 1..=cuts+1 chunks; empty chunks vanish, as in
/// `Payload::push`.
fn chunked(bytes: Vec<u8>, cuts: Vec<prop::sample::Index>) -> Payload {
    let bytes = Bytes::from(bytes);
    let mut cuts: Vec<usize> = cuts.iter().map(|cut| cut.index(bytes.len() + 1)).collect();
    cuts.sort_unstable();
    let mut payload = Payload::new();
    let mut start = 0;
    for cut in cuts.into_iter().chain([bytes.len()]) {
        payload.push(bytes.slice(start..cut));
        start = cut;
    }
    payload
}

/// A whole datagram with up to `hdrs_max` headers and a payload of `0..payload_max` random bytes
/// split into 1 to 4 chunks (more than `Payload`'s two inline chunks, so the spilled case is
/// covered too).
pub fn datagram_with(hdrs_max: usize, payload_max: usize) -> impl Strategy<Value = Datagram> {
    let payload =
        (prop::collection::vec(any::<u8>(), 0..payload_max), prop::collection::vec(any::<prop::sample::Index>(), 0..4))
            .prop_map(|(bytes, cuts)| chunked(bytes, cuts));
    (head(), prop::collection::vec(header(), 0..=hdrs_max), payload).prop_map(|(head, hdrs, payload)| Datagram {
        head,
        hdrs,
        payload,
    })
}

/// Any valid datagram: 0..=32 headers, 0..2000 payload bytes.
pub fn datagram() -> impl Strategy<Value = Datagram> {
    datagram_with(HEADER_COUNT_MAX, PAYLOAD_LEN_MAX)
}

/// `count` values of `strategy`, always the same ones: proptest's ChaCha generator with a fixed
/// seed is specified to give the same sequence on every platform and proptest version.
pub fn fixed_sample<S: Strategy>(strategy: S, count: usize, seed: u8) -> Vec<S::Value> {
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[seed; 32]);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    (0..count).map(|_| strategy.new_tree(&mut runner).expect("strategy never rejects").current()).collect()
}
