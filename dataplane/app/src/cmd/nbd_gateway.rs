//! `falcon nbd-gateway`: an NBD server in front of a storage backend, for
//! unmodified user-space clients (DESIGN §6).
//!
//! Layer: application. Builds the backend `--backend` names, starts the
//! server ([`crate::nbd::server`]) on every `--listen` address, prints a
//! stats line a second on stderr, and on SIGINT, SIGTERM or after
//! `--duration` stops it cleanly (no new clients; requests in flight
//! finish, for `--drain` seconds at most) and prints the summary
//! (`--json`: one object on stdout).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::cli::{NbdBackendKind, NbdGatewayArgs, OnOff};
use crate::cmd::nvme_perf::resolve;
use crate::error::{AppError, Result};
use crate::nbd::backend::Backend;
use crate::nbd::falcon::{FalconBackend, GatewayFigures, QUEUE_DEPTH};
use crate::nbd::ram::RamBackend;
use crate::nbd::server::Server;
use crate::nbd::stats::Snapshot;
use crate::nvme::remote::RemoteConfig;

/// The summary of a run; units in the key names.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// `ram`, `falcon` (an in-process target) or `falcon-remote`.
    pub backend: &'static str,
    pub export: String,
    pub listen: Vec<String>,
    pub size_bytes: u64,
    pub elapsed_s: f64,
    /// `signal` or `duration`.
    pub stopped_by: &'static str,
    /// Replies of every kind, and the rates over the whole run.
    pub requests: u64,
    pub requests_per_s: f64,
    pub read_mib_per_s: f64,
    pub write_mib_per_s: f64,
    #[serde(flatten)]
    pub counters: Snapshot,
    /// Connections still busy when the drain time ran out.
    pub undrained_connections: usize,
    /// `--backend falcon`: the iCMDs, their errors and what Falcon did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub falcon: Option<GatewayFigures>,
    pub ok: bool,
}

/// `falcon nbd-gateway`.
///
/// # Errors
///
/// A bad argument or an address that cannot be bound (exit 2); a stop
/// that left connections undrained (exit 1).
pub fn main(args: &NbdGatewayArgs) -> Result<()> {
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
    if args.export.len() > crate::nbd::proto::MAX_STRING {
        return Err(AppError::Usage(
            "--export: NBD names are at most 4096 bytes".into(),
        ));
    }
    init_logs();
    let (backend, falcon) = match &args.connect {
        Some(control) => remote_backend(args, control)?,
        None => backend(args.backend, args.size)?,
    };
    let size = backend.geometry().size;
    let backend_name = match (&args.connect, args.backend) {
        (Some(_), _) => "falcon-remote",
        (None, kind) => backend_name(kind),
    };
    let signalled = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&signalled))
            .map_err(|e| AppError::Failed(format!("signal handler: {e}")))?;
    }
    let description = format!("falcon nbd-gateway, {backend_name} backend");
    let mut server = Server::start(&args.listen, args.export.clone(), description, backend)
        .map_err(AppError::Usage)?;
    for address in server.bound() {
        eprintln!(
            "nbd-gateway: listening on {address} (export {:?}, {size} bytes, backend {backend_name})",
            args.export,
        );
    }
    let start = Instant::now();
    let deadline = args.duration.map(|d| start + Duration::from_secs_f64(d));
    let mut last = (start, server.stats());
    let stopped_by = loop {
        std::thread::sleep(Duration::from_millis(20));
        let now = Instant::now();
        if signalled.load(Ordering::Relaxed) {
            break "signal";
        }
        if deadline.is_some_and(|d| now >= d) {
            break "duration";
        }
        if !args.quiet && now.duration_since(last.0) >= Duration::from_secs(1) {
            let snap = server.stats();
            stats_line(
                now.duration_since(start).as_secs_f64(),
                &snap,
                &last.1,
                now.duration_since(last.0).as_secs_f64(),
            );
            last = (now, snap);
        }
    };
    let stopped = server.stop(Duration::from_secs_f64(args.drain));
    let falcon = falcon.and_then(|backend| backend.shutdown());
    let elapsed = start.elapsed().as_secs_f64();
    let counters = server.stats();
    let report = Report {
        backend: backend_name,
        export: args.export.clone(),
        listen: server.bound().to_vec(),
        size_bytes: size,
        elapsed_s: elapsed,
        stopped_by,
        requests: counters.requests(),
        requests_per_s: counters.requests() as f64 / elapsed,
        read_mib_per_s: counters.read_bytes as f64 / MIB / elapsed,
        write_mib_per_s: counters.written_bytes as f64 / MIB / elapsed,
        counters,
        undrained_connections: stopped.undrained,
        falcon,
        ok: stopped.undrained == 0,
    };
    if args.json {
        println!("{}", serde_json::to_string(&report).unwrap_or_default());
    } else {
        print_text(&report);
    }
    if report.ok {
        Ok(())
    } else {
        Err(AppError::Failed(format!(
            "{} connection(s) still had requests in flight after --drain {} s",
            stopped.undrained, args.drain
        )))
    }
}

const MIB: f64 = (1u64 << 20) as f64;

fn backend_name(kind: NbdBackendKind) -> &'static str {
    match kind {
        NbdBackendKind::Ram => "ram",
        NbdBackendKind::Falcon => "falcon",
    }
}

