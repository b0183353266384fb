//! Malformed input: every byte string must decode to a value or to a typed [`WireError`], never to
//! a panic. Hand-built cases pin each error kind and where it is reported; a deterministic
//! mutation fuzzer (1,000,000 mutated datagrams) covers what nobody thought of.

mod common;

use bytes::Bytes;
use common::*;
use motet_wire::codec::Writer;
use motet_wire::datagram::{decode, encode};
use motet_wire::{Decoded, Header, WireError, WireErrorKind, DATAGRAM_SIZE_MAX, RANKS_MAX, VERSION};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::panic::{self, AssertUnwindSafe};

// ---------------------------------------------------------------------------------------------
// Hand-built datagrams.
//
// Layout of `cast_head(count)`: version @0, conn @1..9, mux @9, origin @10, count @11, headers @12.
// ---------------------------------------------------------------------------------------------

/// Offset of the first header after a `cast_head`.
const HDRS: usize = 12;

/// A cast head from rank 0 announcing `count` headers.
fn cast_head(count: u8) -> Vec<u8> {
    vec![VERSION, 0x78, 0x56, 0x34, 0x12, 0x21, 0x43, 0x65, 0x87, 0, 0, count]
}

fn varint(value: u64) -> Vec<u8> {
    let mut buf = Vec::new();
    Writer::new(&mut buf).varint(value);
    buf
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

fn decode_ok(bytes: Vec<u8>) -> Decoded {
    decode(Bytes::from(bytes)).unwrap_or_else(|err| panic!("valid datagram rejected: {err}"))
}

/// Asserts that `bytes` is rejected with `kind`, at an offset that points into the offending
/// field: `field` spans from the field's first byte to just past it (the decoder reports either
/// where a field starts or where it noticed the problem, which may be right after it).
#[track_caller]
fn assert_error(bytes: Vec<u8>, kind: WireErrorKind, field: RangeInclusive<usize>) {
    match decode(Bytes::from(bytes.clone())) {
        Ok(decoded) => panic!("{bytes:02x?} decoded to {decoded:?}, expected {kind:?}"),
        Err(err) => {
            assert_eq!(err.kind, kind, "bytes {bytes:02x?}");
            assert!(field.contains(&err.offset), "{err:?} not in {field:?} for {bytes:02x?}");
        }
    }
}

#[test]
fn empty_and_short_heads_are_truncated() {
    assert_error(vec![], WireErrorKind::Truncated, 0..=0);
    // Every cut of a minimal valid head (no headers, no payload).
    let head = cast_head(0);
    decode_ok(head.clone());
    for cut in 1..head.len() {
        assert_error(head[..cut].to_vec(), WireErrorKind::Truncated, 1..=cut);
    }
}

#[test]
fn oversized_datagrams_are_rejected_before_parsing() {
    // The largest datagram is fine...
    let mut max = cast_head(0);
    max.resize(DATAGRAM_SIZE_MAX, 0xab);
    assert_eq!(decode_ok(max.clone()).payload.len(), DATAGRAM_SIZE_MAX - HDRS);
    // ...one byte more is not, even with a valid head.
    max.push(0xab);
    assert_error(max, WireErrorKind::Oversized, DATAGRAM_SIZE_MAX..=DATAGRAM_SIZE_MAX);
    // The size is checked first: junk that would fail anywhere else still reports Oversized.
    assert_error(vec![0xff; DATAGRAM_SIZE_MAX + 1], WireErrorKind::Oversized, DATAGRAM_SIZE_MAX..=DATAGRAM_SIZE_MAX);
    assert_error(vec![0; 1 << 20], WireErrorKind::Oversized, DATAGRAM_SIZE_MAX..=DATAGRAM_SIZE_MAX);
}

#[test]
fn unknown_version() {
    for version in [0, VERSION + 1, 0x80, 0xff] {
        let mut bytes = cast_head(0);
        bytes[0] = version;
        assert_error(bytes, WireErrorKind::Version(version), 0..=0);
        // The version is checked before anything else is read.
        assert_error(vec![version], WireErrorKind::Version(version), 0..=0);
    }
}

#[test]
fn unknown_mux() {
    for mux in [3, 0x7f, 0x80, 0xff] {
        let mut bytes = cast_head(0);
        bytes[9] = mux;
        assert_error(bytes, WireErrorKind::Mux(mux), 9..=9);
    }
}

#[test]
fn header_count_above_max() {
    // 32 headers are accepted (`appl::NoHdr` is `09 01`)...
    let hdrs = [9u8, 1].repeat(32);
    assert_eq!(decode_ok(cat(&[&cast_head(32), &hdrs])).hdrs.len(), 32);
    // ...one fewer than announced is truncated...
    assert_error(cat(&[&cast_head(32), &hdrs[2..]]), WireErrorKind::Truncated, HDRS + 62..=HDRS + 62);
    // ...and a count above 32 is rejected before any header is read.
    for count in [33u8, 0x80, 0xff] {
        assert_error(cat(&[&cast_head(count), &hdrs]), WireErrorKind::HeaderCount(count.into()), 11..=12);
    }
}

#[test]
fn unknown_layer_tag() {
    // Short form (`0x80 | layer`, variant 0) and long form (`layer, variant`): layer 0 and the tags
    // above the registry name no layer.
    for layer in [0u8, 0x42, 0x7f] {
        assert_error(cat(&[&cast_head(1), &[0x80 | layer]]), WireErrorKind::Layer(layer), HDRS..=HDRS);
        assert_error(cat(&[&cast_head(1), &[layer, 1]]), WireErrorKind::Layer(layer), HDRS..=HDRS);
    }
    // The error is at the header that is wrong, not at the first header.
    assert_error(cat(&[&cast_head(2), &[9, 1], &[0xc2]]), WireErrorKind::Layer(0x42), HDRS + 2..=HDRS + 2);
}

#[test]
fn unknown_variant() {
    // (layer, first variant number past the layer's last one)
    let layers = [(1u8, 2u8), (2, 5), (3, 5), (4, 3), (5, 2), (6, 2), (7, 2), (8, 1), (9, 3)];
    for (layer, variant) in layers {
        for variant in [variant, 0x7f, 0xff] {
            let kind = WireErrorKind::Variant { layer, variant };
            assert_error(cat(&[&cast_head(1), &[layer, variant, 0, 0, 0]]), kind, HDRS..=HDRS + 2);
        }
        // Variant 0 has only the one-byte encoding; its long form is rejected, so that every value
        // has exactly one encoding.
        let kind = WireErrorKind::Variant { layer, variant: 0 };
        assert_error(cat(&[&cast_head(1), &[layer, 0]]), kind, HDRS..=HDRS + 2);
    }
}

#[test]
fn overlong_varints() {
    let eleven = [0xffu8; 11];
    let overflow = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02]; // 2^64
    let continued = [0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x81, 0x00]; // 11 bytes
    for bad in [&eleven[..], &overflow[..], &continued[..]] {
        // In the origin, the destination, and a header field (`mnak::Data { seqno }` is `02 01 seqno`).
        let origin = cat(&[&[VERSION, 0, 0, 0, 0, 0, 0, 0, 0, 0], bad, &[0]]);
        assert_error(origin, WireErrorKind::Varint, 10..=10);
        let dest = cat(&[&[VERSION, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0], bad, &[0]]);
        assert_error(dest, WireErrorKind::Varint, 11..=11);
        let seqno = cat(&[&cast_head(1), &[2, 1], bad]);
        assert_error(seqno, WireErrorKind::Varint, HDRS + 2..=HDRS + 2);
    }
    // The largest ten-byte varint is fine.
    let max = cat(&[&cast_head(1), &[2, 1], &varint(u64::MAX)]);
    assert_eq!(
        *decode_ok(max).hdrs.get(0).unwrap(),
        Header::Mnak(motet_wire::hdr::mnak::Header::Data { seqno: u64::MAX })
    );
}

