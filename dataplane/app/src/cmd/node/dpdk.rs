//! `falcon node` on a DPDK port (issue #25, item 7): `net_memif` between
//! two processes on this host, or `net_af_packet` / `net_af_xdp` on a
//! kernel interface (one end of a veth pair, another network namespace at
//! the other end).
//!
//! Layer: application. Each process is one EAL (no hugepages, no PCI, its
//! own file prefix) whose one lcore is `--core`: the node's lcore loop runs
//! on it, pinned. The engine takes the port's MAC address and a frame size
//! the port carries: a memif buffer chain of up to 4352 bytes, the
//! interface's MTU for af_packet and af_xdp (the kernel drops longer
//! frames). The connection is set up over the control channel as on the
//! UDP port; then the same workloads run over the same loop.

use serde::Serialize;

use super::Report;
use crate::cli::NodeArgs;
use crate::error::{AppError, Result};

/// A DPDK port's counters in the report.
#[derive(Debug, Clone, Serialize)]
pub struct DpdkCounters {
    /// The virtual device.
    pub device: String,
    /// Its PMD.
    pub driver: String,
    pub rx_frames: u64,
    pub tx_frames: u64,
    /// Frames the device had no descriptor or buffer for.
    pub rx_missed: u64,
    pub rx_errors: u64,
    pub tx_errors: u64,
    pub rx_no_mbuf: u64,
    /// The engine found the mbuf pool empty.
    pub alloc_failures: u64,
    /// Dropped by the port for a wrong checksum the device flagged.
    pub rx_bad_ip_checksum: u64,
    pub rx_bad_udp_checksum: u64,
}

#[cfg(not(feature = "dpdk"))]
pub fn run(args: &NodeArgs) -> Result<Report> {
    Err(AppError::Usage(format!(
        "--port {}: this falcon was built without DPDK; build it with \
         `cargo build --release --features dpdk` (DPDK 22.11 from scripts/setup.sh)",
        args.port.name()
    )))
}

#[cfg(feature = "dpdk")]
pub(crate) use with_dpdk::{counters, run, with_port, Opened, PortSpec};

#[cfg(feature = "dpdk")]
mod with_dpdk {
    use std::path::Path;

    use falcon_core::api::{Clock, Engine, EthernetAddress};
    use falcon_dpdk::clock::TscClock;
    use falcon_dpdk::eal::Eal;
    use falcon_dpdk::ethdev::{EthPort, PortConfig};
    use falcon_dpdk::mbuf::Mbuf;
    use falcon_dpdk::mempool::Mempool;
    use falcon_dpdk::port::DpdkPort;

    use super::super::workload::Pattern;
    use super::super::{
        addresses, drive_with_faults, new_engine, set_up_connection, NodePort, Setup,
    };
    use super::*;
    use crate::cli::{NodeRole, PortKind};

    /// The largest frame over memif: a 4 KiB push with every header.
    const MEMIF_MAX_FRAME: usize = 4352;
    /// memif's buffer: a whole frame in one (the default 2048 chains a
    /// longer frame over several, and DPDK 22.11's memif then hands the
    /// receiver frames that were never sent: hundreds of thousands a
    /// second, seen here with 4 KiB pushes).
    const MEMIF_BUFFER: usize = 4608;
    /// Ethernet header bytes on top of an interface's MTU.
    const ETHERNET_HEADER: usize = 14;

    pub fn run(args: &NodeArgs) -> Result<Report> {
        let spec = PortSpec {
            kind: args.port,
            server: args.role == NodeRole::Target,
            socket: &args.socket,
            iface: args.iface.as_deref(),
            core: args.core.unwrap_or(0),
            who: format!("node {}", args.role.name()),
        };
        with_port(&spec, |opened| {
            let Opened {
                port,
                mac,
                max_frame,
                mut clock,
            } = opened;
            let (ip, _, _) = addresses(args.role);
            let mut engine: Engine<Mbuf, Pattern> =
                new_engine(args, ip, mac, Some(max_frame), clock.now())?;
            let setup = Setup::new(args, &engine)?;
            let (channel, connection, _) =
                set_up_connection(args, &mut engine, &mut clock, ip, mac)?;
            drive_with_faults(args, engine, port, clock, connection, channel, &setup)
        })
    }