/// The backend, and with `--backend falcon` the same as a
/// [`FalconBackend`] (stopped after the server, for its figures).
type Backends = (Arc<dyn Backend>, Option<Arc<FalconBackend>>);

fn backend(kind: NbdBackendKind, size: u64) -> Result<Backends> {
    match kind {
        NbdBackendKind::Ram => Ok((
            Arc::new(RamBackend::new(size).map_err(|e| AppError::Usage(format!("--size: {e}")))?),
            None,
        )),
        NbdBackendKind::Falcon => {
            let backend = FalconBackend::new(size, nvme_ulp::layout::LbaSize::B512)
                .map_err(|e| AppError::Usage(format!("--size: {e}")))?;
            let backend = Arc::new(backend);
            Ok((Arc::clone(&backend) as Arc<dyn Backend>, Some(backend)))
        }
    }
}

/// `--connect`: the falcon backend in front of a remote target.
fn remote_backend(args: &NbdGatewayArgs, control: &str) -> Result<Backends> {
    if !(args.reconnect_timeout.is_finite() && args.reconnect_timeout >= 0.0) {
        return Err(AppError::Usage(format!(
            "--reconnect-timeout {}: must be zero or more seconds",
            args.reconnect_timeout
        )));
    }
    let config = RemoteConfig {
        bind: args.bind,
        nsid: args.nsid,
        queue_depth: QUEUE_DEPTH,
        psp: args.psp == OnOff::On,
        reconnect_deadline: Duration::from_secs_f64(args.reconnect_timeout),
        ..RemoteConfig::new(resolve("--connect", control)?)
    };
    let backend = FalconBackend::remote(config)
        .map_err(|e| AppError::Failed(format!("--connect {control}: {e}")))?;
    let backend = Arc::new(backend);
    Ok((Arc::clone(&backend) as Arc<dyn Backend>, Some(backend)))
}

/// `--size`: bytes, or a number with a binary suffix (`K`, `M`, `G`, `T`,
/// optionally followed by `iB` or `B`).
///
/// # Errors
///
/// A sentence when it is not a positive size that fits in 64 bits.
pub fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, suffix) = t.split_at(digits);
    let shift = match suffix.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        other => return Err(format!("{s}: unknown unit {other:?} (use K, M, G or T)")),
    };
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{s}: not a size (as in 67108864 or 64M)"))?;
    let bytes = n
        .checked_mul(1u64 << shift)
        .ok_or_else(|| format!("{s}: too large"))?;
    if bytes == 0 {
        return Err(format!("{s}: must be positive"));
    }
    Ok(bytes)
}

fn stats_line(elapsed: f64, now: &Snapshot, then: &Snapshot, dt: f64) {
    let rate = |a: u64, b: u64| a.saturating_sub(b) as f64 / dt;
    let k = |a: u64, b: u64| rate(a, b) / 1e3;
    eprintln!(
        "[nbd-gateway {elapsed:5.1} s] read {:7.1} k/s  write {:7.1} k/s  flush {:5.1} k/s  trim {:5.1} k/s  zero {:5.1} k/s | read {:8.1} MiB/s  write {:8.1} MiB/s | errors {} | clients {}",
        k(now.reads, then.reads),
        k(now.writes, then.writes),
        k(now.flushes, then.flushes),
        k(now.trims, then.trims),
        k(now.write_zeroes, then.write_zeroes),
        rate(now.read_bytes, then.read_bytes) / MIB,
        rate(now.written_bytes, then.written_bytes) / MIB,
        now.errors.saturating_sub(then.errors),
        now.active_connections,
    );
}

fn print_text(r: &Report) {
    let c = &r.counters;
    println!(
        "nbd-gateway: {} backend, export {:?} ({} bytes) on {}; stopped by {} after {:.1} s",
        r.backend,
        r.export,
        r.size_bytes,
        r.listen.join(", "),
        r.stopped_by,
        r.elapsed_s
    );
    println!(
        "  requests {} ({:.1} k/s): read {} write {} flush {} trim {} write-zeroes {}",
        r.requests,
        r.requests_per_s / 1e3,
        c.reads,
        c.writes,
        c.flushes,
        c.trims,
        c.write_zeroes
    );
    println!(
        "  read {} bytes ({:.1} MiB/s), written {} bytes ({:.1} MiB/s), trimmed or zeroed {} bytes",
        c.read_bytes, r.read_mib_per_s, c.written_bytes, r.write_mib_per_s, c.zeroed_bytes
    );
    println!(
        "  errors {} {:?}; connections {}, closed on a protocol violation {:?}; undrained {}",
        c.errors, c.errors_by_code, c.connections, c.closed_by_reason, r.undrained_connections
    );
    if let Some(f) = &r.falcon {
        println!(
            "  NVMe over Falcon: {} iCMDs, {} failed (EIO) {:?}, {} refused, {} unsupported requests",
            f.icmds, f.icmd_errors, f.errors_by_status, f.refused, f.unsupported
        );
        if let Some(falcon) = &f.falcon {
            println!(
                "  Falcon: {} nCMDs, {} retransmissions, {} RNR NACKs, drops {:?}",
                falcon.ncmds, falcon.retransmissions, falcon.rnr_nacks, falcon.drops
            );
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("67108864"), Ok(64 << 20));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
        for bad in ["", "0", "M", "12Q", "-1", "99999999999T", "1.5G"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }
}
