//! The `engine_rx_sealed` harness: the fuzzer writes Falcon packets in
//! clear, the harness seals them as the peer would and drives one engine
//! with a PSP connection through a sequence of steps.
//!
//! Random bytes never pass the PSP ICV check, so a target fed raw frames
//! stops at `psp::SaDatabase::open`. Here each frame's plaintext (Falcon
//! header and payload) comes from the input and is sealed with the
//! connection's real receive SA (the key the engine derived for its SPI),
//! with the strictly increasing IV the peer's clock gives (PSP "IV
//! Generation"; the IV is the TX time, OCP Falcon 0.9 §10.1), and wrapped in
//! Ethernet/IPv4/UDP to the engine's address. Everything then reaches the
//! Falcon parse, the connection lookup, both sliding windows (§8.4, §8.5)
//! and the transaction sublayer. The engine's own requests (pushes and
//! pulls it initiates) come from steps too, so received ACKs, NACKs and
//! Pull Data have something to act on, and the harness answers delivered
//! requests as a ULP would, with an answer the input chooses.
//!
//! # Input format
//!
//! ```text
//! input = flags:u8 step*
//! flags : bit 0 set: the connection is unordered (§8.4.2), else ordered
//! step  = op:u8 argument
//!   op & 7 = 0  frame     len:u16be plaintext[len]  handle_packet, buffer of the frame's length
//!            1  frame     len:u16be plaintext[len]  handle_packet, port-sized buffer
//!            2  frame     len:u16be plaintext[len]  IP ECN CE, as 0
//!            3  replay    -                          the last frame again
//!            4  advance   n:u8                       now += (n + 1) << (3 · (op >> 5)) µs
//!            5  push      len:u16be                  the engine submits a push of len bytes
//!            6  pull      len:u16be                  the engine submits a pull of len bytes
//!            7  policy    -                          how requests are answered from now: op >> 3
//! ```
//!
//! A truncated step ends the input. After every step the clock moves on
//! 1 µs, [`Engine::handle_timeout`] runs, and the outputs are drained:
//! [`Engine::poll_transmit_into`] until `None` (the frames are discarded:
//! the peer is the input), [`Engine::poll_event`] until `None` with each
//! delivered request answered by the policy and every received payload
//! released; the frames the engine lets go of are taken back
//! ([`Engine::take_released`]) as a port's loop does. A frame the engine
//! hands back from `handle_packet` is dropped.
//!
//! Policy `p` (5 bits, initially 0): `p & 7` in 0..=3 accepts (ACK a push,
//! serve a pull with its full length); 4 answers RNR with timeout code
//! 1, 4, 12 or 0 by `p >> 3`; 5 CIE; 6 NRE (`p >> 3` even) or invalid CID;
//! 7 holds the request unanswered (the target timeout reclaims it). The
//! ULP NACK code is `p`.

use std::cell::RefCell;
use std::time::Duration;

use falcon_core::api::{OrderingMode, UlpNack};
use falcon_core::api::{Transaction, TransactionKind, UlpEvent, UlpHeader};
use falcon_core::engine::{Engine, EngineStats};
use falcon_core::port::FrameBuf;
use falcon_core::time::Timestamp;
use falcon_core::wire::{
    Dscp, Ecn, FrameRepr, FrameTemplate, IpFields, RnrTimeout, UdpChecksum, PSP_UDP_PORT,
};
use psp::{Backend, TxSa, TxSaConfig, HEADER_LEN as PSP_HEADER_LEN, ICV_LEN};

use crate::{engine_config, reset_and_connect, LOCAL_MAC, PEER_MAC, START};

/// One step of an input, as the seed generator writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A Falcon packet from the peer, sealed and delivered.
    Frame {
        /// The Falcon header and payload.
        plaintext: Vec<u8>,
        /// How it is delivered.
        via: Via,
    },
    /// The last sealed frame delivered again (a duplicate; PSP accepts it
    /// within the replay margin, the windows must not).
    Replay,
    /// The clock moves on `(n + 1) << (3 * scale)` µs.
    Advance {
        /// The multiplier less one.
        n: u8,
        /// 0..=7.
        scale: u8,
    },
    /// The engine's ULP submits a push of `len` bytes.
    Push {
        /// Payload length (clamped to the engine's maximum).
        len: u16,
    },
    /// The engine's ULP submits a pull of `len` bytes.
    Pull {
        /// Requested length.
        len: u16,
    },
    /// How requests delivered from now on are answered (0..32).
    Policy(u8),
}

