//! The NVMe phase of `falcon demo`: NVMe over Falcon after the Falcon
//! workload.
//!
//! Layer: application. An [`NvmePair`] (an `nvme-ulp` initiator and target
//! in this process, an engine each, over a loopback pair of their own with
//! the demo's seeded loss, PSP on, a RAM namespace on a storage worker)
//! completes a fixed number of commands, `queue_depth` outstanding at most
//! ([`Plan`]): writes of the configured sizes, one in four with FUA
//! (NVMe-0.9 §8.5: the Write Request carries the iCMD's FUA), each read
//! back once it completes; reads of ranges anywhere in the area writes
//! use; and every [`NEVER_WRITTEN_EVERY`] commands a read of the area no
//! command writes. Every successful read is compared byte for byte with
//! the pattern the last write left in each of its blocks, zeroes where
//! none did ([`check_read`]). No write starts on blocks a command in
//! flight covers, and no read on blocks a write in flight covers: what
//! such a read returns is undefined. A command that completes with an
//! error status (one that never completes is failed by the initiator's
//! timeout) or reads a wrong byte is a failure, by name; so is a phase
//! in which nothing completes for longer than that timeout.
//!
//! Offsets are any block, not 4 KiB-aligned, so commands are cut into
//! nCMDs off the 4 KiB boundaries too (NVMe-0.9 §6.5).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use falcon_core::random::{Random, SplitMix64};
use hdrhistogram::Histogram;
use nvme_ulp::data::HostBuffers;
use nvme_ulp::initiator::{Icmd, IcmdBuffers, IcmdCompletion, Refused};
use nvme_ulp::layout::Format;
use nvme_ulp::status::StatusCounts;
use nvme_ulp::Status;

use super::report::{psp_label, size, NvmeReport};
use crate::cmd::nvme_io::{check_read, fill, latency_histogram, Latency};
use crate::cmd::nvme_perf::{errors_by_status, FalconFigures};
use crate::democfg::NvmeWorkload;
use crate::error::Result;
use crate::nvme::{NvmePair, PairConfig, NSID};

/// Every this many commands, one reads the area no command writes.
const NEVER_WRITTEN_EVERY: u64 = 32;
/// The namespace's last eighth is never written.
const NEVER_WRITTEN_SHARE: u64 = 8;
/// One write in this many has FUA set.
const FUA_ONE_IN: u32 = 4;
/// Random offsets tried for a command before the phase waits for a
/// completion to free blocks.
const PICKS: usize = 16;
/// The phase stops after this many failures.
const MAX_FAILURES: usize = 20;
/// How much longer than the iCMD timeout the phase waits for any
/// completion: by then the initiator has failed every command in flight.
const STALL_MARGIN: Duration = Duration::from_secs(10);
/// The generation of blocks a failed write may have left in any state.
const UNKNOWN: u32 = u32::MAX;

/// Runs the NVMe phase; `quiet` drops the progress lines on stderr.
///
/// # Errors
///
/// [`AppError::Failed`](crate::error::AppError) if the pair cannot be
/// built. What goes wrong while it runs is in the report's failures.
pub(super) fn run(workload: &NvmeWorkload, quiet: bool) -> Result<(NvmeReport, Vec<String>)> {
    let config = PairConfig {
        queue_depth: workload.queue_depth,
        faults: workload.faults,
        engines: Some(workload.engines.clone()),
        seed: workload.seed,
        icmd_timeout: workload.icmd_timeout,
        ..PairConfig::default()
    };
    let mut pair = NvmePair::new(&config)?;
    let mut plan = Plan::new(workload, pair.format(), pair.blocks())?;
    let stall_limit = workload.icmd_timeout + STALL_MARGIN;
    let start = Instant::now();
    let mut last_completion = start;
    let mut last_line = start;
    while !plan.done() {
        while pair.has_room() {
            let Some(icmd) = plan.next_icmd() else {
                break;
            };
            if let Err(refused) = pair.submit(icmd) {
                plan.refused(&refused);
                break;
            }
        }
        pair.turn();
        while let Some(done) = pair.poll_completion() {
            last_completion = Instant::now();
            plan.complete(done);
        }
        let now = Instant::now();
        if now.duration_since(last_completion) > stall_limit {
            plan.fail(format!(
                "no command completed for {} s; {} of {} complete, {} outstanding",
                stall_limit.as_secs(),
                plan.counts.commands,
                plan.commands,
                pair.outstanding()
            ));
            break;
        }
        if !quiet && now.duration_since(last_line) >= Duration::from_secs(1) {
            last_line = now;
            eprintln!(
                "  {:>6.1} s  {:>9} of {} NVMe commands  {} retransmissions",
                now.duration_since(start).as_secs_f64(),
                plan.counts.commands,
                plan.commands,
                pair.stats().retransmissions
            );
        }
    }
    let elapsed = last_completion.duration_since(start);
    let stats = pair.stats();
    let falcon = FalconFigures::from_stats(&stats);
    Ok(plan.finish(&config, elapsed, falcon))
}

