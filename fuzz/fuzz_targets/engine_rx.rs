//! Arbitrary frames into an Engine with a live connection: whatever
//! arrives, the receive path (frame parse, PSP open and checks, Falcon
//! parse, connection lookup, delivery and transaction layers) must not
//! panic, and every frame must be either processed or counted as a drop.
//!
//! Two engines, the first input byte picks one: with PSP (bit 0 clear:
//! frames die in the PSP stage unless they authenticate, which
//! `engine_rx_sealed` arranges) or without (so arbitrary Falcon headers
//! reach the delivery and transaction layers of a connection). Both are
//! built once per process and reset before every input (`Engine::reset`),
//! so each input meets an engine as `Engine::new` built it. The rest of the
//! input is a sequence of frames, `[len:u16 BE][bytes]`; they alternate
//! between `handle_packet` (a slice) and `handle_frame` (a heap buffer the
//! engine may take over, with the declared length, which may overshoot).
#![no_main]

use std::cell::RefCell;
use std::time::Duration;

use falcon_core::delivery::OrderingMode;
use falcon_core::engine::Engine;
use falcon_fuzz::{engine_config, reset_and_connect, START};
use libfuzzer_sys::fuzz_target;

struct Engines {
    psp: Engine,
    plain: Engine,
    /// The frame buffer (`handle_frame` may swap it for a spare).
    frame: Vec<u8>,
    /// `poll_transmit`'s buffer.
    tx: Vec<u8>,
}

thread_local! {
    static ENGINES: RefCell<Option<Engines>> = const { RefCell::new(None) };
}

fn build() -> Engines {
    // Invariant: the harness's configurations validate.
    let engine = |psp| Engine::new(engine_config(psp), START).expect("valid configuration");
    let psp = engine(true);
    let len = psp.max_frame_len();
    Engines {
        psp,
        plain: engine(false),
        frame: vec![0; len],
        tx: vec![0; len],
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, mut rest)) = data.split_first() else {
        return;
    };
    ENGINES.with(|cell| {
        let mut cell = cell.borrow_mut();
        let Engines {
            psp,
            plain,
            frame,
            tx,
        } = cell.get_or_insert_with(build);
        let engine = if mode & 1 == 0 { psp } else { plain };
        reset_and_connect(engine, OrderingMode::Ordered);
        let max_frame_len = engine.max_frame_len();
        let mut now = START.saturating_add(Duration::from_micros(1));
        let mut index = 0u32;
        while let Some((len_bytes, tail)) = rest.split_first_chunk::<2>() {
            let declared = usize::from(u16::from_be_bytes(*len_bytes));
            let len = declared.min(tail.len());
            let (bytes, tail) = tail.split_at(len);
            rest = tail;
            index += 1;
            // A heap buffer at least as long as the frame, as a port's.
            frame.resize(max_frame_len.max(len), 0);
            frame[..len].copy_from_slice(bytes);
            if index.is_multiple_of(2) {
                engine.handle_packet(now, &mut frame[..len]);
            } else {
                let capacity = frame.len();
                engine.handle_frame(now, frame, declared);
                assert_eq!(frame.len(), capacity, "a spare as long as the frame");
            }
            now = now.saturating_add(Duration::from_micros(3));
            engine.handle_timeout(now);
            while engine.poll_event().is_some() {}
            while engine.poll_cm_event().is_some() {}
            while engine.poll_transmit(now, tx).is_some() {}
        }
    });
});