#[test]
fn ranks_and_u32_fields_out_of_range() {
    let big_rank = varint(u64::from(u16::MAX) + 1);
    let max_rank = varint(u16::MAX.into());
    // origin, dest
    let conn = [0u8; 8];
    assert_error(cat(&[&[VERSION], &conn, &[0], &big_rank, &[0]]), WireErrorKind::Range, 10..=10);
    assert_error(cat(&[&[VERSION], &conn, &[1, 0], &big_rank, &[0]]), WireErrorKind::Range, 11..=11);
    decode_ok(cat(&[&[VERSION], &conn, &[1], &max_rank, &max_rank, &[0]]));
    // mnak::Nak { origin, lo, hi } is `02 03 origin lo hi`; mnak::Retrans is `02 04 origin seqno`.
    assert_error(cat(&[&cast_head(1), &[2, 3], &big_rank, &[0, 0]]), WireErrorKind::Range, HDRS + 2..=HDRS + 2);
    assert_error(cat(&[&cast_head(1), &[2, 4], &big_rank, &[0]]), WireErrorKind::Range, HDRS + 2..=HDRS + 2);
    assert_error(cat(&[&cast_head(1), &[2, 4], &varint(u64::MAX), &[0]]), WireErrorKind::Range, HDRS + 2..=HDRS + 2);
    decode_ok(cat(&[&cast_head(1), &[2, 4], &max_rank, &[0]]));
    // frag::Part { index, count } is `05 01 index count`, both u32.
    let big = varint(u64::from(u32::MAX) + 1);
    let max = varint(u32::MAX.into());
    assert_error(cat(&[&cast_head(1), &[5, 1], &big, &max]), WireErrorKind::Range, HDRS + 2..=HDRS + 2);
    let count_at = HDRS + 2 + max.len();
    assert_error(cat(&[&cast_head(1), &[5, 1], &max, &big]), WireErrorKind::Range, count_at..=count_at);
    decode_ok(cat(&[&cast_head(1), &[5, 1], &max, &max]));
}

