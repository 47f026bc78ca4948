//! `falcon bench pipeline`: what DPDK's I/O costs through this project's
//! wrappers (issue #25, item 6).
//!
//! Layer: application (a benchmark). Two virtual ports on one lcore, frames
//! forwarded between them both ways in bursts of 32, as `dpdk-testpmd
//! --forward-mode=io` does: once straight on the bindings
//! (`falcon_dpdk::forward::forward_raw`, `forward_mpps`), once through
//! `DpdkPort` and the engine's `Port` trait (`forward_port`,
//! `port_forward_mpps`), in interleaved slices so that the host's drift
//! moves both alike; `port_ratio` is the median of the per-slice ratios
//! (goal ≥ 0.9: the safe wrappers cost under 10 %).
//!
//! The second ratio, `falcon_ratio`, is `falcon_mpps` (a Falcon target on
//! lcore 0 fed real Push Data over a `net_ring` pair by a generator on
//! lcore 1) over `engine_mpps` (the same target fed the same frames from
//! memory): see [`super::pipeline_falcon`] (goal ≥ 0.8, DESIGN §8).
//!
//! The third part, `scaling`, runs Falcon targets on one datapath lcore and
//! on `--lcores` N, each owning a shard of one node, frames reaching their
//! shard by receive queue and by software dispatch: per-lcore and total
//! Mpps and the scaling efficiency from 1 to N (see
//! [`super::pipeline_lcores`]; issue #26).

use serde::Serialize;

use crate::cli::BenchPipelineArgs;
use crate::error::{AppError, Result};

/// Slices each loop's time is cut into.
pub const ROUNDS: usize = 10;
/// DESIGN §8 / issue #25: the wrappers cost under 10 %.
pub const BAR_PORT_RATIO: f64 = 0.9;
/// DESIGN §8: DPDK I/O takes under a fifth of the Falcon loop's budget.
pub const BAR_FALCON_RATIO: f64 = 0.8;

#[derive(Debug, Serialize)]
pub struct Report {
    /// The virtual devices.
    pub vdev: String,
    /// Frame bytes.
    pub size: u32,
    /// Where the loops ran.
    pub lcores: &'static str,
    /// Frames per second forwarded straight on the bindings, millions
    /// (both directions together).
    pub forward_mpps: f64,
    /// The same through `DpdkPort` and the `Port` trait.
    pub port_forward_mpps: f64,
    /// Median of the per-slice `port_forward / forward` ratios.
    pub port_ratio: f64,
    /// Lowest and highest per-slice ratio.
    pub port_ratio_range: [f64; 2],
    /// Frames received that the other port had no room for, both loops.
    pub dropped: u64,
    pub rounds: usize,
    /// `port_ratio ≥ 0.9`.
    pub meets_port_bar: bool,
    /// The Falcon ratio's ports and lcores.
    pub falcon_vdev: &'static str,
    pub falcon_lcores: &'static str,
    /// PSP on the Falcon frames.
    pub psp: bool,
    /// Push Data payload bytes.
    pub push_bytes: u32,
    /// Push Data frames per second the DPDK-fed target handled, millions.
    pub falcon_mpps: f64,
    /// The same target fed the same frames from memory.
    pub engine_mpps: f64,
    /// Median of the per-round `falcon / engine` ratios.
    pub falcon_ratio: f64,
    pub falcon_ratio_range: [f64; 2],
    /// Frames per round, rounds.
    pub falcon_frames: u64,
    pub falcon_rounds: u32,
    /// Frames the DPDK-fed targets dropped, by reason (none expected: the
    /// ring loses nothing).
    pub falcon_drops: u64,
    pub falcon_drop_reasons: std::collections::BTreeMap<&'static str, u64>,
    /// Frames per receive burst of the DPDK-fed target over the bursts
    /// that brought any (median over rounds): near 32 when
    /// the target is the bottleneck, lower when the generator is.
    pub falcon_rx_burst: f64,
    /// `falcon_ratio ≥ 0.8`.
    pub meets_falcon_bar: bool,
    /// Targets on 1 and N lcores.
    pub scaling: Scaling,
    pub build: &'static str,
}

/// The scaling measurement (`--lcores`).
#[derive(Debug, Serialize)]
pub struct Scaling {
    /// N.
    pub lcores: u16,
    pub rounds: u32,
    /// Push Data frames each lcore handles a round, and the chunk it is
    /// fed in (untimed fills between timed drains).
    pub frames_per_lcore: u64,
    pub chunk_frames: usize,
    /// One lcore: Mpps, median over rounds.
    pub one_lcore_mpps: f64,
    /// N lcores, each shard's frames on its own receive queue.
    pub by_queue: Option<LcoreScaling>,
    /// N lcores, one receive queue, lcore 0 dispatching in software.
    pub dispatched: Option<LcoreScaling>,
}

