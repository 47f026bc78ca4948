//! The seed corpus of `engine_rx_sealed`: short, valid exchanges with the
//! engine's connection, one or more per Falcon packet type (OCP Falcon 0.9
//! §7: Pull Request, Push Data, Pull Data, Resync, BACK, EACK, and NACK
//! with each defined code), in [`crate::sealed`]'s input format.
//!
//! Every packet is what the peer (side B of `PairSpec::default()`) would
//! send: the engine's CID and Destination Function, PSNs and RSNs from the
//! connection's initial sequence numbers, ACK fields naming what the engine
//! sent in the same seed. `seed_corpus` (src/bin) writes them to
//! `fuzz/seeds/engine_rx_sealed/`; the tests below check that each one
//! reaches the engine without a drop.

use falcon_core::api::OrderingMode;
use falcon_core::engine::{InitialSequence, PairSpec};
use falcon_core::ids::{ConnectionId, DestinationFunction};
use falcon_core::seq::{Psn, Rsn};
use falcon_core::wire::{
    BackRepr, BaseHeader, CcInfo, EackRepr, FalconRepr, FalconTime32, NackCcInfo, NackCode,
    NackRepr, PacketType, ProtocolType, PullDataRepr, PullRequestRepr, PushDataRepr, ResyncCode,
    ResyncRepr, RnrTimeout, Window,
};

use crate::sealed::{encode, Step, Via};
use crate::START;

/// Every seed: a file name and the input.
pub fn all() -> Vec<(String, Vec<u8>)> {
    let p = Peer::new();
    let mut seeds: Vec<(String, OrderingMode, Vec<Step>)> = Vec::new();
    let mut add = |name: &str, steps: Vec<Step>| {
        seeds.push((name.to_string(), OrderingMode::Ordered, steps.clone()));
        seeds.push((format!("{name}-unordered"), OrderingMode::Unordered, steps));
    };

    // Requests from the peer, answered under each policy.
    for (policy, answer) in [
        (0, "ack"),
        (4, "rnr"),
        (5, "cie"),
        (6, "nre"),
        (14, "invalid-cid"),
        (7, "hold"),
    ] {
        add(
            &format!("push-data-{answer}"),
            vec![Step::Policy(policy), p.push_data(0, 0, 64, Via::Packet)],
        );
        add(
            &format!("pull-request-{answer}"),
            vec![Step::Policy(policy), p.pull_request(0, 0, 128)],
        );
    }
    add(
        "push-data-zero-copy",
        vec![p.push_data(0, 0, 4096, Via::Frame)],
    );
    add("push-data-ecn-ce", vec![p.push_data(0, 0, 64, Via::EcnCe)]);
    add(
        "push-data-duplicate",
        vec![p.push_data(0, 0, 64, Via::Packet), Step::Replay],
    );
    add(
        "push-data-out-of-order",
        vec![
            p.push_data(1, 1, 32, Via::Packet),
            p.push_data(2, 2, 32, Via::Packet),
            p.push_data(0, 0, 32, Via::Packet),
        ],
    );
    add(
        "push-data-then-timeouts",
        vec![
            p.push_data(0, 0, 64, Via::Packet),
            Step::Advance { n: 255, scale: 2 },
            Step::Advance { n: 255, scale: 5 },
        ],
    );

    // The engine's own transactions and the peer's answers.
    add(
        "pull-data",
        vec![Step::Pull { len: 256 }, p.pull_data(0, 0, 256, 0, 1)],
    );
    add(
        "pull-data-short",
        vec![Step::Pull { len: 256 }, p.pull_data(0, 0, 100, 0, 1)],
    );
    add("back", vec![Step::Push { len: 64 }, p.back(1, 0)]);
    add(
        "back-after-pull",
        vec![Step::Pull { len: 64 }, p.back(0, 1)],
    );
    add(
        "eack",
        vec![
            Step::Push { len: 64 },
            Step::Push { len: 64 },
            Step::Push { len: 64 },
            p.eack(0, 0, 0b110, 0b110, 0),
        ],
    );
    add(
        "eack-request-window",
        vec![
            Step::Pull { len: 64 },
            Step::Pull { len: 64 },
            p.eack(0, 0, 0, 0, 0b10),
        ],
    );
    for code in [
        NackCode::InsufficientResources,
        NackCode::ReceiverNotReady,
        NackCode::XlrDrop,
        NackCode::UlpCompletionInError,
        NackCode::UlpNonRecoverableError,
        NackCode::InvalidCid,
    ] {
        let name = format!("nack-{}", u8::from(code));
        add(
            &name,
            vec![
                Step::Push { len: 64 },
                p.nack(code, Window::Data, 0, 0, 0),
                Step::Advance { n: 255, scale: 3 },
            ],
        );
        add(
            &format!("{name}-request-window"),
            vec![
                Step::Pull { len: 64 },
                p.nack(code, Window::Request, 0, 0, 0),
                Step::Advance { n: 255, scale: 3 },
            ],
        );
    }
    for code in ResyncCode::ALL {
        add(
            &format!("resync-{}", u8::from(code)),
            vec![p.resync(0, 0, code, PacketType::PushData)],
        );
    }
    add(
        "resync-pull-request",
        vec![p.resync(
            0,
            0,
            ResyncCode::TransactionTimedOut,
            PacketType::PullRequest,
        )],
    );

    // A longer exchange: both directions, every type, time passing.
    add(
        "conversation",
        vec![
            Step::Push { len: 200 },
            Step::Pull { len: 300 },
            p.push_data(0, 0, 100, Via::Packet),
            p.back(1, 0),
            p.pull_request(0, 1, 50),
            p.pull_data(1, 1, 300, 1, 1),
            Step::Advance { n: 100, scale: 1 },
            Step::Push { len: 10 },
            p.nack(NackCode::ReceiverNotReady, Window::Data, 1, 1, 1),
            Step::Advance { n: 255, scale: 4 },
            p.eack(2, 1, 0, 0, 0),
        ],
    );

    seeds
        .into_iter()
        .map(|(name, ordering, steps)| (name, encode(ordering, &steps)))
        .collect()
}

