//! The plan and the oracle of the RDMA phase of `falcon demo`.
//!
//! Layer: application, sans-IO: never touches a device, a region or a
//! clock. [`Plan`] decides each operation (its QP, kind, size, buffer
//! slot, operands), keeps at most `queue_depth` in flight per QP and at
//! most one compare-and-swap per QP (so that the oracle knows the value
//! each one finds, whatever the ordering mode), and holds the oracle:
//! the bytes each operation must leave ([`payload`]), the value of each
//! compare-and-swap counter, the adds of each fetch-and-add counter. The
//! phase ([`super::rdma`]) posts what the plan decides and hands back
//! what landed; the plan names the first wrong byte (QP, operation,
//! offset) and at the end checks the counters: the prior values the
//! fetch-and-adds of a counter returned, sorted, are its chain of partial
//! sums (each distinct, each the one before plus its add), and the
//! counter ends at the sum of its adds.

use std::collections::BTreeMap;
use std::time::Duration;

use falcon_core::random::{Random, SplitMix64};
use hdrhistogram::Histogram;

use super::report::size;
use crate::cmd::nvme_io::latency_histogram;
use crate::error::Result;

/// Fetch-and-add counters, shared by every QP: words 0.. of the
/// responder's counter region. Each QP's compare-and-swap counter follows.
pub(super) const FETCH_ADD_COUNTERS: usize = 4;
/// The phase stops after this many failures.
pub(super) const MAX_FAILURES: usize = 20;
/// One compare-and-swap in this many expects a value the counter does not
/// hold (it must then leave the counter as it is).
const CAS_MISS_ONE_IN: u32 = 4;

/// What an operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Kind {
    Write,
    /// RDMA WRITE with immediate: consumes a receive posted on the
    /// responder.
    WriteWithImm,
    Read,
    Send,
    SendWithImm,
    FetchAdd,
    CompareSwap,
}

impl Kind {
    pub(super) const ALL: [Kind; 7] = [
        Kind::Write,
        Kind::Read,
        Kind::Send,
        Kind::FetchAdd,
        Kind::CompareSwap,
        Kind::WriteWithImm,
        Kind::SendWithImm,
    ];

    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::Write => "WRITE",
            Kind::WriteWithImm => "WRITE with immediate",
            Kind::Read => "READ",
            Kind::Send => "SEND",
            Kind::SendWithImm => "SEND with immediate",
            Kind::FetchAdd => "fetch-and-add",
            Kind::CompareSwap => "compare-and-swap",
        }
    }

    /// The report's group of the kind.
    pub(super) fn group(self) -> Group {
        match self {
            Kind::Write | Kind::WriteWithImm => Group::Write,
            Kind::Read => Group::Read,
            Kind::Send | Kind::SendWithImm => Group::Send,
            Kind::FetchAdd | Kind::CompareSwap => Group::Atomic,
        }
    }

    /// The responder completes it too, in a receive posted for it.
    pub(super) fn consumes_receive(self) -> bool {
        matches!(self, Kind::WriteWithImm | Kind::Send | Kind::SendWithImm)
    }

    pub(super) fn is_atomic(self) -> bool {
        matches!(self, Kind::FetchAdd | Kind::CompareSwap)
    }

    pub(super) fn has_imm(self) -> bool {
        matches!(self, Kind::WriteWithImm | Kind::SendWithImm)
    }

    /// Draws a kind: a fifth plain WRITE, a tenth WRITE with immediate, a
    /// fifth READ, an eighth plain SEND, a tenth SEND with immediate, the
    /// rest atomics (fetch-and-add twice as often as compare-and-swap).
    fn draw(rng: &mut SplitMix64) -> Kind {
        match rng.below(100) {
            0..=19 => Kind::Write,
            20..=29 => Kind::WriteWithImm,
            30..=49 => Kind::Read,
            50..=62 => Kind::Send,
            63..=72 => Kind::SendWithImm,
            73..=90 => Kind::FetchAdd,
            _ => Kind::CompareSwap,
        }
    }
}

/// Operations as the report groups them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Group {
    Write,
    Read,
    Send,
    Atomic,
}

