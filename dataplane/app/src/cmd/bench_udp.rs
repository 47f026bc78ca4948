//! `falcon bench udp`: Falcon between two processes over the kernel UDP
//! port, in one command (issue #25, item 5).
//!
//! Layer: application (a benchmark). Owns nothing but the assembly: two
//! free loopback ports and a control port, the target as a child
//! `falcon node` process pinned to one core, the initiator
//! ([`super::node::run`]) in this process pinned to the other. What it
//! measures is what two `falcon node` commands measure: two real
//! processes, each its own engine, socket and core.

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::process::{Command, Stdio};

use super::node::{self, Report};
use crate::cli::{
    BenchUdpArgs, NodeArgs, NodeRole, OnOff, PortKind, NODE_MIN_RTO_US, NODE_TARGET_DELAY_US,
};
use crate::error::{AppError, Result};

/// Grace the target gets beyond the initiator's time before it gives up.
const TARGET_GRACE_S: f64 = 60.0;

/// Runs the two nodes; the initiator's report, the target's inside it.
///
/// # Errors
///
/// Bad flags, no free port, the child failing to start, or either node
/// failing.
pub fn run(args: &BenchUdpArgs) -> Result<Report> {
    if !(args.seconds.is_finite() && args.seconds > 0.0) {
        return Err(AppError::Usage(format!(
            "--seconds {}: must be positive",
            args.seconds
        )));
    }
    let (initiator_core, target_core) = (args.cores[0], args.cores[1]);
    let free_udp = || -> Result<SocketAddr> {
        UdpSocket::bind("127.0.0.1:0")
            .and_then(|s| s.local_addr())
            .map_err(|e| AppError::Failed(format!("bench udp: a free UDP port: {e}")))
    };
    let (a, b) = (free_udp()?, free_udp()?);
    let control = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| AppError::Failed(format!("bench udp: a free TCP port: {e}")))?;
    let exe = std::env::current_exe()
        .map_err(|e| AppError::Failed(format!("bench udp: this binary's path: {e}")))?;
    let on_off = |v: OnOff| if v == OnOff::On { "on" } else { "off" };
    let mut target = Command::new(exe);
    target
        .args([
            "node", "--role", "target", "--port", "udp", "--quiet", "--json",
        ])
        .args(["--bind", &b.to_string(), "--peer", &a.to_string()])
        .args(["--control", &control.to_string()])
        .args(["--core", &target_core.to_string()])
        .args(["--loss", &args.loss.to_string()])
        .args([
            "--psp",
            on_off(args.psp),
            "--udp-offload",
            on_off(args.udp_offload),
        ])
        .args(["--seconds", &(args.seconds + TARGET_GRACE_S).to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let child = target
        .spawn()
        .map_err(|e| AppError::Failed(format!("bench udp: starting the target: {e}")))?;
    let initiator = NodeArgs {
        role: NodeRole::Initiator,
        port: PortKind::Udp,
        bind: Some(a),
        peer: Some(b),
        socket: std::path::PathBuf::new(),
        iface: None,
        control,
        core: Some(initiator_core),
        workload: args.workload,
        size: args.size,
        inflight: args.inflight,
        transactions: args.transactions,
        loss: args.loss,
        seconds: (args.workload != crate::cli::NodeWorkload::Verify).then_some(args.seconds),
        psp: args.psp,
        udp_offload: args.udp_offload,
        target_delay_us: NODE_TARGET_DELAY_US,
        min_rto_us: NODE_MIN_RTO_US,
        metrics: None,
        quiet: args.quiet,
        json: args.json,
    };
    let report = node::run(&initiator);
    // The target ends with the initiator's control channel, either way.
    let target = child
        .wait_with_output()
        .map_err(|e| AppError::Failed(format!("bench udp: waiting for the target: {e}")))?;
    let report = report?;
    if !target.status.success() && report.ok {
        return Err(AppError::Failed(format!(
            "bench udp: the target exited with {}",
            target.status
        )));
    }
    Ok(report)
}