/// How the pair's engines run: [`NvmePair`] builds them from `config`'s
/// engines (the demo's file), connected unordered (NVMe-0.9 §7: commands
/// complete in any order), the RUE inline.
fn transport(config: &PairConfig) -> String {
    let d = config.engines.as_deref().cloned().unwrap_or_default();
    let psp = match psp_label(&d) {
        "off" => "PSP off".to_string(),
        label => format!("PSP on ({label})"),
    };
    format!("{psp}, {}, unordered", d.rue.algorithm.label())
}

/// What a command does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Write {
        fua: bool,
    },
    /// A read of the range a write completed.
    ReadBack,
    /// A read of a range in the area writes use.
    Read,
    /// A read of a range in the area no command writes.
    NeverWritten,
}

/// A command in flight.
#[derive(Debug, Clone, Copy)]
struct Command {
    kind: Kind,
    slba: u64,
    blocks: u64,
    /// A write's generation (the pattern it writes).
    generation: u32,
}

impl Command {
    fn is_write(&self) -> bool {
        matches!(self.kind, Kind::Write { .. })
    }

    fn overlaps(&self, slba: u64, blocks: u64) -> bool {
        self.slba < slba + blocks && slba < self.slba + self.blocks
    }

    /// `write (FUA) of 64 KiB at LBA 1234`, for failures.
    fn describe(&self, block_bytes: u64) -> String {
        let what = match self.kind {
            Kind::Write { fua: true } => "write (FUA)",
            Kind::Write { fua: false } => "write",
            Kind::ReadBack => "read-back",
            Kind::Read => "read",
            Kind::NeverWritten => "read (never-written area)",
        };
        let size = size(self.blocks * block_bytes);
        format!("{what} of {size} at LBA {}", self.slba)
    }
}

/// Counts of the phase so far.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    commands: u64,
    reads: u64,
    writes: u64,
    fua_writes: u64,
    read_backs: u64,
    never_written_reads: u64,
    /// Data bytes of successful reads and writes.
    bytes_read: u64,
    bytes_written: u64,
    /// Data bytes of successful reads compared with what they must hold.
    verified_bytes: u64,
    errors: u64,
    verify_failures: u64,
}

/// What to submit next, and the check of each completion (see the module
/// doc). Sans-IO: the pair is driven by [`run`].
struct Plan {
    format: Format,
    commands: u64,
    /// Command sizes, blocks.
    sizes: Vec<u64>,
    /// Blocks from 0 that writes (and the other reads) use; the rest of
    /// the namespace is never written.
    written_area: u64,
    never_written_area: u64,
    rng: SplitMix64,
    /// The generation of the last successful write of each block (0:
    /// never written; [`UNKNOWN`]: a write there failed).
    generations: Vec<u32>,
    next_generation: u32,
    in_flight: BTreeMap<u64, Command>,
    writes_in_flight: u64,
    /// Ranges written and not yet read back.
    read_backs: VecDeque<(u64, u64)>,
    issued: u64,
    next_never_written: u64,
    read_pool: Vec<HostBuffers>,
    counts: Counts,
    statuses: StatusCounts,
    histogram: Histogram<u64>,
    failures: Vec<String>,
    /// A refused command or no progress: submit nothing more.
    stopped: bool,
}

