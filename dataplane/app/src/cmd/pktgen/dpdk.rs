//! `falcon pktgen` on a DPDK port: `falcon node`'s backends (memif between
//! two processes on this host, af_packet or af_xdp on a kernel interface),
//! one EAL per process on `--core`.
//!
//! Layer: application. Opens the port through
//! [`node::dpdk::with_port`](crate::cmd::node::dpdk) (which also removes
//! the EAL's runtime directory and a memif server's socket at the end),
//! builds the engine on it and hands both to [`super::drive`]. The
//! reflector serves the memif socket, the generator connects to it.

use super::report::Report;
use crate::cli::PktgenArgs;
use crate::error::Result;

#[cfg(not(feature = "dpdk"))]
pub fn run(args: &PktgenArgs) -> Result<Report> {
    Err(crate::error::AppError::Usage(format!(
        "pktgen --port {}: this falcon was built without DPDK; build it with \
         `cargo build --release --features dpdk` (DPDK 22.11 from scripts/setup.sh)",
        args.port.kind().name()
    )))
}

#[cfg(feature = "dpdk")]
pub use with_dpdk::run;

#[cfg(feature = "dpdk")]
mod with_dpdk {
    use std::net::TcpListener;
    use std::time::Duration;

    use falcon_core::api::{Clock, Engine, Lcore};
    use falcon_dpdk::mbuf::Mbuf;
    use falcon_dpdk::port::DpdkPort;

    use super::super::{drive, failed, new_engine, CountedPort, Wire, SETUP_TIMEOUT};
    use super::*;
    use crate::cli::PktgenRole;
    use crate::cm::Channel;
    use crate::cmd::node::dpdk::{counters, with_port, Opened, PortSpec};
    use crate::cmd::node::workload::Pattern;
    use crate::cmd::node::DpdkCounters;
    use crate::error::AppError;

    pub fn run(args: &PktgenArgs) -> Result<Report> {
        let spec = PortSpec {
            kind: args.port.kind(),
            server: args.role == PktgenRole::Reflector,
            socket: &args.socket,
            iface: args.iface.as_deref(),
            core: args.core,
            who: format!("pktgen {}", args.role.name()),
        };
        with_port(&spec, |opened| {
            let Opened {
                port,
                mac,
                max_frame,
                mut clock,
            } = opened;
            let engine: Engine<Mbuf, Pattern> = new_engine(args, mac, max_frame, clock.now())?;
            drive(args, Lcore::new(engine, port, clock), mac, || {
                open_channel(args)
            })
        })
    }

    /// The control channel: the reflector listens, the generator connects.
    fn open_channel(args: &PktgenArgs) -> Result<Channel> {
        match args.role {
            PktgenRole::Generator => {
                Channel::connect(args.control, SETUP_TIMEOUT).map_err(|e| failed(args.role, e))
            }
            PktgenRole::Reflector => {
                let listener = TcpListener::bind(args.control)
                    .map_err(|e| AppError::Usage(format!("--control {}: {e}", args.control)))?;
                // `--seconds` bounds the wait for the generator too.
                let wait = args.seconds.map_or(SETUP_TIMEOUT, |s| {
                    Duration::from_secs_f64(s).min(SETUP_TIMEOUT)
                });
                Channel::accept(&listener, wait).map_err(|e| failed(args.role, e))
            }
        }
    }

    impl CountedPort for DpdkPort {
        fn wire(&self) -> Wire {
            let s = self.eth().stats().unwrap_or_default();
            Wire {
                rx_frames: s.rx_packets,
                tx_frames: s.tx_packets,
                rx_bytes: s.rx_bytes,
                tx_bytes: s.tx_bytes,
            }
        }

        fn dpdk(&self) -> Option<DpdkCounters> {
            Some(counters(self))
        }
    }
}