impl Group {
    pub(super) const ALL: [Group; 4] = [Group::Write, Group::Read, Group::Send, Group::Atomic];

    pub(super) fn name(self) -> &'static str {
        match self {
            Group::Write => "write",
            Group::Read => "read",
            Group::Send => "send",
            Group::Atomic => "atomic",
        }
    }
}

/// One operation, as the plan decided it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Op {
    /// Its work request id, on both sides.
    pub(super) id: u64,
    pub(super) qp: usize,
    pub(super) kind: Kind,
    /// The buffer slot it owns on each side while in flight.
    pub(super) slot: usize,
    /// Data bytes (atomics: 8).
    pub(super) len: u32,
    pub(super) imm: u32,
    /// Atomics: the counter's word in the responder's counter region.
    pub(super) counter: usize,
    /// Fetch-and-add: the add; compare-and-swap: the swap.
    pub(super) operand: u64,
    /// Compare-and-swap: the value compared.
    pub(super) compare: u64,
}

impl Op {
    /// `QP 2: READ #17 of 64 KiB`, for failures.
    pub(super) fn describe(&self) -> String {
        format!(
            "QP {}: {} #{} of {}",
            self.qp,
            self.kind.name(),
            self.id,
            size(u64::from(self.len))
        )
    }
}

/// `len` bytes only operation `id` of the run seeded `seed` writes (WRITE,
/// SEND) or reads (READ).
pub(super) fn payload(seed: u64, id: u64, len: u32) -> Vec<u8> {
    let mut rng = SplitMix64::new(seed ^ id.wrapping_mul(0x2545_F491_4F6C_DD1D));
    let mut bytes = Vec::with_capacity(len as usize + 8);
    while bytes.len() < len as usize {
        bytes.extend_from_slice(&rng.next_u64().to_le_bytes());
    }
    bytes.truncate(len as usize);
    bytes
}

/// The first byte of `actual` that differs from `expected`: its offset,
/// the byte found and the byte expected.
pub(super) fn first_difference(expected: &[u8], actual: &[u8]) -> Option<(usize, u8, u8)> {
    if let Some(at) = expected.iter().zip(actual).position(|(e, a)| e != a) {
        return Some((at, actual[at], expected[at]));
    }
    // A length difference: the first byte one of them lacks.
    (expected.len() != actual.len()).then(|| {
        let at = expected.len().min(actual.len());
        (
            at,
            actual.get(at).copied().unwrap_or(0),
            expected.get(at).copied().unwrap_or(0),
        )
    })
}

/// Counts of the phase so far.
#[derive(Debug, Default, Clone)]
pub(super) struct Counts {
    /// Operations retired (both sides' completions in, or failed).
    pub(super) operations: u64,
    /// By kind, in [`Kind::ALL`]'s order.
    pub(super) by_kind: [u64; 7],
    /// WRITEs, READs and SENDs of more than one MTU.
    pub(super) multi_mtu: u64,
    /// Data bytes of the successful operations (atomics: 8 each).
    pub(super) bytes: u64,
    pub(super) verified_bytes: u64,
    /// Completions with an error status.
    pub(super) errors: u64,
    pub(super) verify_failures: u64,
    /// Compare-and-swaps that found the value compared and swapped.
    pub(super) swaps: u64,
}

impl Counts {
    pub(super) fn of(&self, kind: Kind) -> u64 {
        Kind::ALL
            .iter()
            .position(|&k| k == kind)
            .map_or(0, |i| self.by_kind[i])
    }
}

/// What to post next, and the oracle (see the module doc).
pub(super) struct Plan {
    operations: u64,
    sizes: Vec<u32>,
    mtu: u32,
    seed: u64,
    rng: SplitMix64,
    issued: u64,
    /// Free buffer slots of each QP.
    free: Vec<Vec<usize>>,
    /// A compare-and-swap of the QP in flight.
    cas_busy: Vec<bool>,
    /// The value each QP's compare-and-swap counter holds once its
    /// compare-and-swaps so far executed.
    cas_value: Vec<u64>,
    /// Each fetch-and-add counter's adds and the prior values returned.
    fetch_adds: Vec<Vec<(u64, u64)>>,
    adds: Vec<u64>,
    pub(super) counts: Counts,
    pub(super) histograms: Vec<Histogram<u64>>,
    pub(super) all: Histogram<u64>,
    pub(super) failures: Vec<String>,
    stopped: bool,
}

