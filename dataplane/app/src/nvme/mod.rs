//! An NVMe-over-Falcon initiator and target in one process: what
//! `falcon nvme-perf` and `falcon nbd-gateway --backend falcon` run.
//!
//! Layer: application. Two engines built from the demo's embedded default
//! (`democfg`: PSP on, Swift in the inline RUE), connected unordered
//! (NVMe-0.9 §7, ulp.md §3.1: NVMe completes commands in any order), over
//! the in-process loopback with optional seeded loss and reordering
//! ([`FaultInjector`]); each engine on an [`Lcore`] timed by the real clock
//! ([`SystemClock`]); the target's namespace in RAM, its I/O run inline on
//! the target's lcore (a RAM copy never blocks, and a worker thread would
//! add two hand-offs to each command) unless [`PairConfig::storage`] asks
//! for a worker thread. One thread turns both loops ([`NvmePair::turn`]),
//! as `falcon demo` does; it owns the pair: commands submit iCMDs and poll
//! completions between turns.
//!
//! [`NvmeDevice`] is what a command needs of an initiator, whichever the
//! target: the pair, or [`remote::RemoteInitiator`] (a target in another
//! process, `falcon nvme-target`, over the kernel UDP port).

pub mod remote;

use std::time::Duration;

use falcon_core::api::OrderingMode;
use falcon_core::drop::DropCounters;
use falcon_core::engine::connect;
use falcon_core::lcore::{Lcore, SystemClock};
use falcon_core::testing::{
    faulty_lcore_pair, FaultInjector, FaultStats, Faults, LoopbackConfig, LoopbackPort,
};
use nvme_ulp::data::NvmeData;
use nvme_ulp::initiator::{
    Icmd, IcmdCompletion, Initiator, InitiatorConfig, InitiatorStats, NamespaceSpec, PiPolicy,
    RefuseReason, Refused,
};
use nvme_ulp::layout::{Format, LbaSize, MetadataSize};
use nvme_ulp::lba::{self, LbaRow, TranslationTables};
use nvme_ulp::namespace::{Execution, Namespace, NamespaceConfig, Protection, WorkerSpec};
use nvme_ulp::target::{Target, TargetConfig, TargetStats};

use crate::democfg::build::setup;
use crate::democfg::schema::{DemoConfig, Ordering, RuePlacement};
use crate::democfg::Origin;
use crate::error::{AppError, Result};

/// The initiator namespace the pair exports.
pub const NSID: u32 = 1;

/// Bytes an LBA table row covers (its chunk: chunk shift 0 is 1 GiB,
/// NVMe-0.9 §6.6.1).
const CHUNK_BYTES: u64 = 1 << 30;

type Side = Lcore<FaultInjector<LoopbackPort>, SystemClock, NvmeData>;

/// What an [`NvmePair`] is built with.
#[derive(Debug, Clone)]
pub struct PairConfig {
    pub format: Format,
    /// The namespace's size in bytes (a whole number of blocks).
    pub size: u64,
    /// iCMDs outstanding at most.
    pub queue_depth: usize,
    /// The loopback's seeded faults, in both directions.
    pub faults: Faults,
    /// The configuration the engines are built from (`None`: the demo's
    /// embedded default, PSP on, Swift inline); the connection is made
    /// unordered whatever it says (NVMe-0.9 §7, ulp.md §3.1), and the RUE
    /// inline.
    pub engines: Option<Box<DemoConfig>>,
    /// The loopback's one-way delay (2 µs by default, a short link).
    pub one_way_delay: Duration,
    pub seed: u64,
    pub icmd_timeout: Duration,
    /// Where the target runs the RAM namespace's I/O.
    pub storage: Execution,
}

impl Default for PairConfig {
    fn default() -> PairConfig {
        PairConfig {
            format: Format {
                lba_size: LbaSize::B512,
                metadata: MetadataSize::None,
            },
            size: 64 << 20,
            queue_depth: 128,
            faults: Faults::default(),
            engines: None,
            one_way_delay: LoopbackConfig::default().one_way_delay,
            seed: 1,
            icmd_timeout: Duration::from_secs(30),
            storage: Execution::Inline,
        }
    }
}

