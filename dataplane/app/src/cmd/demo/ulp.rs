//! The demo's two ULPs: the initiator's, which submits tagged transactions
//! and checks each completion, and the target's, which checks each request
//! and answers it: ACK, RNR NACK or complete-in-error (OCP Falcon 0.9
//! §8.5.3.4–8.5.3.5).
//!
//! Layer: application, above the engine's ULP interface. Owns the tags'
//! byte pattern, the exactly-once and order checks, and the record of what
//! the target's ULP did to each tag (RNR-NACKed when, completed in error),
//! which the initiator's checks read: both ULPs run in one process on one
//! clock, so the demo can hold each completion to what the target decided.
//!
//! Each transaction's payload starts with its 8-byte tag (a pull's is its
//! ULP header); the bytes after it are a function of the tag, so either
//! side can verify without shared state. Received payloads are read in
//! their frames and released to the engine once checked.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use falcon_core::engine::{ConnectionHandle, Engine};
use falcon_core::random::{Random, SplitMix64};
use falcon_core::seq::Rsn;
use falcon_core::time::Timestamp;
use falcon_core::transaction::{
    Completion, CompletionStatus, Request, Transaction, TransactionKind, UlpHeader, UlpNack,
};
use hdrhistogram::Histogram;

use super::report::Report;
use crate::democfg::build::{TargetUlp, Workload};
use crate::error::{AppError, Result};

/// The ULP header: the transaction's tag.
pub const TAG_LEN: usize = 8;
/// The target ULP's code in its CIE NACKs (opaque to Falcon; a push's
/// reaches the initiator's completion, which checks it).
pub const CIE_ULP_CODE: u8 = 0x5E;
/// The target ULP's code in its RNR NACKs.
pub const RNR_ULP_CODE: u8 = 0x52;

/// Bytes of a transaction with `tag`: the tag, then a tag-seeded pattern.
pub fn fill(tag: u64, len: usize, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&tag.to_be_bytes()[..TAG_LEN.min(len)]);
    let mut rng = SplitMix64::new(tag ^ 0x5eed);
    while out.len() < len {
        out.extend_from_slice(&rng.next_u64().to_le_bytes()[..(len - out.len()).min(8)]);
    }
}

/// Checks `data` is what `fill(tag, len)` makes; returns the tag it names.
pub fn verify(data: &[u8], scratch: &mut Vec<u8>) -> Option<u64> {
    let tag = u64::from_be_bytes(data.get(..TAG_LEN)?.try_into().ok()?);
    fill(tag, data.len(), scratch);
    (scratch.as_slice() == data).then_some(tag)
}

/// The target's ULP: checks every request and answers it.
pub struct TargetAnswers {
    config: TargetUlp,
    /// Draws RNR and CIE, seeded from the workload seed.
    rng: SplitMix64,
    /// Push and pull tags accepted: each exactly once.
    accepted: HashSet<(TransactionKind, u64)>,
    /// Tags completed in error, until their completion is seen.
    completed_in_error: HashSet<u64>,
    /// When each RNR-NACKed tag was first NACKed, until its completion.
    first_rnr: HashMap<u64, Instant>,
    /// Longest wait from a first RNR NACK to the redelivery accepted.
    pub longest_redelivery_wait: Duration,
    /// RNR NACKs sent for pushes (to the initiator, §8.5.3.4).
    pub rnr_sent_push: u64,
    /// RNR NACKs sent for pulls (the target redelivers them itself).
    pub rnr_sent_pull: u64,
}

impl TargetAnswers {
    pub fn new(config: TargetUlp, seed: u64) -> Self {
        TargetAnswers {
            config,
            rng: SplitMix64::new(seed ^ 0x7a26_e7f0_0a11_5eed),
            accepted: HashSet::new(),
            completed_in_error: HashSet::new(),
            first_rnr: HashMap::new(),
            longest_redelivery_wait: Duration::ZERO,
            rnr_sent_push: 0,
            rnr_sent_pull: 0,
        }
    }

