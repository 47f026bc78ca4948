//! Fuzz target: Falcon base header and Pull Data (whose view is the base
//! header), `falcon_core::wire::falcon::{base, pull_data}`.
//!
//! Arbitrary bytes into one parser; whatever parses must emit and parse back
//! to the same value.
#![no_main]

use falcon_core::wire::falcon::{base, pull_data};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(packet) = base::Packet::new_checked(data) else {
        return;
    };
    let _ = (packet.payload().len(), format!("{packet}"));
    if let Ok(repr) = base::Repr::parse(&packet) {
        let mut out = vec![0u8; repr.buffer_len()];
        repr.emit(&mut base::Packet::new_unchecked(&mut out[..]));
        let reparsed = base::Packet::new_checked(&out[..]).and_then(|p| base::Repr::parse(&p));
        assert_eq!(reparsed, Ok(repr));
    }
    if let Ok(repr) = pull_data::Repr::parse(&packet) {
        let mut out = vec![0u8; repr.buffer_len()];
        repr.emit(&mut pull_data::Packet::new_unchecked(&mut out[..]));
        let reparsed =
            pull_data::Packet::new_checked(&out[..]).and_then(|p| pull_data::Repr::parse(&p));
        assert_eq!(reparsed, Ok(repr));
    }
});
