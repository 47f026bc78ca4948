//! Fuzz the PSP header parsers: the zero-copy view (`Header::new_checked` and
//! every accessor), `HeaderRepr::parse`, and the trailer view. When a header
//! parses, `emit` must produce bytes that parse back to the same `HeaderRepr`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use psp::{Header, HeaderRepr, Trailer};

fuzz_target!(|data: &[u8]| {
    if let Ok(view) = Header::new_checked(data) {
        let _ = (
            view.next_header(),
            view.hdr_ext_len(),
            view.header_len(),
            view.reserved(),
            view.crypt_offset(),
            view.sample(),
            view.drop_after_sampling(),
            view.version(),
            view.vc_present(),
            view.always_one(),
            view.spi(),
            view.iv(),
            view.nonce(),
            view.vc(),
            view.payload().len(),
        );
        if let Ok(repr) = HeaderRepr::parse(&view) {
            let mut out = [0u8; 24];
            let len = repr.buffer_len();
            repr.emit(&mut Header::new_unchecked(&mut out[..len]));
            let again = Header::new_checked(&out[..len]).expect("emitted header passes check_len");
            assert_eq!(again.header_len(), len);
            assert_eq!(HeaderRepr::parse(&again), Ok(repr));
        }
    } else {
        assert!(HeaderRepr::parse(&Header::new_unchecked(data)).is_err());
    }
    if let Ok(trailer) = Trailer::new_checked(data) {
        let _ = trailer.icv();
    }
});