    /// Checks `request` (its bytes, that it is accepted once) and answers
    /// it: an RNR NACK for a drawn share of first deliveries (§8.5.3.4),
    /// else a CIE for a drawn share (§8.5.3.5: a NACK for a push, a
    /// zero-length Pull Data for a pull, both through `ulp_nack`), else an
    /// ACK or the Pull Data.
    #[allow(clippy::too_many_arguments)]
    pub fn serve(
        &mut self,
        engine: &mut Engine,
        now: Timestamp,
        wall: Instant,
        conn: ConnectionHandle,
        request: Request,
        scratch: &mut Vec<u8>,
        report: &mut Report,
        failures: &mut Vec<String>,
    ) -> Result<()> {
        let rsn = request.rsn;
        let tag = match request.kind {
            TransactionKind::Push => match verify(&request.payload, scratch) {
                Some(tag) => tag,
                None => {
                    failures.push(format!(
                        "push RSN {rsn}: payload differs from what was sent"
                    ));
                    let answer = engine.ulp_ack(now, conn, rsn);
                    engine.release(request.payload);
                    return answer
                        .map_err(|e| AppError::Failed(format!("ULP ACK of RSN {rsn}: {e:?}")));
                }
            },
            TransactionKind::Pull => {
                match request
                    .header
                    .get(..TAG_LEN)
                    .and_then(|h| h.try_into().ok())
                    .map(u64::from_be_bytes)
                {
                    Some(tag) => tag,
                    None => {
                        failures.push(format!("pull RSN {rsn}: no tag in the ULP header"));
                        engine.release(request.payload);
                        return Ok(());
                    }
                }
            }
        };
        let kind = request.kind;
        if request.redelivery {
            match self.first_rnr.get(&tag) {
                Some(&first) => {
                    let wait = wall.saturating_duration_since(first);
                    self.longest_redelivery_wait = self.longest_redelivery_wait.max(wait);
                }
                None => failures.push(format!(
                    "{kind:?} {tag} (RSN {rsn}) redelivered though never RNR-NACKed"
                )),
            }
        } else if self.rng.chance(self.config.rnr_ppm, 1_000_000) {
            let nack = UlpNack::ReceiverNotReady {
                timeout: self.config.rnr_timeout,
                ulp_nack_code: RNR_ULP_CODE,
            };
            let answer = engine.ulp_nack(now, conn, rsn, nack);
            engine.release(request.payload);
            answer.map_err(|e| AppError::Failed(format!("RNR NACK of RSN {rsn}: {e:?}")))?;
            self.first_rnr.entry(tag).or_insert(wall);
            match kind {
                TransactionKind::Push => self.rnr_sent_push += 1,
                TransactionKind::Pull => self.rnr_sent_pull += 1,
            }
            return Ok(());
        }
        if !self.accepted.insert((kind, tag)) {
            failures.push(format!(
                "{kind:?} {tag} (RSN {rsn}) accepted by the target twice"
            ));
        }
        let len = request.request_length;
        let payload_len = request.payload.len() as u64;
        engine.release(request.payload);
        if self.rng.chance(self.config.cie_ppm, 1_000_000) {
            self.completed_in_error.insert(tag);
            let nack = UlpNack::CompletionInError {
                ulp_nack_code: CIE_ULP_CODE,
            };
            return engine
                .ulp_nack(now, conn, rsn, nack)
                .map_err(|e| AppError::Failed(format!("CIE NACK of RSN {rsn}: {e:?}")));
        }
        match kind {
            TransactionKind::Push => {
                report.verified_bytes += payload_len;
                engine
                    .ulp_ack(now, conn, rsn)
                    .map_err(|e| AppError::Failed(format!("ULP ACK of RSN {rsn}: {e:?}")))?;
            }
            TransactionKind::Pull => {
                let mut data = Vec::with_capacity(usize::from(len));
                fill(tag, usize::from(len), &mut data);
                if let Err(rejected) =
                    engine.submit_pull_data(now, conn, rsn, UlpHeader::EMPTY, data)
                {
                    failures.push(format!(
                        "pull RSN {rsn}: pull data refused: {:?}",
                        rejected.reason
                    ));
                }
            }
        }
        Ok(())
    }

    /// Tags completed in error whose completion has not been seen.
    pub fn completions_in_error_pending(&self) -> usize {
        self.completed_in_error.len()
    }
}

/// A transaction submitted and not yet completed.
struct Outstanding {
    kind: TransactionKind,
    len: usize,
    submitted: Instant,
}

/// The initiator's ULP: keeps `depth` transactions outstanding and checks
/// each completion.
pub struct InitiatorUlp {
    rng: SplitMix64,
    outstanding: HashMap<u64, Outstanding>,
    next_tag: u64,
    /// Completions seen.
    pub completed: u64,
    /// The connection's credits ran out (until Xon).
    pub xoff: bool,
    /// On an ordered connection, the RSN the next completion must carry.
    next_rsn: Option<Rsn>,
    /// Submit to completion.
    pub latency: Histogram<u64>,
    /// Longest wait from a first RNR NACK to the completion.
    pub longest_rnr_wait: Duration,
}

