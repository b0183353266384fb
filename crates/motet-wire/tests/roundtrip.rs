//! Round trips through the codec: every value the encoder accepts must decode to itself, and
//! every header's encoding must be the canonical one (re-encoding gives the same bytes).

mod common;

use common::*;
use motet_wire::codec::{Reader, Writer};
use motet_wire::datagram::{decode, encode, encode_head};
use motet_wire::hdr::LayerHeader;
use motet_wire::Header;
use proptest::prelude::*;

fn encode_header(header: &Header) -> Vec<u8> {
    let mut buf = Vec::new();
    header.encode(&mut Writer::new(&mut buf));
    buf
}

/// Encodes one layer's header, decodes it, re-encodes the result: the value must come back, all
/// bytes must be consumed, the bytes must be identical, and the first byte must follow the
/// documented layout (`0x80 | layer` for variant 0, else `layer, variant, fields`).
fn check_header<H: LayerHeader + Into<Header>>(layer_header: H) -> Result<(), TestCaseError> {
    let variant = layer_header.variant();
    let header: Header = layer_header.into();
    let bytes = encode_header(&header);
    if variant == 0 {
        prop_assert_eq!(&bytes[..], &[0x80 | H::LAYER][..]);
    } else {
        prop_assert_eq!(&bytes[..2], &[H::LAYER, variant][..]);
    }
    let mut reader = Reader::new(&bytes);
    let decoded = Header::decode(&mut reader);
    prop_assert_eq!(decoded.as_ref(), Ok(&header), "bytes {:02x?}", bytes);
    prop_assert_eq!(reader.remaining(), 0, "trailing bytes after {:?}", header);
    prop_assert_eq!(encode_header(&decoded.unwrap()), bytes);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn bottom_header_is_canonical(header in bottom_hdr()) {
        check_header(header)?;
    }

    #[test]
    fn mnak_header_is_canonical(header in mnak_hdr()) {
        check_header(header)?;
    }

    #[test]
    fn pt2pt_header_is_canonical(header in pt2pt_hdr()) {
        check_header(header)?;
    }

    #[test]
    fn stable_header_is_canonical(header in stable_hdr()) {
        check_header(header)?;
    }

    #[test]
    fn frag_header_is_canonical(header in frag_hdr()) {
        check_header(header)?;
    }

    #[test]
    fn pt2ptw_header_is_canonical(header in pt2ptw_hdr()) {
        check_header(header)?;
    }

    #[test]
    fn mflow_header_is_canonical(header in mflow_hdr()) {
        check_header(header)?;
    }

    #[test]
    fn local_header_is_canonical(header in local_hdr()) {
        check_header(header)?;
    }

    #[test]
    fn appl_header_is_canonical(header in appl_hdr()) {
        check_header(header)?;
    }

    #[test]
    fn heal_header_is_canonical(header in heal_hdr()) {
        check_header(header)?;
    }

    #[test]
    fn inter_header_is_canonical(header in inter_hdr()) {
        check_header(header)?;
    }

    #[test]
    fn merge_header_is_canonical(header in merge_hdr()) {
        check_header(header)?;
    }

    #[test]
    fn primary_header_is_canonical(header in primary_hdr()) {
        check_header(header)?;
    }

    #[test]
    fn suspect_header_is_canonical(header in suspect_hdr()) {
        check_header(header)?;
    }

    #[test]
    fn slander_header_is_canonical(header in slander_hdr()) {
        check_header(header)?;
    }

    #[test]
    fn elect_header_is_canonical(header in elect_hdr()) {
        check_header(header)?;
    }

    #[test]
    fn sync_header_is_canonical(header in sync_hdr()) {
        check_header(header)?;
    }

    #[test]
    fn intra_header_is_canonical(header in intra_hdr()) {
        check_header(header)?;
    }

    #[test]
    fn leave_header_is_canonical(header in leave_hdr()) {
        check_header(header)?;
    }

    /// Through the central enum, so that the layer-tag dispatch is covered for every layer at once.
    #[test]
    fn any_header_round_trips(header in header()) {
        let bytes = encode_header(&header);
        let mut reader = Reader::new(&bytes);
        let decoded = Header::decode(&mut reader);
        prop_assert_eq!(decoded.as_ref(), Ok(&header), "bytes {:02x?}", bytes);
        prop_assert_eq!(reader.remaining(), 0);
        prop_assert_eq!(encode_header(&decoded.unwrap()), bytes);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// `decode(encode(d))` gives back the head, the headers in the same order and the payload bytes.
    #[test]
    fn datagram_round_trips(dgram in datagram()) {
        let bytes = dgram.encode();
        let decoded = decode(bytes.clone());
        prop_assert!(decoded.is_ok(), "{:?} for {:?}", decoded, dgram);
        let decoded = decoded.unwrap();
        prop_assert_eq!(decoded.head, dgram.head);
        prop_assert_eq!(&decoded.hdrs, &dgram.hdrs);
        prop_assert_eq!(decoded.payload.to_bytes(), dgram.payload_bytes());
        // The decoder must not copy the payload: it is a view at the end of the datagram.
        if let Some(chunk) = decoded.payload.chunks().first() {
            prop_assert_eq!(chunk.as_ptr(), bytes[bytes.len() - dgram.payload.len()..].as_ptr());
        }
        // And re-encoding what was decoded gives the very same bytes.
        prop_assert_eq!(encode(&decoded.head, &decoded.hdrs, &decoded.payload), bytes);
    }

    /// The scatter-gather path (`encode_head`, then the payload's chunks as they are) puts the
    /// same bytes on the wire as the contiguous `encode`.
    #[test]
    fn encode_head_then_chunks_equals_encode(dgram in datagram()) {
        let mut gathered = Vec::new();
        encode_head(&dgram.head, &dgram.hdrs, &mut gathered);
        let head_len = gathered.len();
        for chunk in dgram.payload.chunks() {
            gathered.extend_from_slice(chunk);
        }
        prop_assert_eq!(&gathered[..], &dgram.encode()[..]);
        prop_assert_eq!(gathered.len(), head_len + dgram.payload.len());
    }
}
