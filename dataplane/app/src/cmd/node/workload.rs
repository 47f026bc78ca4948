//! What the two sides of `falcon node` run: the initiator's workloads
//! (verify, bulk, rr) and the target's answers, every byte checked.
//!
//! Layer: application, the ULP on each side's lcore loop. Owns the data
//! pattern both processes derive from one seed ([`Pattern`], also the
//! [`DataSource`] of every push and Pull Data: data goes from the pattern
//! into the frame once), the 8-byte ULP header naming a transaction's slice
//! of it, and the two ULPs. A mismatch, an unexpected completion status or
//! a refused answer is a counted failure with its first reason kept; the
//! ULPs never panic on what arrives.

use std::collections::HashMap;
use std::sync::Arc;

use falcon_core::api::{
    CompletionStatus, ConnectionHandle, DataSource, Engine, PacketBuf, Timestamp, Transaction,
    TransactionKind, Ulp, UlpEvent, UlpHeader,
};
use hdrhistogram::Histogram;

/// Bytes of the ULP header: the transaction's id (its slice of the
/// pattern starts at [`offset_of`] it; the top bit asks the target for a
/// response) and its data length.
pub const HEADER_LEN: usize = 8;
/// Offsets into the pattern wrap at this.
const SPAN: usize = 1 << 20;
/// The header's "answer with a push of the same length" bit.
pub(crate) const RESPOND: u32 = 1 << 31;

/// Where the pattern slice of transaction `id` starts.
pub(crate) fn offset_of(id: u32) -> usize {
    (id & !RESPOND) as usize * 7919 % SPAN
}

/// The bytes both sides send and check: `SPAN` + a frame's worth of
/// pseudo-random bytes from a fixed seed.
#[derive(Clone)]
pub struct Pattern {
    bytes: Arc<[u8]>,
    start: usize,
    len: usize,
}

impl Pattern {
    /// The whole pattern, for slices of up to `max_len` bytes.
    pub fn new(max_len: usize) -> Self {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let bytes: Vec<u8> = (0..SPAN + max_len)
            .map(|_| {
                // splitmix64
                state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = state;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                (z ^ (z >> 31)) as u8
            })
            .collect();
        let len = bytes.len();
        Pattern {
            bytes: bytes.into(),
            start: 0,
            len,
        }
    }

    /// `len` bytes from `offset` (wrapped into the span), as a source.
    pub fn slice(&self, offset: usize, len: usize) -> Pattern {
        let start = (offset % SPAN).min(self.bytes.len());
        Pattern {
            bytes: Arc::clone(&self.bytes),
            start,
            len: len.min(self.bytes.len() - start),
        }
    }

    /// Whether `data` is the pattern's `len` bytes at `offset`.
    pub fn matches(&self, offset: usize, data: &[u8]) -> bool {
        let start = offset % SPAN;
        self.bytes.get(start..start + data.len()) == Some(data)
    }

    fn as_slice(&self) -> &[u8] {
        &self.bytes[self.start..self.start + self.len]
    }
}

impl DataSource for Pattern {
    fn len(&self) -> usize {
        self.len
    }

    fn copy_to(&self, offset: usize, dst: &mut [u8]) {
        let src = self.as_slice().get(offset..).unwrap_or_default();
        let n = src.len().min(dst.len());
        dst[..n].copy_from_slice(&src[..n]);
        dst[n..].fill(0);
    }
}

impl std::fmt::Debug for Pattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pattern({}..+{})", self.start, self.len)
    }
}

pub(crate) fn header(id: u32, len: usize) -> UlpHeader {
    let mut bytes = [0u8; HEADER_LEN];
    bytes[..4].copy_from_slice(&id.to_be_bytes());
    bytes[4..].copy_from_slice(&(len as u32).to_be_bytes());
    // Invariant: 8 bytes are within ULP_HEADER_CAPACITY.
    UlpHeader::new(&bytes).expect("an 8-byte header fits")
}

/// (id with its flag, data length).
pub(crate) fn parse_header(bytes: &[u8]) -> Option<(u32, usize)> {
    let id = u32::from_be_bytes(bytes.get(..4)?.try_into().ok()?);
    let len = u32::from_be_bytes(bytes.get(4..8)?.try_into().ok()?);
    Some((id, len as usize))
}

/// Whether `payload` (header and data) is a well-formed slice of the
/// pattern; its (id, length) if so.
pub(crate) fn check(pattern: &Pattern, payload: &[u8]) -> Option<(u32, usize)> {
    parse_header(payload).filter(|&(id, len)| {
        payload.len() == HEADER_LEN + len && pattern.matches(offset_of(id), &payload[HEADER_LEN..])
    })
}

