//! The scaling half of `falcon bench pipeline`: Falcon targets on 1 and on
//! N datapath lcores, each an engine owning a shard of one node, fed real
//! Push Data over DPDK (issue #26, item 2; DESIGN §3).
//!
//! Layer: application (a benchmark). A generator on its own lcore, as the
//! single-lcore ratio uses, would compete with the targets for this
//! machine's two cores. Here each target lcore feeds itself instead, in
//! untimed pauses: every round records each shard's own traffic (a real
//! initiator pushing to a scratch copy of that shard's engine, PSP sealed,
//! as [`super::pipeline_falcon`] does), then the lcores run in lockstep,
//! chunk by chunk:
//!
//! 1. **Fill** (not timed): each lcore copies its next [`CHUNK`] recorded
//!    frames into mbufs and sends them through its queue of the generator
//!    port of a `net_ring` pair, and frees the ACKs that came back. The
//!    frames wait in the target port's receive ring.
//! 2. **Drain** (timed): after a spin barrier every lcore turns its loop
//!    (parse, PSP open, windows, ULP delivery and ACK, ACKs out) until its
//!    chunk is handled; a second barrier ends the chunk.
//!
//! Per lcore, Mpps = its frames over its drain time; the node's total =
//! all frames over the chunks' wall time (each chunk as long as its
//! slowest lcore). `scaling_efficiency` = total at N over N × the total at
//! one, median over rounds (1 and N alternate their order by round).
//!
//! Two ways a frame reaches its shard, both measured:
//!
//! - **by queue**: the port has N receive queues and each shard's frames
//!   arrive on its own (what RSS or a flow rule does on a NIC that can
//!   steer by SPI or CID);
//! - **dispatched**: one receive queue; lcore 0 fills it with every
//!   shard's chunk, interleaved, and its port hands the other shards'
//!   frames to their lcores over `rte_ring`s after peeking the SPI (PSP
//!   on) or CID (`falcon_core::api::Steering`), as `falcon run` does on
//!   ports that cannot steer.

#![cfg(feature = "dpdk")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use falcon_core::api::*;
use falcon_dpdk::clock::TscClock;
use falcon_dpdk::eal::Eal;
use falcon_dpdk::ethdev::{EthPort, PortConfig};
use falcon_dpdk::mbuf::Mbuf;
use falcon_dpdk::mempool::Mempool;
use falcon_dpdk::port::{Dispatch, DpdkPort};
use falcon_dpdk::ring::mbuf_ring;

use super::pipeline_falcon::{
    engine_config, fill, record_frames, Recording, Sink, CHUNK, DATA_ROOM, MAX_FRAME, ROUND_LIMIT,
};
use super::spin_barrier::SpinBarrier;
use crate::error::{AppError, Result};

/// Recorded frames per lcore and round at most, and the bytes they may
/// take (both lcores' recordings are held at once).
const FRAMES_PER_LCORE: usize = 60_000;
const RECORDING_BYTES_PER_LCORE: usize = 96 << 20;
/// The connection id of each shard's connection: its `n`-th local CID.
const SHARD_CID_INDEX: u32 = 0x20;

/// How frames reach their shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Steering {
    /// One receive queue per lcore.
    ByQueue,
    /// One receive queue; lcore 0 dispatches in software.
    Dispatched,
}

/// One configuration's round.
#[derive(Debug, Clone)]
pub struct Run {
    /// Frames each lcore handled.
    pub frames: Vec<u64>,
    /// Each lcore's frames over its drain time.
    pub lcore_pps: Vec<f64>,
    /// All frames over the chunks' wall time.
    pub total_pps: f64,
    /// Frames the engines dropped, by reason (none expected).
    pub drops: DropCounters,
    /// Frames lcore 0 handed to other shards (dispatched runs).
    pub dispatched: u64,
    /// Frames a dispatch ring had no room for (none expected).
    pub dispatch_ring_full: u64,
}

/// The ports of one configuration: each lcore's queue of the generator
/// port and of the target port.
struct Setup {
    steering: Steering,
    generators: Vec<DpdkPort>,
    targets: Vec<DpdkPort>,
}

