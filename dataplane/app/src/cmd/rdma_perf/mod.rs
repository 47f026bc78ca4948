//! `falcon rdma-perf`: perftest's bandwidth and latency tools (ulp.md
//! §4.1, reported as §4.5 asks) over RDMA over Falcon.
//!
//! Layer: application. [`Plan`] is what the options ask for, checked;
//! [`run`] drives the in-process pair ([`crate::rdma::RdmaPair`]) through
//! [`measure`]; the report prints as perftest prints it (the dashed banner,
//! the local and remote address lines, the result header with perftest's
//! column headings and units, one row per size) or as one JSON object.

mod measure;

use std::time::Duration;

use falcon_core::testing::Faults;
use rdma_ulp::verbs::{Mtu, QpOrdering, QpType};
use serde::Serialize;

use crate::cli::{RdmaConnection, RdmaOrdering, RdmaOutput, RdmaPerfArgs, RdmaTest};
use crate::error::{AppError, Result};

pub use measure::{BwRow, LatRow};

/// The verb a test runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verb {
    Write,
    Read,
    Send,
    /// Fetch-and-add of 1 to the server's 8-byte counter.
    Atomic,
}

impl Verb {
    /// Latency reported as RTT/2 (send, write: a ping-pong) or as the full
    /// RTT (read, atomic: one request and its response), ulp.md §4.1.
    pub const fn rtt_factor(self) -> f64 {
        match self {
            Verb::Write | Verb::Send => 2.0,
            Verb::Read | Verb::Atomic => 1.0,
        }
    }
}

/// The largest buffer a QP gets (perftest's `-a` top size, 2^23).
pub const MAX_SIZE: u32 = 1 << 23;

/// The checked options (see the module doc).
#[derive(Debug, Clone)]
pub struct Plan {
    pub test: RdmaTest,
    pub verb: Verb,
    pub latency: bool,
    /// Message sizes, in order.
    pub sizes: Vec<u32>,
    /// Iterations per QP and size (`None`: a duration).
    pub iters: Option<u64>,
    pub duration: Option<Duration>,
    pub qps: usize,
    pub tx_depth: u32,
    pub rx_depth: u32,
    pub mtu: Mtu,
    pub qp_type: QpType,
    pub ordering: QpOrdering,
    pub faults: Faults,
    pub loss_percent: f64,
    pub seed: u64,
    pub verify: bool,
    /// Per-second lines on stderr.
    pub progress: bool,
}

fn usage<T>(message: impl Into<String>) -> Result<T> {
    Err(AppError::Usage(message.into()))
}