/// Counted failures, the first reason kept.
#[derive(Debug, Default, Clone)]
pub struct Failures {
    pub count: u64,
    pub first: Option<String>,
}

impl Failures {
    pub(crate) fn add(&mut self, reason: impl FnOnce() -> String) {
        self.count += 1;
        if self.first.is_none() {
            self.first = Some(reason());
        }
    }
}

/// The initiator's workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// `transactions` of many sizes, pushes and pulls (every third).
    Verify { transactions: u64 },
    /// Pushes of `size` flat out.
    Bulk,
    /// Request/response: a push of `size`, answered by the target's ULP
    /// with a push of `size` back (an RPC over sends).
    Rr,
    /// Request/response the Falcon way round: a push of `size` then a
    /// pull of `size`, one op.
    RrPull,
}

/// What one transaction of the workload is.
#[derive(Debug, Clone, Copy)]
struct Plan {
    kind: TransactionKind,
    /// Data bytes (after the ULP header).
    len: usize,
}

/// The initiator's ULP.
pub struct Initiator {
    connection: ConnectionHandle,
    workload: Workload,
    pattern: Pattern,
    /// Data bytes per transaction (bulk, rr) or the largest (verify).
    size: usize,
    /// Ops kept outstanding (an rr op is two transactions).
    inflight: usize,
    next_tag: u64,
    /// Transactions submitted and not completed.
    outstanding: usize,
    /// rr: ops whose response has not arrived.
    awaiting: usize,
    /// A transaction the engine turned away, submitted first next time.
    pending: Option<Transaction<Pattern>>,
    stopped: bool,
    started: HashMap<u64, Timestamp>,
    /// Latency of each op, ns (rr: push submitted to pull completed).
    pub latency: Histogram<u64>,
    pub completions: u64,
    pub ops: u64,
    /// Push data bytes acknowledged.
    pub push_bytes: u64,
    /// Pull data bytes received and verified.
    pub pull_bytes: u64,
    /// rr: response bytes (pushes from the target) received and verified.
    pub response_bytes: u64,
    pub failures: Failures,
}

impl Initiator {
    pub fn new(
        connection: ConnectionHandle,
        workload: Workload,
        pattern: Pattern,
        size: usize,
        inflight: usize,
    ) -> Self {
        Initiator {
            connection,
            workload,
            pattern,
            size: size.max(1),
            inflight: inflight.max(1),
            next_tag: 0,
            outstanding: 0,
            awaiting: 0,
            pending: None,
            stopped: false,
            started: HashMap::new(),
            // Invariant: 3 significant digits is a valid precision.
            latency: Histogram::new(3).expect("3 significant digits"),
            completions: 0,
            ops: 0,
            push_bytes: 0,
            pull_bytes: 0,
            response_bytes: 0,
            failures: Failures::default(),
        }
    }

    /// Submits nothing more; [`finished`](Self::finished) once the
    /// outstanding ones complete.
    pub fn stop(&mut self) {
        self.stopped = true;
        self.pending = None;
    }

    /// Stopped (or every transaction submitted) and none outstanding.
    pub fn finished(&self) -> bool {
        let all_submitted = match self.workload {
            Workload::Verify { transactions } => self.next_tag >= transactions,
            _ => false,
        };
        (self.stopped || all_submitted)
            && self.outstanding == 0
            && self.awaiting == 0
            && self.pending.is_none()
    }

    /// Transactions (not ops) outstanding.
    pub fn outstanding(&self) -> usize {
        self.outstanding
    }

    fn plan(&self, tag: u64) -> Plan {
        match self.workload {
            Workload::Verify { .. } => Plan {
                kind: if tag % 3 == 2 {
                    TransactionKind::Pull
                } else {
                    TransactionKind::Push
                },
                len: 1 + (tag as usize).wrapping_mul(733) % self.size,
            },
            Workload::Bulk | Workload::Rr => Plan {
                kind: TransactionKind::Push,
                len: self.size,
            },
            Workload::RrPull => Plan {
                kind: if tag % 2 == 0 {
                    TransactionKind::Push
                } else {
                    TransactionKind::Pull
                },
                len: self.size,
            },
        }
    }

    /// The header id of transaction `tag` (ids wrap below the flag bit).
    fn id(&self, tag: u64) -> u32 {
        let id = (tag as u32) & !RESPOND;
        if self.workload == Workload::Rr {
            id | RESPOND
        } else {
            id
        }
    }