/// The ports and pool of the scaling rounds.
pub struct ScalingRig {
    eal: &'static Eal,
    pool: &'static Mempool,
    psp: bool,
    size: usize,
    lcores: u16,
    single: Option<Setup>,
    by_queue: Option<Setup>,
    dispatched: Option<Setup>,
}

impl ScalingRig {
    /// Ring pairs for one lcore and for `lcores` (by queue and
    /// dispatched), and a pool for their frames.
    pub fn new(eal: &'static Eal, psp: bool, size: usize, lcores: u16) -> Result<ScalingRig> {
        let failed = |e: falcon_dpdk::DpdkError| AppError::Failed(format!("bench pipeline: {e}"));
        let in_flight = usize::from(lcores) * CHUNK * 4;
        let mbufs = (in_flight.max(4096) + 1).next_power_of_two() as u32 - 1;
        let pool: &'static Mempool = Box::leak(Box::new(
            Mempool::new(eal, "pipeline_scale", mbufs, 256, DATA_ROOM).map_err(failed)?,
        ));
        let mut rig = ScalingRig {
            eal,
            pool,
            psp,
            size,
            lcores,
            single: None,
            by_queue: None,
            dispatched: None,
        };
        rig.single = Some(rig.setup("ps1", 1, Steering::ByQueue)?);
        if lcores > 1 {
            rig.by_queue = Some(rig.setup("psq", lcores, Steering::ByQueue)?);
            rig.dispatched = Some(rig.setup("psd", lcores, Steering::Dispatched)?);
        }
        Ok(rig)
    }

    fn setup(&self, name: &str, lcores: u16, steering: Steering) -> Result<Setup> {
        let failed = |e: falcon_dpdk::DpdkError| AppError::Failed(format!("bench pipeline: {e}"));
        // Lcore 0 of a dispatched run fills the one queue with every
        // shard's chunk; the ACK rings take a chunk's ACKs per lcore.
        let slots = (usize::from(lcores) * CHUNK * 2).next_power_of_two() as u32;
        let (gen_id, target_id) = EthPort::ring_pair_with_queues(
            self.eal,
            &format!("{name}_gen"),
            &format!("{name}_tgt"),
            slots,
            lcores,
        )
        .map_err(failed)?;
        let queues = PortConfig {
            rx_queues: lcores,
            tx_queues: lcores,
            ..PortConfig::default()
        };
        let generator = EthPort::start(self.eal, gen_id, queues, self.pool).map_err(failed)?;
        let target_config = PortConfig {
            rx_queues: if steering == Steering::Dispatched {
                1
            } else {
                lcores
            },
            ..queues
        };
        let target =
            EthPort::start(self.eal, target_id, target_config, self.pool).map_err(failed)?;
        let generators =
            DpdkPort::on_queues(generator, lcores, self.pool, MAX_FRAME).map_err(failed)?;
        let mut targets =
            DpdkPort::on_queues(target, lcores, self.pool, MAX_FRAME).map_err(failed)?;
        if steering == Steering::Dispatched {
            let node = self.node(lcores)?;
            let mut senders = Vec::new();
            let mut receivers = Vec::new();
            for shard in 0..lcores {
                let (tx, rx) =
                    mbuf_ring(self.eal, &format!("{name}_shard{shard}"), slots).map_err(failed)?;
                senders.push(tx);
                receivers.push(rx);
            }
            for (shard, (port, inbound)) in targets.iter_mut().zip(receivers).enumerate() {
                port.set_dispatch(Dispatch {
                    shard: shard as u16,
                    steering: node.steering(),
                    inbound,
                    outbound: senders
                        .iter()
                        .enumerate()
                        .map(|(s, ring)| (s != shard).then(|| ring.clone()))
                        .collect(),
                });
            }
        }
        Ok(Setup {
            steering,
            generators,
            targets,
        })
    }

    /// A fresh node of `shards` shards: the same keys and SPI allocation
    /// every time, so that a scratch engine and a measured one built alike
    /// have the same SAs.
    fn node(&self, shards: u16) -> Result<Arc<Node>> {
        let psp = engine_config(2, self.psp).psp;
        Node::new(NodeConfig {
            shards,
            psp,
            ..NodeConfig::default()
        })
        .map_err(|e| AppError::Failed(format!("bench pipeline: node: {e}")))
    }

    /// One round of one lcore, then of N by queue and N dispatched (the
    /// order rotating by `round`): the single run and the others.
    pub fn round(&mut self, round: u32) -> Result<(Run, Option<Run>, Option<Run>)> {
        let order = [Steering::ByQueue, Steering::Dispatched];
        let (mut single, mut by_queue, mut dispatched) = (None, None, None);
        for step in 0..3 {
            match (step + round as usize) % 3 {
                0 => single = Some(self.run_setup(1, None)?),
                1 if self.lcores > 1 => {
                    by_queue = Some(self.run_setup(self.lcores, Some(order[0]))?)
                }
                2 if self.lcores > 1 => {
                    dispatched = Some(self.run_setup(self.lcores, Some(order[1]))?)
                }
                _ => {}
            }
        }
        let single = single.expect("step 0 runs once a round");
        Ok((single, by_queue, dispatched))
    }

    fn run_setup(&mut self, lcores: u16, steering: Option<Steering>) -> Result<Run> {
        let slot = match steering {
            None => &mut self.single,
            Some(Steering::ByQueue) => &mut self.by_queue,
            Some(Steering::Dispatched) => &mut self.dispatched,
        };
        let setup = slot.take().expect("the setup is back");
        let (setup, run) = self.measure(setup, lcores);
        let slot = match steering {
            None => &mut self.single,
            Some(Steering::ByQueue) => &mut self.by_queue,
            Some(Steering::Dispatched) => &mut self.dispatched,
        };
        *slot = Some(setup);
        run
    }

    /// Records each shard's traffic, then runs the lcores in lockstep.
    /// The ports always come back, whatever the outcome.
    fn measure(&self, mut setup: Setup, lcores: u16) -> (Setup, Result<Run>) {
        let prepared = match self.prepare(lcores) {
            Ok(p) => p,
            Err(e) => return (setup, Err(e)),
        };
        let (engines, recordings) = prepared;
        let recordings = Arc::new(recordings);
        let chunks = recordings[0].len().div_ceil(CHUNK);
        let barrier = Arc::new(SpinBarrier::new(usize::from(lcores)));
        let workers = falcon_dpdk::lcore::workers(self.eal);
        let generators = std::mem::take(&mut setup.generators);
        let targets = std::mem::take(&mut setup.targets);
        let mut jobs: Vec<Job> = engines
            .into_iter()
            .zip(generators)
            .zip(targets)
            .enumerate()
            .map(|(shard, ((engine, generator), target))| Job {
                shard,
                engine,
                generator,
                target,
                fills: match setup.steering {
                    Steering::ByQueue => vec![shard],
                    Steering::Dispatched if shard == 0 => (0..usize::from(lcores)).collect(),
                    Steering::Dispatched => Vec::new(),
                },
                recordings: Arc::clone(&recordings),
                chunks,
                barrier: Arc::clone(&barrier),
                pool: self.pool,
                clock: TscClock::new(self.eal),
            })
            .collect();
        let first = jobs.remove(0);
        let mut launched = Vec::new();
        let mut launch_error = None;
        for (job, &lcore) in jobs.into_iter().zip(&workers) {
            match falcon_dpdk::lcore::launch(self.eal, lcore, move || job.run()) {
                Ok(l) => launched.push(l),
                Err(e) => {
                    barrier.abort();
                    launch_error = Some(AppError::Failed(format!("bench pipeline: {e}")));
                    break;
                }
            }
        }
        let mut outcomes = vec![first.run()];
        for l in launched {
            outcomes.push(l.wait().unwrap_or_else(|_| Outcome {
                generator: None,
                target: None,
                result: Err("the lcore panicked".into()),
            }));
        }
        // The ports, in shard order, back into the setup.
        let mut failure = launch_error;
        let mut lanes = Vec::new();
        for (shard, outcome) in outcomes.into_iter().enumerate() {
            if let (Some(g), Some(t)) = (outcome.generator, outcome.target) {
                setup.generators.push(g);
                setup.targets.push(t);
            } else {
                failure.get_or_insert_with(|| {
                    AppError::Failed(format!(
                        "bench pipeline: lcore of shard {shard} lost its ports"
                    ))
                });
            }
            match outcome.result {
                Ok(lane) => lanes.push(lane),
                Err(e) => {
                    failure.get_or_insert_with(|| {
                        AppError::Failed(format!("bench pipeline: shard {shard}: {e}"))
                    });
                }
            }
        }
        if let Some(e) = failure {
            return (setup, Err(e));
        }
        (setup, Ok(summarise(&lanes, chunks)))
    }

    /// The measured engines of `lcores` shards and each shard's recording.
    fn prepare(&self, lcores: u16) -> Result<(Vec<Engine<Mbuf>>, Vec<Recording>)> {
        let config_error = |e: ConfigError| AppError::Failed(format!("bench pipeline: {e}"));
        let mut clock = TscClock::new(self.eal);
        let now = clock.now();
        let scratch_node = self.node(lcores)?;
        let measured_node = self.node(lcores)?;
        let steering = measured_node.steering();
        let want = FRAMES_PER_LCORE.min(RECORDING_BYTES_PER_LCORE / (self.size + 128));
        let mut engines = Vec::new();
        let mut recordings = Vec::new();
        for shard in 0..lcores {
            let spec = PairSpec {
                b_cid: steering
                    .cid(shard, SHARD_CID_INDEX)
                    .expect("a shard owns at least 2^16 CIDs"),
                ..PairSpec::default()
            };
            let in_node = |node: &Arc<Node>| EngineConfig {
                node: Some(NodeShard {
                    node: Arc::clone(node),
                    shard,
                }),
                psp: None,
                ..engine_config(2, self.psp)
            };
            let mut initiator: Engine =
                Engine::new(engine_config(1, self.psp), now).map_err(config_error)?;
            let mut scratch: Engine =
                Engine::new(in_node(&scratch_node), now).map_err(config_error)?;
            let (handle, _) =
                connect(now, &mut initiator, &mut scratch, &spec).map_err(config_error)?;
            let mut idle: Engine<Mbuf> =
                Engine::new(engine_config(1, self.psp), now).map_err(config_error)?;
            let mut target: Engine<Mbuf> =
                Engine::new(in_node(&measured_node), now).map_err(config_error)?;
            connect(now, &mut idle, &mut target, &spec).map_err(config_error)?;
            recordings.push(record_frames(
                initiator, scratch, handle, clock, self.size, want,
            )?);
            engines.push(target);
        }
        Ok((engines, recordings))
    }
}