impl Plan {
    pub(super) fn new(
        operations: u64,
        qps: usize,
        queue_depth: usize,
        sizes: &[u32],
        mtu: u32,
        seed: u64,
    ) -> Result<Plan> {
        Ok(Plan {
            operations,
            sizes: sizes.to_vec(),
            mtu,
            seed,
            rng: SplitMix64::new(seed ^ 0x5244_4D41_5F64_656D),
            issued: 0,
            free: (0..qps)
                .map(|qp| (qp * queue_depth..(qp + 1) * queue_depth).rev().collect())
                .collect(),
            cas_busy: vec![false; qps],
            cas_value: vec![0; qps],
            fetch_adds: vec![Vec::new(); FETCH_ADD_COUNTERS],
            adds: vec![0; FETCH_ADD_COUNTERS],
            counts: Counts::default(),
            histograms: Group::ALL
                .iter()
                .map(|_| latency_histogram())
                .collect::<Result<_>>()?,
            all: latency_histogram()?,
            failures: Vec::new(),
            stopped: false,
        })
    }

    pub(super) fn seed(&self) -> u64 {
        self.seed
    }

    pub(super) fn issued(&self) -> u64 {
        self.issued
    }

    pub(super) fn operations(&self) -> u64 {
        self.operations
    }

    /// Every operation issued and retired, or the phase stopped.
    pub(super) fn done(&self, in_flight: usize) -> bool {
        ((self.stopped || self.issued == self.operations) && in_flight == 0)
            || self.failures.len() >= MAX_FAILURES
    }

    /// Submit nothing more.
    pub(super) fn stop(&mut self) {
        self.stopped = true;
    }

    pub(super) fn fail(&mut self, reason: String) {
        self.failures.push(reason);
    }

    /// The next operation of `qp`, if one may start now. The first seven
    /// are one of each kind, so every kind runs in any phase that long.
    pub(super) fn next(&mut self, qp: usize) -> Option<Op> {
        if self.stopped || self.issued == self.operations || self.failures.len() >= MAX_FAILURES {
            return None;
        }
        let slot = *self.free.get(qp)?.last()?;
        let mut kind = match Kind::ALL.get(self.issued as usize) {
            Some(&kind) => kind,
            None => Kind::draw(&mut self.rng),
        };
        if kind == Kind::CompareSwap && self.cas_busy[qp] {
            kind = Kind::FetchAdd;
        }
        self.free[qp].pop();
        let id = self.issued;
        self.issued += 1;
        let mut op = Op {
            id,
            qp,
            kind,
            slot,
            len: 8,
            imm: 0,
            counter: 0,
            operand: 0,
            compare: 0,
        };
        match kind {
            Kind::FetchAdd => {
                op.counter = self.rng.below(FETCH_ADD_COUNTERS as u32) as usize;
                op.operand = 1 + u64::from(self.rng.below(1_000_000));
                self.adds[op.counter] += op.operand;
            }
            Kind::CompareSwap => {
                self.cas_busy[qp] = true;
                op.counter = FETCH_ADD_COUNTERS + qp;
                let value = self.cas_value[qp];
                op.compare = if self.rng.chance(1, CAS_MISS_ONE_IN) {
                    value ^ 1
                } else {
                    value
                };
                op.operand = self.rng.next_u64();
            }
            _ => {
                op.len = self.sizes[self.rng.below(self.sizes.len() as u32) as usize];
                if kind.has_imm() {
                    op.imm = self.rng.next_u64() as u32;
                }
            }
        }
        Some(op)
    }

    /// Checks the bytes an operation left in `place` (the responder's
    /// region, the requester's buffer, the receive buffer).
    pub(super) fn verify(&mut self, op: &Op, place: &str, expected: &[u8], actual: &[u8]) {
        match first_difference(expected, actual) {
            None => self.counts.verified_bytes += expected.len() as u64,
            Some((offset, found, wanted)) => {
                self.counts.verify_failures += 1;
                self.fail(format!(
                    "{}: byte {offset} of {place} is {found:#04x}, {wanted:#04x} expected",
                    op.describe()
                ));
            }
        }
    }