/// N lcores in one way of steering.
#[derive(Debug, Serialize)]
pub struct LcoreScaling {
    /// Each lcore's frames over its own busy time, Mpps, median over
    /// rounds.
    pub lcore_mpps: Vec<f64>,
    /// All frames over the wall time, Mpps, median over rounds.
    pub total_mpps: f64,
    /// `total_mpps / (N × one_lcore_mpps)` per round, median.
    pub scaling_efficiency: f64,
    pub scaling_efficiency_range: [f64; 2],
    /// Frames lcore 0 handed to other shards' lcores, a round (dispatch
    /// only), and frames a dispatch ring refused (none expected).
    pub dispatched_frames: u64,
    pub dispatch_ring_full: u64,
    /// Frames the engines dropped, by reason (none expected).
    pub drops: u64,
    pub drop_reasons: std::collections::BTreeMap<&'static str, u64>,
}

pub fn print_text(r: &Report) {
    let verdict = |ok| if ok { "meets the bar" } else { "BELOW THE BAR" };
    println!(
        "Pipeline: {} ports, {} B frames, {}",
        r.vdev, r.size, r.lcores
    );
    println!(
        "  forward (bindings)  {:8.2} Mpps\n  forward (DpdkPort)  {:8.2} Mpps\n  port_ratio {:.3} ({:.3}..{:.3}; bar {}) {}",
        r.forward_mpps,
        r.port_forward_mpps,
        r.port_ratio,
        r.port_ratio_range[0],
        r.port_ratio_range[1],
        BAR_PORT_RATIO,
        verdict(r.meets_port_bar)
    );
    println!(
        "Falcon target: {} B pushes, PSP {}, {}, {}; {} rounds of {} frames",
        r.push_bytes,
        if r.psp { "on" } else { "off" },
        r.falcon_vdev,
        r.falcon_lcores,
        r.falcon_rounds,
        r.falcon_frames
    );
    println!(
        "  fed from memory     {:8.2} Mpps\n  fed over DPDK       {:8.2} Mpps ({} dropped: {:?}; {:.1} frames a receive burst)\n  falcon_ratio {:.3} ({:.3}..{:.3}; bar {}) {}",
        r.engine_mpps,
        r.falcon_mpps,
        r.falcon_drops,
        r.falcon_drop_reasons,
        r.falcon_rx_burst,
        r.falcon_ratio,
        r.falcon_ratio_range[0],
        r.falcon_ratio_range[1],
        BAR_FALCON_RATIO,
        verdict(r.meets_falcon_bar)
    );
    let sc = &r.scaling;
    println!(
        "Scaling: {} B pushes, PSP {}, {} rounds of {} frames a lcore (fed in untimed chunks of {})",
        r.push_bytes,
        if r.psp { "on" } else { "off" },
        sc.rounds,
        sc.frames_per_lcore,
        sc.chunk_frames
    );
    println!("  1 lcore             {:8.2} Mpps", sc.one_lcore_mpps);
    for (name, run) in [("by queue", &sc.by_queue), ("dispatched", &sc.dispatched)] {
        let Some(run) = run else { continue };
        let lcores: Vec<String> = run.lcore_mpps.iter().map(|m| format!("{m:.2}")).collect();
        println!(
            "  {} lcores {:<10} {:8.2} Mpps (per lcore {}; efficiency {:.3}, {:.3}..{:.3}{})",
            sc.lcores,
            name,
            run.total_mpps,
            lcores.join(" / "),
            run.scaling_efficiency,
            run.scaling_efficiency_range[0],
            run.scaling_efficiency_range[1],
            if run.dispatched_frames > 0 {
                format!("; {} frames dispatched a round", run.dispatched_frames)
            } else {
                String::new()
            }
        );
    }
}

#[cfg(not(feature = "dpdk"))]
pub fn run(_args: &BenchPipelineArgs) -> Result<Report> {
    Err(AppError::Usage(
        "bench pipeline: this falcon was built without DPDK; build it with \
         `cargo build --release --features dpdk` (DPDK 22.11 from scripts/setup.sh)"
            .into(),
    ))
}