/// Both sides' counters.
#[derive(Debug, Clone)]
pub struct PairStats {
    pub initiator: InitiatorStats,
    pub target: TargetStats,
    /// Falcon retransmissions, both engines.
    pub retransmissions: u64,
    /// Frames dropped by the engines, by reason, both engines.
    pub drops: DropCounters,
    /// Requests the target NACKed receiver-not-ready (no tCMD slot, no
    /// buffer, worker busy, behind parked requests).
    pub rnr_nacks: u64,
    /// What the loopback's fault injectors did, both directions.
    pub faults: FaultStats,
}

/// An NVMe-over-Falcon initiator as a command drives it: the virtual NVMe
/// device of NVMe-0.9 §6.1, one namespace of it. The caller owns it and
/// turns it; commands are submitted and completions polled between turns.
pub trait NvmeDevice {
    /// Takes a command; its nCMDs go out on the next turn.
    ///
    /// # Errors
    ///
    /// The refusal, with the command handed back.
    fn submit(&mut self, icmd: Icmd) -> std::result::Result<(), SubmitError>;
    /// Takes a Flush of the namespace (our vendor Command Request, where
    /// the target takes it): once it completes successfully, every write
    /// that completed before it was taken is durable. It completes
    /// through [`poll_completion`](Self::poll_completion) with `tag`.
    ///
    /// # Errors
    ///
    /// The initiator's refusal (the target does not take flushes, too many
    /// outstanding), or the connection is down.
    fn flush(&mut self, tag: u64) -> std::result::Result<(), SubmitRefusal>;
    /// A finished command, if any (every submitted command completes once,
    /// a failed one with its NVMe status).
    fn poll_completion(&mut self) -> Option<IcmdCompletion>;
    /// Runs the datapath once; `false` when it had nothing to do.
    fn turn(&mut self) -> bool;
    /// Commands submitted and not yet completed.
    fn outstanding(&self) -> usize;
    /// Room for more commands.
    fn has_room(&self) -> bool;
    fn stats(&self) -> DeviceStats;
    /// The namespace's LBA format.
    fn format(&self) -> Format;
    /// The namespace's size in blocks.
    fn blocks(&self) -> u64;
    /// The initiator NSID commands name.
    fn nsid(&self) -> u32;
    /// What carries the commands, for reports.
    fn transport(&self) -> String;
    /// Changes when the connection to the target is set up again: the
    /// target may have restarted in between, losing writes that were not
    /// yet durable.
    fn epoch(&self) -> u64;
}

/// A command [`NvmeDevice::submit`] did not take, handed back.
#[derive(Debug)]
pub struct SubmitError {
    pub reason: SubmitRefusal,
    pub icmd: Icmd,
}

/// Why [`NvmeDevice::submit`] refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubmitRefusal {
    /// The initiator's own refusal (queue full, a bad command).
    Initiator(RefuseReason),
    /// The connection to the target is down and being set up again: try
    /// later. The text says why it went down.
    Reconnecting(String),
    /// The connection is down for good: reconnecting gave up.
    Disconnected(String),
}

impl std::fmt::Display for SubmitRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SubmitRefusal::Initiator(reason) => std::fmt::Display::fmt(reason, f),
            SubmitRefusal::Reconnecting(why) => write!(f, "reconnecting to the target ({why})"),
            SubmitRefusal::Disconnected(why) => write!(f, "disconnected from the target: {why}"),
        }
    }
}

impl From<Refused> for SubmitError {
    fn from(refused: Refused) -> SubmitError {
        SubmitError {
            reason: SubmitRefusal::Initiator(refused.reason),
            icmd: refused.icmd,
        }
    }
}

