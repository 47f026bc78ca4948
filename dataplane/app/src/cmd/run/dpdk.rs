//! `falcon run` on DPDK: the EAL, the port, the node's shards on their
//! lcores, the RUE's lcore, and the main lcore's once-a-second work.

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use falcon_core::api::{
    Clock, Engine, EngineConfig, EthernetAddress, Lcore, Node, NodeConfig, NodeShard, PspConfig,
    RueMode,
};
use falcon_dpdk::clock::TscClock;
use falcon_dpdk::eal::Eal;
use falcon_dpdk::ethdev::{DeviceInfo, EthPort, Offloads, PortConfig};
use falcon_dpdk::mbuf::Mbuf;
use falcon_dpdk::mempool::Mempool;
use falcon_dpdk::port::{Dispatch, DpdkPort};
use falcon_dpdk::ring::mbuf_ring;
use psp::Version;
use ring_channel::{ring_channel, RingReceiver};

use super::connect::{self, PeerChannel};
use super::report::{DeviceCounters, End, NodeInfo, Reporter, RunReport};
use super::shard::{drive, Control, LcoreSnapshot, PortCounters, RunPort, ShardUlp};
use crate::cli::RunArgs;
use crate::cm::Message;
use crate::cmd::node::workload::Pattern;
use crate::democfg::locate;
use crate::error::{AppError, Result};
use crate::metrics::MetricsServer;
use crate::runcfg::Plan;

/// Slots of each shard's dispatch ring.
const DISPATCH_RING: u32 = 4096;
/// Connection slots per shard engine beyond the configured connections.
const SPARE_CONNECTIONS: u32 = 64;
/// How long the end of the run waits for a peer's `Done`.
const PEER_DONE_TIMEOUT: Duration = Duration::from_secs(30);

impl RunPort for DpdkPort {
    fn counters(&self) -> PortCounters {
        let s = self.stats();
        PortCounters {
            dispatched: s.dispatched,
            dispatch_received: s.dispatch_received,
            dispatch_ring_full: s.dispatch_ring_full,
            alloc_failures: s.alloc_failures,
            rx_bad_checksums: s.rx_bad_ip_checksum + s.rx_bad_udp_checksum,
        }
    }
}

fn device_counters(port: &EthPort) -> Option<DeviceCounters> {
    let s = port.stats().ok()?;
    Some(DeviceCounters {
        rx_packets: s.rx_packets,
        tx_packets: s.tx_packets,
        rx_bytes: s.rx_bytes,
        tx_bytes: s.tx_bytes,
        rx_missed: s.rx_missed,
        rx_errors: s.rx_errors,
        tx_errors: s.tx_errors,
        rx_no_mbuf: s.rx_no_mbuf,
    })
}

/// A configuration error found with DPDK up: names the key in the file.
fn config_error(args: &RunArgs, key: &str, problem: impl Into<String>) -> AppError {
    let line = std::fs::read_to_string(&args.config)
        .ok()
        .and_then(|text| locate::line_of(&text, key));
    AppError::config(&args.config, line, key, problem)
}

/// Structured logs on stderr (`RUST_LOG` filters; default `info`).
fn init_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}

/// Runs the node of `plan` to its end.
pub fn run(args: &RunArgs, plan: &Plan) -> Result<RunReport> {
    init_logs();
    if !plan.shared_cpus.is_empty() {
        tracing::warn!(cpus = ?plan.shared_cpus, "polling lcores share CPUs: they take turns a scheduler slice at a time");
    }
    let shards = plan.datapath_cpus.len() as u16;
    let failed = |call: &str, e: falcon_dpdk::DpdkError| AppError::Failed(format!("{call}: {e}"));
    remove_stale_memif_sockets(&plan.eal_args);
    let eal_args: Vec<&str> = plan.eal_args.iter().map(String::as_str).collect();
    let eal = Eal::init(&eal_args)
        .map_err(|e| config_error(args, "eal.args", format!("the EAL refused them: {e}")))?;
    tracing::info!(args = %plan.eal_args.join(" "), "EAL up");
    let result = run_on(args, plan, eal, shards, failed);
    let _ = std::fs::remove_dir_all(eal.runtime_dir());
    result
}

