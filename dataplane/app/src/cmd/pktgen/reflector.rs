//! The reflector's ULP: a Falcon target that accepts every push and serves
//! every pull from the pattern, on every connection it has.
//!
//! Layer: application, the ULP on the reflector's lcore loop. Owns its
//! counts and, with `--verify`, the check of every pushed byte against the
//! slice of the pattern its ULP header names. A pull is always served from
//! the slice its header names, so the generator can check it. Never panics
//! on what arrives: a malformed header or a mismatch is a counted failure
//! (a push is still acknowledged: the transport delivered it whole).

use falcon_core::api::{
    CompletionStatus, Engine, PacketBuf, Timestamp, TransactionKind, Ulp, UlpEvent,
};

use crate::cmd::node::workload::{check, offset_of, parse_header, Failures, Pattern, HEADER_LEN};

/// What the reflector has done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Pushes accepted, and their payload bytes.
    pub pushes: u64,
    pub push_bytes: u64,
    /// Pulls served, and their payload bytes.
    pub pulls: u64,
    pub pull_bytes: u64,
    /// Push payload bytes checked against the pattern (`--verify`).
    pub verified_bytes: u64,
}

impl Counts {
    pub fn ops(&self) -> u64 {
        self.pushes + self.pulls
    }

    pub fn bytes(&self) -> u64 {
        self.push_bytes + self.pull_bytes
    }
}

/// The reflector's ULP.
pub struct Reflector {
    pattern: Pattern,
    verify: bool,
    /// When the first request arrived.
    pub first_request: Option<Timestamp>,
    pub counts: Counts,
    pub failures: Failures,
}

impl Reflector {
    pub fn new(pattern: Pattern, verify: bool) -> Self {
        Reflector {
            pattern,
            verify,
            first_request: None,
            counts: Counts::default(),
            failures: Failures::default(),
        }
    }
}

impl<B: PacketBuf + std::fmt::Debug> Ulp<B, Pattern> for Reflector {
    fn submit(&mut self, _now: Timestamp, _engine: &mut Engine<B, Pattern>) {}

    fn on_event(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, Pattern>,
        event: UlpEvent<B, Pattern>,
    ) {
        let r = match event {
            UlpEvent::Request(r) => r,
            UlpEvent::Xoff { .. } | UlpEvent::Xon { .. } => return,
            UlpEvent::Completion(c) => {
                if c.status != CompletionStatus::Ack || c.kind != TransactionKind::Push {
                    self.failures
                        .add(|| format!("reflector: a completion of its own ({c:?})"));
                }
                engine.release(c.data);
                return;
            }
            other => {
                self.failures.add(|| format!("reflector: {other:?}"));
                return;
            }
        };
        self.first_request.get_or_insert(now);
        match r.kind {
            TransactionKind::Push => {
                let size = r.payload.len() as u64;
                if self.verify {
                    match check(&self.pattern, &r.payload) {
                        Some(_) => self.counts.verified_bytes += size,
                        None => self.failures.add(|| {
                            format!(
                                "push rsn {:?}: {size} bytes do not match the pattern",
                                r.rsn
                            )
                        }),
                    }
                }
                self.counts.pushes += 1;
                self.counts.push_bytes += size;
                if let Err(e) = engine.ulp_ack(now, r.connection, r.rsn) {
                    self.failures.add(|| format!("ulp_ack: {e:?}"));
                }
                engine.release(r.payload);
            }
            TransactionKind::Pull => {
                let Some((id, len)) = parse_header(r.header.as_slice())
                    .filter(|&(_, len)| usize::from(r.request_length) == HEADER_LEN + len)
                else {
                    self.failures
                        .add(|| format!("pull rsn {:?}: a header that names no slice", r.rsn));
                    engine.release(r.payload);
                    return;
                };
                let data = self.pattern.slice(offset_of(id), len);
                match engine.submit_pull_data(now, r.connection, r.rsn, r.header, data) {
                    Ok(()) => {
                        self.counts.pulls += 1;
                        self.counts.pull_bytes += (HEADER_LEN + len) as u64;
                    }
                    Err(e) => self.failures.add(|| format!("submit_pull_data: {e:?}")),
                }
                engine.release(r.payload);
            }
        }
    }
}
