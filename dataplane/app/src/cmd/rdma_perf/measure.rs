//! The measurements of `falcon rdma-perf` on the in-process pair.
//!
//! Layer: application. Each QP has one buffer per side of
//! [`Plan::buffer_len`] bytes, registered with every right; the client's
//! (side 0) is filled with a pattern of `--seed`, the server's with another
//! (READ's source) or zeroes (WRITE's and SEND's target). Bandwidth: each
//! QP keeps `-t` signalled work requests outstanding until `-n` have
//! completed (or `-D` seconds have passed); BW = bytes × completions /
//! (last completion − first post), perftest's definition (ulp.md §4.1);
//! the server of a SEND test keeps `-r` receives posted per QP. Latency
//! (ulp.md §4.1): write is a ping-pong of WRITEs, each side polling the
//! last byte of its buffer for the iteration's tag; send a ping-pong of
//! SENDs; read and atomic one request at a time; samples sorted, the 2
//! largest dropped, reported RTT/2 for write and send and the full RTT
//! for read and atomic.

use std::time::{Duration, Instant};

use rdma_ulp::verbs::{
    Access, MemoryRegion, QpType, RecvWr, Region, SendWr, Sge, UdDest, WcOpcode, WorkCompletion,
    WrOp,
};
use serde::Serialize;

use super::{test_name, Endpoint, FalconFigures, Plan, Report, Verb};
use crate::error::{AppError, Result};
use crate::rdma::{Node, PairConfig, RdmaPair, UD_QKEY};

/// perftest's `LAT_MEASURE_TAIL`: the largest samples dropped.
const LAT_MEASURE_TAIL: usize = 2;

/// Latency samples kept for the percentiles (32 MiB of them); a longer
/// `-D` run counts the rest into `t_avg` and `tps average` only.
const MAX_SAMPLES: usize = 1 << 22;

/// How long a size may go without a completion before the run fails.
const STALL_LIMIT: Duration = Duration::from_secs(30);

/// One row of a bandwidth test.
#[derive(Debug, Clone, Serialize)]
pub struct BwRow {
    pub bytes: u32,
    /// Completed work requests, all QPs.
    pub iterations: u64,
    pub bw_peak_mib_s: f64,
    pub bw_average_mib_s: f64,
    pub bw_peak_gbps: f64,
    pub bw_average_gbps: f64,
    pub msg_rate_mpps: f64,
    pub seconds: f64,
    /// `--verify`: whether every byte (or the counter) checked out.
    pub verified: Option<bool>,
}

/// One row of a latency test (µs).
#[derive(Debug, Clone, Serialize)]
pub struct LatRow {
    pub bytes: u32,
    pub iterations: u64,
    pub t_min_us: f64,
    pub t_max_us: f64,
    /// The median.
    pub t_typical_us: f64,
    pub t_avg_us: f64,
    pub t_stdev_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    /// Round trips a second.
    pub tps_average: f64,
    pub verified: Option<bool>,
}

/// Both sides' buffers, per QP.
struct Buffers {
    regions: [Vec<Region>; 2],
    mrs: [Vec<MemoryRegion>; 2],
}

/// `len` bytes of a pattern named by `seed` (xorshift).
pub(crate) fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

fn failed(what: &str, e: &dyn std::fmt::Display) -> AppError {
    AppError::Failed(format!("{what}: {e}"))
}

/// The state of a run: the pair, the buffers, what went wrong.
struct Run<'a> {
    plan: &'a Plan,
    pair: RdmaPair,
    buffers: Buffers,
    errors: Vec<String>,
    /// Receive completions on the server, per QP, since the size began.
    received: Vec<u64>,
    /// Receive completions on the client (send_lat), per QP.
    client_received: Vec<u64>,
    /// Fetch-and-adds completed successfully, per QP, warm-up included.
    atomics: Vec<u64>,
}