/// What one lcore does in a run.
struct Job {
    shard: usize,
    engine: Engine<Mbuf>,
    generator: DpdkPort,
    target: DpdkPort,
    /// The shards whose chunks this lcore sends into its queue.
    fills: Vec<usize>,
    recordings: Arc<Vec<Recording>>,
    chunks: usize,
    barrier: Arc<SpinBarrier>,
    pool: &'static Mempool,
    clock: TscClock,
}

/// One lcore's figures in a run.
struct Lane {
    frames: u64,
    busy: Vec<Duration>,
    drops: DropCounters,
    dispatched: u64,
    dispatch_ring_full: u64,
}

/// What a lcore gives back: its ports in any case.
struct Outcome {
    generator: Option<DpdkPort>,
    target: Option<DpdkPort>,
    result: std::result::Result<Lane, String>,
}

impl Job {
    fn run(self) -> Outcome {
        let Job {
            shard,
            engine,
            mut generator,
            target,
            fills,
            recordings,
            chunks,
            barrier,
            pool,
            clock,
        } = self;
        // The port's counters run on over the rounds.
        let before = target.stats();
        let mut lcore = Lcore::new(engine, target, clock);
        let mut sink = Sink::default();
        let own = recordings[shard].len();
        let mut busy = Vec::with_capacity(chunks);
        let mut tx: Vec<Mbuf> = Vec::with_capacity(CHUNK * fills.len().max(1));
        let mut rx: Vec<Mbuf> = Vec::with_capacity(32);
        let limit = Instant::now() + ROUND_LIMIT;
        let mut result = Ok(());
        for chunk in 0..chunks {
            // The ACKs of the last chunk, freed.
            while generator.rx_burst(Timestamp::ZERO, &mut rx, 32) > 0 {
                rx.clear();
            }
            if let Err(e) = send_chunk(&mut generator, pool, &recordings, &fills, chunk, &mut tx) {
                barrier.abort();
                result = Err(e);
                break;
            }
            if barrier.wait().is_err() {
                result = Err("another lcore failed".into());
                break;
            }
            let goal = own.min((chunk + 1) * CHUNK) as u64;
            lcore.resume();
            let start = Instant::now();
            while !sink.done(&lcore.engine, goal, lcore.turns) {
                lcore.turn(&mut sink);
                if lcore.turns % 1024 == 0 && (Instant::now() > limit || barrier.aborted()) {
                    break;
                }
            }
            busy.push(start.elapsed());
            if sink.handled(&lcore.engine) < goal {
                barrier.abort();
                result = Err(format!(
                    "handled {} of {goal} frames ({} delivered; drops {:?})",
                    sink.handled(&lcore.engine),
                    sink.delivered,
                    lcore.engine.stats().drops
                ));
                break;
            }
            if barrier.wait().is_err() {
                result = Err("another lcore failed".into());
                break;
            }
        }
        let result = result.and_then(|()| sink.check().map_err(|e| e.to_string()));
        let drops = lcore.engine.stats().drops;
        let Lcore { port: target, .. } = lcore;
        let stats = target.stats();
        Outcome {
            generator: Some(generator),
            target: Some(target),
            result: result.map(|()| Lane {
                frames: own as u64,
                busy,
                drops,
                dispatched: stats.dispatched - before.dispatched,
                dispatch_ring_full: stats.dispatch_ring_full - before.dispatch_ring_full,
            }),
        }
    }
}