impl Plan {
    /// Checks `args`.
    ///
    /// # Errors
    ///
    /// [`AppError::Usage`] naming the flag that cannot be honoured.
    pub fn new(args: &RdmaPerfArgs) -> Result<Plan> {
        let (verb, latency) = match args.test {
            RdmaTest::WriteBw => (Verb::Write, false),
            RdmaTest::ReadBw => (Verb::Read, false),
            RdmaTest::SendBw => (Verb::Send, false),
            RdmaTest::AtomicBw => (Verb::Atomic, false),
            RdmaTest::WriteLat => (Verb::Write, true),
            RdmaTest::ReadLat => (Verb::Read, true),
            RdmaTest::SendLat => (Verb::Send, true),
            RdmaTest::AtomicLat => (Verb::Atomic, true),
        };
        let Some(mtu) = Mtu::from_bytes(args.mtu) else {
            return usage(format!(
                "-m {}: the MTU is 256, 512, 1024, 2048 or 4096",
                args.mtu
            ));
        };
        let qp_type = match args.connection {
            RdmaConnection::Rc => QpType::Rc,
            RdmaConnection::Ud if verb == Verb::Send => QpType::Ud,
            RdmaConnection::Ud => {
                return usage("-c UD: only send_bw and send_lat run on UD QPs");
            }
        };
        let ordering = match args.ordering {
            RdmaOrdering::Strong => QpOrdering::Strong,
            RdmaOrdering::Weak => QpOrdering::Weak,
            RdmaOrdering::Unordered => QpOrdering::Unordered,
        };
        if !args.max_size.is_power_of_two() {
            return usage(format!(
                "--max-size {}: a power of two, 2 to 2^23",
                args.max_size
            ));
        }
        let sizes: Vec<u32> = if verb == Verb::Atomic {
            // An atomic is 8 bytes whatever -s says (as perftest).
            vec![8]
        } else if args.all {
            (1..=23)
                .map(|shift| 1u32 << shift)
                .take_while(|&s| s <= args.max_size)
                .collect()
        } else {
            vec![args.size.unwrap_or(if latency { 2 } else { 65536 })]
        };
        let largest = sizes.iter().copied().max().unwrap_or(8);
        // RDMA-0.9 §6.6.3: a UD send is one MTU; §6.4: so is a SEND on an
        // unordered QP.
        if verb == Verb::Send
            && (qp_type == QpType::Ud || ordering == QpOrdering::Unordered)
            && largest > mtu.bytes()
        {
            let flag = if qp_type == QpType::Ud {
                "-c UD"
            } else {
                "--ordering unordered"
            };
            return usage(format!(
                "-s {largest}: with {flag} a SEND carries one MTU ({} bytes) at most",
                mtu.bytes()
            ));
        }
        if latency && args.qps > 1 {
            return usage(format!("-q {}: latency tests run one QP", args.qps));
        }
        if verb == Verb::Write && latency && ordering != QpOrdering::Strong {
            // The ping-pong polls the last byte of the buffer, which says
            // the message landed only when data is placed in order.
            return usage("--ordering: write_lat polls memory and needs strong ordering");
        }
        if !(0.0..=100.0).contains(&args.loss) {
            return usage(format!("--loss {}: must be 0 to 100", args.loss));
        }
        match (args.output, latency) {
            (Some(RdmaOutput::Latency), false) => {
                return usage("--output=latency: a bandwidth test measures no latency");
            }
            (Some(RdmaOutput::Bandwidth | RdmaOutput::MessageRate), true) => {
                return usage("--output: a latency test measures latency only");
            }
            _ => {}
        }
        let duration = match args.duration {
            None => None,
            Some(d) if d > 0.0 && d <= 3600.0 => Some(Duration::from_secs_f64(d)),
            Some(d) => return usage(format!("-D {d}: must be above 0 and at most 3600")),
        };
        let iters = match (duration, args.iters) {
            (Some(_), _) => None,
            (None, Some(n)) => Some(n),
            (None, None) if args.test == RdmaTest::WriteBw => Some(5000),
            (None, None) => Some(1000),
        };
        let ppm = (args.loss * 10_000.0).round() as u32;
        let faults = Faults {
            loss_ppm: ppm,
            reorder_ppm: ppm,
            reorder_delay: Duration::from_micros(20),
            ..Faults::default()
        };
        Ok(Plan {
            test: args.test,
            verb,
            latency,
            sizes,
            iters,
            duration,
            qps: args.qps as usize,
            tx_depth: if latency { 1 } else { args.tx_depth },
            rx_depth: args.rx_depth,
            mtu,
            qp_type,
            ordering,
            faults,
            loss_percent: args.loss,
            seed: args.seed,
            verify: args.verify,
            progress: !args.quiet && duration.is_some_and(|d| d > Duration::from_secs(2)),
        })
    }

    /// perftest's test name, as its banner prints it.
    pub fn title(&self) -> &'static str {
        match self.test {
            RdmaTest::WriteBw => "RDMA_Write BW Test",
            RdmaTest::ReadBw => "RDMA_Read BW Test",
            RdmaTest::SendBw => "Send BW Test",
            RdmaTest::AtomicBw => "Atomic FETCH_AND_ADD BW Test",
            RdmaTest::WriteLat => "RDMA_Write Latency Test",
            RdmaTest::ReadLat => "RDMA_Read Latency Test",
            RdmaTest::SendLat => "Send Latency Test",
            RdmaTest::AtomicLat => "Atomic FETCH_AND_ADD Latency Test",
        }
    }

    /// The buffer each QP gets on each side: the largest size (UD
    /// receives: with room for the 40-byte GRH).
    pub fn buffer_len(&self) -> usize {
        let largest = self.sizes.iter().copied().max().unwrap_or(8) as usize;
        largest.max(8) + rdma_ulp::UD_GRH_LEN
    }

    /// Where in a QP's buffer the data a side sends starts: write_lat
    /// sends from a second half (the first is where the peer's WRITEs
    /// land and where the side polls), every other test from the start.
    pub fn source_offset(&self) -> usize {
        if self.test == RdmaTest::WriteLat {
            self.buffer_len()
        } else {
            0
        }
    }
}