#[test]
fn vector_lengths() {
    // stable::Columns { seq, stable, max, failed } is `04 01 seq len values... (three vectors)`.
    let gossip = |vectors: &[&[u8]]| cat(&[&cast_head(1), &[4, 1, 0], &vectors.concat()]);
    let at = HDRS + 3;
    let zeros = vec![0u8; RANKS_MAX + 1];

    // RANKS_MAX elements are accepted...
    let ok = decode_ok(gossip(&[&varint(RANKS_MAX as u64), &zeros[..RANKS_MAX], &[0], &[0]]));
    let Header::Stable(motet_wire::hdr::stable::Header::Columns(g)) = &*ok.hdrs.get(0).unwrap() else {
        panic!("{ok:?}")
    };
    assert_eq!((g.stable.len(), g.max.len()), (RANKS_MAX, 0));
    // ...one more is rejected even though enough bytes follow to hold them.
    let len = RANKS_MAX as u64 + 1;
    assert_error(gossip(&[&varint(len), &zeros, &[0], &[0]]), WireErrorKind::VectorLength(len), at..=at);
    assert_error(gossip(&[&varint(u64::MAX)]), WireErrorKind::VectorLength(u64::MAX), at..=at);

    // A length larger than the bytes that remain is rejected before allocating.
    assert_error(gossip(&[&[10], &[0; 9]]), WireErrorKind::VectorLength(10), at..=at);
    // Same for the second vector.
    assert_error(gossip(&[&[2, 0, 0], &[5, 0, 0]]), WireErrorKind::VectorLength(5), at + 3..=at + 3);
    // A length that fits the remaining bytes, but whose elements run out, is truncated.
    assert_error(gossip(&[&[3, 0, 0x80, 0x80]]), WireErrorKind::Truncated, at + 1..=at + 4);
}