/// How a frame reaches the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// `handle_packet`, in a buffer of the frame's length.
    Packet,
    /// `handle_packet`, in a port-sized buffer (room for the engine's
    /// longest frame after the frame).
    Frame,
    /// As `Packet`, the IP header's ECN field Congestion Experienced.
    EcnCe,
}

/// The flags byte for an ordered or unordered connection.
pub fn flags(ordering: OrderingMode) -> u8 {
    u8::from(ordering == OrderingMode::Unordered)
}

/// Writes `steps` in the input format after the flags byte.
pub fn encode(ordering: OrderingMode, steps: &[Step]) -> Vec<u8> {
    let mut out = vec![flags(ordering)];
    for step in steps {
        match step {
            Step::Frame { plaintext, via } => {
                let op = match via {
                    Via::Packet => 0,
                    Via::Frame => 1,
                    Via::EcnCe => 2,
                };
                let len = u16::try_from(plaintext.len()).unwrap_or(u16::MAX);
                out.push(op);
                out.extend_from_slice(&len.to_be_bytes());
                out.extend_from_slice(&plaintext[..usize::from(len)]);
            }
            Step::Replay => out.push(3),
            Step::Advance { n, scale } => out.extend_from_slice(&[4 | (scale & 7) << 5, *n]),
            Step::Push { len } => {
                out.push(5);
                out.extend_from_slice(&len.to_be_bytes());
            }
            Step::Pull { len } => {
                out.push(6);
                out.extend_from_slice(&len.to_be_bytes());
            }
            Step::Policy(p) => out.push(7 | (p & 31) << 3),
        }
    }
    out
}

/// Reads the steps of `data` (what [`run`] executes); a truncated step
/// ends the input.
pub fn decode(data: &[u8]) -> (OrderingMode, Vec<Step>) {
    let mut steps = Vec::new();
    let Some((&flags, mut rest)) = data.split_first() else {
        return (OrderingMode::Ordered, steps);
    };
    let ordering = if flags & 1 == 1 {
        OrderingMode::Unordered
    } else {
        OrderingMode::Ordered
    };
    while let Some((&op, tail)) = rest.split_first() {
        rest = tail;
        let u16_arg = |rest: &mut &[u8]| -> Option<u16> {
            let (bytes, tail) = rest.split_first_chunk::<2>()?;
            *rest = tail;
            Some(u16::from_be_bytes(*bytes))
        };
        let step = match op & 7 {
            0..=2 => {
                let Some(declared) = u16_arg(&mut rest) else {
                    break;
                };
                let len = usize::from(declared).min(rest.len());
                let (plaintext, tail) = rest.split_at(len);
                rest = tail;
                let via = match op & 7 {
                    0 => Via::Packet,
                    1 => Via::Frame,
                    _ => Via::EcnCe,
                };
                Step::Frame {
                    plaintext: plaintext.to_vec(),
                    via,
                }
            }
            3 => Step::Replay,
            4 => {
                let Some((&n, tail)) = rest.split_first() else {
                    break;
                };
                rest = tail;
                Step::Advance { n, scale: op >> 5 }
            }
            5 | 6 => {
                let Some(len) = u16_arg(&mut rest) else {
                    break;
                };
                if op & 7 == 5 {
                    Step::Push { len }
                } else {
                    Step::Pull { len }
                }
            }
            _ => Step::Policy(op >> 3),
        };
        steps.push(step);
    }
    (ordering, steps)
}

/// Runs one input on the process's engine (built on first use, reset
/// before every input) and returns its counters.
pub fn run(data: &[u8]) -> EngineStats {
    thread_local! {
        static HARNESS: RefCell<Option<Harness>> = const { RefCell::new(None) };
    }
    HARNESS.with(|cell| {
        let mut cell = cell.borrow_mut();
        let harness = cell.get_or_insert_with(Harness::new);
        harness.run(data)
    })
}