/// What an [`NvmeDevice`] has done, the transport beneath included.
#[derive(Debug, Clone)]
pub struct DeviceStats {
    pub initiator: InitiatorStats,
    /// The target's counters, when it runs in this process.
    pub target: Option<TargetStats>,
    /// Falcon retransmissions of the engines in this process.
    pub retransmissions: u64,
    /// Frames dropped by the engines in this process, by reason.
    pub drops: DropCounters,
    /// Requests the target NACKed receiver-not-ready (in-process: as the
    /// target counted them; remote: as the initiator's engine received
    /// them).
    pub rnr_nacks: u64,
    /// What injected faults did (in-process loopback only).
    pub faults: FaultStats,
    /// Connections set up to a remote target, and lost.
    pub connects: u64,
    pub disconnects: u64,
}

impl From<PairStats> for DeviceStats {
    fn from(p: PairStats) -> DeviceStats {
        DeviceStats {
            initiator: p.initiator,
            target: Some(p.target),
            retransmissions: p.retransmissions,
            drops: p.drops,
            rnr_nacks: p.rnr_nacks,
            faults: p.faults,
            connects: 0,
            disconnects: 0,
        }
    }
}

impl NvmeDevice for NvmePair {
    fn submit(&mut self, icmd: Icmd) -> std::result::Result<(), SubmitError> {
        NvmePair::submit(self, icmd).map_err(SubmitError::from)
    }

    fn flush(&mut self, tag: u64) -> std::result::Result<(), SubmitRefusal> {
        let now = falcon_core::lcore::Clock::now(&mut self.a.clock);
        self.initiator
            .submit_flush(now, tag, NSID)
            .map_err(SubmitRefusal::Initiator)
    }

    fn poll_completion(&mut self) -> Option<IcmdCompletion> {
        NvmePair::poll_completion(self)
    }

    fn turn(&mut self) -> bool {
        NvmePair::turn(self)
    }

    fn outstanding(&self) -> usize {
        NvmePair::outstanding(self)
    }

    fn has_room(&self) -> bool {
        NvmePair::has_room(self)
    }

    fn stats(&self) -> DeviceStats {
        NvmePair::stats(self).into()
    }

    fn format(&self) -> Format {
        NvmePair::format(self)
    }

    fn blocks(&self) -> u64 {
        NvmePair::blocks(self)
    }

    fn nsid(&self) -> u32 {
        NSID
    }

    fn transport(&self) -> String {
        "NVMe over Falcon, in-process loopback (unordered connection, PSP, Swift)".into()
    }
    fn epoch(&self) -> u64 {
        // One connection for the pair's life.
        1
    }
}

/// The pair (see the module doc).
pub struct NvmePair {
    a: Side,
    b: Side,
    initiator: Initiator,
    target: Target,
    format: Format,
    blocks: u64,
}