    fn transaction(&self, tag: u64) -> Transaction<Pattern> {
        let plan = self.plan(tag);
        let id = self.id(tag);
        let h = header(id, plan.len);
        match plan.kind {
            TransactionKind::Push => {
                Transaction::push(tag, self.pattern.slice(offset_of(id), plan.len)).with_header(h)
            }
            // The request length counts the header the target echoes.
            TransactionKind::Pull => {
                Transaction::pull(tag, (HEADER_LEN + plan.len) as u16).with_header(h)
            }
        }
    }

    /// Transactions per op (rr-pull: push and pull).
    fn per_op(&self) -> usize {
        if self.workload == Workload::RrPull {
            2
        } else {
            1
        }
    }

    /// Ops in flight.
    fn in_flight(&self) -> usize {
        if self.workload == Workload::Rr {
            self.awaiting
        } else {
            self.outstanding / self.per_op()
        }
    }

    /// A push from the target: rr's response.
    fn handle_response<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, Pattern>,
        r: falcon_core::api::Request<B>,
    ) {
        match check(&self.pattern, &r.payload) {
            Some((id, len)) if self.workload == Workload::Rr && r.kind == TransactionKind::Push => {
                let op = u64::from(id & !RESPOND);
                match self.started.remove(&op) {
                    Some(start) => {
                        self.response_bytes += len as u64;
                        self.awaiting = self.awaiting.saturating_sub(1);
                        self.ops += 1;
                        let ns = now.as_nanos().saturating_sub(start.as_nanos());
                        let _ = self.latency.record(ns.max(1));
                    }
                    None => self.failures.add(|| format!("a response to no op ({op})")),
                }
            }
            _ => self
                .failures
                .add(|| format!("initiator got an unexpected request (rsn {:?})", r.rsn)),
        }
        if r.kind == TransactionKind::Push {
            if let Err(e) = engine.ulp_ack(now, r.connection, r.rsn) {
                self.failures.add(|| format!("ulp_ack: {e:?}"));
            }
        }
        engine.release(r.payload);
    }
}

impl<B: PacketBuf + std::fmt::Debug> Ulp<B, Pattern> for Initiator {
    fn submit(&mut self, now: Timestamp, engine: &mut Engine<B, Pattern>) {
        loop {
            let t = match self.pending.take() {
                Some(t) => t,
                None => {
                    if self.stopped || self.in_flight() >= self.inflight {
                        return;
                    }
                    if let Workload::Verify { transactions } = self.workload {
                        if self.next_tag >= transactions {
                            return;
                        }
                    }
                    let tag = self.next_tag;
                    self.next_tag += 1;
                    if tag % self.per_op() as u64 == 0 {
                        self.started.insert(tag / self.per_op() as u64, now);
                    }
                    self.transaction(tag)
                }
            };
            let response = self.workload == Workload::Rr;
            match engine.submit(now, self.connection, t) {
                Ok(_) => {
                    self.outstanding += 1;
                    self.awaiting += usize::from(response);
                }
                Err(rejected) => {
                    self.pending = Some(rejected.returned);
                    return;
                }
            }
        }
    }

    fn on_event(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, Pattern>,
        event: UlpEvent<B, Pattern>,
    ) {
        let c = match event {
            UlpEvent::Completion(c) => c,
            UlpEvent::Xoff { .. } | UlpEvent::Xon { .. } => return,
            UlpEvent::Request(r) => {
                self.handle_response(now, engine, r);
                return;
            }
            other => {
                self.failures.add(|| format!("initiator: {other:?}"));
                return;
            }
        };
        self.outstanding = self.outstanding.saturating_sub(1);
        self.completions += 1;
        let plan = self.plan(c.tag);
        if c.status != CompletionStatus::Ack {
            self.failures
                .add(|| format!("tag {} completed {:?}", c.tag, c.status));
        } else {
            match c.kind {
                TransactionKind::Push => self.push_bytes += plan.len as u64,
                TransactionKind::Pull => {
                    let ok = check(&self.pattern, &c.data) == Some((self.id(c.tag), plan.len));
                    if ok {
                        self.pull_bytes += plan.len as u64;
                    } else {
                        self.failures.add(|| {
                            format!(
                                "pull tag {}: {} bytes back, not the {} expected",
                                c.tag,
                                c.data.len(),
                                HEADER_LEN + plan.len
                            )
                        });
                    }
                }
            }
        }
        engine.release(c.data);
        // An op ends with its last transaction (ordered: in RSN order),
        // rr's with its response.
        let per_op = self.per_op() as u64;
        if self.workload != Workload::Rr && c.tag % per_op == per_op - 1 {
            self.ops += 1;
            if let Some(start) = self.started.remove(&(c.tag / per_op)) {
                let ns = now.as_nanos().saturating_sub(start.as_nanos());
                let _ = self.latency.record(ns.max(1));
            }
        }
    }
}