/// Runs `input` on the harness: every frame must reach the engine and
/// none may be dropped but the replayed duplicates (the receive window's
/// duplicate detection, a counted drop).
///
/// # Errors
///
/// What went wrong, for a message.
pub fn check(input: &[u8]) -> Result<(), String> {
    let steps = crate::sealed::decode(input).1;
    let frames = steps
        .iter()
        .filter(|s| matches!(s, Step::Frame { .. } | Step::Replay))
        .count();
    let replays = steps.iter().filter(|s| **s == Step::Replay).count();
    let stats = crate::sealed::run(input);
    let drops: Vec<_> = stats.drops.iter().collect();
    if stats.rx_frames as usize != frames {
        return Err(format!("{} frames received of {frames}", stats.rx_frames));
    }
    if stats.drops.total() as usize != replays {
        return Err(format!("dropped {drops:?} with {replays} replays"));
    }
    Ok(())
}

/// The peer's view of the connection.
struct Peer {
    /// The engine's CID: the destination of what the peer sends.
    cid: ConnectionId,
    /// The engine's Destination Function.
    function: DestinationFunction,
    /// The engine's initial sequence numbers.
    sequence: InitialSequence,
}

impl Peer {
    fn new() -> Peer {
        let spec = PairSpec::default();
        Peer {
            cid: spec.a_cid,
            function: spec.a_function,
            sequence: spec.sequence,
        }
    }

    /// A base header for the peer's packet `psn`, `rsn`, acknowledging
    /// nothing of the engine's (its bases are the engine's initial PSNs)
    /// and asking for an ACK.
    fn base(&self, psn: Psn, rsn: Rsn) -> BaseHeader {
        BaseHeader {
            connection_id: self.cid,
            destination_function: self.function,
            protocol: ProtocolType::Rdma,
            ack_request: true,
            data_bpsn: self.sequence.tx_data_psn,
            request_bpsn: self.sequence.tx_request_psn,
            psn,
            rsn,
        }
    }