impl Plan {
    fn new(workload: &NvmeWorkload, format: Format, blocks: u64) -> Result<Plan> {
        let block = format.lba_size.bytes() as u64;
        let never_written_area = blocks / NEVER_WRITTEN_SHARE;
        Ok(Plan {
            format,
            commands: workload.commands,
            sizes: workload.sizes.iter().map(|bytes| bytes / block).collect(),
            written_area: blocks - never_written_area,
            never_written_area,
            rng: SplitMix64::new(workload.seed ^ 0x4E56_4D65_5F64_656D),
            generations: vec![0; blocks as usize],
            next_generation: 1,
            in_flight: BTreeMap::new(),
            writes_in_flight: 0,
            read_backs: VecDeque::new(),
            issued: 0,
            next_never_written: NEVER_WRITTEN_EVERY / 2,
            read_pool: Vec::new(),
            counts: Counts::default(),
            statuses: StatusCounts::default(),
            histogram: latency_histogram()?,
            failures: Vec::new(),
            stopped: false,
        })
    }

    /// Every command complete, or the phase stopped with nothing in flight
    /// worth waiting for.
    fn done(&self) -> bool {
        ((self.stopped || self.issued == self.commands) && self.in_flight.is_empty())
            || self.failures.len() >= MAX_FAILURES
    }

    fn fail(&mut self, reason: String) {
        self.failures.push(reason);
    }

    /// Commands promised and not yet issued: a read-back for each write in
    /// flight and each written range not yet read back. Writes start only
    /// with room for their read-back within the command count.
    fn owed(&self) -> u64 {
        self.writes_in_flight + self.read_backs.len() as u64
    }

    /// The next command, if one may start now.
    fn next_icmd(&mut self) -> Option<Icmd> {
        if self.stopped || self.failures.len() >= MAX_FAILURES || self.issued == self.commands {
            return None;
        }
        // What was written is read back as soon as no write covers it.
        let ready = self
            .read_backs
            .iter()
            .position(|&(slba, blocks)| !self.busy(slba, blocks, false));
        if let Some((slba, blocks)) = ready.and_then(|i| self.read_backs.remove(i)) {
            return Some(self.start(Kind::ReadBack, slba, blocks));
        }
        let free = self.commands - self.issued - self.owed();
        if free == 0 {
            return None;
        }
        let blocks = self.sizes[self.rng.below(self.sizes.len() as u32) as usize];
        if self.issued >= self.next_never_written {
            self.next_never_written += NEVER_WRITTEN_EVERY;
            // Reads only there: nothing in flight can conflict.
            let room = self.never_written_area.saturating_sub(blocks) + 1;
            let slba = self.written_area + self.rng.next_u64() % room;
            return Some(self.start(Kind::NeverWritten, slba, blocks));
        }
        let kind = if free >= 2 && self.rng.chance(1, 2) {
            Kind::Write {
                fua: self.rng.chance(1, FUA_ONE_IN),
            }
        } else {
            Kind::Read
        };
        let room = self.written_area.saturating_sub(blocks) + 1;
        for _ in 0..PICKS {
            let slba = self.rng.next_u64() % room;
            if !self.busy(slba, blocks, kind != Kind::Read) {
                return Some(self.start(kind, slba, blocks));
            }
        }
        None
    }

    /// Whether a command in flight keeps one on these blocks from
    /// starting: any for a write, a write for a read.
    fn busy(&self, slba: u64, blocks: u64, write: bool) -> bool {
        self.in_flight
            .values()
            .any(|c| (write || c.is_write()) && c.overlaps(slba, blocks))
    }

    fn start(&mut self, kind: Kind, slba: u64, blocks: u64) -> Icmd {
        let tag = self.issued;
        self.issued += 1;
        let mut command = Command {
            kind,
            slba,
            blocks,
            generation: 0,
        };
        // nlb is 0-based; a size is at most 1 MiB, 2048 blocks of 512 B.
        let nlb = u16::try_from(blocks - 1).unwrap_or(u16::MAX);
        let icmd = match kind {
            Kind::Write { fua } => {
                command.generation = self.next_generation;
                self.next_generation = match self.next_generation + 1 {
                    UNKNOWN => 1,
                    next => next,
                };
                self.writes_in_flight += 1;
                let mut buffers = HostBuffers::default();
                fill(
                    self.format,
                    slba,
                    command.generation,
                    &mut buffers,
                    blocks as usize,
                );
                let icmd = Icmd::write(tag, NSID, slba, nlb, Arc::new(buffers));
                if fua {
                    icmd.with_fua()
                } else {
                    icmd
                }
            }
            Kind::ReadBack | Kind::Read | Kind::NeverWritten => {
                let buffers = self.read_pool.pop().unwrap_or_default();
                Icmd::read(tag, NSID, slba, nlb, buffers)
            }
        };
        self.in_flight.insert(tag, command);
        icmd
    }