impl NvmePair {
    /// Builds the engines, connects them and starts the storage worker.
    ///
    /// # Errors
    ///
    /// [`AppError::Usage`] for a size that is not a whole number of
    /// blocks; [`AppError::Failed`] if the engines, the initiator or the
    /// target refuse their configuration.
    pub fn new(config: &PairConfig) -> Result<NvmePair> {
        let block = config.format.lba_size.bytes() as u64;
        if config.size == 0 || config.size % block != 0 {
            return Err(AppError::Usage(format!(
                "size {} is not a positive multiple of the {block}-byte LBA size",
                config.size
            )));
        }
        let blocks = config.size / block;
        let failed =
            |what: &str, e: &dyn std::fmt::Display| AppError::Failed(format!("{what}: {e}"));

        // The demo's engines; unordered for NVMe.
        let mut demo = config.engines.as_deref().cloned().unwrap_or_default();
        demo.connection.ordering = Ordering::Unordered;
        // The pair's loops have no RUE core beside them.
        demo.rue.placement = RuePlacement::Inline;
        let demo = setup(&demo, &Origin::default())?;
        let clock = SystemClock::new();
        let mut now_clock = clock;
        let now = falcon_core::lcore::Clock::now(&mut now_clock);
        let mut a = falcon_core::engine::Engine::<_, NvmeData>::new(demo.initiator.clone(), now)
            .map_err(|e| failed("initiator engine", &e))?;
        let mut b = falcon_core::engine::Engine::<_, NvmeData>::new(demo.target.clone(), now)
            .map_err(|e| failed("target engine", &e))?;
        let mut pair = demo.pair.clone();
        pair.ordering = OrderingMode::Unordered;
        connect(now, &mut a, &mut b, &pair).map_err(|e| failed("connect", &e))?;

        let (a, b) = faulty_lcore_pair(
            a,
            b,
            config.faults,
            config.seed,
            config.one_way_delay,
            clock,
        );

        // One LBA table row per 1 GiB chunk, all on target namespace 1,
        // SQID 0, the pair's connection (NVMe-0.9 §6.6.2).
        let rows = config.size.div_ceil(CHUNK_BYTES) as u32;
        let translation = lba::Namespace::new(0, rows, 0, 0, 0, config.format.lba_size)
            .map_err(|e| failed("translation", &e))?;
        let mut tables = TranslationTables::new(rows, 1);
        tables
            .set_connection(0, Some(pair.a_cid))
            .map_err(|e| failed("translation", &e))?;
        for row in 0..rows {
            let entry = LbaRow {
                valid: true,
                target_sqid: 0,
                connection_index: 0,
                target_nsid: 1,
                target_chunk: u64::from(row),
            };
            tables
                .set_row(row, entry)
                .map_err(|e| failed("translation", &e))?;
        }
        let initiator_config = InitiatorConfig {
            queue_depth: config.queue_depth,
            icmd_timeout: config.icmd_timeout,
            // Both ends are ours: flush over the vendor Command Request.
            vendor_commands: true,
            ..InitiatorConfig::default()
        };
        let mut initiator =
            Initiator::new(initiator_config, tables).map_err(|e| failed("initiator", &e))?;
        let spec = NamespaceSpec {
            translation,
            metadata: config.format.metadata,
            pi: PiPolicy::Off,
        };
        initiator
            .add_namespace(NSID, spec)
            .map_err(|e| failed("initiator namespace", &e))?;

        let namespace = NamespaceConfig::new(1, blocks, block as u32)
            .with_metadata(config.format.metadata.bytes() as u32, Protection::Off);
        let namespace = Namespace::ram(&namespace).map_err(|e| failed("namespace", &e))?;
        let tcmd_slots = config.queue_depth.max(32) * 2;
        let target_config = TargetConfig {
            tcmd_slots,
            buffers: config.queue_depth.clamp(16, 256),
            vendor_commands: true,
            // Inline, a tCMD's I/O is done when it starts and polled on the
            // next turn: a depth of every slot never refuses one for it.
            worker_queue_depth: match config.storage {
                Execution::Inline => tcmd_slots,
                Execution::Thread => TargetConfig::default().worker_queue_depth,
            },
            ..TargetConfig::default()
        };
        let spec = WorkerSpec::new(vec![0], vec![namespace]).with_execution(config.storage);
        let target = Target::new(target_config, vec![spec]).map_err(|e| failed("target", &e))?;
        Ok(NvmePair {
            a,
            b,
            initiator,
            target,
            format: config.format,
            blocks,
        })
    }

    pub fn format(&self) -> Format {
        self.format
    }

    /// The namespace's size in blocks.
    pub fn blocks(&self) -> u64 {
        self.blocks
    }

    /// Takes a command; its nCMDs go out on the next turn.
    ///
    /// # Errors
    ///
    /// The initiator's refusal, with the command.
    #[allow(clippy::result_large_err)]
    pub fn submit(&mut self, icmd: Icmd) -> std::result::Result<(), Refused> {
        let now = falcon_core::lcore::Clock::now(&mut self.a.clock);
        self.initiator.submit_icmd(now, icmd)
    }

    /// A finished command, if any.
    pub fn poll_completion(&mut self) -> Option<IcmdCompletion> {
        self.initiator.poll_completion()
    }

    /// iCMDs submitted and not yet completed.
    pub fn outstanding(&self) -> usize {
        self.initiator.outstanding()
    }

    /// Room for more commands.
    pub fn has_room(&self) -> bool {
        self.initiator.outstanding() < self.initiator.config().queue_depth
    }

