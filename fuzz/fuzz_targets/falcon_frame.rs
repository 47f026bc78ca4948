//! A whole received frame through every parser of the receive path:
//! Ethernet → IPv4/IPv6 → UDP → PSP header → open (fixed key) → Falcon
//! dispatch. Nothing may panic; a frame that parses must re-emit equal.
#![no_main]

use falcon_core::wire::frame::{self, ChecksumChecks};
use falcon_core::wire::FalconRepr;
use libfuzzer_sys::fuzz_target;
use psp::{Backend, MasterKey, MasterKeys, SaDatabase};

fuzz_target!(|data: &[u8]| {
    let Ok(parsed) = frame::parse_with(data, ChecksumChecks::ALL) else {
        return;
    };
    // Re-emit the outer headers in front of the same payload: same bytes.
    let payload = parsed.layers.payload.clone();
    let mut again = vec![0u8; parsed.repr.header_len() + payload.len()];
    let at = parsed.repr.header_len();
    again[at..].copy_from_slice(&data[payload.clone()]);
    if parsed.repr.emit(&mut again, payload.len()).is_ok() {
        let reparsed =
            frame::parse_with(&again, ChecksumChecks::ALL).expect("emitted frame parses");
        assert_eq!(reparsed.repr, parsed.repr);
    }

    // The PSP stage: any bytes, fixed master keys; must fail cleanly.
    let keys = MasterKeys {
        k0: MasterKey::new([7; 32]),
        k1: MasterKey::new([9; 32]),
    };
    let mut db = SaDatabase::new(Backend::RustCrypto, keys, 4);
    let mut buf = data[payload].to_vec();
    let len = buf.len();
    if let Ok(opened) = db.open(&mut buf, 0, len) {
        let _ = FalconRepr::parse(opened.payload());
    }
    // Falcon dispatch on the raw UDP payload too (clear-text captures).
    let _ = FalconRepr::parse(&data[parsed.layers.payload.clone()]);
});
