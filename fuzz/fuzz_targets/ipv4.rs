//! Fuzz target: IPv4 header, `falcon_core::wire::ipv4`.
//!
//! Arbitrary bytes into one parser; whatever parses must emit and parse back
//! to the same value. The header checksum verifies as true under
//! `--cfg fuzzing`, so the fuzzer gets past it (the re-emitted header carries
//! a correct one).
#![no_main]

use falcon_core::wire::ipv4::{Packet, Repr};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(packet) = Packet::new_checked(data) else {
        return;
    };
    let _ = (
        packet.options().len(),
        packet.payload().len(),
        format!("{packet}"),
    );
    let Ok(repr) = Repr::parse(&packet) else {
        return;
    };
    // Options are not represented: the re-emitted header is 20 bytes.
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut out[..]));
    let reparsed = Packet::new_checked(&out[..]).and_then(|p| Repr::parse(&p));
    assert_eq!(reparsed, Ok(repr));
});
