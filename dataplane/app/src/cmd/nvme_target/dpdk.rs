//! `falcon nvme-target` on a DPDK ethdev (`[port] kind = "dpdk"`): a
//! virtual device of `port.eal_args` (`net_memif`, `net_af_packet`, ...)
//! or a PCI device.
//!
//! Layer: application. The process is one EAL (the file's arguments, its
//! one lcore `node.core`, its own file prefix), the port one queue pair
//! whose MAC the engine takes (unless `node.mac`), frames up to
//! `port.max_frame`; then the same sessions and loop as on the UDP port.
//! The port keeps no peer table: frames go to the addresses the initiators
//! offered.

use super::report::Report;
use crate::cli::NvmeTargetArgs;
use crate::error::{AppError, Result};
use crate::nvmecfg::Plan;

#[cfg(not(feature = "dpdk"))]
pub fn run(args: &NvmeTargetArgs, _plan: &Plan) -> Result<Report> {
    Err(AppError::Usage(format!(
        "{}: port.kind = \"dpdk\": this falcon was built without DPDK; build it with \
         `cargo build --release --features dpdk` (DPDK 22.11 from scripts/setup.sh)",
        args.config.display()
    )))
}

#[cfg(feature = "dpdk")]
pub use with_dpdk::run;

#[cfg(feature = "dpdk")]
mod with_dpdk {
    use falcon_core::api::{Clock, EthernetAddress, Lcore};
    use falcon_dpdk::clock::TscClock;
    use falcon_dpdk::eal::Eal;
    use falcon_dpdk::ethdev::{EthPort, PortConfig};
    use falcon_dpdk::mempool::Mempool;
    use falcon_dpdk::port::DpdkPort;

    use super::super::serve::{self, ServedPort, Serving, Sessions};
    use super::super::{config_error, engine, listen, signals, target};
    use super::*;
    use crate::cmd::run::dpdk::remove_stale_memif_sockets;
    use crate::nvmecfg::PortPlan;

    impl ServedPort for DpdkPort {
        fn frames(&self) -> (u64, u64) {
            self.eth()
                .stats()
                .map_or((0, 0), |s| (s.rx_packets, s.tx_packets))
        }

        fn report_into(&self, report: &mut Report) {
            report.dpdk = Some(crate::cmd::node::dpdk::counters(self));
        }
    }

    pub fn run(args: &NvmeTargetArgs, plan: &Plan) -> Result<Report> {
        let PortPlan::Dpdk {
            eal_args,
            file_prefix,
            device,
            max_frame,
            mbufs,
        } = &plan.port
        else {
            return Err(AppError::Failed("nvme-target: not a DPDK port".into()));
        };
        let failed = |call: &str, e: falcon_dpdk::DpdkError| {
            AppError::Failed(format!("nvme-target: {call}: {e}"))
        };
        remove_stale_memif_sockets(eal_args);
        let mut all = eal_args.clone();
        // Invariant: nvmecfg requires node.core with a DPDK port.
        all.push("-l".into());
        all.push(plan.core.unwrap_or(0).to_string());
        all.push(format!(
            "--file-prefix={}",
            file_prefix
                .clone()
                .unwrap_or_else(|| format!("falcon-nvme-target-{}", std::process::id()))
        ));
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        let eal = Eal::init(&all).map_err(|e| {
            config_error(args, "port.eal_args", format!("the EAL refused them: {e}"))
        })?;
        let result = (|| {
            let id = EthPort::id_by_name(eal, device).map_err(|e| {
                config_error(
                    args,
                    "port.device",
                    format!("no DPDK device of that name: {e}"),
                )
            })?;
            let data_room = u16::try_from(max_frame + 128).map_err(|_| {
                config_error(args, "port.max_frame", "too large for an mbuf".into())
            })?;
            let pool: &'static Mempool = Box::leak(Box::new(
                Mempool::new(eal, "nvme_target_pool", *mbufs, 256, data_room)
                    .map_err(|e| failed("rte_pktmbuf_pool_create", e))?,
            ));
            let eth = EthPort::start(eal, id, PortConfig::default(), pool)
                .map_err(|e| failed("port start", e))?;
            let mac = match plan.mac {
                Some(mac) => mac,
                None => EthernetAddress(
                    eth.mac_address()
                        .map_err(|e| failed("rte_eth_macaddr_get", e))?,
                ),
            };
            let mut clock = TscClock::new(eal);
            let engine = engine(plan, mac, Some(*max_frame), clock.now())?;
            let port = DpdkPort::new(eth, 0, pool, *max_frame);
            let (target, namespaces) = target(plan)?;
            let listener = listen(args, plan)?;
            eprintln!(
                "nvme-target: serving {} namespace(s) on {device} (MAC {mac}), control {}",
                namespaces.len(),
                plan.control
            );
            let lcore = Lcore::new(engine, port, clock);
            let sessions = Sessions::new(listener, plan, mac, None, &namespaces);
            serve::serve(
                args,
                plan,
                lcore,
                Serving::new(target),
                sessions,
                namespaces,
                signals()?,
            )
        })();
        let _ = std::fs::remove_dir_all(eal.runtime_dir());
        remove_stale_memif_sockets(eal_args);
        result
    }
}