    /// A fetch-and-add's prior value, recorded for the end's check.
    pub(super) fn fetch_add_done(&mut self, op: &Op, prior: u64) {
        if let Some(seen) = self.fetch_adds.get_mut(op.counter) {
            seen.push((prior, op.operand));
            self.counts.verified_bytes += 8;
        }
    }

    /// A compare-and-swap's prior value: the one the oracle has for its
    /// counter; the counter then holds the swap if it was compared equal.
    pub(super) fn compare_swap_done(&mut self, op: &Op, prior: Option<u64>) {
        self.cas_busy[op.qp] = false;
        let Some(prior) = prior else {
            // Failed: what the counter holds is unknown; no more checks.
            self.cas_value[op.qp] = u64::MAX;
            self.stop();
            return;
        };
        let expected = self.cas_value[op.qp];
        if prior != expected {
            self.counts.verify_failures += 1;
            self.fail(format!(
                "{}: returned {prior:#x}, the counter held {expected:#x}",
                op.describe()
            ));
            return;
        }
        self.counts.verified_bytes += 8;
        if op.compare == expected {
            self.cas_value[op.qp] = op.operand;
            self.counts.swaps += 1;
        }
    }

    /// The operation is over (both sides' completions in, or failed): its
    /// slot is free again, its latency (post to the requester's
    /// completion, ns) recorded.
    pub(super) fn retire(&mut self, op: &Op, success: bool, latency: Duration) {
        self.free[op.qp].push(op.slot);
        if op.kind == Kind::CompareSwap && self.cas_busy[op.qp] {
            self.compare_swap_done(op, None);
        }
        self.counts.operations += 1;
        if let Some(i) = Kind::ALL.iter().position(|&k| k == op.kind) {
            self.counts.by_kind[i] += 1;
        }
        if !op.kind.is_atomic() && op.len > self.mtu {
            self.counts.multi_mtu += 1;
        }
        if success {
            self.counts.bytes += u64::from(op.len);
        } else {
            self.counts.errors += 1;
        }
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        if let Some(i) = Group::ALL.iter().position(|&g| g == op.kind.group()) {
            self.histograms[i].saturating_record(ns);
        }
        self.all.saturating_record(ns);
    }

    /// The end's check of the counters, `words` the responder's counter
    /// region (fetch-and-add counters, then each QP's compare-and-swap
    /// counter), after every operation retired.
    pub(super) fn check_counters(&mut self, words: &[u64]) {
        for counter in 0..FETCH_ADD_COUNTERS {
            let mut seen = std::mem::take(&mut self.fetch_adds[counter]);
            seen.sort_unstable();
            let mut at = 0u64;
            for (i, &(prior, add)) in seen.iter().enumerate() {
                if prior != at {
                    let what = if i > 0 && seen[i - 1].0 == prior {
                        "returned twice"
                    } else {
                        "is not a partial sum of its adds"
                    };
                    self.counts.verify_failures += 1;
                    self.fail(format!(
                        "fetch-and-add counter {counter}: prior value {prior:#x} {what} ({at:#x} expected)"
                    ));
                    break;
                }
                at = at.wrapping_add(add);
            }
            let Some(&value) = words.get(counter) else {
                continue;
            };
            // With a failed fetch-and-add the sum is unknown.
            if self.counts.errors == 0 && value != self.adds[counter] {
                self.counts.verify_failures += 1;
                self.fail(format!(
                    "fetch-and-add counter {counter} ends at {value:#x}, the sum of its adds is {:#x}",
                    self.adds[counter]
                ));
            }
        }
        for (qp, &expected) in self.cas_value.iter().enumerate() {
            let Some(&value) = words.get(FETCH_ADD_COUNTERS + qp) else {
                continue;
            };
            if expected != u64::MAX && value != expected {
                self.counts.verify_failures += 1;
                self.failures.push(format!(
                    "compare-and-swap counter of QP {qp} ends at {value:#x}, {expected:#x} expected"
                ));
            }
        }
    }

