//! Feeds arbitrary bytes to the datagram decoder. The decoder is total, so any panic is a bug;
//! whatever it accepts must be the one canonical encoding of its value. Same checks as the
//! `mutated_datagrams_never_panic` test in `crates/motet-wire/tests/malformed.rs`, which CI runs.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use motet_wire::datagram::{decode, encode};

fuzz_target!(|data: &[u8]| {
    let input = Bytes::copy_from_slice(data);
    let Ok(decoded) = decode(input.clone()) else {
        return;
    };
    // The payload is the input's tail, and re-encoding gives the input back byte for byte.
    assert!(input.ends_with(&decoded.payload.to_bytes()));
    assert_eq!(encode(&decoded.head, &decoded.hdrs, &decoded.payload), input);
});