/// A memif server's socket left by a run that was killed: the server could
/// not bind it (also `falcon nvme-target`'s, whose EAL arguments are its
/// file's).
pub(crate) fn remove_stale_memif_sockets(eal_args: &[String]) {
    use std::os::unix::fs::FileTypeExt;
    for arg in eal_args {
        let Some(vdev) = arg.strip_prefix("--vdev=net_memif") else {
            continue;
        };
        let fields: Vec<&str> = vdev.split(',').collect();
        if !fields.contains(&"role=server") {
            continue;
        }
        for path in fields.iter().filter_map(|f| f.strip_prefix("socket=")) {
            if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

fn run_on(
    args: &RunArgs,
    plan: &Plan,
    eal: &'static Eal,
    shards: u16,
    failed: impl Fn(&str, falcon_dpdk::DpdkError) -> AppError,
) -> Result<RunReport> {
    // The port: a transmit queue per datapath lcore, receive queues as
    // asked and the device has.
    let id = EthPort::id_by_name(eal, &plan.port.device).map_err(|e| {
        config_error(
            args,
            "port.device",
            format!("no DPDK device of that name: {e}"),
        )
    })?;
    let info = DeviceInfo::get(id).map_err(|e| failed("rte_eth_dev_info_get", e))?;
    if info.max_tx_queues < shards {
        return Err(config_error(
            args,
            "lcores.datapath",
            format!(
                "{shards} datapath lcores need as many transmit queues; {} ({}) has {}",
                plan.port.device, info.driver, info.max_tx_queues
            ),
        ));
    }
    let rx_queues = match plan.port.rx_queues {
        0 => shards.min(info.max_rx_queues).max(1),
        n if n > info.max_rx_queues => {
            return Err(config_error(
                args,
                "port.rx_queues",
                format!(
                    "{} ({}) has at most {}",
                    plan.port.device, info.driver, info.max_rx_queues
                ),
            ))
        }
        n => n.min(shards),
    };
    let data_room = u16::try_from(plan.port.max_frame + 128)
        .map_err(|_| config_error(args, "port.max_frame", "too large for an mbuf"))?;
    let pool: &'static Mempool = Box::leak(Box::new(
        Mempool::new(eal, "run_pool", plan.port.mbufs, 256, data_room)
            .map_err(|e| failed("rte_pktmbuf_pool_create", e))?,
    ));
    let port_config = PortConfig {
        rx_queues,
        tx_queues: shards,
        rx_descriptors: plan.port.descriptors,
        tx_descriptors: plan.port.descriptors,
        offloads: Offloads::WHERE_AVAILABLE,
    };
    let eth = EthPort::start(eal, id, port_config, pool).map_err(|e| failed("port start", e))?;
    let mac = match plan.mac {
        Some(mac) => mac,
        None => EthernetAddress(
            eth.mac_address()
                .map_err(|e| failed("rte_eth_macaddr_get", e))?,
        ),
    };
    let mut ports = DpdkPort::on_queues(eth, shards, pool, plan.port.max_frame)
        .map_err(|e| failed("port queues", e))?;
    let device = ports[0].eth_shared();
    tracing::info!(
        device = %plan.port.device, driver = %info.driver, rx_queues, tx_queues = shards,
        %mac, "port up"
    );

    // The node and its shards.
    let psp = match &plan.psp {
        Some(p) => {
            let keys = match p.keys.clone() {
                Some(k) => k,
                None => crate::cmd::node::master_keys()?,
            };
            let mut config = PspConfig::new(keys);
            config.backend = p.backend;
            config.globals = p.globals;
            Some(config)
        }
        None => None,
    };
    let node = Node::new(NodeConfig {
        shards,
        psp,
        ..NodeConfig::default()
    })
    .map_err(|e| AppError::Failed(format!("node: {e}")))?;
    let steering = node.steering();
    if shards > 1 {
        // Software dispatch: each lcore hands another shard's frames to it.
        let mut senders = Vec::new();
        let mut receivers = Vec::new();
        for shard in 0..shards {
            let (tx, rx) = mbuf_ring(eal, &format!("run_shard{shard}"), DISPATCH_RING)
                .map_err(|e| failed("rte_ring_create", e))?;
            senders.push(tx);
            receivers.push(rx);
        }
        for (shard, (port, inbound)) in ports.iter_mut().zip(receivers).enumerate() {
            port.set_dispatch(Dispatch {
                shard: shard as u16,
                steering,
                inbound,
                outbound: senders
                    .iter()
                    .enumerate()
                    .map(|(s, ring)| (s != shard).then(|| ring.clone()))
                    .collect(),
            });
        }
    }
    let per_shard = plan.connections.len() as u32 * 2 / u32::from(shards) + SPARE_CONNECTIONS;
    let mut rue_core = None;
    let mut rue_channels = Vec::new();
    if plan.rue_cpu.is_some() {
        let RueMode::Profiles(profiles) = &plan.rue else {
            return Err(config_error(
                args,
                "lcores.rue",
                "needs a RUE algorithm (rue.algorithm)",
            ));
        };
        let mut rue = rue::Rue::new(
            rue::RueConfig {
                connections: per_shard * u32::from(shards),
                ..rue::RueConfig::default()
            },
            rue::Profiles::clone(profiles),
        )
        .map_err(|e| AppError::Failed(format!("RUE: {e}")))?;
        let queue = EngineConfig::default().rue_queue;
        for _ in 0..shards {
            rue_channels.push(Some(rue.add_core(queue)));
        }
        rue_core = Some(rue);
    }
    let mut clock = TscClock::new(eal);
    let now = clock.now();
    let mut engines: Vec<Engine<Mbuf, Pattern>> = Vec::new();
    for shard in 0..shards {
        let config = EngineConfig {
            local_ip: plan.ip,
            local_mac: mac,
            node: Some(NodeShard {
                node: Arc::clone(&node),
                shard,
            }),
            max_frame_len: plan.port.max_frame,
            max_connections: per_shard,
            rue: match rue_core {
                Some(_) => RueMode::External {
                    id_base: u32::from(shard) * per_shard,
                },
                None => plan.rue.clone(),
            },
            delivery: plan.delivery.clone(),
            resources: plan.resources,
            ..EngineConfig::default()
        };
        engines.push(
            Engine::new(config, now)
                .map_err(|e| AppError::Failed(format!("engine of shard {shard}: {e}")))?,
        );
    }
    let version = plan.psp.as_ref().map_or(Version::Aes128Gcm, |p| p.version);
    let wiring = connect::set_up(now, plan, &mut engines, steering, mac, version)?;
    tracing::info!(
        connections = wiring.ulps.iter().map(ShardUlp::len).sum::<usize>(),
        peers = wiring.channels.len(),
        "connections set up"
    );
    let mut channels = wiring.channels;

    // Signals: the first SIGINT or SIGTERM stops the node cleanly.
    let signalled = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&signalled))
            .map_err(|e| AppError::Failed(format!("signal handler: {e}")))?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let control = Control::new(
        Arc::clone(&stop),
        Duration::from_secs_f64(args.drain),
        Duration::from_secs(1),
        usize::from(shards),
    );

    // The RUE's lcore, then the datapath lcores (lcore 1 + shard).
    let rue_stop = Arc::new(AtomicBool::new(false));
    let rue_job = match rue_core {
        Some(mut rue) => {
            let lcore = u32::from(shards) + 1;
            let stop = Arc::clone(&rue_stop);
            // On a CPU of its own it spins; beside a datapath lcore it
            // yields, or the two take turns a scheduler slice at a time.
            let idle = if plan
                .rue_cpu
                .is_some_and(|cpu| plan.datapath_cpus.contains(&cpu))
            {
                rue::Idle::Yield
            } else {
                rue::Idle::Spin
            };
            Some(
                falcon_dpdk::lcore::launch(eal, lcore, move || {
                    rue.run(&stop, idle);
                    rue.counters()
                })
                .map_err(|e| failed("RUE lcore", e))?,
            )
        }
        None => None,
    };
    let mut receivers: Vec<RingReceiver<LcoreSnapshot>> = Vec::new();
    let mut jobs = Vec::new();
    for (shard, ((engine, port), mut ulp)) in
        engines.into_iter().zip(ports).zip(wiring.ulps).enumerate()
    {
        let (tx, rx) = ring_channel(NonZeroUsize::MIN);
        receivers.push(rx);
        let control = control.clone();
        let channel = rue_channels.get_mut(shard).and_then(Option::take);
        let job = falcon_dpdk::lcore::launch(eal, 1 + shard as u32, move || {
            let mut lcore = Lcore::new(engine, port, clock);
            if let Some(channel) = channel {
                lcore = lcore.with_rue(channel);
            }
            drive(shard as u16, &mut lcore, &mut ulp, &control, |s| {
                let _ = tx.send(s);
            });
            // The engine, its frames and the port go back to the pool here.
            drop((lcore, ulp));
        })
        .map_err(|e| failed("datapath lcore", e))?;
        jobs.push(job);
    }

    // The main lcore: a stats line a second, metrics, the end.
    let info = NodeInfo {
        config: args.config.display().to_string(),
        device: plan.port.device.clone(),
        driver: info.driver.clone(),
        psp: plan.psp.is_some(),
        rue: if plan.rue_cpu.is_some() {
            "lcore"
        } else {
            "inline"
        },
    };
    let metrics_addr = args.metrics.or(plan.metrics);
    let mut metrics = match metrics_addr {
        Some(addr) => {
            let server = MetricsServer::start(addr, |text: &String| text.clone())
                .map_err(|e| AppError::Usage(format!("metrics {addr}: {e}")))?;
            tracing::info!(addr = %server.local_addr(), "metrics endpoint up");
            Some(server)
        }
        None => None,
    };
    let mut reporter = Reporter::new(plan.datapath_cpus.clone());
    let started = Instant::now();
    let mut stopped_by: Option<&'static str> = None;
    let mut stopped_at = None;
    let mut device_then = device_counters(&device);
    let mut next_line = Instant::now() + Duration::from_secs(1);
    let serving: Vec<usize> = (0..channels.len())
        .filter(|&i| !channels[i].initiating)
        .collect();
    let mut peers_done = vec![false; channels.len()];
    loop {
        std::thread::sleep(Duration::from_millis(50));
        for rx in &mut receivers {
            while let Ok(s) = rx.try_recv() {
                reporter.take(s);
            }
        }
        // A lcore that ended without its last snapshot panicked: the node
        // stops (and fails).
        let crashed = jobs.iter().any(|j| j.is_finished()) && !reporter.all_last();
        if stopped_by.is_some() && (reporter.all_last() || jobs.iter().all(|j| j.is_finished())) {
            break;
        }
        if Instant::now() >= next_line {
            next_line += Duration::from_secs(1);
            let device_now = device_counters(&device);
            if !args.quiet {
                for line in reporter.lines(device_now, device_then, args.verbose) {
                    eprintln!("{line}");
                }
            }
            device_then = device_now;
            if let Some(m) = &mut metrics {
                m.publish(reporter.render(device_now, &info));
            }
        }
        // Peers this node serves say when their initiators are done.
        for &i in &serving {
            if let Ok(Some(Message::Done { .. })) = channels[i].channel.try_recv() {
                peers_done[i] = true;
            }
        }
        if stopped_by.is_none() {
            let reason = if crashed {
                Some("lcore-failure")
            } else if signalled.load(Ordering::Relaxed) {
                Some("signal")
            } else if args
                .duration
                .is_some_and(|d| started.elapsed().as_secs_f64() >= d)
            {
                Some("duration")
            } else if args.duration.is_none() && reporter.initiators_done() && serving.is_empty() {
                Some("done")
            } else if !serving.is_empty() && serving.iter().all(|&i| peers_done[i]) {
                Some("peers")
            } else {
                None
            };
            if let Some(reason) = reason {
                tracing::info!(
                    reason,
                    "stopping: initiators submit nothing more, outstanding transactions drain"
                );
                stop.store(true, Ordering::Relaxed);
                stopped_by = Some(reason);
                stopped_at = Some(started.elapsed().as_secs_f64());
            }
        }
    }
    let mut lcores_ok = true;
    for job in jobs {
        if job.wait().is_err() {
            lcores_ok = false;
            tracing::error!("a datapath lcore panicked");
        }
    }
    rue_stop.store(true, Ordering::Relaxed);
    if let Some(job) = rue_job {
        match job.wait() {
            Ok(c) => tracing::info!(events = c.events, "RUE lcore stopped"),
            Err(_) => lcores_ok = false,
        }
    }
    let device_now = device_counters(&device);
    if let Some(m) = &mut metrics {
        m.publish(reporter.render(device_now, &info));
    }
    let end = End {
        seconds: stopped_at.unwrap_or_else(|| started.elapsed().as_secs_f64()),
        stopped_by: stopped_by.unwrap_or("signal"),
        peers_ok: lcores_ok,
    };
    let mut report = reporter.report(&info, device_now, end);
    report.ok &= finish_with_peers(&mut channels, &report);
    Ok(report)
}