/// The engine and the buffers that live across inputs (none of them
/// visible to the engine).
struct Harness {
    engine: Engine,
    plain: FrameTemplate,
    ce_marked: FrameTemplate,
    /// Where each frame is sealed, port-sized (the engine's longest
    /// frame), before it is copied into the buffer it is delivered in.
    frame: Vec<u8>,
    /// The last sealed frame, for [`Step::Replay`].
    last: Vec<u8>,
    /// `poll_transmit_into`'s buffer.
    tx: Vec<u8>,
    /// Frames the engine let go of (`Engine::take_released`), dropped.
    released: Vec<FrameBuf>,
}

impl Harness {
    fn new() -> Harness {
        // Invariant: the default configuration with PSP validates.
        let engine = Engine::new(engine_config(true), START).expect("valid configuration");
        let template = |ecn| {
            FrameTemplate::new(FrameRepr {
                destination: LOCAL_MAC,
                source: PEER_MAC,
                vlan: None,
                ip: IpFields::V4 {
                    src: "10.0.0.2".parse().expect("literal address"),
                    dst: "10.0.0.1".parse().expect("literal address"),
                    ttl: 64,
                    dscp: Dscp::ZERO,
                    ecn,
                    ident: 0,
                    dont_fragment: true,
                },
                src_port: 0xC020,
                dst_port: PSP_UDP_PORT,
                udp_checksum: UdpChecksum::Zero,
            })
        };
        let max_frame_len = engine.max_frame_len();
        Harness {
            engine,
            plain: template(Ecn::Ect0),
            ce_marked: template(Ecn::Ce),
            frame: vec![0; max_frame_len],
            last: Vec::with_capacity(max_frame_len),
            tx: vec![0; max_frame_len],
            released: Vec::new(),
        }
    }

    fn run(&mut self, data: &[u8]) -> EngineStats {
        let (ordering, steps) = decode(data);
        let peer = reset_and_connect(&mut self.engine, ordering);
        let connection = peer.connection;
        // Invariant: the engine runs PSP, so `reset_and_connect` allocated
        // its receive SPI; the key it derived builds an SA.
        let (spi, key) = peer.rx_sa.expect("the engine runs PSP");
        let mut sa = TxSa::new(Backend::Ring, &key, TxSaConfig::falcon(spi, None))
            .expect("a valid SPI and key");
        self.last.clear();
        let mut now = START;
        let mut policy = 0u8;
        let mut tag = 0u64;
        for step in steps {
            match step {
                Step::Frame { plaintext, via } => {
                    let template = match via {
                        Via::EcnCe => &self.ce_marked,
                        Via::Packet | Via::Frame => &self.plain,
                    };
                    if let Some(len) = seal(template, &mut sa, now, &plaintext, &mut self.frame) {
                        self.last.clear();
                        self.last.extend_from_slice(&self.frame[..len]);
                        let capacity = match via {
                            Via::Frame => self.frame.len(),
                            Via::Packet | Via::EcnCe => len,
                        };
                        let frame = FrameBuf::from_frame(&self.frame[..len], capacity);
                        let _ = self.engine.handle_packet(now, frame);
                    }
                }
                Step::Replay => {
                    if !self.last.is_empty() {
                        let frame = FrameBuf::from_frame(&self.last, self.last.len());
                        let _ = self.engine.handle_packet(now, frame);
                    }
                }
                Step::Advance { n, scale } => {
                    let micros = (u64::from(n) + 1) << (3 * u32::from(scale & 7));
                    now = now.saturating_add(Duration::from_micros(micros));
                }
                Step::Push { len } => {
                    let len = usize::from(len).min(self.engine.max_payload());
                    tag += 1;
                    let _ = self.engine.submit(
                        now,
                        connection,
                        Transaction::push(tag, vec![0xA5; len]),
                    );
                }
                Step::Pull { len } => {
                    tag += 1;
                    let _ = self
                        .engine
                        .submit(now, connection, Transaction::pull(tag, len));
                }
                Step::Policy(p) => policy = p & 31,
            }
            now = now.saturating_add(Duration::from_micros(1));
            self.engine.handle_timeout(now);
            self.drain(now, policy);
        }
        self.engine.stats().clone()
    }