    /// Latency histograms by group, in [`Group::ALL`]'s order.
    pub(super) fn latency(&self) -> BTreeMap<&'static str, &Histogram<u64>> {
        Group::ALL
            .iter()
            .zip(&self.histograms)
            .filter(|(_, h)| !h.is_empty())
            .map(|(g, h)| (g.name(), h))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A faithful responder in memory: what each operation leaves.
    struct Responder {
        counters: Vec<u64>,
    }

    impl Responder {
        fn execute(&mut self, op: &Op) -> Option<u64> {
            let word = &mut self.counters[op.counter];
            let prior = *word;
            match op.kind {
                Kind::FetchAdd => *word = prior.wrapping_add(op.operand),
                Kind::CompareSwap if prior == op.compare => *word = op.operand,
                Kind::CompareSwap => {}
                _ => return None,
            }
            Some(prior)
        }
    }

    fn plan(operations: u64) -> Plan {
        Plan::new(operations, 4, 8, &[64, 4096, 65536, 262144], 4096, 3).unwrap()
    }

    /// Run against a faithful responder, everything in flight retired in
    /// reverse order: exactly the operations asked for, every kind among
    /// them, multi-MTU messages, at most `queue_depth` per QP and one
    /// compare-and-swap per QP in flight, each slot owned by one
    /// operation at a time; the counters check out.
    #[test]
    fn the_plan_runs_every_kind_within_its_limits_against_a_faithful_responder() {
        let mut plan = plan(3000);
        let mut responder = Responder {
            counters: vec![0; FETCH_ADD_COUNTERS + 4],
        };
        let mut in_flight: Vec<Op> = Vec::new();
        let mut rounds = 0;
        while !plan.done(in_flight.len()) {
            for qp in 0..4 {
                while let Some(op) = plan.next(qp) {
                    assert_eq!(op.qp, qp);
                    assert!((qp * 8..qp * 8 + 8).contains(&op.slot), "{op:?}");
                    in_flight.push(op);
                }
                let mine: Vec<&Op> = in_flight.iter().filter(|o| o.qp == qp).collect();
                assert!(mine.len() <= 8);
                let cas = mine.iter().filter(|o| o.kind == Kind::CompareSwap).count();
                assert!(cas <= 1, "{mine:?}");
            }
            let mut slots: Vec<usize> = in_flight.iter().map(|o| o.slot).collect();
            slots.sort_unstable();
            slots.dedup();
            assert_eq!(slots.len(), in_flight.len(), "a slot owned twice");
            // The CAS of each QP executes in its posting order; the others
            // in reverse.
            for op in in_flight.drain(..).rev().collect::<Vec<_>>() {
                match op.kind {
                    Kind::FetchAdd => {
                        let prior = responder.execute(&op).unwrap();
                        plan.fetch_add_done(&op, prior);
                    }
                    Kind::CompareSwap => {
                        let prior = responder.execute(&op);
                        plan.compare_swap_done(&op, prior);
                    }
                    _ => {
                        let bytes = payload(plan.seed(), op.id, op.len);
                        plan.verify(&op, "the buffer", &bytes, &bytes.clone());
                    }
                }
                plan.retire(&op, true, Duration::from_micros(10));
            }
            rounds += 1;
            assert!(rounds < 10_000);
        }
        plan.check_counters(&responder.counters);
        assert!(plan.failures.is_empty(), "{:?}", plan.failures);
        let c = &plan.counts;
        assert_eq!(c.operations, 3000);
        for kind in Kind::ALL {
            assert!(c.of(kind) > 50, "{kind:?}: {c:?}");
        }
        assert!(c.multi_mtu > 500 && c.swaps > 0, "{c:?}");
        assert!(c.swaps < c.of(Kind::CompareSwap), "some miss: {c:?}");
        assert_eq!(c.verify_failures, 0);
        let sum: u64 = responder.counters[..FETCH_ADD_COUNTERS].iter().sum();
        assert!(sum > 0);
    }

