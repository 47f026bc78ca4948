//! Fuzz target: Falcon BACK, `falcon_core::wire::falcon::ack`.
//!
//! Arbitrary bytes into one parser; whatever parses must emit and parse back
//! to the same value.
#![no_main]

use falcon_core::wire::falcon::ack::{BackPacket, BackRepr};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(packet) = BackPacket::new_checked(data) else {
        return;
    };
    let _ = (packet.cc_info(), format!("{packet}"));
    let Ok(repr) = BackRepr::parse(&packet) else {
        return;
    };
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut BackPacket::new_unchecked(&mut out[..]));
    let reparsed = BackPacket::new_checked(&out[..]).and_then(|p| BackRepr::parse(&p));
    assert_eq!(reparsed, Ok(repr));
});