/// The target's ULP: checks every push against the pattern slice its
/// header names, answers every pull with the slice it asks for.
pub struct Target {
    pattern: Pattern,
    /// Responses (rr) the engine has not taken yet, first first.
    responses: std::collections::VecDeque<Transaction<Pattern>>,
    connection: Option<ConnectionHandle>,
    /// Push data bytes verified.
    pub push_bytes: u64,
    /// Pull data bytes served.
    pub pull_bytes: u64,
    /// Response bytes (rr) served.
    pub response_bytes: u64,
    pub requests: u64,
    /// Of them, pushes received and pulls served.
    pub pushes: u64,
    pub pulls: u64,
    pub failures: Failures,
}

impl Target {
    pub fn new(pattern: Pattern) -> Self {
        Target {
            pattern,
            responses: std::collections::VecDeque::new(),
            connection: None,
            push_bytes: 0,
            pull_bytes: 0,
            response_bytes: 0,
            requests: 0,
            pushes: 0,
            pulls: 0,
            failures: Failures::default(),
        }
    }
}

impl<B: PacketBuf + std::fmt::Debug> Ulp<B, Pattern> for Target {
    fn submit(&mut self, now: Timestamp, engine: &mut Engine<B, Pattern>) {
        while let Some(t) = self.responses.pop_front() {
            // Invariant: a response is queued only with its connection,
            // which the tag carries.
            let connection = self.connection.expect("a connection with a response");
            if let Err(rejected) = engine.submit(now, connection, t) {
                self.responses.push_front(rejected.returned);
                return;
            }
        }
    }

    fn on_event(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, Pattern>,
        event: UlpEvent<B, Pattern>,
    ) {
        let r = match event {
            UlpEvent::Request(r) => r,
            UlpEvent::Completion(c) => {
                if c.kind != TransactionKind::Push || c.status != CompletionStatus::Ack {
                    self.failures
                        .add(|| format!("response tag {} completed {:?}", c.tag, c.status));
                }
                engine.release(c.data);
                return;
            }
            UlpEvent::Xoff { .. } | UlpEvent::Xon { .. } => return,
            other => {
                self.failures.add(|| format!("target: {other:?}"));
                return;
            }
        };
        self.requests += 1;
        match r.kind {
            TransactionKind::Push => {
                self.pushes += 1;
                match check(&self.pattern, &r.payload) {
                    Some((id, len)) => {
                        self.push_bytes += len as u64;
                        if id & RESPOND != 0 {
                            // rr: the response, the same slice back.
                            let t = Transaction::push(
                                u64::from(id),
                                self.pattern.slice(offset_of(id), len),
                            )
                            .with_header(header(id, len));
                            self.connection = Some(r.connection);
                            self.responses.push_back(t);
                            self.response_bytes += len as u64;
                        }
                    }
                    None => self.failures.add(|| {
                        format!(
                            "push rsn {:?}: {} bytes do not match",
                            r.rsn,
                            r.payload.len()
                        )
                    }),
                }
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
                    return;
                };
                let data = self.pattern.slice(offset_of(id), len);
                match engine.submit_pull_data(now, r.connection, r.rsn, r.header, data) {
                    Ok(()) => {
                        self.pulls += 1;
                        self.pull_bytes += len as u64;
                    }
                    Err(e) => self.failures.add(|| format!("submit_pull_data: {e:?}")),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_slices_copy_and_match() {
        let p = Pattern::new(100);
        let s = p.slice(SPAN + 5, 50);
        let mut out = [0u8; 50];
        s.copy_to(0, &mut out);
        assert!(p.matches(5, &out));
        assert!(!p.matches(6, &out));
        assert_eq!(parse_header(header(7, 9).as_slice()), Some((7, 9)));
        let mut payload = header(7 | RESPOND, 50).to_vec();
        payload.extend_from_slice(&{
            let mut d = [0u8; 50];
            p.slice(offset_of(7), 50).copy_to(0, &mut d);
            d
        });
        assert_eq!(check(&p, &payload), Some((7 | RESPOND, 50)));
        payload[20] ^= 1;
        assert_eq!(check(&p, &payload), None);
    }
}