    /// The initiator did not take a command: a failure (the pair had
    /// room, and every command is within the namespace).
    fn refused(&mut self, refused: &Refused) {
        let block = self.format.lba_size.bytes() as u64;
        let what = match self.in_flight.remove(&refused.icmd.tag) {
            Some(command) => {
                if command.is_write() {
                    self.writes_in_flight -= 1;
                }
                command.describe(block)
            }
            None => format!("command {}", refused.icmd.tag),
        };
        self.stopped = true;
        self.fail(format!("the initiator refused the {what}: {refused}"));
    }

    /// One completion: counted, its latency recorded, a read checked.
    fn complete(&mut self, done: IcmdCompletion) {
        let Some(command) = self.in_flight.remove(&done.tag) else {
            self.fail(format!(
                "a completion names command {}, not in flight",
                done.tag
            ));
            return;
        };
        let block = self.format.lba_size.bytes() as u64;
        let range = command.slba as usize..(command.slba + command.blocks) as usize;
        self.counts.commands += 1;
        self.statuses.record(done.status);
        self.histogram
            .saturating_record(u64::try_from(done.latency.as_nanos()).unwrap_or(u64::MAX));
        let success = done.status == Status::SUCCESS;
        if !success {
            self.counts.errors += 1;
            let what = command.describe(block);
            self.fail(format!("{what}: status {}", done.status));
        }
        match (command.kind, done.buffers) {
            (Kind::Write { fua }, IcmdBuffers::Write(buffers)) => {
                self.writes_in_flight -= 1;
                self.counts.writes += 1;
                self.counts.fua_writes += u64::from(fua);
                let written = if success {
                    self.counts.bytes_written += buffers.data.len() as u64;
                    self.read_backs.push_back((command.slba, command.blocks));
                    command.generation
                } else {
                    UNKNOWN
                };
                if let Some(blocks) = self.generations.get_mut(range) {
                    blocks.fill(written);
                }
            }
            (
                kind @ (Kind::ReadBack | Kind::Read | Kind::NeverWritten),
                IcmdBuffers::Read(buffers),
            ) => {
                self.counts.reads += 1;
                match kind {
                    Kind::ReadBack => self.counts.read_backs += 1,
                    Kind::NeverWritten => self.counts.never_written_reads += 1,
                    _ => {}
                }
                if success {
                    self.counts.bytes_read += buffers.data.len() as u64;
                    self.verify(&command, &buffers);
                }
                self.read_pool.push(buffers);
            }
            (_, _) => {
                if command.is_write() {
                    self.writes_in_flight -= 1;
                }
                let what = command.describe(block);
                self.fail(format!(
                    "the {what} completed with the other direction's buffers"
                ));
            }
        }
    }

    /// Compares a successful read with what its blocks must hold.
    fn verify(&mut self, command: &Command, buffers: &HostBuffers) {
        let generations = &self.generations;
        let generation = |lba: u64| match generations.get(lba as usize) {
            Some(&UNKNOWN) | None => None,
            Some(&g) => Some(g),
        };
        let checked = (command.slba..command.slba + command.blocks)
            .filter(|&lba| generation(lba).is_some())
            .count() as u64;
        match check_read(
            self.format,
            command.slba,
            command.blocks as usize,
            generation,
            buffers,
        ) {
            Ok(()) => {
                self.counts.verified_bytes += checked * self.format.lba_size.bytes() as u64;
            }
            Err(mismatch) => {
                self.counts.verify_failures += 1;
                let what = command.describe(self.format.lba_size.bytes() as u64);
                self.fail(format!("the {what} read wrong bytes: {mismatch}"));
            }
        }
    }

