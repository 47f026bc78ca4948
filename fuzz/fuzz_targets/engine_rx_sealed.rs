//! Falcon packets in clear, sealed by the harness with the connection's
//! PSP receive SA and delivered to an engine, with the engine's own
//! transactions, ULP answers and timeouts driven by the input: the
//! delivery and transaction sublayers behind PSP must not panic, hang or
//! leak whatever the peer sends. Input format and harness:
//! `falcon_fuzz::sealed`; seed corpus: `fuzz/seeds/engine_rx_sealed/`
//! (`cargo run --manifest-path fuzz/Cargo.toml --bin seed_corpus`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    falcon_fuzz::sealed::run(data);
});