    /// The peer's `n`-th data-window PSN.
    fn data_psn(&self, n: u32) -> Psn {
        self.sequence.rx_data_psn.wrapping_add(n)
    }

    /// The peer's `n`-th RSN.
    fn rsn(&self, n: u32) -> Rsn {
        self.sequence.rx_rsn.wrapping_add(n)
    }

    fn push_data(&self, psn: u32, rsn: u32, len: u16, via: Via) -> Step {
        let repr = FalconRepr::PushData(PushDataRepr {
            header: self.base(self.data_psn(psn), self.rsn(rsn)),
            request_length: len,
        });
        frame(&repr, via)
    }

    fn pull_request(&self, psn: u32, rsn: u32, request_length: u16) -> Step {
        let repr = FalconRepr::PullRequest(PullRequestRepr {
            header: self.base(
                self.sequence.rx_request_psn.wrapping_add(psn),
                self.rsn(rsn),
            ),
            request_length,
            payload_len: 16,
        });
        frame(&repr, Via::Packet)
    }

    /// Pull Data in the peer's data window (`psn`) for the engine's pull
    /// `rsn` (its `rsn`-th RSN), acknowledging `acked_requests` of the
    /// engine's Pull Requests and `acked_data` of its data packets.
    fn pull_data(
        &self,
        psn: u32,
        rsn: u32,
        len: usize,
        acked_data: u32,
        acked_requests: u32,
    ) -> Step {
        let mut header = self.base(self.data_psn(psn), self.sequence.tx_rsn.wrapping_add(rsn));
        header.data_bpsn = self.sequence.tx_data_psn.wrapping_add(acked_data);
        header.request_bpsn = self.sequence.tx_request_psn.wrapping_add(acked_requests);
        let repr = FalconRepr::PullData(PullDataRepr {
            header,
            payload_len: len,
        });
        frame(&repr, Via::Packet)
    }

    fn resync(&self, psn: u32, rsn: u32, code: ResyncCode, original: PacketType) -> Step {
        let psn = match original {
            PacketType::PullRequest => self.sequence.rx_request_psn.wrapping_add(psn),
            _ => self.data_psn(psn),
        };
        let repr = FalconRepr::Resync(ResyncRepr {
            header: self.base(psn, self.rsn(rsn)),
            code,
            original_packet_type: original,
            vendor_defined: 0,
        });
        frame(&repr, Via::Packet)
    }

    /// A BACK: the engine's first `data` data packets and first `requests`
    /// Pull Requests received.
    fn back(&self, data: u32, requests: u32) -> Step {
        frame(
            &FalconRepr::Back(self.back_repr(data, requests)),
            Via::Packet,
        )
    }

    fn back_repr(&self, data: u32, requests: u32) -> BackRepr {
        BackRepr {
            connection_id: self.cid,
            data_bpsn: self.sequence.tx_data_psn.wrapping_add(data),
            request_bpsn: self.sequence.tx_request_psn.wrapping_add(requests),
            t1: FalconTime32::from_picos(START.iv_picos()),
            t2: FalconTime32::from_picos(START.iv_picos() + 2_000_000),
            cc_info: CcInfo::from_bits(0),
        }
    }

    fn eack(&self, data: u32, requests: u32, data_ack: u128, data_rx: u128, request: u64) -> Step {
        let repr = FalconRepr::Eack(EackRepr {
            back: self.back_repr(data, requests),
            data_ack_bitmap: data_ack,
            data_rx_bitmap: data_rx,
            request_bitmap: request,
        });
        frame(&repr, Via::Packet)
    }

