//! `falcon run --config F`: the appliance on DPDK ports (issue #26, items
//! 1, 2 and 4; DESIGN §1, §3, §6).
//!
//! Layer: application. The node configuration is read and checked first
//! ([`crate::runcfg`]: every error names the file, line and key, before
//! DPDK starts). Then, on DPDK ([`dpdk`]): the EAL on the configured
//! lcores, the port with a transmit queue per datapath lcore, one engine
//! per datapath lcore as a shard of one node ([`falcon_core::api::Node`]:
//! SPIs, keys and connection ids node-wide, disjoint per shard), frames
//! steered to their shard in software where the device cannot
//! (`falcon_dpdk::port::Dispatch`), the RUE inline or on its own lcore,
//! the connections and their ULP roles ([`connect`]), each lcore's loop
//! ([`shard`]), and on the main lcore a stats line a second, the metrics
//! endpoint and the signals ([`report`]). SIGINT or SIGTERM stop the node:
//! initiators submit nothing more, outstanding transactions drain for
//! `--drain` seconds (what does not is reported as undrained), and the
//! final figures are printed.

pub mod connect;
#[cfg(feature = "dpdk")]
pub(crate) mod dpdk;
pub mod report;
pub mod shard;
#[cfg(test)]
mod tests;

use crate::cli::RunArgs;
use crate::error::{AppError, Result};
use crate::runcfg::{self, Plan};

/// `falcon run`.
///
/// # Errors
///
/// A configuration error (exit 2), a setup failure, or a run that lost or
/// corrupted something (exit 1).
pub fn main(args: &RunArgs) -> Result<()> {
    let plan = runcfg::load(&args.config)?;
    if let Some(d) = args.duration {
        if !(d.is_finite() && d > 0.0) {
            return Err(AppError::Usage(format!(
                "--duration {d}: must be a positive number of seconds"
            )));
        }
    }
    if !(args.drain.is_finite() && args.drain >= 0.0) {
        return Err(AppError::Usage(format!(
            "--drain {}: must be zero or more seconds",
            args.drain
        )));
    }
    if args.check {
        print_plan(args, &plan);
        return Ok(());
    }
    let report = run(args, &plan)?;
    if args.json {
        println!("{}", serde_json::to_string(&report).unwrap_or_default());
    } else {
        report::print_text(&report);
    }
    if report.ok {
        Ok(())
    } else {
        Err(AppError::Failed(format!(
            "{} failure(s), {} transaction(s) undrained{}",
            report.failures,
            report.undrained,
            report
                .first_failure
                .as_deref()
                .map(|f| format!("; first: {f}"))
                .unwrap_or_default()
        )))
    }
}

#[cfg(feature = "dpdk")]
fn run(args: &RunArgs, plan: &Plan) -> Result<report::RunReport> {
    dpdk::run(args, plan)
}

#[cfg(not(feature = "dpdk"))]
fn run(args: &RunArgs, _plan: &Plan) -> Result<report::RunReport> {
    Err(AppError::Usage(format!(
        "{}: the configuration is valid, but this falcon was built without DPDK; build it \
         with `cargo build --release --features dpdk` (DPDK 22.11 from scripts/setup.sh)",
        args.config.display()
    )))
}

/// `--check`: what the node would set up.
fn print_plan(args: &RunArgs, plan: &Plan) {
    println!("{}: valid", args.config.display());
    println!("  EAL: {}", plan.eal_args.join(" "));
    println!(
        "  port {} ({} descriptors, {} mbufs, frames up to {} bytes)",
        plan.port.device, plan.port.descriptors, plan.port.mbufs, plan.port.max_frame
    );
    println!(
        "  main lcore on CPU {}; datapath lcores on CPUs {:?}; RUE {}",
        plan.main_cpu,
        plan.datapath_cpus,
        match plan.rue_cpu {
            Some(cpu) => format!("on its own lcore, CPU {cpu}"),
            None => "inline".to_string(),
        }
    );
    if !plan.shared_cpus.is_empty() {
        println!(
            "  warning: polling lcores share CPU(s) {:?}: they take turns a scheduler slice at a time",
            plan.shared_cpus
        );
    }
    println!(
        "  node {} function {:#x}, PSP {}",
        plan.ip,
        plan.function.value(),
        match &plan.psp {
            Some(p) if p.keys.is_some() => "on (master keys from the file)",
            Some(_) => "on (fresh master keys at startup)",
            None => "off",
        }
    );
    for c in &plan.connections {
        if c.index > 0 {
            continue;
        }
        let count = plan
            .connections
            .iter()
            .filter(|d| d.entry == c.entry)
            .count();
        println!(
            "  connections[{}]: {count} × {:?} to {} ({:?}, {:?}, {} bytes, {} in flight)",
            c.entry,
            c.role,
            c.peer.map_or("self", |p| plan.peers[p].name.as_str()),
            c.ordering,
            c.workload,
            c.size,
            c.inflight
        );
    }
}