/// One side's QP as perftest's address lines show it.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Endpoint {
    pub qpn: u32,
    /// Falcon owns the sequence numbers (RDMA-0.9 §6.8): the QP has no
    /// PSN of its own, shown as 0.
    pub psn: u32,
    pub rkey: u32,
    pub vaddr: u64,
    /// The Falcon connection the QP rides (its local connection id).
    pub cid: u32,
}

/// Falcon's figures over the run, both engines.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FalconFigures {
    pub retransmissions: u64,
    pub frames_lost: u64,
    pub frames_reordered: u64,
    /// RNR NACKs the sends met (a receiver short of receives).
    pub rnr_nacks: u64,
}

/// What a run measured (the `--json` object; units in the key names).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub test: &'static str,
    pub title: &'static str,
    pub transport: String,
    pub qps: usize,
    pub connection_type: &'static str,
    pub ordering: &'static str,
    pub tx_depth: u32,
    pub mtu_bytes: u32,
    pub loss_percent: f64,
    pub seed: u64,
    pub verify: bool,
    pub report_gbits: bool,
    pub local: Vec<Endpoint>,
    pub remote: Vec<Endpoint>,
    /// Bandwidth tests: one row per size.
    pub bw: Vec<BwRow>,
    /// Latency tests: one row per size.
    pub lat: Vec<LatRow>,
    pub falcon: FalconFigures,
    /// Work requests that completed with a status other than success,
    /// and failed checks, each named.
    pub errors: Vec<String>,
    pub ok: bool,
}

pub(crate) fn test_name(test: RdmaTest) -> &'static str {
    match test {
        RdmaTest::WriteBw => "write_bw",
        RdmaTest::ReadBw => "read_bw",
        RdmaTest::SendBw => "send_bw",
        RdmaTest::AtomicBw => "atomic_bw",
        RdmaTest::WriteLat => "write_lat",
        RdmaTest::ReadLat => "read_lat",
        RdmaTest::SendLat => "send_lat",
        RdmaTest::AtomicLat => "atomic_lat",
    }
}

/// Runs the test in process.
///
/// # Errors
///
/// [`AppError::Usage`] for options that cannot be honoured;
/// [`AppError::Failed`] if the pair cannot be built.
pub fn run(args: &RdmaPerfArgs) -> Result<Report> {
    let plan = Plan::new(args)?;
    if let Some(core) = args.core {
        crate::cmd::node::pin(core)?;
    }
    let mut report = measure::in_process(&plan)?;
    report.report_gbits = args.report_gbits;
    Ok(report)
}

const DASHES: &str =
    "---------------------------------------------------------------------------------------";

/// The BW header, perftest's column headings and units.
pub fn bw_header(gbits: bool) -> String {
    let unit = if gbits { "Gb/sec" } else { "MiB/sec" };
    format!(" #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   MsgRate[Mpps]")
}

/// The latency header, perftest's column headings and units.
pub const LAT_HEADER: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";

/// The duration-mode latency header (perftest's `-D` latency report).
pub const LAT_DURATION_HEADER: &str = " #bytes        #iterations       t_avg[usec]    tps average";