    /// A NACK of the engine's `n`-th packet in `window`, its first
    /// `acked_data` data packets and `acked_requests` Pull Requests received.
    fn nack(
        &self,
        code: NackCode,
        window: Window,
        n: u32,
        acked_data: u32,
        acked_requests: u32,
    ) -> Step {
        let nack_psn = match window {
            Window::Data => self.sequence.tx_data_psn,
            Window::Request => self.sequence.tx_request_psn,
        }
        .wrapping_add(n);
        let repr = FalconRepr::Nack(NackRepr {
            connection_id: self.cid,
            data_bpsn: self.sequence.tx_data_psn.wrapping_add(acked_data),
            request_bpsn: self.sequence.tx_request_psn.wrapping_add(acked_requests),
            t1: FalconTime32::from_picos(START.iv_picos()),
            t2: FalconTime32::from_picos(START.iv_picos() + 2_000_000),
            cc_info: NackCcInfo::from_bits(0),
            nack_psn,
            code,
            // Invariant: 1 is a 5-bit RNR timeout code (10 µs).
            rnr_timeout: RnrTimeout::new(1).expect("a 5-bit code"),
            window,
            ulp_nack_code: 0x42,
        });
        frame(&repr, Via::Packet)
    }
}

/// The packet of `repr`, its payload (if any) a counting pattern.
fn frame(repr: &FalconRepr, via: Via) -> Step {
    let mut plaintext = vec![0u8; repr.buffer_len()];
    if let Some(range) = repr.emit_within(&mut plaintext) {
        for (i, byte) in plaintext[range].iter_mut().enumerate() {
            *byte = i as u8;
        }
    }
    Step::Frame { plaintext, via }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_seed_reaches_the_engine_without_a_drop() {
        let seeds = all();
        assert!(seeds.len() > 40);
        for (name, input) in &seeds {
            if let Err(e) = check(input) {
                panic!("{name}: {e}");
            }
        }
    }

    #[test]
    fn seeds_cover_every_packet_type() {
        let mut seen = std::collections::BTreeSet::new();
        for (_, input) in all() {
            for step in crate::sealed::decode(&input).1 {
                if let Step::Frame { plaintext, .. } = step {
                    let repr = falcon_core::wire::FalconRepr::parse(&plaintext).expect("parses");
                    seen.insert(format!("{:?}", repr.packet_type()));
                    if let FalconRepr::Nack(nack) = repr {
                        seen.insert(format!("{:?}", nack.code));
                    }
                }
            }
        }
        for name in [
            "PullRequest",
            "PushData",
            "PullData",
            "Resync",
            "Back",
            "Eack",
            "Nack",
            "InsufficientResources",
            "ReceiverNotReady",
            "XlrDrop",
            "UlpCompletionInError",
            "UlpNonRecoverableError",
            "InvalidCid",
        ] {
            assert!(seen.contains(name), "no seed has {name}: {seen:?}");
        }
    }

    /// The seeds do what they are named for: they are not only accepted
    /// but act on the windows and the transaction sublayer.
    #[test]
    fn seeds_have_their_effect() {
        let seeds: std::collections::BTreeMap<_, _> = all().into_iter().collect();
        let run = |name: &str| crate::sealed::run(&seeds[name]);
        let stats = run("push-data-ack");
        assert_eq!(
            (stats.transactions.requests_delivered, stats.tx_acks),
            (1, 1)
        );
        assert_eq!(run("pull-request-ack").transactions.pull_data_submitted, 1);
        assert_eq!(run("push-data-cie").transactions.ulp_nacks, 1);
        assert_eq!(run("pull-data").transactions_completed(), 1);
        assert_eq!(run("back").transactions_completed(), 1);
        assert_eq!(run("nack-1").retransmissions, 1);
        assert_eq!(run("nack-2").transactions.rnr_received, 1);
        assert_eq!(run("nack-4").resyncs, 1);
        assert_eq!(
            run("push-data-out-of-order-unordered")
                .transactions
                .requests_delivered,
            3
        );
    }
}