// ---------------------------------------------------------------------------------------------
// Truncation of random valid datagrams.
// ---------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Every strict prefix that cuts into the head or the headers is an error (the datagram
    /// ended early, or a vector's length exceeds what is left), reported no later than the cut.
    /// Every prefix that cuts into the payload is a valid datagram with a shorter payload.
    #[test]
    fn prefixes_are_truncated(dgram in datagram_with(32, 64)) {
        let bytes = dgram.encode();
        let head_len = bytes.len() - dgram.payload.len();
        for cut in 0..head_len {
            let err = decode(bytes.slice(..cut));
            prop_assert!(
                matches!(err, Err(WireError { kind: WireErrorKind::Truncated | WireErrorKind::VectorLength(_), offset })
                    if offset <= cut),
                "cut {} of {:02x?}: {:?}", cut, bytes, err
            );
        }
        for cut in head_len..bytes.len() {
            let decoded = decode(bytes.slice(..cut));
            prop_assert!(decoded.is_ok(), "cut {} of {:02x?}: {:?}", cut, bytes, decoded);
            let decoded = decoded.unwrap();
            prop_assert_eq!(decoded.head, dgram.head);
            prop_assert_eq!(&decoded.hdrs, &dgram.hdrs);
            prop_assert_eq!(decoded.payload.to_bytes(), bytes.slice(head_len..cut));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Deterministic mutation fuzzing.
// ---------------------------------------------------------------------------------------------

/// Mutated inputs decoded by [`mutated_datagrams_never_panic`].
const MUTATED_INPUTS: usize = 1_000_000;

/// xorshift64*: tiny, fast and fixed, so the mutation sequence never changes under us (unlike
/// a library generator whose stream may change between versions).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform enough in `0..n` for fuzzing (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    /// A random byte, or with even odds one the decoder treats specially: varint continuation
    /// boundaries, the version, layer tags in both forms, header-count limits.
    fn byte(&mut self) -> u8 {
        const SPECIAL: &[u8] = &[
            0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x7f, 0x80, 0x81, 0xff, 0x20, 0x21, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x82,
            0x84, 0x85, 0x89, 0x8a,
        ];
        if self.one_in(2) {
            SPECIAL[self.below(SPECIAL.len())]
        } else {
            self.next() as u8
        }
    }
}

/// A valid encoded datagram and the length of its head and headers, where mutations matter most.
struct Seed {
    bytes: Vec<u8>,
    head_len: usize,
}

fn corpus() -> Vec<Seed> {
    // Mostly small payloads: the decoder never looks at payload bytes, so long payloads would only
    // slow each iteration down. A few full-size ones keep the splices and offsets realistic.
    let mut dgrams = fixed_sample(datagram_with(12, 48), 224, 0x5e);
    dgrams.extend(fixed_sample(datagram(), 32, 0xed));
    dgrams
        .iter()
        .map(|dgram| {
            let bytes = dgram.encode().to_vec();
            let head_len = bytes.len() - dgram.payload.len();
            Seed { bytes, head_len }
        })
        .collect()
}

/// Applies one random mutation to `buf`. Positions fall in the head and headers (plus a little of
/// the payload) three times out of four.
fn mutate(rng: &mut Rng, buf: &mut Vec<u8>, head_len: usize, corpus: &[Seed]) {
    let len = buf.len();
    let pos = if len > 0 && !rng.one_in(4) { rng.below(len.min(head_len + 8)) } else { rng.below(len + 1) };
    // An operation that needs a byte at `pos` when `pos == len` falls through to the last arm.
    match rng.below(8) {
        // Bit flip.
        0 if pos < len => buf[pos] ^= 1 << rng.below(8),
        // Byte overwrite.
        1 if pos < len => buf[pos] = rng.byte(),
        // Insertion of 1..=4 bytes.
        2 => {
            let inserted: Vec<u8> = (0..1 + rng.below(4)).map(|_| rng.byte()).collect();
            buf.splice(pos..pos, inserted);
        }
        // Deletion of 1..=4 bytes.
        3 if pos < len => {
            let end = (pos + 1 + rng.below(4)).min(len);
            buf.drain(pos..end);
        }
        // Truncation.
        4 => buf.truncate(pos),
        // Appending junk.
        5 => {
            for _ in 0..1 + rng.below(16) {
                buf.push(rng.byte());
            }
        }
        // Splice: our prefix, another datagram's suffix.
        6 => {
            let other = &corpus[rng.below(corpus.len())].bytes;
            let from = rng.below(other.len() + 1);
            buf.truncate(pos);
            buf.extend_from_slice(&other[from..]);
        }
        // A varint of a boundary value written over the bytes at `pos` (ranks, u32 fields and
        // vector lengths just past their limits, the largest u64).
        _ => {
            const VALUES: &[u64] = &[
                0,
                127,
                128,
                u16::MAX as u64,
                u16::MAX as u64 + 1,
                u32::MAX as u64,
                u32::MAX as u64 + 1,
                RANKS_MAX as u64,
                RANKS_MAX as u64 + 1,
                u64::MAX,
            ];
            let value = varint(VALUES[rng.below(VALUES.len())]);
            let end = (pos + value.len()).min(len);
            buf.splice(pos..end, value);
        }
    }
}

/// Tallies of the fuzz run.
#[derive(Default)]
struct Tally {
    ok: usize,
    errors: BTreeMap<&'static str, usize>,
}

fn kind_name(kind: WireErrorKind) -> &'static str {
    match kind {
        WireErrorKind::Truncated => "Truncated",
        WireErrorKind::Oversized => "Oversized",
        WireErrorKind::Version(_) => "Version",
        WireErrorKind::Mux(_) => "Mux",
        WireErrorKind::HeaderCount(_) => "HeaderCount",
        WireErrorKind::Layer(_) => "Layer",
        WireErrorKind::Variant { .. } => "Variant",
        WireErrorKind::Varint => "Varint",
        WireErrorKind::Range => "Range",
        WireErrorKind::VectorLength(_) => "VectorLength",
        WireErrorKind::Bundle => "Bundle",
    }
}