/// Prints the report as perftest does.
pub fn print_text(report: &Report, duration_mode: bool) {
    println!("{DASHES}");
    println!("                    {}", report.title);
    println!(" Dual-port       : OFF\t\tDevice         : falcon0");
    println!(
        " Number of qps   : {:<2}\t\tTransport type : Falcon",
        report.qps
    );
    println!(
        " Connection type : {}\t\tUsing SRQ      : OFF",
        report.connection_type
    );
    println!(" TX depth        : {}", report.tx_depth);
    println!(" CQ Moderation   : 1");
    println!(" Mtu             : {}[B]", report.mtu_bytes);
    println!(" Link type       : Ethernet");
    println!(" Ordering        : {}", report.ordering);
    println!(" Data ex. method : {}", report.transport);
    println!("{DASHES}");
    for (local, remote) in report.local.iter().zip(&report.remote) {
        println!(" local address: {}", address(local));
        println!(" remote address: {}", address(remote));
    }
    println!("{DASHES}");
    if report.lat.is_empty() {
        println!("{}", bw_header(report.report_gbits));
        for row in &report.bw {
            let (peak, avg) = if report.report_gbits {
                (row.bw_peak_gbps, row.bw_average_gbps)
            } else {
                (row.bw_peak_mib_s, row.bw_average_mib_s)
            };
            println!(
                " {:<10} {:<10}       {:<7.2}            {:<7.2}\t\t   {:.6}",
                row.bytes, row.iterations, peak, avg, row.msg_rate_mpps
            );
        }
    } else if duration_mode {
        println!("{LAT_DURATION_HEADER}");
        for row in &report.lat {
            println!(
                " {:<7}       {:<10}        {:<7.2}        {:.2}",
                row.bytes, row.iterations, row.t_avg_us, row.tps_average
            );
        }
    } else {
        println!("{LAT_HEADER}");
        for row in &report.lat {
            println!(
                " {:<7} {:<10}   {:<7.2}        {:<7.2}      {:<7.2}    \t   {:<7.2}     \t{:<7.2}\t\t{:<7.2}  \t\t{:<7.2}",
                row.bytes,
                row.iterations,
                row.t_min_us,
                row.t_max_us,
                row.t_typical_us,
                row.t_avg_us,
                row.t_stdev_us,
                row.p99_us,
                row.p999_us
            );
        }
    }
    println!("{DASHES}");
    println!(
        " Falcon: {} retransmissions, {} frames lost, {} reordered, {} RNR NACKs",
        report.falcon.retransmissions,
        report.falcon.frames_lost,
        report.falcon.frames_reordered,
        report.falcon.rnr_nacks
    );
    for error in &report.errors {
        println!(" error: {error}");
    }
}

fn address(e: &Endpoint) -> String {
    format!(
        "LID 0000 QPN {:#06x} PSN {:#08x} RKey {:#08x} VAddr {:#016x} CID {:#x}",
        e.qpn, e.psn, e.rkey, e.vaddr, e.cid
    )
}

/// The one number `--output` asks for, of the last row.
pub fn one_number(report: &Report, output: RdmaOutput) -> Option<f64> {
    match output {
        RdmaOutput::Bandwidth => report.bw.last().map(|r| {
            if report.report_gbits {
                r.bw_average_gbps
            } else {
                r.bw_average_mib_s
            }
        }),
        RdmaOutput::MessageRate => report.bw.last().map(|r| r.msg_rate_mpps),
        RdmaOutput::Latency => report.lat.last().map(|r| r.t_typical_us),
    }
}

/// `falcon rdma-perf`.
///
/// # Errors
///
/// [`AppError::Usage`] for options that cannot be honoured (exit 2);
/// [`AppError::Failed`] when a work request failed or a check did not
/// pass (exit 1).
pub fn main(args: &RdmaPerfArgs) -> Result<()> {
    let report = run(args)?;
    if args.json {
        println!("{}", serde_json::to_string(&report).unwrap_or_default());
    } else if let Some(output) = args.output {
        match one_number(&report, output) {
            Some(x) => println!("{x:.2}"),
            None => {
                return usage(format!(
                    "--output={}: not measured by {}",
                    match output {
                        RdmaOutput::Bandwidth => "bandwidth",
                        RdmaOutput::MessageRate => "message_rate",
                        RdmaOutput::Latency => "latency",
                    },
                    report.test
                ))
            }
        }
    } else {
        print_text(&report, args.duration.is_some());
    }
    if report.ok {
        Ok(())
    } else {
        Err(AppError::Failed(format!(
            "rdma-perf {}: {} errors; first: {}",
            report.test,
            report.errors.len(),
            report.errors.first().map(String::as_str).unwrap_or("")
        )))
    }
}