/// The end of the run with each peer: an initiating node says it is done
/// and waits for the peer's answer; a serving node answers.
fn finish_with_peers(channels: &mut [PeerChannel], report: &RunReport) -> bool {
    // What a peer compares with its own counts: this node's totals, and
    // its target ends' pushes and pulls in the terms of `falcon pktgen`
    // (whole payloads, the workload's 8-byte header included), so that a
    // pktgen generator can use this node as its reflector.
    let header = crate::cmd::node::workload::HEADER_LEN as u64;
    let summary = serde_json::json!({
        "transactions": report.transactions,
        "verified_bytes": report.verified_bytes,
        "failures": report.failures,
        "first_failure": report.first_failure,
        "pushes": report.pushes_served,
        "pulls": report.pulls_served,
        "push_bytes": report.served_push_bytes + header * report.pushes_served,
        "pull_bytes": report.served_pull_bytes + header * report.pulls_served,
    });
    let mut ok = true;
    for ch in channels.iter_mut() {
        let done = Message::Done {
            report: summary.clone(),
        };
        if ch.initiating {
            if let Err(e) = ch.channel.send(&done) {
                tracing::warn!(error = %e, "telling a peer the run is done");
                ok = false;
                continue;
            }
            match ch.channel.recv(PEER_DONE_TIMEOUT) {
                Ok(Message::Done { report }) => {
                    tracing::info!(peer = ch.peer, report = %report, "peer done");
                    if report
                        .get("failures")
                        .and_then(serde_json::Value::as_u64)
                        .unwrap_or(0)
                        > 0
                    {
                        ok = false;
                    }
                }
                other => {
                    tracing::warn!(answer = ?other.map(|_| ()), "a peer did not answer Done");
                    ok = false;
                }
            }
        } else if ch.channel.send(&done).is_err() {
            // The initiator may have gone already: not this node's failure.
            tracing::info!(peer = ch.peer, "peer gone before the answer to its Done");
        }
    }
    ok
}