    /// Transmits until nothing is left and answers every event, until both
    /// are quiet (an answer may queue a transmission).
    fn drain(&mut self, now: Timestamp, policy: u8) {
        loop {
            while self.engine.poll_transmit_into(now, &mut self.tx).is_some() {}
            while self.engine.poll_cm_event().is_some() {}
            let mut answered = false;
            while let Some(event) = self.engine.poll_event() {
                answered = true;
                match event {
                    UlpEvent::Request(request) => {
                        answer(&mut self.engine, now, policy, &request);
                        self.engine.release(request.payload);
                    }
                    UlpEvent::Completion(completion) => self.engine.release(completion.data),
                    UlpEvent::ConnectionError { .. }
                    | UlpEvent::Xoff { .. }
                    | UlpEvent::Xon { .. } => {}
                }
            }
            if !answered {
                self.engine.take_released(&mut self.released);
                self.released.clear();
                return;
            }
        }
    }
}

/// The target ULP's answer to `request` under `policy` (see the module
/// doc). Refusals by the engine (a stale RSN, no credit) are its business.
fn answer(engine: &mut Engine, now: Timestamp, policy: u8, request: &falcon_core::api::Request) {
    let connection = request.connection;
    let rsn = request.rsn;
    let ulp_nack_code = policy;
    let nack = match policy & 7 {
        0..=3 => {
            if request.kind == TransactionKind::Pull {
                let data = vec![0x5A; usize::from(request.request_length)];
                let _ = engine.submit_pull_data(now, connection, rsn, UlpHeader::EMPTY, data);
            } else {
                let _ = engine.ulp_ack(now, connection, rsn);
            }
            return;
        }
        4 => {
            let code = [1, 4, 12, 0][usize::from(policy >> 3 & 3)];
            // Invariant: the codes above are 5-bit RNR timeout codes.
            let timeout = RnrTimeout::new(code).expect("a 5-bit code");
            UlpNack::ReceiverNotReady {
                timeout,
                ulp_nack_code,
            }
        }
        5 => UlpNack::CompletionInError { ulp_nack_code },
        6 if policy >> 3 & 1 == 0 => UlpNack::NonRecoverableError { ulp_nack_code },
        6 => UlpNack::InvalidCid { ulp_nack_code },
        _ => return,
    };
    let _ = engine.ulp_nack(now, connection, rsn, nack);
}

/// Builds the frame of `plaintext` in `buf`: Ethernet/IPv4/UDP from
/// `template`, the PSP header, the plaintext sealed in place with `sa` at
/// `now` (its IV clock makes the IV strictly increasing), the ICV. Returns
/// the frame length; `None` if the plaintext is too short for the crypt
/// offset (the 4 clear CID bytes) or too long for the buffer.
fn seal(
    template: &FrameTemplate,
    sa: &mut TxSa,
    now: Timestamp,
    plaintext: &[u8],
    buf: &mut [u8],
) -> Option<usize> {
    let headers = template.header_len();
    let start = headers + PSP_HEADER_LEN;
    let psp_len = PSP_HEADER_LEN + plaintext.len() + ICV_LEN;
    buf.get_mut(start..start + plaintext.len())?
        .copy_from_slice(plaintext);
    let sealed = sa
        .seal(now.iv_picos(), buf, headers, plaintext.len())
        .ok()?
        .len();
    debug_assert_eq!(sealed, psp_len);
    template.emit(buf, sealed).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_reads_what_encode_writes() {
        let steps = vec![
            Step::Policy(21),
            Step::Push { len: 300 },
            Step::Frame {
                plaintext: vec![1, 2, 3],
                via: Via::Frame,
            },
            Step::Advance { n: 9, scale: 3 },
            Step::Replay,
            Step::Pull { len: 7 },
            Step::Frame {
                plaintext: vec![],
                via: Via::EcnCe,
            },
        ];
        for ordering in [OrderingMode::Ordered, OrderingMode::Unordered] {
            assert_eq!(decode(&encode(ordering, &steps)), (ordering, steps.clone()));
        }
        // A truncated step ends the input.
        let mut bytes = encode(OrderingMode::Ordered, &steps[..2]);
        bytes.extend_from_slice(&[0, 0x01]);
        assert_eq!(decode(&bytes).1, steps[..2].to_vec());
    }

    /// Inputs that once crashed the target (`fuzz/regressions/`) run clean.
    #[test]
    fn regressions_run_clean() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions/engine_rx_sealed");
        let mut ran = 0;
        for entry in std::fs::read_dir(&dir).expect("the regressions directory") {
            let input = std::fs::read(entry.expect("an entry").path()).expect("readable");
            run(&input);
            ran += 1;
        }
        assert!(ran > 0);
    }
}
