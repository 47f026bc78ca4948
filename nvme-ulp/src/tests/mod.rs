//! End-to-end tests of the initiator and the target: two engines over the
//! in-process loopback with seeded faults, PSP on, unordered connection,
//! each driven by its lcore loop in virtual time; RAM namespaces on the
//! target's workers. Every test of the target's storage path runs twice
//! ([`storage_modes!`]): the namespaces on worker threads, and inline on
//! the target's lcore.
//!
//! Layer: tests. [`Pair`] is the harness: it turns both loops, waits for
//! the storage workers after each turn (storage takes no virtual time, so
//! a run replays from its seed), and advances the clock to the next timer
//! when both sides are idle. [`Oracle`] is the expected content of the
//! initiator namespace, updated by each successful write and compared with
//! each read.

/// Runs each named test function, which takes the target's storage
/// [`Execution`](crate::namespace::Execution), as two tests: `thread` (the
/// RAM namespaces on worker threads) and `inline` (on the target's lcore).
macro_rules! storage_modes {
    ($($test:ident),* $(,)?) => {$(
        mod $test {
            #[test]
            fn thread() {
                super::$test(crate::namespace::Execution::Thread);
            }

            #[test]
            fn inline() {
                super::$test(crate::namespace::Execution::Inline);
            }
        }
    )*};
}

mod commands;
mod errors;
mod flows;

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;

use core::time::Duration;

use falcon_core::api::{
    connect, ConnectionHandle, Engine, Lcore, OrderingMode, PairSpec, Timestamp,
};
use falcon_core::ids::ConnectionId;
use falcon_core::testing::{
    faulty_lcore_pair, psp_engine_config, FaultInjector, Faults, HandClock, LoopbackPort,
};

use crate::data::{HostBuffers, NvmeData};
use crate::initiator::{
    Icmd, IcmdBuffers, IcmdCompletion, Initiator, InitiatorConfig, NamespaceSpec, PiPolicy,
};
use crate::layout::{Format, LbaSize, MetadataSize};
use crate::lba::{self, LbaRow, TranslationTables};
use crate::namespace::{
    BlockStore, Execution, FaultRule, Namespace, NamespaceConfig, Protection, Storage, WorkerSpec,
};
use crate::status::Status;
use crate::target::{Target, TargetConfig};

/// The initiator namespace every test uses.
pub(crate) const NSID: u32 = 1;

pub(crate) type Side = Lcore<FaultInjector<LoopbackPort>, HandClock, NvmeData>;

/// What a [`Pair`] is built with.
#[derive(Debug, Clone)]
pub(crate) struct Setup {
    pub(crate) format: Format,
    /// The target namespaces' PI.
    pub(crate) protection: Protection,
    /// What the initiator asks of it.
    pub(crate) pi: PiPolicy,
    /// Blocks of each target namespace.
    pub(crate) target_blocks: u64,
    /// Two target namespaces (SQIDs 0 and 1, one worker each) striped in
    /// 256 KiB stripes, so that commands across a stripe boundary become
    /// two tCMDs; else one namespace, target LBA = initiator LBA.
    pub(crate) striped: bool,
    pub(crate) faults: Faults,
    pub(crate) seed: u64,
    pub(crate) initiator: InitiatorConfig,
    pub(crate) target: TargetConfig,
    /// Injected device faults, on target namespace 1.
    pub(crate) device_faults: Vec<FaultRule>,
    pub(crate) one_way_delay: Duration,
    /// Where the target's namespaces run.
    pub(crate) storage: Execution,
}

impl Default for Setup {
    fn default() -> Setup {
        Setup {
            format: Format {
                lba_size: LbaSize::B512,
                metadata: MetadataSize::None,
            },
            protection: Protection::Off,
            pi: PiPolicy::Off,
            target_blocks: 1 << 16,
            striped: false,
            faults: Faults::default(),
            seed: 1,
            initiator: InitiatorConfig {
                queue_depth: 16,
                icmd_timeout: Duration::from_secs(60),
                ..InitiatorConfig::default()
            },
            target: TargetConfig {
                tcmd_slots: 32,
                buffers: 16,
                ..TargetConfig::default()
            },
            device_faults: Vec::new(),
            one_way_delay: Duration::from_micros(2),
            storage: Execution::Thread,
        }
    }
}

/// Loss and reordering of `percent` % each, held-back frames up to 20 µs.
pub(crate) fn lossy(percent: u32) -> Faults {
    Faults {
        loss_ppm: Faults::percent(percent),
        reorder_ppm: Faults::percent(percent),
        reorder_delay: Duration::from_micros(20),
        ..Faults::default()
    }
}

/// An initiator and a target over a lossy loopback (see the module doc).
pub(crate) struct Pair<S: BlockStore + 'static = Storage> {
    time: Rc<Cell<Timestamp>>,
    pub(crate) a: Side,
    pub(crate) b: Side,
    pub(crate) initiator: Initiator,
    pub(crate) target: Target<S>,
    /// How long a step waits for the storage workers (real time).
    pub(crate) storage_wait: Duration,
    /// The connection's handles at the initiator and at the target.
    pub(crate) connections: (ConnectionHandle, ConnectionHandle),
    pub(crate) format: Format,
    /// Completions not yet taken by the test.
    pub(crate) done: Vec<IcmdCompletion>,
}