impl InitiatorUlp {
    /// `first_rsn`: on an ordered connection, the initial RSN (completions
    /// come in RSN order from it); `None` on an unordered one.
    pub fn new(seed: u64, first_rsn: Option<Rsn>) -> Result<Self> {
        Ok(InitiatorUlp {
            rng: SplitMix64::new(seed),
            outstanding: HashMap::new(),
            next_tag: 1,
            completed: 0,
            xoff: false,
            next_rsn: first_rsn,
            latency: Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)
                .map_err(|e| AppError::Failed(format!("histogram: {e}")))?,
            longest_rnr_wait: Duration::ZERO,
        })
    }

    /// Submits until `depth` transactions are outstanding, all are
    /// submitted, or the engine refuses (no credits: retried later).
    pub fn submit(
        &mut self,
        engine: &mut Engine,
        now: Timestamp,
        wall: Instant,
        conn: ConnectionHandle,
        workload: &Workload,
    ) {
        // `setup` keeps every size within 8..=max_payload.
        let sizes = &workload.sizes;
        while !self.xoff
            && self.next_tag <= workload.transactions
            && self.outstanding.len() < workload.depth
        {
            let len = sizes[(self.rng.next_u64() % sizes.len() as u64) as usize];
            let push = (self.rng.next_u64() % 1000) < (workload.push_fraction * 1000.0) as u64;
            let tag = self.next_tag;
            let (kind, transaction) = if push {
                let mut payload = Vec::with_capacity(len);
                fill(tag, len, &mut payload);
                (TransactionKind::Push, Transaction::push(tag, payload))
            } else {
                let pull = Transaction::pull(tag, len as u16);
                // Invariant: TAG_LEN (8) is within ULP_HEADER_CAPACITY.
                let header = UlpHeader::new(&tag.to_be_bytes()).expect("a tag fits a ULP header");
                (TransactionKind::Pull, pull.with_header(header))
            };
            match engine.submit(now, conn, transaction) {
                Ok(_) => {
                    let submitted = wall;
                    self.outstanding.insert(
                        tag,
                        Outstanding {
                            kind,
                            len,
                            submitted,
                        },
                    );
                    self.next_tag += 1;
                }
                // Resources or credits exhausted: retry on a later turn.
                Err(_) => break,
            }
        }
    }

    /// Checks a completion: submitted and not completed before; in RSN
    /// order on an ordered connection; kCmplAck with the right bytes, or
    /// kCmplTargetNackCIE exactly when the target's ULP completed it in
    /// error (with its code, for a push).
    #[allow(clippy::too_many_arguments)]
    pub fn complete(
        &mut self,
        engine: &mut Engine,
        wall: Instant,
        c: Completion,
        target: &mut TargetAnswers,
        scratch: &mut Vec<u8>,
        report: &mut Report,
        failures: &mut Vec<String>,
    ) {
        let Some(o) = self.outstanding.remove(&c.tag) else {
            failures.push(format!(
                "transaction {} completed twice or was never submitted",
                c.tag
            ));
            engine.release(c.data);
            return;
        };
        self.completed += 1;
        self.latency
            .saturating_record(wall.saturating_duration_since(o.submitted).as_nanos() as u64);
        if let Some(expected) = self.next_rsn {
            if c.rsn != expected {
                failures.push(format!(
                    "transaction {} completed with RSN {} out of order: RSN {} was next",
                    c.tag, c.rsn, expected
                ));
            }
            self.next_rsn = Some(c.rsn.next());
        }
        if let Some(first) = target.first_rnr.remove(&c.tag) {
            self.longest_rnr_wait = self
                .longest_rnr_wait
                .max(wall.saturating_duration_since(first));
        }
        let in_error = target.completed_in_error.remove(&c.tag);
        match (c.status, in_error) {
            (CompletionStatus::Ack, false) => match o.kind {
                TransactionKind::Pull => {
                    report.pulls += 1;
                    if c.data.len() != o.len || verify(&c.data, scratch) != Some(c.tag) {
                        failures.push(format!(
                            "pull {}: data differs from what the target served",
                            c.tag
                        ));
                    } else {
                        report.verified_bytes += c.data.len() as u64;
                    }
                }
                TransactionKind::Push => report.pushes += 1,
            },
            (CompletionStatus::TargetCompletionInError, true) => {
                report.cie_completions += 1;
                match o.kind {
                    TransactionKind::Push => {
                        report.cie_pushes += 1;
                        if c.ulp_nack_code != CIE_ULP_CODE {
                            failures.push(format!(
                                "push {} completed in error with ULP code {:#x}, not the target's {CIE_ULP_CODE:#x}",
                                c.tag, c.ulp_nack_code
                            ));
                        }
                    }
                    // A zero-length Pull Data carries no code (§8.5.3.5).
                    TransactionKind::Pull => report.cie_pulls += 1,
                }
            }
            (status, true) => failures.push(format!(
                "transaction {} ({:?}) completed with {:?}, though the target's ULP completed it in error",
                c.tag, o.kind, status
            )),
            (status, false) => failures.push(format!(
                "transaction {} ({:?}) completed with {:?}",
                c.tag, o.kind, status
            )),
        }
        engine.release(c.data);
    }
}

