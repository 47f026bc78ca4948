//! Arbitrary frames into an Engine with live connections: whatever arrives,
//! the receive path (frame parse, PSP open and checks, Falcon parse,
//! connection lookup, delivery and transaction layers) must not panic, and
//! every frame must be either processed or counted as a drop.
//!
//! Two engines: one with PSP (so frames die in the PSP stage unless they
//! authenticate) and one without (so arbitrary Falcon headers reach the
//! delivery and transaction layers of a connection). Frames alternate
//! between `handle_packet` (a slice) and `handle_frame` (a heap buffer the
//! engine may take over, with the declared length, which may overshoot).
#![no_main]

use falcon_core::engine::{connect, Engine, EngineConfig, PairSpec, PspConfig};
use falcon_core::time::Timestamp;
use falcon_core::wire::EthernetAddress;
use libfuzzer_sys::fuzz_target;
use psp::{MasterKey, MasterKeys};

fn pair(psp: bool) -> (Engine, Engine) {
    let now = Timestamp::from_micros(1);
    let keys = |k: u8| MasterKeys {
        k0: MasterKey::new([k; 32]),
        k1: MasterKey::new([k + 1; 32]),
    };
    let config = |ip: &str, mac: u8, k: u8| EngineConfig {
        local_ip: ip.parse().expect("literal address"),
        local_mac: EthernetAddress([2, 0, 0, 0, 0, mac]),
        psp: psp.then(|| PspConfig::new(keys(k))),
        ..EngineConfig::default()
    };
    let mut a = Engine::new(config("10.0.0.1", 1, 1), now).expect("valid config");
    let mut b = Engine::new(config("10.0.0.2", 2, 3), now).expect("valid config");
    connect(now, &mut a, &mut b, &PairSpec::default()).expect("connect");
    (a, b)
}

fuzz_target!(|data: &[u8]| {
    for psp in [true, false] {
        let (mut engine, _peer) = pair(psp);
        let mut now = Timestamp::from_micros(2);
        // The input is a sequence of frames: [len:u16 BE][bytes]...
        let mut rest = data;
        let mut index = 0u32;
        while rest.len() >= 2 {
            let declared = usize::from(u16::from_be_bytes([rest[0], rest[1]]));
            let len = declared.min(rest.len() - 2);
            let mut frame = rest[2..2 + len].to_vec();
            rest = &rest[2 + len..];
            index += 1;
            if index % 2 == 0 {
                engine.handle_packet(now, &mut frame);
            } else {
                frame.resize(len.max(engine.max_frame_len()), 0);
                let capacity = frame.len();
                engine.handle_frame(now, &mut frame, declared);
                assert_eq!(frame.len(), capacity, "a spare as long as the frame");
            }
            now = now.saturating_add(core::time::Duration::from_micros(3));
            engine.handle_timeout(now);
            while engine.poll_event().is_some() {}
            while engine.poll_cm_event().is_some() {}
            let mut buf = vec![0u8; engine.max_frame_len()];
            while engine.poll_transmit(now, &mut buf).is_some() {}
        }
    }
});