impl Pair {
    pub(crate) fn new(setup: Setup) -> Pair {
        let target = target(&setup);
        Pair::with_target(setup, target)
    }
}

impl<S: BlockStore + 'static> Pair<S> {
    /// The pair of `setup` with `target` (built for `setup`'s namespaces).
    pub(crate) fn with_target(setup: Setup, target: Target<S>) -> Pair<S> {
        let time = Rc::new(Cell::new(Timestamp::from_nanos(1_000_000_000)));
        let now = time.get();
        let config = psp_engine_config;
        let mut a: Engine<_, NvmeData> = Engine::new(config(1), now).expect("engine A");
        let mut b: Engine<_, NvmeData> = Engine::new(config(2), now).expect("engine B");
        let spec = PairSpec {
            ordering: OrderingMode::Unordered,
            ..PairSpec::default()
        };
        let connections = connect(now, &mut a, &mut b, &spec).expect("connect");
        let clock = HandClock(Rc::clone(&time));
        let (a, b) = faulty_lcore_pair(a, b, setup.faults, setup.seed, setup.one_way_delay, clock);
        let initiator = initiator(&setup, spec.a_cid);
        Pair {
            time,
            a,
            b,
            initiator,
            target,
            storage_wait: Duration::from_secs(20),
            connections,
            format: setup.format,
            done: Vec::new(),
        }
    }

    pub(crate) fn now(&self) -> Timestamp {
        self.time.get()
    }

    /// One turn of each side; then, if nothing happened, the clock moves
    /// to the next timer. `false` when nothing is left to happen.
    pub(crate) fn step(&mut self) -> bool {
        let turn_a = self.a.turn(&mut self.initiator);
        let turn_b = self.b.turn(&mut self.target);
        let storage = self.target.wait_for_storage(self.storage_wait);
        while let Some(completion) = self.initiator.poll_completion() {
            self.done.push(completion);
        }
        if !turn_a.is_idle() || !turn_b.is_idle() || storage > 0 {
            return true;
        }
        let next = [
            self.a.engine.poll_timeout(),
            self.b.engine.poll_timeout(),
            falcon_core::api::Port::poll_timeout(&self.a.port),
            falcon_core::api::Port::poll_timeout(&self.b.port),
            self.initiator.poll_timeout(),
            self.target.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min();
        match next {
            Some(at) => {
                // A timer already due runs on the next turn.
                let at = at.max(self.now().saturating_add(Duration::from_nanos(1)));
                self.time.set(at);
                true
            }
            None => false,
        }
    }

    /// Steps until `done`, within `limit` of virtual time.
    pub(crate) fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&Pair<S>) -> bool) {
        let deadline = self.now().saturating_add(limit);
        while !done(self) {
            assert!(
                self.now() <= deadline,
                "not done after {limit:?} of virtual time: {} outstanding\n{:#?}\n{:#?}",
                self.initiator.outstanding(),
                self.initiator.stats(),
                self.target.stats()
            );
            if !self.step() {
                assert!(
                    done(self),
                    "idle but not done: {} outstanding",
                    self.initiator.outstanding()
                );
                return;
            }
        }
    }

    /// Steps until every submitted iCMD completed; returns the completions
    /// not yet taken, in completion order.
    pub(crate) fn finish(&mut self) -> Vec<IcmdCompletion> {
        self.run_until(Duration::from_secs(30), |pair| {
            pair.initiator.outstanding() == 0
        });
        while let Some(completion) = self.initiator.poll_completion() {
            self.done.push(completion);
        }
        core::mem::take(&mut self.done)
    }

    /// Submits one command and runs it to completion.
    pub(crate) fn execute(&mut self, icmd: Icmd) -> IcmdCompletion {
        let now = self.now();
        self.initiator.submit_icmd(now, icmd).expect("submitted");
        let mut done = self.finish();
        assert_eq!(done.len(), 1);
        done.remove(0)
    }

    /// Writes `data` and `metadata` at `slba`; returns the status.
    pub(crate) fn write(&mut self, slba: u64, data: Vec<u8>, metadata: Vec<u8>) -> Status {
        let nlb = self.nlb(data.len());
        let buffers = Arc::new(HostBuffers::with_metadata(data, metadata));
        self.execute(Icmd::write(0, NSID, slba, nlb, buffers))
            .status
    }

    /// Reads `blocks` blocks at `slba`: the status and the buffers.
    pub(crate) fn read(&mut self, slba: u64, blocks: usize) -> (Status, HostBuffers) {
        let nlb = (blocks - 1) as u16;
        let done = self.execute(Icmd::read(0, NSID, slba, nlb, HostBuffers::default()));
        match done.buffers {
            IcmdBuffers::Read(buffers) => (done.status, buffers),
            IcmdBuffers::Write(_) => panic!("a read completes with read buffers"),
        }
    }

    /// The 0-based NLB of `len` data bytes.
    pub(crate) fn nlb(&self, len: usize) -> u16 {
        (len / self.format.lba_size.bytes() - 1) as u16
    }

    /// No frame, tCMD, buffer or engine resource is left held once the
    /// traffic is over.
    pub(crate) fn assert_quiet(&mut self) {
        self.run_until(Duration::from_millis(100), |pair| {
            pair.target.tcmds() == 0
                && falcon_core::api::Credit::ALL.iter().all(|&credit| {
                    pair.a.engine.resources_used(credit) == 0
                        && pair.b.engine.resources_used(credit) == 0
                })
        });
        assert_eq!(self.initiator.outstanding(), 0);
        assert_eq!(self.target.io_in_flight(), 0);
    }
}

