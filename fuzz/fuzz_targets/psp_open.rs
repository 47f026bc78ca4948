//! Fuzz `open` on arbitrary bytes: with a fixed AES-GCM-128 context
//! (`psp::open_in_place`), and through an RX SA database that derives keys
//! from fixed master keys (`SaDatabase::open`). Neither may panic; random
//! bytes must never authenticate.
#![no_main]

use libfuzzer_sys::fuzz_target;
use psp::{open_in_place, AeadContext, Backend, MasterKey, MasterKeys, SaDatabase, SaKey, Version};

fuzz_target!(|data: &[u8]| {
    let key = SaKey::new(Version::Aes128Gcm, &[0x42; 16]).expect("16-byte v0 key");
    let ctx = AeadContext::new(Backend::Ring, &key);

    // Whole input as the PSP packet.
    let mut buf = data.to_vec();
    let len = buf.len();
    assert!(open_in_place(&ctx, &mut buf, 0, len).is_err());

    // First two bytes choose an offset and a length inside (or outside) the rest.
    if let [a, b, rest @ ..] = data {
        let mut buf = rest.to_vec();
        let _ = open_in_place(&ctx, &mut buf, usize::from(*a), usize::from(*b));

        let keys = MasterKeys {
            k0: MasterKey::new([1; 32]),
            k1: MasterKey::new([2; 32]),
        };
        let mut db = SaDatabase::new(Backend::RustCrypto, keys, 8);
        let mut buf = rest.to_vec();
        let len = buf.len();
        assert!(db.open(&mut buf, 0, len).is_err());
    }
});