#[cfg(test)]
mod tests {
    use falcon_core::engine::{connect, EngineConfig, PairSpec};
    use falcon_core::transaction::Payload;
    use falcon_core::wire::RnrTimeout;

    use super::*;

    /// An engine (plaintext) with one connection, for the ULPs' buffers.
    fn engine() -> (Engine, ConnectionHandle) {
        let now = Timestamp::from_nanos(1_000_000_000);
        let config = |host: u8| EngineConfig {
            local_ip: std::net::IpAddr::from([10, 0, 0, host]),
            local_mac: falcon_core::wire::EthernetAddress([2, 0, 0, 0, 0, host]),
            ..EngineConfig::default()
        };
        let mut a = Engine::new(config(1), now).unwrap();
        let mut b = Engine::new(config(2), now).unwrap();
        let (conn, _) = connect(now, &mut a, &mut b, &PairSpec::default()).unwrap();
        (a, conn)
    }

    /// The target's decisions are held against each completion: a CIE the
    /// target sent is counted, not failed; a CIE it did not send, an ACK
    /// of one it did, an RSN out of order, a second completion all fail.
    #[test]
    fn completions_are_held_to_what_the_target_decided() {
        let (mut engine, conn) = engine();
        let wall = Instant::now();
        let mut initiator = InitiatorUlp::new(1, Some(Rsn::new(10))).unwrap();
        for tag in 1..=5 {
            initiator.outstanding.insert(
                tag,
                Outstanding {
                    kind: TransactionKind::Push,
                    len: 64,
                    submitted: wall,
                },
            );
        }
        let config = TargetUlp {
            rnr_ppm: 0,
            rnr_timeout: RnrTimeout::SHORTEST,
            cie_ppm: 0,
        };
        let mut target = TargetAnswers::new(config, 1);
        target.completed_in_error.extend([2, 3]);
        target.first_rnr.insert(5, wall);
        let effective = crate::democfg::EffectiveConfig::resolve(&Default::default()).unwrap();
        let mut report = Report::new(&effective, Duration::ZERO);
        let (mut scratch, mut failures) = (Vec::new(), Vec::new());
        let mut complete = |tag: u64, rsn: u32, status, code, failures: &mut Vec<String>| {
            let c = Completion {
                connection: conn,
                rsn: Rsn::new(rsn),
                tag,
                kind: TransactionKind::Push,
                status,
                ulp_nack_code: code,
                data: Payload::new(),
                source: None,
            };
            let (target, scratch) = (&mut target, &mut scratch);
            initiator.complete(&mut engine, wall, c, target, scratch, &mut report, failures);
        };
        let cie = CompletionStatus::TargetCompletionInError;
        complete(1, 10, CompletionStatus::Ack, 0, &mut failures);
        complete(2, 11, cie, CIE_ULP_CODE, &mut failures);
        assert!(failures.is_empty(), "{failures:?}");
        complete(3, 12, CompletionStatus::Ack, 0, &mut failures);
        assert_eq!(failures.len(), 1, "an ACK of a CIE'd push: {failures:?}");
        complete(4, 14, cie, CIE_ULP_CODE, &mut failures);
        assert_eq!(failures.len(), 3, "out of order, and a CIE never sent");
        complete(1, 15, CompletionStatus::Ack, 0, &mut failures);
        assert_eq!(failures.len(), 4, "completed twice: {failures:?}");
        complete(5, 15, CompletionStatus::LocalTimeout, 0, &mut failures);
        assert_eq!(failures.len(), 5, "a local timeout: {failures:?}");
        assert!(failures[4].contains("LocalTimeout"), "{failures:?}");
        assert_eq!(
            (report.pushes, report.cie_completions, report.cie_pushes),
            (1, 1, 1)
        );
        assert!(target.completed_in_error.is_empty());
        assert!(target.first_rnr.is_empty(), "the RNR wait was taken");
    }

    #[test]
    fn fill_and_verify_agree_and_catch_a_flipped_byte() {
        let (mut a, mut scratch) = (Vec::new(), Vec::new());
        for len in [8, 9, 64, 4096] {
            fill(42, len, &mut a);
            assert_eq!(a.len(), len);
            assert_eq!(verify(&a, &mut scratch), Some(42));
            a[len - 1] ^= 1;
            assert_ne!(verify(&a, &mut scratch), Some(42));
        }
    }
}
