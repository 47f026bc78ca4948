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
//! input is a sequence of frames, `[len:u16 BE][bytes]`, each handed to
//! `handle_packet` in a buffer of its own; they alternate between a buffer
//! of the frame's length and a port-sized one (room for the longest frame)
//! whose frame length is the declared one, which may overshoot the bytes
//! into the buffer's zeroed tail. Delivered payloads are released and the
//! frames the engine lets go of taken back, as a port's loop does.
#![no_main]

use std::cell::RefCell;
use std::time::Duration;

use falcon_core::api::OrderingMode;
use falcon_core::api::UlpEvent;
use falcon_core::engine::Engine;
use falcon_core::port::{FrameBuf, PacketBuf};
use falcon_fuzz::{engine_config, reset_and_connect, START};
use libfuzzer_sys::fuzz_target;

struct Engines {
    psp: Engine,
    plain: Engine,
    /// `poll_transmit_into`'s buffer.
    tx: Vec<u8>,
    /// Frames the engine let go of (`Engine::take_released`), dropped.
    released: Vec<FrameBuf>,
}

thread_local! {
    static ENGINES: RefCell<Option<Engines>> = const { RefCell::new(None) };
}

fn build() -> Engines {
    // Invariant: the harness's configurations validate.
    let engine =
        |psp| -> Engine { Engine::new(engine_config(psp), START).expect("valid configuration") };
    let psp = engine(true);
    let len = psp.max_frame_len();
    Engines {
        psp,
        plain: engine(false),
        tx: vec![0; len],
        released: Vec::new(),
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
            tx,
            released,
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
            let frame = if index.is_multiple_of(2) {
                FrameBuf::from_frame(bytes, len)
            } else {
                let mut frame = FrameBuf::from_frame(bytes, max_frame_len.max(len));
                frame.set_len(declared);
                frame
            };
            // A frame handed back would go back to its port: dropped here.
            let _ = engine.handle_packet(now, frame);
            now = now.saturating_add(Duration::from_micros(3));
            engine.handle_timeout(now);
            while let Some(event) = engine.poll_event() {
                match event {
                    UlpEvent::Request(request) => engine.release(request.payload),
                    UlpEvent::Completion(completion) => engine.release(completion.data),
                    _ => {}
                }
            }
            while engine.poll_cm_event().is_some() {}
            while engine.poll_transmit_into(now, tx).is_some() {}
            engine.take_released(released);
            released.clear();
        }
    });
});