    /// The report and the failures.
    fn finish(
        self,
        config: &PairConfig,
        elapsed: Duration,
        falcon: FalconFigures,
    ) -> (NvmeReport, Vec<String>) {
        let c = self.counts;
        let block = self.format.lba_size.bytes() as u64;
        let secs = elapsed.as_secs_f64().max(1e-9);
        let failed = self.failures.len() as u64;
        let failures: Vec<String> = self
            .failures
            .into_iter()
            .take(MAX_FAILURES)
            .map(|f| format!("NVMe: {f}"))
            .collect();
        let report = NvmeReport {
            ok: failed == 0 && c.commands == self.commands,
            transport: transport(config),
            commands: c.commands,
            reads: c.reads,
            writes: c.writes,
            fua_writes: c.fua_writes,
            read_backs: c.read_backs,
            never_written_reads: c.never_written_reads,
            bytes_read: c.bytes_read,
            bytes_written: c.bytes_written,
            verified_bytes: c.verified_bytes,
            queue_depth: config.queue_depth,
            sizes: self.sizes.iter().map(|blocks| blocks * block).collect(),
            lba_size_bytes: block,
            namespace_bytes: config.size,
            loss: f64::from(config.faults.loss_ppm) / 1e6,
            reorder: f64::from(config.faults.reorder_ppm) / 1e6,
            elapsed_s: secs,
            iops: c.commands as f64 / secs,
            mib_s: (c.bytes_read + c.bytes_written) as f64 / secs / f64::from(1 << 20),
            latency_us: Latency::from_histogram(&self.histogram),
            errors: c.errors,
            errors_by_status: errors_by_status(&self.statuses),
            verify_failures: c.verify_failures,
            failures: failed,
            falcon,
        };
        (report, failures)
    }
}

#[cfg(test)]
mod tests {
    use nvme_ulp::layout::{LbaSize, MetadataSize};

    use super::*;

    const FORMAT: Format = Format {
        lba_size: LbaSize::B512,
        metadata: MetadataSize::None,
    };

    fn workload(commands: u64) -> NvmeWorkload {
        NvmeWorkload {
            commands,
            queue_depth: 8,
            sizes: vec![4096, 8192, 65536],
            faults: falcon_core::testing::Faults::default(),
            engines: Box::default(),
            seed: 3,
            icmd_timeout: Duration::from_secs(1),
        }
    }

    /// The Falcon figures of a pair that sent nothing.
    fn no_falcon() -> FalconFigures {
        FalconFigures::from_stats(&crate::nvme::PairStats {
            initiator: Default::default(),
            target: Default::default(),
            retransmissions: 0,
            drops: Default::default(),
            rnr_nacks: 0,
            faults: Default::default(),
        })
    }

    /// What a target with a RAM namespace would do with `icmd`, applied to
    /// `disk`: its completion, successful.
    fn serve(disk: &mut [u8], icmd: Icmd) -> IcmdCompletion {
        let at = icmd.slba as usize * 512;
        let len = (usize::from(icmd.nlb) + 1) * 512;
        let buffers = match icmd.buffers {
            IcmdBuffers::Write(buffers) => {
                disk[at..at + len].copy_from_slice(&buffers.data);
                IcmdBuffers::Write(buffers)
            }
            IcmdBuffers::Read(mut buffers) => {
                buffers.data.clear();
                buffers.data.extend_from_slice(&disk[at..at + len]);
                IcmdBuffers::Read(buffers)
            }
        };
        IcmdCompletion {
            tag: icmd.tag,
            status: Status::SUCCESS,
            buffers,
            latency: Duration::from_micros(50),
            ncmds: 1,
        }
    }