/// Decodes one input and checks what can be checked of the result.
fn check(input: &Bytes, tally: &mut Tally) {
    match decode(input.clone()) {
        Err(err) => {
            // Only the size check reports a position (the limit) beyond a short input.
            let limit = if err.kind == WireErrorKind::Oversized { DATAGRAM_SIZE_MAX } else { input.len() };
            assert!(err.offset <= limit, "offset past the input: {err:?}");
            *tally.errors.entry(kind_name(err.kind)).or_default() += 1;
        }
        Ok(decoded) => {
            tally.ok += 1;
            // The payload is the input's tail, and every accepted input is the one canonical
            // encoding of what it decodes to (the decoder refuses padded varints and long-form
            // variant 0), so re-encoding gives the input back byte for byte.
            assert!(input.ends_with(&decoded.payload.to_bytes()));
            let reencoded = encode(&decoded.head, &decoded.hdrs, &decoded.payload);
            assert_eq!(reencoded, input, "accepted a non-canonical encoding");
        }
    }
}

/// 1,000,000 mutated datagrams from a fixed corpus and a fixed seed: `decode` must return on each,
/// and whatever it accepts must survive a re-encode/decode round trip. This is the CI stand-in for
/// the cargo-fuzz target in `fuzz/`.
#[test]
fn mutated_datagrams_never_panic() {
    let corpus = corpus();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut tally = Tally::default();
    let mut mutations = 0usize;
    for _ in 0..MUTATED_INPUTS {
        let seed = &corpus[rng.below(corpus.len())];
        let mut buf = seed.bytes.clone();
        // Usually one mutation, so most inputs stay close to valid and reach deep into the
        // headers; sometimes a few stacked.
        let count = if rng.one_in(4) { 2 + rng.below(3) } else { 1 };
        for _ in 0..count {
            mutate(&mut rng, &mut buf, seed.head_len, &corpus);
        }
        mutations += count;
        let input = Bytes::from(buf);
        // Report the offending input before the panic propagates, so it can be replayed.
        if let Err(panic) = panic::catch_unwind(AssertUnwindSafe(|| check(&input, &mut tally))) {
            eprintln!("failing input ({} bytes): {:02x?}", input.len(), &input[..]);
            panic::resume_unwind(panic);
        }
    }
    eprintln!(
        "mutation fuzz: {MUTATED_INPUTS} inputs, {mutations} mutations, {} Ok, {} Err {:?}",
        tally.ok,
        MUTATED_INPUTS - tally.ok,
        tally.errors
    );
    // Guard against a corpus or mutator that silently stops reaching the decoder's paths.
    assert!(tally.errors.len() >= 8, "too few error kinds exercised: {:?}", tally.errors);
}

// ---------------------------------------------------------------------------------------------
// Bundles.
// ---------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A bundle of valid datagrams unpacks to exactly them, each still decoding; any byte string
    /// given to the bundle decoder gives datagrams or an error (never a panic), and what it
    /// accepts re-encodes to the same bytes.
    #[test]
    fn bundles_unpack_exactly_and_garbage_is_an_error(
        dgrams in proptest::collection::vec(datagram_with(8, 32), 2..6),
        noise in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        use motet_wire::bundle;
        let encoded: Vec<Bytes> = dgrams.iter().map(|d| d.encode()).collect();
        let mut out = Vec::new();
        let parts: Vec<Vec<&[u8]>> = encoded.iter().map(|b| vec![&b[..]]).collect();
        bundle::encode(parts.iter().map(Vec::as_slice), &mut out);
        let unpacked = bundle::decode(&Bytes::from(out)).unwrap();
        prop_assert_eq!(&unpacked, &encoded);
        for (part, dgram) in unpacked.into_iter().zip(&dgrams) {
            prop_assert_eq!(decode(part).unwrap().head, dgram.head);
        }
        let mut garbage = vec![bundle::BUNDLE_TAG];
        garbage.extend(noise);
        if let Ok(parts) = bundle::decode(&Bytes::from(garbage.clone())) {
            let slices: Vec<Vec<&[u8]>> = parts.iter().map(|p| vec![&p[..]]).collect();
            let mut again = Vec::new();
            bundle::encode(slices.iter().map(Vec::as_slice), &mut again);
            // Canonical up to padding: the same bytes, then nothing but zeros.
            prop_assert_eq!(&garbage[..again.len()], &again[..]);
            prop_assert!(garbage[again.len()..].iter().all(|&b| b == 0));
        }
    }
}