    /// A duplicated fetch-and-add (its prior value returned twice, the
    /// counter one add too far), a compare-and-swap that reports another
    /// value, and one wrong byte are failures, each by name.
    #[test]
    fn the_oracle_names_each_wrong_result() {
        let mut plan = plan(200);
        let mut responder = Responder {
            counters: vec![0; FETCH_ADD_COUNTERS + 4],
        };
        let mut duplicated = false;
        let mut wrong_cas = false;
        let mut wrong_byte = false;
        while !plan.done(0) {
            let Some(op) = plan.next(0).or_else(|| plan.next(1)) else {
                break;
            };
            match op.kind {
                Kind::FetchAdd => {
                    let prior = responder.execute(&op).unwrap();
                    plan.fetch_add_done(&op, prior);
                    if !duplicated && op.counter == 0 {
                        duplicated = true;
                        responder.execute(&op);
                    }
                }
                Kind::CompareSwap => {
                    let prior = responder.execute(&op).unwrap();
                    let reported = if wrong_cas { prior } else { prior + 7 };
                    wrong_cas = true;
                    plan.compare_swap_done(&op, Some(reported));
                }
                _ => {
                    let bytes = payload(plan.seed(), op.id, op.len);
                    let mut landed = bytes.clone();
                    if !wrong_byte && op.len > 40 {
                        wrong_byte = true;
                        landed[40] ^= 0x01;
                        let name = op.describe();
                        plan.verify(&op, "the responder's region", &bytes, &landed);
                        assert!(
                            plan.failures.last().unwrap()
                                == &format!(
                                    "{name}: byte 40 of the responder's region is {:#04x}, {:#04x} expected",
                                    landed[40], bytes[40]
                                ),
                            "{:?}",
                            plan.failures
                        );
                    } else {
                        plan.verify(&op, "the buffer", &bytes, &landed);
                    }
                }
            }
            plan.retire(&op, true, Duration::from_micros(1));
        }
        assert!(duplicated && wrong_cas && wrong_byte);
        plan.check_counters(&responder.counters);
        let f = &plan.failures;
        assert!(
            f.iter().any(|r| r.starts_with("QP ")
                && r.contains(": compare-and-swap #")
                && r.contains(": returned 0x7, the counter held 0x0")),
            "{f:?}"
        );
        assert!(
            f.iter()
                .any(|r| r.starts_with("fetch-and-add counter 0 ends at ")),
            "{f:?}"
        );
        assert!(
            f.iter()
                .any(|r| r.contains(": byte 40 of the responder's region is ")),
            "{f:?}"
        );
        assert!(plan.counts.verify_failures >= 3, "{f:?}");
    }

    /// Prior values returned twice, or off the chain of partial sums.
    #[test]
    fn fetch_add_priors_must_chain() {
        let op = |id, operand| Op {
            id,
            qp: 0,
            kind: Kind::FetchAdd,
            slot: 0,
            len: 8,
            imm: 0,
            counter: 1,
            operand,
            compare: 0,
        };
        let mut plan = plan(10);
        plan.adds[1] = 12;
        plan.fetch_add_done(&op(0, 5), 0);
        plan.fetch_add_done(&op(1, 7), 0);
        plan.check_counters(&[0, 12]);
        assert_eq!(
            plan.failures,
            ["fetch-and-add counter 1: prior value 0x0 returned twice (0x5 expected)"]
        );
        let mut plan = self::plan(10);
        plan.adds[1] = 12;
        plan.fetch_add_done(&op(0, 5), 0);
        plan.fetch_add_done(&op(1, 7), 5);
        plan.check_counters(&[0, 12]);
        assert!(plan.failures.is_empty(), "{:?}", plan.failures);
    }

    #[test]
    fn first_difference_names_offset_and_bytes() {
        assert_eq!(first_difference(&[1, 2, 3], &[1, 2, 3]), None);
        assert_eq!(first_difference(&[1, 2, 3], &[1, 9, 3]), Some((1, 9, 2)));
        assert_eq!(first_difference(&[1, 2, 3], &[1, 2]), Some((2, 0, 3)));
        let a = payload(1, 2, 100);
        assert_eq!(a.len(), 100);
        assert_ne!(a, payload(1, 3, 100), "each operation its own bytes");
        assert_eq!(a, payload(1, 2, 100));
    }
}