    /// Against a faithful disk, all in flight at once as far as the plan
    /// allows and completed in reverse order: exactly the commands asked
    /// for, every write read back, a few reads of the never-written area,
    /// no failure; and no two commands in flight together where one
    /// writes blocks the other covers.
    #[test]
    fn the_plan_reads_back_every_write_and_verifies_against_a_faithful_disk() {
        let blocks = 8192;
        let mut plan = Plan::new(&workload(200), FORMAT, blocks).unwrap();
        let mut disk = vec![0u8; blocks as usize * 512];
        let mut rounds = 0;
        while !plan.done() {
            let mut batch = Vec::new();
            while batch.len() < 8 {
                let Some(icmd) = plan.next_icmd() else { break };
                batch.push(icmd);
            }
            for (i, a) in batch.iter().enumerate() {
                for b in &batch[i + 1..] {
                    let (ea, eb) = (a.slba + u64::from(a.nlb) + 1, b.slba + u64::from(b.nlb) + 1);
                    let overlap = a.slba < eb && b.slba < ea;
                    assert!(
                        !(overlap && (a.is_write() || b.is_write())),
                        "{} and {} overlap",
                        a.tag,
                        b.tag
                    );
                }
            }
            assert!(!batch.is_empty(), "nothing in flight and nothing to start");
            for icmd in batch.into_iter().rev() {
                let done = serve(&mut disk, icmd);
                plan.complete(done);
            }
            rounds += 1;
            assert!(rounds < 1000);
        }
        let (report, failures) =
            plan.finish(&PairConfig::default(), Duration::from_secs(1), no_falcon());
        assert!(failures.is_empty(), "{failures:?}");
        assert!(report.ok);
        assert_eq!(report.commands, 200);
        assert_eq!(report.reads + report.writes, 200);
        assert_eq!(report.read_backs, report.writes, "every write read back");
        assert!(report.writes > 40 && report.fua_writes > 0, "{report:?}");
        assert!(report.never_written_reads >= 200 / NEVER_WRITTEN_EVERY - 1);
        assert!(report.reads > report.read_backs + report.never_written_reads);
        assert_eq!(report.verified_bytes, report.bytes_read);
    }

    /// A read-back that returns one wrong byte, and a read of the
    /// never-written area that returns data, are failures naming the
    /// command and the byte.
    #[test]
    fn a_wrong_byte_in_a_read_fails_the_phase() {
        let blocks = 8192;
        let mut plan = Plan::new(&workload(64), FORMAT, blocks).unwrap();
        let mut disk = vec![0u8; blocks as usize * 512];
        let mut corrupted = None;
        let mut never_written = None;
        while !plan.done() {
            let Some(icmd) = plan.next_icmd() else { break };
            let tag = icmd.tag;
            let command = plan.in_flight[&tag];
            let mut done = serve(&mut disk, icmd);
            if let IcmdBuffers::Read(buffers) = &mut done.buffers {
                match command.kind {
                    Kind::ReadBack if corrupted.is_none() => {
                        buffers.data[700] ^= 0x10;
                        corrupted = Some(command.slba + 1);
                    }
                    Kind::NeverWritten if never_written.is_none() => {
                        buffers.data[3] = 0xFF;
                        never_written = Some(command.slba);
                    }
                    _ => {}
                }
            }
            plan.complete(done);
        }
        let (corrupted, never_written) = (corrupted.unwrap(), never_written.unwrap());
        let (report, failures) =
            plan.finish(&PairConfig::default(), Duration::from_secs(1), no_falcon());
        assert!(!report.ok);
        assert_eq!(report.verify_failures, 2, "{failures:?}");
        assert!(
            failures
                .iter()
                .any(|f| f.starts_with("NVMe: the read-back of ")
                    && f.contains(&format!("LBA {corrupted} data byte 188 is "))),
            "{failures:?}"
        );
        assert!(
            failures.iter().any(|f| f.starts_with("NVMe: the read (never-written area) of ")
                && f.contains(&format!("LBA {never_written} data byte 3 is 0xff, 0x00 expected (never written: zeroes)"))),
            "{failures:?}"
        );
    }

    /// An error status fails the phase, and the blocks of a failed write
    /// are no longer checked (their content is unknown).
    #[test]
    fn an_error_status_is_a_failure_by_name() {
        let mut plan = Plan::new(&workload(16), FORMAT, 8192).unwrap();
        let mut disk = vec![0u8; 8192 * 512];
        loop {
            let icmd = plan.next_icmd().unwrap();
            let write = icmd.is_write();
            let mut done = serve(&mut disk, icmd);
            if write {
                done.status = Status::ABORTED_BY_HOST;
                let command = plan.in_flight[&done.tag];
                plan.complete(done);
                let range = command.slba as usize..(command.slba + command.blocks) as usize;
                assert!(plan.generations[range].iter().all(|&g| g == UNKNOWN));
                break;
            }
            plan.complete(done);
        }
        assert_eq!(plan.failures.len(), 1);
        assert!(
            plan.failures[0].starts_with("write")
                && plan.failures[0].contains("status command aborted by host"),
            "{:?}",
            plan.failures
        );
    }
}