#[cfg(feature = "dpdk")]
pub fn run(args: &BenchPipelineArgs) -> Result<Report> {
    use falcon_dpdk::eal::Eal;
    use falcon_dpdk::ethdev::{EthPort, PortConfig};
    use falcon_dpdk::forward::{forward_port, forward_raw};
    use falcon_dpdk::mempool::Mempool;
    use falcon_dpdk::port::DpdkPort;

    use super::slices::{median, range, ratios, Rates};

    if !(args.seconds.is_finite() && args.seconds > 0.0) {
        return Err(AppError::Usage(format!(
            "--seconds must be positive, got {}",
            args.seconds
        )));
    }
    if args.size > 4096 {
        return Err(AppError::Usage(format!(
            "--size {}: the Falcon target's pushes are at most 4096 bytes a frame",
            args.size
        )));
    }
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    if usize::from(args.lcores) > cpus {
        return Err(AppError::Usage(format!(
            "--lcores {}: this process may use {cpus} CPUs, and each polling lcore needs its own",
            args.lcores
        )));
    }
    if args.vdev != "net_null" {
        return Err(AppError::Usage(format!(
            "--vdev {}: only net_null is measured yet (two null ports: the I/O framework alone)",
            args.vdev
        )));
    }
    let failed = |e: falcon_dpdk::DpdkError| AppError::Failed(format!("bench pipeline: {e}"));
    let prefix = format!("--file-prefix=falcon-pipeline-{}", std::process::id());
    let size = format!("size={}", args.size);
    let vdev0 = format!("--vdev=net_null0,{size}");
    let vdev1 = format!("--vdev=net_null1,{size}");
    let lcores = format!("0-{}", args.lcores.max(2) - 1);
    let eal = Eal::init(&[
        "--no-huge",
        "-m",
        "768",
        "--no-pci",
        "--no-shconf",
        "--no-telemetry",
        &prefix,
        "-l",
        &lcores,
        "--log-level=lib.eal:error",
        &vdev0,
        &vdev1,
    ])
    .map_err(failed)?;
    let data_room = u16::try_from(args.size + 128)
        .unwrap_or(u16::MAX)
        .max(2048 + 128);
    let pool: &'static Mempool = Box::leak(Box::new(
        Mempool::new(eal, "pipeline", 16383, 256, data_room).map_err(failed)?,
    ));
    let start = |name: &str| -> Result<DpdkPort> {
        let id = EthPort::id_by_name(eal, name).map_err(failed)?;
        let port = EthPort::start(eal, id, PortConfig::default(), pool).map_err(failed)?;
        Ok(DpdkPort::new(port, 0, pool, usize::from(data_room) - 128))
    };
    let (mut a, mut b) = (start("net_null0")?, start("net_null1")?);
    // Each port was started for one `DpdkPort`, so the device is its alone.
    fn sole(port: &mut DpdkPort) -> &mut EthPort {
        port.eth_mut().expect("one DpdkPort on the device")
    }
    let slice = args.seconds / ROUNDS as f64;
    // Warm-up: the pool's caches, the branch predictors.
    let _ = forward_raw(eal, sole(&mut a), sole(&mut b), slice / 2.0);
    let _ = forward_port(eal, &mut a, &mut b, slice / 2.0);
    let (mut raw, mut port) = (Rates::default(), Rates::default());
    let mut dropped = 0;
    let record = |rates: &mut Rates, run: falcon_dpdk::forward::Forwarded| {
        rates.record(run.frames, std::time::Duration::from_secs_f64(run.seconds));
        run.dropped
    };
    for round in 0..ROUNDS {
        if round % 2 == 0 {
            dropped += record(
                &mut raw,
                forward_raw(eal, sole(&mut a), sole(&mut b), slice),
            );
            dropped += record(&mut port, forward_port(eal, &mut a, &mut b, slice));
        } else {
            dropped += record(&mut port, forward_port(eal, &mut a, &mut b, slice));
            dropped += record(
                &mut raw,
                forward_raw(eal, sole(&mut a), sole(&mut b), slice),
            );
        }
    }
    let per_slice = ratios(&port, &raw);
    let port_ratio = median(&per_slice);
    drop((a, b));

    let mut rig = super::pipeline_falcon::Rig::new(
        eal,
        args.psp == crate::cli::OnOff::On,
        args.size as usize,
    )?;
    // Warm-up: the engines' code and the pool.
    rig.round(false)?;
    let (mut engine, mut falcon) = (Rates::default(), Rates::default());
    let mut falcon_frames = 0;
    let mut bursts = Vec::new();
    let mut drops = falcon_core::api::DropCounters::default();
    for round in 0..args.falcon_rounds {
        let r = rig.round(round % 2 == 1)?;
        engine.record(
            r.frames,
            std::time::Duration::from_secs_f64(r.frames as f64 / r.engine_pps),
        );
        falcon.record(
            r.frames,
            std::time::Duration::from_secs_f64(r.frames as f64 / r.falcon_pps),
        );
        falcon_frames = r.frames;
        drops.merge(&r.drops);
        bursts.push(r.rx_burst);
    }
    let per_round = ratios(&falcon, &engine);
    let falcon_ratio = median(&per_round);
    drop(rig);
    let scaling = scaling(eal, args)?;
    let _ = std::fs::remove_dir_all(eal.runtime_dir());
    Ok(Report {
        vdev: args.vdev.clone(),
        size: args.size,
        lcores: "one lcore (0), both directions",
        forward_mpps: raw.mean() / 1e6,
        port_forward_mpps: port.mean() / 1e6,
        port_ratio,
        port_ratio_range: range(&per_slice),
        dropped,
        rounds: ROUNDS,
        meets_port_bar: port_ratio >= BAR_PORT_RATIO,
        falcon_vdev: "net_ring pair (rte_eth_from_rings), 1024 descriptors",
        falcon_lcores: "target on lcore 0, generator on lcore 1",
        psp: (args.psp == crate::cli::OnOff::On),
        push_bytes: args.size,
        falcon_mpps: falcon.mean() / 1e6,
        engine_mpps: engine.mean() / 1e6,
        falcon_ratio,
        falcon_ratio_range: range(&per_round),
        falcon_frames,
        falcon_rounds: args.falcon_rounds,
        falcon_drops: drops.total(),
        falcon_drop_reasons: drops.iter().filter(|&(_, n)| n > 0).collect(),
        falcon_rx_burst: median(&bursts),
        meets_falcon_bar: falcon_ratio >= BAR_FALCON_RATIO,
        scaling,
        build: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
    })
}