/// The pair of `plan`, its buffers registered, the receives of a SEND
/// test posted; and both sides' address lines.
fn setup(plan: &Plan) -> Result<(Run<'_>, Vec<Endpoint>, Vec<Endpoint>)> {
    let depth = plan.tx_depth.max(plan.rx_depth).max(16) * 2;
    let config = PairConfig {
        qps: plan.qps,
        qp_type: plan.qp_type,
        ordering: plan.ordering,
        mtu: plan.mtu,
        cap: rdma_ulp::verbs::QpCap {
            max_send_wr: depth,
            max_recv_wr: depth,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        cq_depth: (depth * plan.qps as u32 * 2).max(1024),
        faults: plan.faults,
        seed: plan.seed,
        ..PairConfig::default()
    };
    let mut pair = RdmaPair::new(&config)?;
    let len = plan.buffer_len() + plan.source_offset();
    let access =
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    let mut buffers = Buffers {
        regions: [Vec::new(), Vec::new()],
        mrs: [Vec::new(), Vec::new()],
    };
    for side in 0..2 {
        for q in 0..plan.qps {
            let region = match (side, plan.verb) {
                (0, _) => Region::from_vec(pattern(plan.seed ^ q as u64, len)),
                (_, Verb::Read) => Region::from_vec(pattern(!plan.seed ^ q as u64, len)),
                (_, _) => Region::new(len),
            };
            let node = &mut pair.nodes[side];
            let mr = node
                .device
                .reg_mr(node.pd, &region, access)
                .map_err(|e| failed("register", &e))?;
            buffers.regions[side].push(region);
            buffers.mrs[side].push(mr);
        }
    }
    let endpoints = |side: usize, pair: &RdmaPair, buffers: &Buffers| -> Vec<Endpoint> {
        (0..plan.qps)
            .map(|q| Endpoint {
                qpn: pair.nodes[side].qps[q].value(),
                psn: 0,
                rkey: buffers.mrs[side][q].rkey().0,
                vaddr: buffers.mrs[side][q].addr(),
                cid: pair.nodes[side].cids[q].value(),
            })
            .collect()
    };
    let local = endpoints(0, &pair, &buffers);
    let remote = endpoints(1, &pair, &buffers);
    let mut run = Run {
        plan,
        pair,
        buffers,
        errors: Vec::new(),
        received: vec![0; plan.qps],
        client_received: vec![0; plan.qps],
        atomics: vec![0; plan.qps],
    };
    if plan.verb == Verb::Send {
        // The server's receives (and, for send_lat, the client's).
        for q in 0..plan.qps {
            for _ in 0..plan.rx_depth {
                run.post_recv(1, q)?;
                if plan.latency {
                    run.post_recv(0, q)?;
                }
            }
        }
    }
    Ok((run, local, remote))
}

/// Runs the plan on a fresh in-process pair.
///
/// # Errors
///
/// [`AppError::Failed`] if the pair or a verbs object cannot be built.
pub fn in_process(plan: &Plan) -> Result<Report> {
    let (mut run, local, remote) = setup(plan)?;
    let mut bw = Vec::new();
    let mut lat = Vec::new();
    for &size in &plan.sizes {
        if plan.latency {
            lat.push(run.latency(size)?);
        } else {
            bw.push(run.bandwidth(size)?);
        }
        if !run.errors.is_empty() {
            break;
        }
    }
    let [sa, sb] = run.pair.device_stats();
    let faults = run.pair.faults();
    let falcon = FalconFigures {
        retransmissions: run.pair.retransmissions(),
        frames_lost: faults.lost,
        frames_reordered: faults.reordered,
        rnr_nacks: sa.rnr_nacks + sb.rnr_nacks,
    };
    Ok(Report {
        test: test_name(plan.test),
        title: plan.title(),
        transport: format!(
            "Falcon in-process loopback ({} connection per QP, PSP, Swift)",
            match plan.ordering.falcon() {
                falcon_core::api::OrderingMode::Ordered => "an ordered",
                falcon_core::api::OrderingMode::Unordered => "an unordered",
            }
        ),
        qps: plan.qps,
        connection_type: match plan.qp_type {
            QpType::Rc => "RC",
            QpType::Ud => "UD",
        },
        ordering: match plan.ordering {
            rdma_ulp::verbs::QpOrdering::Strong => "strong",
            rdma_ulp::verbs::QpOrdering::Weak => "weak",
            rdma_ulp::verbs::QpOrdering::Unordered => "unordered",
        },
        tx_depth: plan.tx_depth,
        mtu_bytes: plan.mtu.bytes(),
        loss_percent: plan.loss_percent,
        seed: plan.seed,
        verify: plan.verify,
        report_gbits: false,
        local,
        remote,
        ok: run.errors.is_empty(),
        errors: run.errors,
        bw,
        lat,
        falcon,
    })
}

impl Run<'_> {
    /// Posts one receive of the whole buffer on `side`'s QP `q`.
    fn post_recv(&mut self, side: usize, q: usize) -> Result<()> {
        let mr = &self.buffers.mrs[side][q];
        let sge = Sge {
            addr: mr.addr(),
            length: mr.len() as u32,
            lkey: mr.lkey(),
        };
        let node = &mut self.pair.nodes[side];
        node.device
            .post_recv(node.qps[q], RecvWr::new(q as u64, sge))
            .map_err(|e| failed("post receive", &e))
    }

    /// The client's (side 0) or the server's work request of `size` bytes
    /// on QP `q`, at offset `offset` of its buffer (the peer's at the
    /// same offset).
    fn work_request(&self, side: usize, q: usize, size: u32, wr_id: u64) -> SendWr {
        let mine = &self.buffers.mrs[side][q];
        let peer = &self.buffers.mrs[1 - side][q];
        let (length, op) = match self.plan.verb {
            Verb::Write => (
                size,
                WrOp::Write {
                    remote_addr: peer.addr(),
                    rkey: peer.rkey(),
                },
            ),
            Verb::Read => (
                size,
                WrOp::Read {
                    remote_addr: peer.addr(),
                    rkey: peer.rkey(),
                },
            ),
            Verb::Send => (size, WrOp::Send),
            Verb::Atomic => (
                8,
                WrOp::FetchAdd {
                    remote_addr: peer.addr(),
                    rkey: peer.rkey(),
                    add: 1,
                },
            ),
        };
        let sge = Sge {
            addr: mine.addr_at(self.plan.source_offset() as u64),
            length,
            lkey: mine.lkey(),
        };
        let wr = SendWr::new(wr_id, op, sge);
        let node = &self.pair.nodes[side];
        match self.plan.qp_type {
            QpType::Ud => wr.to(UdDest {
                ah: node.ahs[q],
                remote_qpn: self.pair.nodes[1 - side].qps[q],
                remote_qkey: UD_QKEY,
            }),
            QpType::Rc => wr,
        }
    }

    fn post(&mut self, side: usize, q: usize, size: u32, wr_id: u64) -> Result<()> {
        let wr = self.work_request(side, q, size, wr_id);
        let node = &mut self.pair.nodes[side];
        node.device
            .post_send(node.qps[q], wr)
            .map_err(|e| failed("post send", &e))
    }

    /// Turns the pair once and takes `side`'s completions: send
    /// completions are returned, receives counted and reposted, errors
    /// named.
    fn turn(&mut self, sends: &mut [Vec<WorkCompletion>; 2]) -> Result<()> {
        self.pair.turn();
        for (side, sends) in sends.iter_mut().enumerate() {
            while let Some(wc) = {
                let node: &mut Node = &mut self.pair.nodes[side];
                node.device.poll_cq_one(node.cq)
            } {
                if !wc.status.is_ok() {
                    self.errors.push(format!(
                        "{} side: work request {} ({:?}) on QP {:#x} completed with {} (vendor error {})",
                        if side == 0 { "client" } else { "server" },
                        wc.wr_id,
                        wc.opcode,
                        wc.qp_num,
                        wc.status,
                        wc.vendor_err
                    ));
                    continue;
                }
                if matches!(wc.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm) {
                    let q = wc.wr_id as usize;
                    if side == 1 {
                        self.received[q] += 1;
                    } else {
                        self.client_received[q] += 1;
                    }
                    self.post_recv(side, q)?;
                } else {
                    if wc.opcode == WcOpcode::FetchAdd {
                        let node = &self.pair.nodes[side];
                        if let Some(q) = node.qps.iter().position(|qp| qp.value() == wc.qp_num) {
                            self.atomics[q] += 1;
                        }
                    }
                    sends.push(wc);
                }
            }
        }
        Ok(())
    }

    /// One size of a bandwidth test, after a warm-up of `-t` messages
    /// per QP that is not counted (the first messages of a connection
    /// meet Swift's initial window and the caches cold).
    fn bandwidth(&mut self, size: u32) -> Result<BwRow> {
        let warm_up = u64::from(self.plan.tx_depth).min(self.plan.iters.unwrap_or(u64::MAX));
        self.bandwidth_pass(size, Some(warm_up), None, false)?;
        self.bandwidth_pass(
            size,
            self.plan.iters,
            self.plan.duration,
            self.plan.progress,
        )
    }

    fn bandwidth_pass(
        &mut self,
        size: u32,
        iters: Option<u64>,
        duration: Option<Duration>,
        progress: bool,
    ) -> Result<BwRow> {
        let plan = self.plan;
        let qps = plan.qps;
        let limit = iters.unwrap_or(u64::MAX);
        let mut posted = vec![0u64; qps];
        let mut completed = vec![0u64; qps];
        self.received.iter_mut().for_each(|r| *r = 0);
        let mut tposted: Vec<u64> = Vec::new();
        let mut tcompleted: Vec<u64> = Vec::new();
        let keep_times = iters.is_some();
        let start = Instant::now();
        let stop_at = duration.map(|d| start + d);
        let mut last_progress = Instant::now();
        let mut last_done = 0u64;
        let mut last_completion = Instant::now();
        let mut end = start;
        let mut sends = [Vec::new(), Vec::new()];
        let mut per_second: Vec<f64> = Vec::new();
        loop {
            let now = Instant::now();
            let posting = stop_at.map_or(true, |at| now < at);
            for q in 0..qps {
                while posting
                    && posted[q] < limit
                    && posted[q] - completed[q] < u64::from(plan.tx_depth)
                {
                    self.post(0, q, size, q as u64)?;
                    posted[q] += 1;
                    if keep_times {
                        tposted.push(start.elapsed().as_nanos() as u64);
                    }
                }
            }
            self.turn(&mut sends)?;
            sends[1].clear();
            for wc in sends[0].drain(..) {
                completed[wc.wr_id as usize] += 1;
                end = Instant::now();
                last_completion = end;
                if keep_times {
                    tcompleted.push((end - start).as_nanos() as u64);
                }
            }
            if !self.errors.is_empty() {
                break;
            }
            let done: u64 = completed.iter().sum();
            if progress && last_progress.elapsed() >= Duration::from_secs(1) {
                let secs = last_progress.elapsed().as_secs_f64();
                let mib = (done - last_done) as f64 * f64::from(size) / secs / f64::from(1 << 20);
                per_second.push(mib);
                eprintln!(
                    "[{:>3} s] {size} B: {mib:.2} MiB/sec, {:.6} Mpps",
                    start.elapsed().as_secs(),
                    (done - last_done) as f64 / secs / 1e6
                );
                last_progress = Instant::now();
                last_done = done;
            }
            let all_posted = !posting || posted.iter().all(|&p| p >= limit);
            let sends_done = completed.iter().zip(&posted).all(|(c, p)| c == p);
            let received = plan.verb != Verb::Send
                || self.received.iter().zip(&completed).all(|(r, c)| r >= c)
                // UD datagrams without a receive are dropped (RDMA-0.9
                // §6.6.3): stop waiting for them after a second.
                || (plan.qp_type == QpType::Ud
                    && last_completion.elapsed() > Duration::from_secs(1));
            if all_posted && sends_done && received {
                break;
            }
            if last_completion.elapsed() > STALL_LIMIT {
                self.errors.push(format!(
                    "{size} B: no completion for {} s ({} of {} posted work requests completed)",
                    STALL_LIMIT.as_secs(),
                    completed.iter().sum::<u64>(),
                    posted.iter().sum::<u64>()
                ));
                break;
            }
        }
        let total: u64 = completed.iter().sum();
        if plan.verb == Verb::Send {
            let got: u64 = self.received.iter().sum();
            if got < total {
                self.errors.push(format!(
                    "{size} B: {} of {total} SENDs were not received",
                    total - got
                ));
            }
        }
        let seconds = (end - start).as_secs_f64().max(1e-9);
        let bytes = total as f64 * f64::from(size);
        let average = bytes / seconds;
        let peak = if keep_times {
            peak_rate(&tposted, &tcompleted) * f64::from(size)
        } else {
            per_second
                .iter()
                .copied()
                .fold(average / f64::from(1 << 20), f64::max)
                * f64::from(1 << 20)
        }
        .max(average);
        let verified = plan.verify.then(|| self.verify(size));
        Ok(BwRow {
            bytes: size,
            iterations: total,
            bw_peak_mib_s: peak / f64::from(1 << 20),
            bw_average_mib_s: average / f64::from(1 << 20),
            bw_peak_gbps: peak / 1.25e8,
            bw_average_gbps: average / 1.25e8,
            msg_rate_mpps: total as f64 / seconds / 1e6,
            seconds,
            verified,
        })
    }

    /// Checks the target buffers after a size; records a failure.
    fn verify(&mut self, size: u32) -> bool {
        let size = size as usize;
        let mut ok = true;
        for q in 0..self.plan.qps {
            let (source, target, at) = match self.plan.verb {
                Verb::Write => (&self.buffers.regions[0][q], &self.buffers.regions[1][q], 0),
                Verb::Read => (&self.buffers.regions[1][q], &self.buffers.regions[0][q], 0),
                Verb::Send => {
                    let at = if self.plan.qp_type == QpType::Ud {
                        rdma_ulp::UD_GRH_LEN
                    } else {
                        0
                    };
                    (&self.buffers.regions[0][q], &self.buffers.regions[1][q], at)
                }
                Verb::Atomic => {
                    // The server's counter, little-endian as the device
                    // keeps it, counts every fetch-and-add of this QP.
                    let counter = self.buffers.regions[1][q].with(|b| {
                        let mut word = [0u8; 8];
                        word.copy_from_slice(&b[..8]);
                        u64::from_le_bytes(word)
                    });
                    let expected = self.atomics[q];
                    if counter != expected {
                        ok = false;
                        self.errors.push(format!(
                            "verify: QP {q}: the counter is {counter}, {expected} fetch-and-adds completed"
                        ));
                    }
                    continue;
                }
            };
            let want = source.with(|b| b[..size].to_vec());
            let got = target.with(|b| b[at..at + size].to_vec());
            if let Some(i) = want.iter().zip(&got).position(|(a, b)| a != b) {
                ok = false;
                self.errors.push(format!(
                    "verify: QP {q}, {size} B: byte {i} is {:#04x}, expected {:#04x}",
                    got[i], want[i]
                ));
            }
        }
        ok
    }

    fn latency(&mut self, size: u32) -> Result<LatRow> {
        let plan = self.plan;
        let limit = plan.iters.unwrap_or(u64::MAX);
        let mut samples: Vec<u64> = Vec::new();
        let mut sends = [Vec::new(), Vec::new()];
        let start = Instant::now();
        let stop_at = plan.duration.map(|d| start + d);
        let mut last_progress = Instant::now();
        let mut last_count = 0u64;
        self.client_received[0] = 0;
        self.received[0] = 0;
        let mut iteration = 0u64;
        let mut total_ns = 0u128;
        while iteration < limit && stop_at.map_or(true, |at| Instant::now() < at) {
            // The tag of this round trip: never 0 (a fresh buffer).
            let tag = (iteration % 255 + 1) as u8;
            let source = plan.source_offset();
            let last = size as usize - 1;
            if plan.verb == Verb::Write {
                self.buffers.regions[0][0].with_mut(|b| b[source + last] = tag);
            }
            let t0 = Instant::now();
            self.post(0, 0, size, iteration)?;
            let mut replied = false;
            loop {
                self.turn(&mut sends)?;
                if !self.errors.is_empty() {
                    break;
                }
                let done = match plan.verb {
                    Verb::Read | Verb::Atomic => !sends[0].is_empty(),
                    Verb::Write => {
                        // The server answers once the tag lands in its
                        // buffer; the client is done when the answer's
                        // lands in its own.
                        if !replied && self.buffers.regions[1][0].with(|b| b[last]) == tag {
                            self.buffers.regions[1][0].with_mut(|b| b[source + last] = tag);
                            self.post(1, 0, size, iteration)?;
                            replied = true;
                        }
                        replied && self.buffers.regions[0][0].with(|b| b[last]) == tag
                    }
                    Verb::Send => {
                        if !replied && self.received[0] > iteration {
                            self.post(1, 0, size, iteration)?;
                            replied = true;
                        }
                        self.client_received[0] > iteration
                    }
                };
                sends[0].clear();
                sends[1].clear();
                if done {
                    break;
                }
                if t0.elapsed() > STALL_LIMIT {
                    self.errors.push(format!(
                        "{size} B: round trip {iteration} not done after {} s",
                        STALL_LIMIT.as_secs()
                    ));
                    break;
                }
            }
            if !self.errors.is_empty() {
                break;
            }
            let sample = t0.elapsed().as_nanos() as u64;
            total_ns += u128::from(sample);
            if samples.len() < MAX_SAMPLES {
                samples.push(sample);
            }
            iteration += 1;
            if plan.progress && last_progress.elapsed() >= Duration::from_secs(1) {
                let secs = last_progress.elapsed().as_secs_f64();
                eprintln!(
                    "[{:>3} s] {size} B: {:.0} round trips/s",
                    start.elapsed().as_secs(),
                    (iteration - last_count) as f64 / secs
                );
                last_progress = Instant::now();
                last_count = iteration;
            }
        }
        // Let the last replies' completions come in before the next size.
        let settle = Instant::now();
        while settle.elapsed() < Duration::from_millis(20) {
            self.turn(&mut sends)?;
            sends[0].clear();
            sends[1].clear();
        }
        let elapsed = start.elapsed().as_secs_f64().max(1e-9);
        let verified = plan.verify.then(|| self.verify_latency(size));
        let mut row = lat_row(size, &samples, plan.verb.rtt_factor());
        if iteration > samples.len() as u64 {
            row.iterations = iteration;
            row.t_avg_us = total_ns as f64 / iteration as f64 / 1e3 / plan.verb.rtt_factor();
        }
        row.tps_average = iteration as f64 / elapsed;
        row.verified = verified;
        Ok(row)
    }

    fn verify_latency(&mut self, size: u32) -> bool {
        match self.plan.verb {
            Verb::Atomic | Verb::Read => self.verify(size),
            Verb::Write | Verb::Send => {
                // Each side's target holds the other's data (send_lat:
                // each side receives into the bytes it sends from, so the
                // sides end with the same bytes).
                let size = size as usize;
                let source = self.plan.source_offset();
                let mut ok = true;
                for (from, to) in [(0, 1), (1, 0)] {
                    let want =
                        self.buffers.regions[from][0].with(|b| b[source..source + size].to_vec());
                    let got = self.buffers.regions[to][0].with(|b| b[..size].to_vec());
                    if let Some(i) = want.iter().zip(&got).position(|(a, b)| a != b) {
                        ok = false;
                        self.errors.push(format!(
                            "verify: {size} B: byte {i} differs between the sides' buffers"
                        ));
                        break;
                    }
                }
                ok
            }
        }
    }
}

