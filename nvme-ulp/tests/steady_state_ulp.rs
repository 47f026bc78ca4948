//! Steady-state NVMe over Falcon allocates nothing per command: an
//! initiator and a target on two engines over the loopback (PSP on,
//! unordered), reads and writes of 64 KiB with the caller's buffers
//! reused, after a warm-up; the target's RAM namespace on a worker thread,
//! then inline on its lcore.
//!
//! Its own test binary, with one test, because the counting allocator sees
//! every thread of the process (the target's storage worker included).

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use falcon_core::api::{connect, Engine, Lcore, OrderingMode, PairSpec, Port, Timestamp};
use falcon_core::testing::{psp_engine_config, HandClock, Loopback, LoopbackConfig, LoopbackPort};
use nvme_ulp::data::{HostBuffers, NvmeData};
use nvme_ulp::initiator::{Icmd, IcmdBuffers, Initiator, InitiatorConfig, NamespaceSpec, PiPolicy};
use nvme_ulp::layout::{LbaSize, MetadataSize};
use nvme_ulp::lba::{self, LbaRow, TranslationTables};
use nvme_ulp::namespace::{Execution, Namespace, NamespaceConfig, WorkerSpec};
use nvme_ulp::target::{Target, TargetConfig};
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static GLOBAL: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

/// 64 KiB of 4 KiB blocks.
const NLB: u16 = 15;
const DEPTH: usize = 8;

type Side = Lcore<LoopbackPort, HandClock, NvmeData>;

struct Pair {
    time: Rc<Cell<Timestamp>>,
    a: Side,
    b: Side,
    initiator: Initiator,
    target: Target,
    /// Read buffers and write buffers, back from completed commands.
    reads: Vec<HostBuffers>,
    writes: Vec<Arc<HostBuffers>>,
    submitted: u64,
}

impl Pair {
    fn new(storage: Execution) -> Pair {
        let time = Rc::new(Cell::new(Timestamp::from_nanos(1_000_000_000)));
        let now = time.get();
        let config = psp_engine_config;
        let mut a: Engine<_, NvmeData> = Engine::new(config(1), now).expect("engine A");
        let mut b: Engine<_, NvmeData> = Engine::new(config(2), now).expect("engine B");
        let spec = PairSpec {
            ordering: OrderingMode::Unordered,
            ..PairSpec::default()
        };
        connect(now, &mut a, &mut b, &spec).expect("connect");
        let (pa, pb) = Loopback::pair(LoopbackConfig::default());
        let clock = HandClock(Rc::clone(&time));
        let translation = lba::Namespace::new(0, 1, 0, 0, 0, LbaSize::B4096).expect("namespace");
        let mut tables = TranslationTables::new(1, 1);
        tables
            .set_connection(0, Some(spec.a_cid))
            .expect("connection");
        let row = LbaRow {
            valid: true,
            target_sqid: 0,
            connection_index: 0,
            target_nsid: 1,
            target_chunk: 0,
        };
        tables.set_row(0, row).expect("row");
        let config = InitiatorConfig {
            queue_depth: DEPTH,
            ..InitiatorConfig::default()
        };
        let mut initiator = Initiator::new(config, tables).expect("initiator");
        let spec = NamespaceSpec {
            translation,
            metadata: MetadataSize::None,
            pi: PiPolicy::Off,
        };
        initiator.add_namespace(1, spec).expect("namespace");
        let namespace = Namespace::ram(&NamespaceConfig::new(1, 4096, 4096)).expect("namespace");
        let config = TargetConfig {
            tcmd_slots: 16,
            buffers: 16,
            ..TargetConfig::default()
        };
        let spec = WorkerSpec::new(vec![0], vec![namespace]).with_execution(storage);
        let target = Target::new(config, vec![spec]).expect("target");
        let blocks = usize::from(NLB) + 1;
        Pair {
            time,
            a: Lcore::new(a, pa, clock.clone()),
            b: Lcore::new(b, pb, clock),
            initiator,
            target,
            reads: (0..DEPTH)
                .map(|_| HostBuffers::new(Vec::with_capacity(blocks * 4096)))
                .collect(),
            writes: (0..DEPTH)
                .map(|i| Arc::new(HostBuffers::new(vec![i as u8; blocks * 4096])))
                .collect(),
            submitted: 0,
        }
    }