/// The initiator of `setup`: namespace 1 on connection 0 (the pair's).
fn initiator(setup: &Setup, cid: ConnectionId) -> Initiator {
    let (rows, group_shift) = if setup.striped { (2, 1) } else { (1, 0) };
    // 1 GiB chunks, 256 KiB stripes.
    let translation =
        lba::Namespace::new(0, rows, 0, 0, group_shift, setup.format.lba_size).expect("namespace");
    let mut tables = TranslationTables::new(rows, 1);
    tables.set_connection(0, Some(cid)).expect("connection");
    for row in 0..rows {
        let entry = LbaRow {
            valid: true,
            // Row r: target namespace r + 1 on SQID r.
            target_sqid: row as u8,
            connection_index: 0,
            target_nsid: row as u16 + 1,
            target_chunk: 0,
        };
        tables.set_row(row, entry).expect("row");
    }
    let mut initiator = Initiator::new(setup.initiator, tables).expect("initiator");
    let spec = NamespaceSpec {
        translation,
        metadata: setup.format.metadata,
        pi: setup.pi,
    };
    initiator.add_namespace(NSID, spec).expect("namespace");
    initiator
}

/// The target namespace config of `setup` with NSID `nsid`.
pub(crate) fn namespace_config(setup: &Setup, nsid: u16) -> NamespaceConfig {
    NamespaceConfig::new(
        nsid,
        setup.target_blocks,
        setup.format.lba_size.bytes() as u32,
    )
    .with_metadata(setup.format.metadata.bytes() as u32, setup.protection)
}

/// The target of `setup`: one RAM namespace per worker, run as
/// `setup.storage` says.
fn target(setup: &Setup) -> Target {
    let namespaces = if setup.striped { 2 } else { 1 };
    let specs = (0..namespaces)
        .map(|index| {
            let config = namespace_config(setup, index + 1);
            let mut namespace = Namespace::ram(&config).expect("namespace");
            if index == 0 {
                for rule in &setup.device_faults {
                    namespace.faults_mut().add(rule.clone());
                }
            }
            WorkerSpec::new(vec![index as u8], vec![namespace]).with_execution(setup.storage)
        })
        .collect();
    Target::new(setup.target, specs).expect("target")
}

/// The expected content of the initiator namespace's first blocks.
pub(crate) struct Oracle {
    format: Format,
    pub(crate) data: Vec<u8>,
    pub(crate) metadata: Vec<u8>,
}

impl Oracle {
    /// `blocks` blocks as a new RAM namespace reads them: zero data, zero
    /// metadata (no PI in these formats' metadata).
    pub(crate) fn new(format: Format, blocks: usize) -> Oracle {
        Oracle {
            format,
            data: vec![0; format.data_len(blocks)],
            metadata: vec![0; format.metadata_len(blocks)],
        }
    }

    pub(crate) fn write(&mut self, slba: u64, buffers: &HostBuffers) {
        let slba = slba as usize;
        let data = self.format.data_len(slba);
        self.data[data..data + buffers.data.len()].copy_from_slice(&buffers.data);
        let metadata = self.format.metadata_len(slba);
        self.metadata[metadata..metadata + buffers.metadata.len()]
            .copy_from_slice(&buffers.metadata);
    }

    /// Panics unless `buffers` hold what blocks `slba..` should.
    pub(crate) fn check(&self, slba: u64, buffers: &HostBuffers, what: &str) {
        let slba = slba as usize;
        let data = self.format.data_len(slba);
        let expected = &self.data[data..data + buffers.data.len()];
        if let Some(at) = expected.iter().zip(&buffers.data).position(|(a, b)| a != b) {
            panic!(
                "{what}: data byte {at} (block {}) differs",
                slba + at / self.format.lba_size.bytes()
            );
        }
        let metadata = self.format.metadata_len(slba);
        assert_eq!(
            &self.metadata[metadata..metadata + buffers.metadata.len()],
            &buffers.metadata[..],
            "{what}: metadata"
        );
    }
}

/// `len` bytes of a pattern named by `seed`.
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