    /// One turn of each loop; `false` when neither did anything (the
    /// storage worker may still be busy: see [`storage_busy`](Self::storage_busy)).
    pub fn turn(&mut self) -> bool {
        let a = self.a.turn(&mut self.initiator);
        let b = self.b.turn(&mut self.target);
        !a.is_idle() || !b.is_idle()
    }

    /// Requests on the target's storage worker (inline: done, and not yet
    /// polled by the target's next turn).
    pub fn storage_busy(&self) -> bool {
        self.target.io_in_flight() > 0
    }

    pub fn stats(&self) -> PairStats {
        let a = self.a.engine.stats();
        let b = self.b.engine.stats();
        let mut drops = a.drops.clone();
        drops.merge(&b.drops);
        let (fa, fb) = (self.a.port.stats(), self.b.port.stats());
        PairStats {
            initiator: *self.initiator.stats(),
            target: *self.target.stats(),
            retransmissions: a.retransmissions + b.retransmissions,
            drops,
            rnr_nacks: {
                let t = self.target.stats();
                t.rnr_no_slot + t.rnr_no_buffer + t.rnr_worker_busy + t.rnr_behind_parked
            },
            faults: FaultStats {
                lost: fa.lost + fb.lost,
                duplicated: fa.duplicated + fb.duplicated,
                reordered: fa.reordered + fb.reordered,
                corrupted: fa.corrupted + fb.corrupted,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Instant;

    use nvme_ulp::data::HostBuffers;
    use nvme_ulp::initiator::IcmdBuffers;
    use nvme_ulp::Status;

    use super::*;

    /// Runs `icmd` to completion, turning the pair.
    fn execute(pair: &mut NvmePair, icmd: Icmd) -> IcmdCompletion {
        pair.submit(icmd).expect("submitted");
        let start = Instant::now();
        loop {
            pair.turn();
            if let Some(done) = pair.poll_completion() {
                return done;
            }
            assert!(start.elapsed() < Duration::from_secs(20), "no completion");
        }
    }

    /// What is written is read back, across the 4 KiB nCMD boundaries,
    /// over a loopback that loses and reorders 2 % of the frames; the
    /// namespace inline and on a worker thread.
    #[test]
    fn writes_read_back_over_a_lossy_loopback() {
        for storage in Execution::ALL {
            read_back(storage);
        }
    }

    fn read_back(storage: Execution) {
        let config = PairConfig {
            faults: Faults {
                loss_ppm: Faults::percent(2),
                reorder_ppm: Faults::percent(2),
                reorder_delay: Duration::from_micros(20),
                ..Faults::default()
            },
            storage,
            ..PairConfig::default()
        };
        let mut pair = NvmePair::new(&config).expect("pair");
        let data: Vec<u8> = (0..64 * 512).map(|i| (i * 7 + i / 512) as u8).collect();
        let buffers = Arc::new(HostBuffers::new(data.clone()));
        let done = execute(&mut pair, Icmd::write(1, NSID, 3, 63, buffers));
        assert_eq!(done.status, Status::SUCCESS);
        let done = execute(
            &mut pair,
            Icmd::read(2, NSID, 3, 63, HostBuffers::default()),
        );
        assert_eq!(done.status, Status::SUCCESS);
        match done.buffers {
            IcmdBuffers::Read(read) => assert!(read.data == data, "read back differs"),
            IcmdBuffers::Write(_) => panic!("a read completes with read buffers"),
        }
        // Past the end of the namespace: refused or failed, never success.
        let last = pair.blocks();
        if pair
            .submit(Icmd::read(3, NSID, last, 0, HostBuffers::default()))
            .is_ok()
        {
            let start = Instant::now();
            let done = loop {
                pair.turn();
                if let Some(done) = pair.poll_completion() {
                    break done;
                }
                assert!(start.elapsed() < Duration::from_secs(20));
            };
            assert_ne!(done.status, Status::SUCCESS);
        }
        assert_eq!(pair.stats().initiator.completed.success, 2);
    }

    #[test]
    fn size_must_be_whole_blocks() {
        let config = PairConfig {
            size: 4097,
            ..PairConfig::default()
        };
        assert!(matches!(NvmePair::new(&config), Err(AppError::Usage(_))));
    }
}
