//! Fuzz target: UDP header, `falcon_core::wire::udp`.
//!
//! Arbitrary bytes into one parser; whatever parses must emit and parse back
//! to the same value.
#![no_main]

use falcon_core::wire::udp::{Packet, Repr};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(packet) = Packet::new_checked(data) else {
        return;
    };
    let _ = (packet.payload().len(), format!("{packet}"));
    let Ok(repr) = Repr::parse(&packet) else {
        return;
    };
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut out[..]));
    let reparsed = Packet::new_checked(&out[..]).and_then(|p| Repr::parse(&p));
    assert_eq!(reparsed, Ok(repr));
});