/// Chunk `chunk` of each shard in `fills`, interleaved, into mbufs and out
/// through `generator`: all of it, or an error (the rings are sized to
/// hold it).
fn send_chunk(
    generator: &mut DpdkPort,
    pool: &Mempool,
    recordings: &[Recording],
    fills: &[usize],
    chunk: usize,
    tx: &mut Vec<Mbuf>,
) -> std::result::Result<(), String> {
    let start = chunk * CHUNK;
    for i in start..start + CHUNK {
        for &shard in fills {
            if i < recordings[shard].len() {
                tx.push(fill(pool, recordings[shard].frame(i)).map_err(|e| e.to_string())?);
            }
        }
    }
    let want = tx.len();
    let sent = generator.tx_burst(Timestamp::ZERO, tx);
    tx.clear();
    if sent < want {
        return Err(format!("the ring took {sent} of a chunk's {want} frames"));
    }
    Ok(())
}

/// A run's figures from its lanes.
fn summarise(lanes: &[Lane], chunks: usize) -> Run {
    let wall: Duration = (0..chunks)
        .map(|c| {
            lanes
                .iter()
                .filter_map(|l| l.busy.get(c))
                .max()
                .copied()
                .unwrap_or_default()
        })
        .sum();
    let frames: Vec<u64> = lanes.iter().map(|l| l.frames).collect();
    let total: u64 = frames.iter().sum();
    let mut drops = DropCounters::default();
    for l in lanes {
        drops.merge(&l.drops);
    }
    Run {
        lcore_pps: lanes
            .iter()
            .map(|l| {
                let busy: Duration = l.busy.iter().sum();
                l.frames as f64 / busy.as_secs_f64().max(1e-9)
            })
            .collect(),
        total_pps: total as f64 / wall.as_secs_f64().max(1e-9),
        frames,
        drops,
        dispatched: lanes.iter().map(|l| l.dispatched).sum(),
        dispatch_ring_full: lanes.iter().map(|l| l.dispatch_ring_full).sum(),
    }
}