/// The scaling rounds: a warm-up, then `--scaling-rounds` rounds.
#[cfg(feature = "dpdk")]
fn scaling(eal: &'static falcon_dpdk::eal::Eal, args: &BenchPipelineArgs) -> Result<Scaling> {
    use super::pipeline_lcores::{Run, ScalingRig};
    use super::slices::{median, range};

    let mut rig = ScalingRig::new(
        eal,
        args.psp == crate::cli::OnOff::On,
        args.size as usize,
        args.lcores,
    )?;
    rig.round(0)?;
    let mut single = Vec::new();
    let (mut by_queue, mut dispatched) = (Vec::new(), Vec::new());
    for round in 0..args.scaling_rounds {
        let (one, q, d) = rig.round(round + 1)?;
        single.push(one);
        by_queue.extend(q);
        dispatched.extend(d);
    }
    let one: Vec<f64> = single.iter().map(|r| r.total_pps).collect();
    let lcores = f64::from(args.lcores);
    let summary = |runs: &[Run]| -> Option<LcoreScaling> {
        let first = runs.first()?;
        let efficiency: Vec<f64> = runs
            .iter()
            .zip(&one)
            .map(|(r, one)| r.total_pps / (lcores * one.max(f64::MIN_POSITIVE)))
            .collect();
        let mut drops = falcon_core::api::DropCounters::default();
        for r in runs {
            drops.merge(&r.drops);
        }
        Some(LcoreScaling {
            lcore_mpps: (0..first.lcore_pps.len())
                .map(|i| {
                    let v: Vec<f64> = runs.iter().map(|r| r.lcore_pps[i]).collect();
                    median(&v) / 1e6
                })
                .collect(),
            total_mpps: median(&runs.iter().map(|r| r.total_pps).collect::<Vec<_>>()) / 1e6,
            scaling_efficiency: median(&efficiency),
            scaling_efficiency_range: range(&efficiency),
            dispatched_frames: first.dispatched,
            dispatch_ring_full: runs.iter().map(|r| r.dispatch_ring_full).sum(),
            drops: drops.total(),
            drop_reasons: drops.iter().filter(|&(_, n)| n > 0).collect(),
        })
    };
    Ok(Scaling {
        lcores: args.lcores,
        rounds: args.scaling_rounds,
        frames_per_lcore: single.first().map_or(0, |r| r.frames[0]),
        chunk_frames: super::pipeline_falcon::CHUNK,
        one_lcore_mpps: median(&one) / 1e6,
        by_queue: summary(&by_queue),
        dispatched: summary(&dispatched),
    })
}
