//! Fuzz target: Falcon EACK (BACK + three bitmaps), `falcon_core::wire::falcon::ack`.
//!
//! Arbitrary bytes into one parser; whatever parses must emit and parse back
//! to the same value.
#![no_main]

use falcon_core::wire::falcon::ack::{EackPacket, EackRepr};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(packet) = EackPacket::new_checked(data) else {
        return;
    };
    let _ = (
        packet.data_ack_bitmap(),
        packet.data_rx_bitmap(),
        packet.request_bitmap(),
    );
    let _ = format!("{packet}");
    let Ok(repr) = EackRepr::parse(&packet) else {
        return;
    };
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut EackPacket::new_unchecked(&mut out[..]));
    let reparsed = EackPacket::new_checked(&out[..]).and_then(|p| EackRepr::parse(&p));
    assert_eq!(reparsed, Ok(repr));
});
