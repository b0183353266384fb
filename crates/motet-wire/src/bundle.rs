//! Bundles: several datagrams packed into one UDP datagram (message packing, as Horus and Aeron
//! do), so that many small messages to one destination cost one system call and one packet.
//!
//! Layout: [`BUNDLE_TAG`] then, repeated at least twice, `varint length ‖ datagram`, then
//! optionally padding: zero bytes to the end (a zero length ends the bundle), so that bundles sent
//! together with segmentation offload can share one segment size. The tag is
//! not a valid [`crate::VERSION`], so a receiver tells a bundle from a plain datagram by its
//! first byte. Bundles do not nest. Unpacking is zero-copy: each datagram is a slice of the
//! bundle's buffer.

use crate::codec::{Reader, Writer};
use crate::{WireError, WireErrorKind, DATAGRAM_SIZE_MAX};
use bytes::Bytes;

/// The first byte of a bundle.
pub const BUNDLE_TAG: u8 = 0xB5;

/// Whether `datagram` is a bundle.
pub fn is_bundle(datagram: &[u8]) -> bool {
    datagram.first() == Some(&BUNDLE_TAG)
}

/// The bytes a datagram of `len` bytes adds to a bundle.
pub fn framed_len(len: usize) -> usize {
    let mut varint = 1;
    let mut rest = len >> 7;
    while rest > 0 {
        varint += 1;
        rest >>= 7;
    }
    varint + len
}

/// Writes a bundle of `datagrams` (each given as its chunks, e.g. head then payload).
pub fn encode<'a>(datagrams: impl IntoIterator<Item = &'a [&'a [u8]]>, out: &mut Vec<u8>) {
    out.push(BUNDLE_TAG);
    for chunks in datagrams {
        let len: usize = chunks.iter().map(|c| c.len()).sum();
        // What `decode` refuses: an empty part (read as the start of padding), a bundle in a
        // bundle.
        debug_assert!(len > 0 && chunks.iter().find(|c| !c.is_empty()).is_none_or(|c| c[0] != BUNDLE_TAG));
        Writer::new(out).varint(len as u64);
        for chunk in chunks {
            out.extend_from_slice(chunk);
        }
    }
}

/// Pads the bundle in `out` (from `start`) with zero bytes to `len` bytes; nothing when it is
/// already that long.
pub fn pad(out: &mut Vec<u8>, start: usize, len: usize) {
    if out.len() - start < len {
        out.resize(start + len, 0);
    }
}

/// Splits a bundle into its datagrams without copying. Total: any input gives the datagrams or an
/// error, never a panic.
pub fn decode(bundle: &Bytes) -> Result<Vec<Bytes>, WireError> {
    if bundle.len() > DATAGRAM_SIZE_MAX {
        return Err(WireError { kind: WireErrorKind::Oversized, offset: DATAGRAM_SIZE_MAX });
    }
    let mut r = Reader::new(bundle);
    if r.u8()? != BUNDLE_TAG {
        return Err(WireError { kind: WireErrorKind::Version(bundle[0]), offset: 0 });
    }
    let mut out = Vec::new();
    while r.remaining() > 0 {
        let offset = r.position();
        let len = r.varint()?;
        let start = r.position();
        let bad = || WireError { kind: WireErrorKind::Bundle, offset };
        let len = usize::try_from(len).map_err(|_| bad())?;
        if len == 0 {
            // Padding: only zero bytes may follow.
            if bundle[start..].iter().any(|&b| b != 0) {
                return Err(bad());
            }
            break;
        }
        // No datagram is shorter than a compressed head: a bundle of shorter parts is forged, and
        // unpacking its tens of thousands of one-byte parts allocated about a megabyte.
        if len > r.remaining() || len < crate::datagram::COMPRESSED_HEAD_MAX {
            return Err(bad());
        }
        if bundle[start] == BUNDLE_TAG {
            return Err(bad()); // bundles do not nest
        }
        out.push(bundle.slice(start..start + len));
        r.skip(len)?;
    }
    if out.len() < 2 {
        return Err(WireError { kind: WireErrorKind::Bundle, offset: r.position() });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_framing_size() {
        let (a, b): (&[u8], &[u8]) = (&[1, 2, 3, 4, 5, 6, 7, 8], &[1; 200]);
        let mut out = Vec::new();
        encode([&[a][..], &[&b[..100], &b[100..]][..]], &mut out);
        assert_eq!(out.len(), 1 + framed_len(8) + framed_len(200));
        let parts = decode(&Bytes::from(out)).unwrap();
        assert_eq!(parts, vec![Bytes::from_static(a), Bytes::copy_from_slice(b)]);
        let mut padded = out_copy(&parts);
        let unpadded = padded.len();
        pad(&mut padded, 0, unpadded + 9);
        assert_eq!(padded.len(), unpadded + 9);
        assert_eq!(decode(&Bytes::from(padded)).unwrap(), parts, "padding is not a datagram");
    }

    fn out_copy(parts: &[Bytes]) -> Vec<u8> {
        let slices: Vec<Vec<&[u8]>> = parts.iter().map(|p| vec![&p[..]]).collect();
        let mut out = Vec::new();
        encode(slices.iter().map(Vec::as_slice), &mut out);
        out
    }

    #[test]
    fn malformed_bundles_are_errors() {
        // A framed part of the shortest length a datagram has.
        const PART: [u8; 9] = [8, 1, 1, 1, 1, 1, 1, 1, 1];
        let bundle =
            |pieces: &[&[u8]]| [&[BUNDLE_TAG][..]].iter().chain(pieces).flat_map(|p| p.iter().copied()).collect();
        assert!(decode(&Bytes::from(bundle(&[&PART, &PART]))).is_ok(), "the well-formed control");
        let bad: [Vec<u8>; 9] = [
            bundle(&[]),                                    // empty
            bundle(&[&PART]),                               // one datagram only
            bundle(&[&PART, &[9, 1, 2]]),                   // truncated
            bundle(&[&[0, 0, 0]]),                          // padding only
            bundle(&[&PART, &[0, 0]]),                      // one datagram, padded
            bundle(&[&PART, &PART, &[0, 1]]),               // padding that is not zero
            bundle(&[&PART, &[8, BUNDLE_TAG], &PART[2..]]), // nested
            bundle(&[&PART, &[7, 1, 1, 1, 1, 1, 1, 1]]),    // a part shorter than any datagram
            vec![1, 1, 1],                                  // not a bundle
        ];
        for bad in bad {
            assert!(decode(&Bytes::from(bad.clone())).is_err(), "{bad:?}");
        }
    }

    /// A bundle of the shortest parts a datagram may have holds at most a few thousand: a
    /// datagram of one-byte parts (tens of thousands, about a megabyte of handles) is refused.
    #[test]
    fn a_bundle_of_one_byte_parts_is_refused() {
        let mut tiny = vec![BUNDLE_TAG];
        (0..30_000).for_each(|_| tiny.extend([1, 1]));
        assert!(decode(&Bytes::from(tiny)).is_err());
    }
}