    /// Keeps `DEPTH` commands in flight, alternating reads and writes,
    /// until `count` more have completed.
    fn run(&mut self, count: u64) {
        let mut completed = 0;
        let mut turns = 0u64;
        while completed < count {
            turns += 1;
            assert!(turns < 10_000_000, "stuck at {completed} of {count}");
            let now = self.time.get();
            while self.initiator.outstanding() < DEPTH {
                let slba = (self.submitted % 64) * 64;
                let icmd = if self.submitted % 2 == 0 {
                    let Some(buffers) = self.writes.pop() else {
                        break;
                    };
                    Icmd::write(self.submitted, 1, slba, NLB, buffers)
                } else {
                    let Some(buffers) = self.reads.pop() else {
                        break;
                    };
                    Icmd::read(self.submitted, 1, slba, NLB, buffers)
                };
                self.initiator.submit_icmd(now, icmd).expect("within depth");
                self.submitted += 1;
            }
            let turn_a = self.a.turn(&mut self.initiator);
            let turn_b = self.b.turn(&mut self.target);
            let storage = self.target.wait_for_storage(Duration::from_secs(20));
            while let Some(done) = self.initiator.poll_completion() {
                assert!(done.status.is_success(), "{}", done.status);
                match done.buffers {
                    IcmdBuffers::Read(buffers) => self.reads.push(buffers),
                    IcmdBuffers::Write(buffers) => self.writes.push(buffers),
                }
                completed += 1;
            }
            if turn_a.is_idle() && turn_b.is_idle() && storage == 0 {
                let next = [
                    self.a.engine.poll_timeout(),
                    self.b.engine.poll_timeout(),
                    self.a.port.poll_timeout(),
                    self.b.port.poll_timeout(),
                ]
                .into_iter()
                .flatten()
                .min();
                let at = next
                    .expect("something to wait for")
                    .max(self.time.get().saturating_add(Duration::from_nanos(1)));
                self.time.set(at);
            }
        }
    }
}

/// Commands measured after the warm-up.
const MEASURED: u64 = 1000;

#[test]
fn steady_state_ulp_allocates_nothing_per_command() {
    for storage in Execution::ALL {
        allocates_nothing(storage);
    }
}

fn allocates_nothing(storage: Execution) {
    let mut pair = Pair::new(storage);
    pair.run(2000);
    let region = Region::new(GLOBAL);
    let start = Instant::now();
    pair.run(MEASURED);
    let elapsed = start.elapsed();
    let stats = region.change();
    let bytes = MEASURED * (u64::from(NLB) + 1) * 4096;
    eprintln!(
        "{MEASURED} commands of 64 KiB (16 nCMDs each, half reads, half writes): \
         {} allocations ({} bytes); {:.0} commands/s, {:.0} MiB/s on one thread \
         (both engines, PSP), storage {storage:?}",
        stats.allocations,
        stats.bytes_allocated,
        MEASURED as f64 / elapsed.as_secs_f64(),
        bytes as f64 / elapsed.as_secs_f64() / f64::from(1 << 20),
    );
    // What remains is the engine's, not the ULP's: its timing wheel gives
    // each of its 4,096 far-level slots (2 ms of virtual time each) a
    // vector the first time a timer lands there, a few per thousand
    // commands here; one allocation per command, or per nCMD, would be a
    // thousand or more.
    assert!(
        (stats.allocations as u64) < MEASURED / 100,
        "{} allocations for {MEASURED} commands: {stats:?}",
        stats.allocations
    );
    assert_eq!(stats.reallocations, 0, "{stats:?}");
}