    /// The DPDK port a process opens (`falcon node`, `falcon pktgen`).
    pub(crate) struct PortSpec<'a> {
        pub kind: PortKind,
        /// memif: this side serves the socket (the other connects).
        pub server: bool,
        pub socket: &'a Path,
        pub iface: Option<&'a str>,
        /// The EAL's one lcore.
        pub core: usize,
        /// This process in errors and in the EAL's file prefix
        /// (`node target`).
        pub who: String,
    }

    /// What [`with_port`] hands its closure.
    pub(crate) struct Opened {
        pub port: DpdkPort,
        pub mac: EthernetAddress,
        /// The largest frame the port carries (the engine's
        /// `max_frame_len`).
        pub max_frame: usize,
        pub clock: TscClock,
    }

    /// Brings up this process's EAL and its one port as `spec` says, runs
    /// `f` on it, then removes the EAL's runtime directory and (memif
    /// server) the socket, whatever `f` returned.
    pub(crate) fn with_port<T>(
        spec: &PortSpec<'_>,
        f: impl FnOnce(Opened) -> Result<T>,
    ) -> Result<T> {
        let who = &spec.who;
        let (vdev, device, max_frame) = match spec.kind {
            PortKind::Memif => {
                let role = if spec.server { "server" } else { "client" };
                if spec.server {
                    // A socket left by a run that was killed: the server
                    // could not bind it.
                    let _ = std::fs::remove_file(spec.socket);
                }
                (
                    format!(
                        "--vdev=net_memif0,role={role},socket={},bsize={MEMIF_BUFFER}",
                        spec.socket.display()
                    ),
                    "net_memif0",
                    MEMIF_MAX_FRAME,
                )
            }
            PortKind::AfPacket | PortKind::AfXdp => {
                let iface = spec.iface.unwrap_or_default();
                let mtu_path = format!("/sys/class/net/{iface}/mtu");
                let mtu: usize = std::fs::read_to_string(&mtu_path)
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
                    .ok_or_else(|| {
                        AppError::Usage(format!(
                            "--iface {iface}: no such interface in this network namespace ({mtu_path})"
                        ))
                    })?;
                let (pmd, device) = if spec.kind == PortKind::AfPacket {
                    ("net_af_packet", "net_af_packet0")
                } else {
                    ("net_af_xdp", "net_af_xdp0")
                };
                (
                    format!("--vdev={pmd}0,iface={iface}"),
                    device,
                    (mtu + ETHERNET_HEADER).min(MEMIF_MAX_FRAME),
                )
            }
            PortKind::Udp => unreachable!("the UDP port is not a DPDK port"),
        };
        let failed = |e: falcon_dpdk::DpdkError| {
            AppError::Failed(format!("{who}: {}: {e}", spec.kind.name()))
        };
        let prefix = format!(
            "--file-prefix=falcon-{}-{}",
            who.replace(' ', "-"),
            std::process::id()
        );
        let lcore = spec.core.to_string();
        let eal = Eal::init(&[
            "--no-huge",
            "-m",
            "256",
            "--no-pci",
            "--no-telemetry",
            &prefix,
            "-l",
            &lcore,
            "--log-level=lib.eal:error",
            &vdev,
        ])
        .map_err(failed)?;
        let result = (|| {
            // af_packet wants room for its 2 KiB ring frames in every mbuf,
            // whatever the MTU.
            let data_room = u16::try_from(128 + max_frame.max(2048)).unwrap_or(u16::MAX);
            let pool: &'static Mempool = Box::leak(Box::new(
                Mempool::new(eal, "node_pool", 8191, 256, data_room).map_err(failed)?,
            ));
            let id = EthPort::id_by_name(eal, device).map_err(failed)?;
            let eth = EthPort::start(eal, id, PortConfig::default(), pool).map_err(failed)?;
            let mac = EthernetAddress(eth.mac_address().map_err(failed)?);
            f(Opened {
                port: DpdkPort::new(eth, 0, pool, max_frame),
                mac,
                max_frame,
                clock: TscClock::new(eal),
            })
        })();
        let _ = std::fs::remove_dir_all(eal.runtime_dir());
        if spec.kind == PortKind::Memif && spec.server {
            let _ = std::fs::remove_file(spec.socket);
        }
        result
    }

    /// The port's counters as the reports show them.
    pub(crate) fn counters(port: &DpdkPort) -> DpdkCounters {
        let eth = port.eth().stats().unwrap_or_default();
        let own = port.stats();
        DpdkCounters {
            device: format!("port {}", port.eth().id()),
            driver: port.eth().info().driver.clone(),
            rx_frames: eth.rx_packets,
            tx_frames: eth.tx_packets,
            rx_missed: eth.rx_missed,
            rx_errors: eth.rx_errors,
            tx_errors: eth.tx_errors,
            rx_no_mbuf: eth.rx_no_mbuf,
            alloc_failures: own.alloc_failures + own.alloc_too_long,
            rx_bad_ip_checksum: own.rx_bad_ip_checksum,
            rx_bad_udp_checksum: own.rx_bad_udp_checksum,
        }
    }

    impl NodePort for DpdkPort {
        fn frames(&self) -> (u64, u64) {
            self.eth()
                .stats()
                .map_or((0, 0), |s| (s.rx_packets, s.tx_packets))
        }

        fn injected_losses(&self) -> u64 {
            0
        }

        fn report_into(&self, report: &mut Report) {
            report.dpdk = Some(counters(self));
        }
    }
}