/// perftest's peak: the fastest per-message time of any run of
/// consecutive messages, (tcompleted\[j\] − tposted\[i\]) / (j − i + 1),
/// as messages a second. Past 2,000 messages `i` steps so that 2,000
/// starts are tried (perftest's own run time grows with the square).
pub(crate) fn peak_rate(tposted: &[u64], tcompleted: &[u64]) -> f64 {
    let n = tposted.len().min(tcompleted.len());
    if n == 0 {
        return 0.0;
    }
    let step = n.div_ceil(2000).max(1);
    let mut best = f64::INFINITY;
    for i in (0..n).step_by(step) {
        for (k, &done) in tcompleted[i..n].iter().enumerate() {
            let t = done.saturating_sub(tposted[i]) as f64 / (k + 1) as f64;
            if t > 0.0 && t < best {
                best = t;
            }
        }
    }
    if best.is_finite() {
        1e9 / best
    } else {
        0.0
    }
}

/// The latency row of `samples` (ns): sorted, the top
/// [`LAT_MEASURE_TAIL`] dropped, divided by `rtt_factor` (ulp.md §4.1).
pub(crate) fn lat_row(size: u32, samples: &[u64], rtt_factor: f64) -> LatRow {
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let keep = sorted.len().saturating_sub(LAT_MEASURE_TAIL).max(1);
    sorted.truncate(keep.min(sorted.len()));
    let us: Vec<f64> = sorted
        .iter()
        .map(|&ns| ns as f64 / 1e3 / rtt_factor)
        .collect();
    if us.is_empty() {
        return LatRow {
            bytes: size,
            iterations: 0,
            t_min_us: 0.0,
            t_max_us: 0.0,
            t_typical_us: 0.0,
            t_avg_us: 0.0,
            t_stdev_us: 0.0,
            p99_us: 0.0,
            p999_us: 0.0,
            tps_average: 0.0,
            verified: None,
        };
    }
    let n = us.len();
    let avg = us.iter().sum::<f64>() / n as f64;
    let var = us.iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / n as f64;
    let at = |p: f64| us[((n as f64 * p).ceil() as usize).clamp(1, n) - 1];
    LatRow {
        bytes: size,
        iterations: samples.len() as u64,
        t_min_us: us[0],
        t_max_us: us[n - 1],
        t_typical_us: us[n / 2],
        t_avg_us: avg,
        t_stdev_us: var.sqrt(),
        p99_us: at(0.99),
        p999_us: at(0.999),
        tps_average: 0.0,
        verified: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 2 largest samples are dropped, the median is t_typical, and
    /// write/send latency halves the round trip.
    #[test]
    fn latency_row_drops_the_tail_and_halves_ping_pong() {
        let mut samples: Vec<u64> = (1..=100).map(|i| i * 1000).collect();
        samples.push(1_000_000);
        samples.push(2_000_000);
        let row = lat_row(2, &samples, 2.0);
        assert_eq!(row.iterations, 102);
        assert_eq!(row.t_max_us, 50.0);
        assert_eq!(row.t_min_us, 0.5);
        assert_eq!(row.t_typical_us, 25.5);
        assert!((row.t_avg_us - 25.25).abs() < 1e-9);
        assert_eq!(row.p99_us, 49.5);
        let full = lat_row(2, &samples, 1.0);
        assert_eq!(full.t_max_us, 100.0);
    }

    /// One message posted at 0 and completed at 10 µs, then 9 more each
    /// 1 µs apart: the best run is all ten, 19 µs / 10 = 1.9 µs each.
    fn plan(args: &[&str]) -> Plan {
        use clap::Parser;
        let mut all = vec!["falcon", "rdma-perf"];
        all.extend_from_slice(args);
        match crate::cli::Cli::try_parse_from(all)
            .expect("parsed")
            .command
        {
            crate::cli::Command::RdmaPerf(args) => Plan::new(&args).expect("plan"),
            _ => unreachable!("rdma-perf parses as rdma-perf"),
        }
    }

    /// --verify passes on what the run placed and fails, naming the byte,
    /// once a byte of the target differs.
    #[test]
    fn verify_catches_a_wrong_byte() {
        for test in ["write_bw", "read_bw", "send_bw"] {
            let plan = plan(&[test, "-n", "20", "-s", "5000", "--verify"]);
            let (mut run, _, _) = setup(&plan).expect("setup");
            let row = run.bandwidth(5000).expect("ran");
            assert_eq!(row.verified, Some(true), "{test}: {:?}", run.errors);
            let target = if test == "read_bw" { 0 } else { 1 };
            run.buffers.regions[target][0].with_mut(|b| b[4999] ^= 1);
            assert!(!run.verify(5000), "{test}");
            assert!(run.errors[0].contains("byte 4999"), "{:?}", run.errors);
        }
    }

    /// The atomic counter equals the fetch-and-adds completed, exactly:
    /// one more or one fewer fails.
    #[test]
    fn verify_counts_fetch_and_adds() {
        let plan = plan(&["atomic_bw", "-n", "30", "-q", "2", "--verify"]);
        let (mut run, _, _) = setup(&plan).expect("setup");
        let row = run.bandwidth(8).expect("ran");
        assert_eq!(row.verified, Some(true), "{:?}", run.errors);
        // The warm-up's 30 and the run's 30 per QP.
        assert_eq!(run.atomics, vec![60, 60]);
        run.buffers.regions[1][1].with_mut(|b| b[0] = b[0].wrapping_add(1));
        assert!(!run.verify(8));
        assert!(run.errors[0].contains("QP 1"), "{:?}", run.errors);
    }

    #[test]
    fn peak_is_the_fastest_run_of_messages() {
        let posted: Vec<u64> = vec![0; 10];
        let completed: Vec<u64> = (0..10).map(|i| 10_000 + i * 1000).collect();
        let rate = peak_rate(&posted, &completed);
        assert!((rate - 1e9 / 1900.0).abs() < 1.0, "{rate}");
    }
}
