//! The command line (DESIGN §6): every subcommand has `--help`, every
//! measuring subcommand has `--json`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::cmd::bench_loop::Shape;

/// Falcon transport appliance: Google's Falcon reliable transport over PSP,
/// in software.
#[derive(Debug, Parser)]
#[command(name = "falcon", version, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The main job on the embedded default, or on `--config FILE` (see
    /// configs/demo.toml): an initiator and a target in one process over the in-process loopback with seeded loss,
    /// reordering and duplication (and, asked for, corruption), PSP on,
    /// Swift congestion control; a mix of push and pull transactions, every
    /// byte verified; the target's ULP may answer RNR or complete in error.
    /// Then NVMe over Falcon: an NVMe initiator and target over their own
    /// lossy loopback, PSP on, reads and writes of 4 KiB to 1 MiB, every
    /// write read back and compared byte for byte (`--no-nvme` skips it).
    /// Then RDMA over Falcon: WRITE, READ, SEND and atomics over several RC
    /// QPs, multi-MTU messages, every byte verified (`--no-rdma` skips it).
    /// Prints transactions/s, Gbit/s, p50/p99 latency, retransmissions,
    /// drops by reason and the congestion windows seen, the NVMe IOPS,
    /// MiB/s and latency, and the RDMA ops/s, MiB/s and latency. Exits 1 if
    /// anything failed verification.
    Demo(DemoArgs),
    /// Offline PSP tools on pcap files, compatible with google/psp's
    /// `psp_encrypt` and `psp_decrypt` (same flags, same configuration files,
    /// byte-identical output).
    #[command(subcommand)]
    Psp(PspCommand),
    /// Offline tools on pcap captures of Falcon traffic.
    #[command(subcommand)]
    Pcap(PcapCommand),
    /// Measure one stage of the dataplane against its physical limit, both
    /// measured in the same run on the same core.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// One side of a two-process run: an initiator or a target engine on a
    /// port (a kernel UDP socket, or a DPDK memif, af_packet or af_xdp
    /// port), its connection to the peer set up over a TCP control channel,
    /// PSP on. The initiator runs the workload (`verify`: pushes and pulls
    /// of many sizes, every byte checked on both sides; `bulk`: push
    /// goodput; `rr`: request/response rate and latency) and tells the
    /// target when it is done; both print a summary (`--json`: one object).
    /// A stats line a second goes to stderr; `--metrics` serves the same
    /// figures to Prometheus. Exits 1 if anything failed verification or
    /// the two sides' byte counts differ.
    Node(NodeArgs),
    /// The appliance on DPDK ports: brings up the EAL, the port, one
    /// engine per datapath lcore (each owning a shard of the connections by
    /// connection id, frames steered to it in software where the device
    /// cannot), the RUE inline or on its own lcore, and the connections and
    /// ULP roles of the node configuration (`--config`, see
    /// configs/run-*.toml); then runs until SIGINT or SIGTERM (or
    /// `--duration`, or every initiator's work done), printing a stats line
    /// a second as dpdk-testpmd does. On stop, outstanding transactions
    /// drain (or are reported), and the final figures are printed
    /// (`--json`: one object). Configuration errors name the file, line
    /// and key, before DPDK starts (exit 2). Exits 1 if a byte failed
    /// verification or a transaction was lost. Needs a falcon built with
    /// `--features dpdk`.
    Run(RunArgs),
    /// Falcon/PSP traffic generator and reflector on a DPDK port (memif,
    /// af_packet, af_xdp; a falcon built with `--features dpdk`), one
    /// process each side, their connections set up over a TCP control
    /// channel. The generator is a real Falcon initiator: Push Data (or a
    /// push/pull mix) of fixed, listed, ranged or IMIX sizes over one or many
    /// connections, flat out or at `--rate-gbps` / `--rate-mpps`; the
    /// reflector is a Falcon target that accepts every push and serves every
    /// pull. A testpmd-like line a second on stderr (tx/rx Mpps from the
    /// port's frame counters, goodput Gbit/s, ops/s, drops, retransmissions,
    /// p50/p99 push latency), a summary at the end (`--json`: one object).
    /// The generator checks the reflector's counts against its own and
    /// exits 1 if they differ or anything failed.
    Pktgen(PktgenArgs),
    /// An NBD server for unmodified user-space clients (fio
    /// `--ioengine=nbd`, qemu-img, nbdcopy, nbdinfo): the front of the
    /// NVMe-over-Falcon gateway. Serves one export from `--backend` on
    /// every `--listen` address (Unix socket or TCP), any number of clients
    /// at once, each with many requests in flight and replies in
    /// completion order. Fixed newstyle handshake (NBD_OPT_GO, INFO,
    /// EXPORT_NAME, LIST, ABORT; structured replies refused), READ, WRITE
    /// (FUA), FLUSH, TRIM, WRITE_ZEROES (NO_HOLE), DISC. A stats line a
    /// second on stderr (requests/s by kind, MiB/s read and written,
    /// errors); on SIGINT, SIGTERM or after `--duration` it stops
    /// accepting, finishes the requests in flight and prints a summary
    /// (`--json`: one object on stdout). Try it with
    /// `nbdinfo 'nbd+unix:///?socket=PATH'`.
    NbdGateway(NbdGatewayArgs),
    /// NVMe I/O with spdk_nvme_perf's options and table, over NVMe over
    /// Falcon. With `--connect` (or `-r`), against a target in another
    /// process or host (`falcon nvme-target`): its namespaces come with the
    /// connection, frames go over the kernel UDP port, PSP on; a lost
    /// target fails the outstanding I/Os (Transient Transport Error) and is
    /// reconnected to for `--reconnect-timeout` seconds. Without, the
    /// initiator and the target run in this process (two engines over the
    /// in-process loopback, PSP on, Swift, an unordered connection, a RAM
    /// namespace on a storage worker thread), with `--loss` seeded loss
    /// and reordering. A line a second on stderr (IOPS, MiB/s, errors); at
    /// the end the `Device Information` table (latency in µs),
    /// percentiles, the Falcon figures (retransmissions, drops by reason,
    /// RNR NACKs, reconnections) and the NVMe errors by status (`--json`:
    /// one object). Exits 1 on any non-success status (unless
    /// `--allow-errors`), a target lost for good, or, with `--verify`, any
    /// read that differs from what was written.
    NvmePerf(NvmePerfArgs),
    /// Serve NVMe namespaces over Falcon (`--config`, see
    /// configs/nvme-target.toml): RAM- or file-backed namespaces (O_DIRECT
    /// where the file system takes it) on storage worker threads, the
    /// engine on the kernel UDP port (or a DPDK ethdev), PSP on. Initiators
    /// (`falcon nvme-perf --connect`) connect to the connection manager
    /// (`node.control`, TCP) and get an unordered Falcon connection each
    /// and the namespace list, at once or one after another; one that goes
    /// away or whose connection fails is closed and its commands aborted,
    /// and the target serves the others. A stats line a second on stderr
    /// (connections, IOPS, MiB/s read and written, error statuses, RNR
    /// NACKs); SIGINT, SIGTERM or `--duration` stop it with the final
    /// figures (`--json`: one object). Configuration errors name the file,
    /// line and key (exit 2); `--check` prints the plan.
    NvmeTarget(NvmeTargetArgs),
    /// perftest's ib_*_bw and ib_*_lat over RDMA over Falcon, with
    /// perftest's options, banner, column headings and units (ulp.md §4.1):
    /// `write_bw`, `read_bw`, `send_bw`, `atomic_bw` (fetch-and-add),
    /// `write_lat`, `read_lat`, `send_lat`, `atomic_lat`. By default both
    /// sides run in this process: two engines over the in-process loopback
    /// (PSP on, Swift), one Falcon connection per QP (ordered for strong
    /// ordering), one verbs device each, turned by one thread, with
    /// `--loss` seeded loss and reordering. BW tests report `BW
    /// peak[MiB/sec] BW average[MiB/sec] MsgRate[Mpps]` (MiB = 2^20 bytes;
    /// `--report_gbits`: Gb/sec, 10^9 bits); latency tests report t_min,
    /// t_max, t_typical (the median), t_avg, t_stdev and the 99% and 99.9%
    /// percentiles in µs after dropping the 2 largest samples, RTT/2 for
    /// write and send, the full RTT for read and atomic. `--verify` checks
    /// every byte of the target buffers (atomics: the final counter) after
    /// the run. Exits 1 if a work request completes with an error status
    /// or a check fails, 2 on a bad option.
    #[command(name = "rdma-perf")]
    RdmaPerf(RdmaPerfArgs),
}

/// `falcon rdma-perf`'s test (perftest's tool names, without `ib_`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RdmaTest {
    #[value(name = "write_bw")]
    WriteBw,
    #[value(name = "read_bw")]
    ReadBw,
    #[value(name = "send_bw")]
    SendBw,
    #[value(name = "atomic_bw")]
    AtomicBw,
    #[value(name = "write_lat")]
    WriteLat,
    #[value(name = "read_lat")]
    ReadLat,
    #[value(name = "send_lat")]
    SendLat,
    #[value(name = "atomic_lat")]
    AtomicLat,
}

/// perftest's `-c`: the connection type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RdmaConnection {
    #[value(name = "RC")]
    Rc,
    #[value(name = "UD")]
    Ud,
}

/// perftest's `--output`: one number only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RdmaOutput {
    Bandwidth,
    #[value(name = "message_rate")]
    MessageRate,
    Latency,
}

/// RDMA over Falcon's ordering mode of the QPs (RDMA-0.9 §6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RdmaOrdering {
    Strong,
    Weak,
    Unordered,
}

/// `falcon rdma-perf`: perftest's options where they apply.
#[derive(Debug, Clone, Args)]
pub struct RdmaPerfArgs {
    /// The test.
    #[arg(value_enum)]
    pub test: RdmaTest,
    /// Message size in bytes [default: 65536 for BW tests, 2 for latency
    /// tests; atomics are always 8].
    #[arg(short = 's', long = "size", value_name = "BYTES", value_parser = clap::value_parser!(u32).range(1..=(1 << 23)))]
    pub size: Option<u32>,
    /// All sizes, powers of two from 2 to 2^23 (8 MiB, the largest buffer
    /// each QP gets), or to `--max-size`.
    #[arg(short = 'a', long = "all")]
    pub all: bool,
    /// With `-a`: the largest size (a power of two, 2 to 2^23).
    #[arg(long = "max-size", value_name = "BYTES", default_value_t = 1 << 23, value_parser = clap::value_parser!(u32).range(2..=(1 << 23)))]
    pub max_size: u32,
    /// Iterations per QP and size [default: 5000 for write_bw, 1000
    /// otherwise].
    #[arg(short = 'n', long = "iters", value_name = "N", conflicts_with = "duration", value_parser = clap::value_parser!(u64).range(5..=100_000_000))]
    pub iters: Option<u64>,
    /// Run this many seconds instead of `-n` iterations (latency tests
    /// then report `t_avg[usec] tps average`).
    #[arg(
        short = 'D',
        long = "duration",
        value_name = "SECONDS",
        conflicts_with = "all"
    )]
    pub duration: Option<f64>,
    /// QPs, each on its own Falcon connection.
    #[arg(short = 'q', long = "qp", value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub qps: u32,
    /// Work requests outstanding per QP at most (BW tests; latency tests
    /// have one).
    #[arg(short = 't', long = "tx-depth", value_name = "N", default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=8192))]
    pub tx_depth: u32,
    /// Receives posted per QP (send tests).
    #[arg(short = 'r', long = "rx-depth", value_name = "N", default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..=8192))]
    pub rx_depth: u32,
    /// The path MTU: RDMA payload bytes per packet, 256 to 4096.
    #[arg(
        short = 'm',
        long = "mtu",
        value_name = "BYTES",
        default_value_t = 4096
    )]
    pub mtu: u32,
    /// Connection type: RC, or UD (send tests only; a message fits one
    /// MTU).
    #[arg(short = 'c', long = "connection", value_enum, default_value_t = RdmaConnection::Rc)]
    pub connection: RdmaConnection,
    /// Report bandwidth in Gb/sec (10^9 bits) instead of MiB/sec.
    #[arg(long = "report_gbits")]
    pub report_gbits: bool,
    /// Print one number only: the average bandwidth, the message rate, or
    /// the typical (median) latency.
    #[arg(
        long = "output",
        value_enum,
        value_name = "bandwidth|message_rate|latency"
    )]
    pub output: Option<RdmaOutput>,
    /// Accepted for perftest compatibility (there is no CPU frequency
    /// check to skip).
    #[arg(short = 'F')]
    pub no_cpufreq_check: bool,
    /// Check every byte of the target buffers after each size (WRITE: the
    /// server's; READ: the client's; SEND: the receive buffers) against
    /// the source; atomics: the server's counter equals the number of
    /// fetch-and-adds.
    #[arg(long)]
    pub verify: bool,
    /// Lose and reorder this percentage of the frames each way on the
    /// in-process loopback (seeded by `--seed`).
    #[arg(long, value_name = "PERCENT", default_value_t = 0.0)]
    pub loss: f64,
    /// Seed of the faults and the data pattern.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// RDMA over Falcon ordering mode of the QPs: strong (ordered Falcon
    /// connections), weak or unordered (unordered ones).
    #[arg(long, value_enum, default_value_t = RdmaOrdering::Strong)]
    pub ordering: RdmaOrdering,
    /// Pin this process to CPU core N.
    #[arg(long, value_name = "N")]
    pub core: Option<usize>,
    /// No per-second lines on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// The report as one JSON object on stdout (perftest's `--out_json`).
    #[arg(long, alias = "out_json")]
    pub json: bool,
}

/// `falcon nvme-target`: the target node.
#[derive(Debug, Clone, Args)]
pub struct NvmeTargetArgs {
    /// The target's configuration (TOML; commented example in
    /// configs/nvme-target.toml).
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// Stop after this many seconds (default: run until SIGINT/SIGTERM).
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Check the configuration, print the plan, and exit without serving.
    #[arg(long)]
    pub check: bool,
    /// No stats lines on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// The final figures as one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}

/// `falcon nvme-perf`'s I/O pattern (`-w`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum NvmePattern {
    Read,
    Write,
    Randread,
    Randwrite,
    Rw,
    Randrw,
}

/// `falcon nvme-perf`: spdk_nvme_perf's options where they apply.
#[derive(Debug, Clone, Args)]
pub struct NvmePerfArgs {
    /// Queue depth: I/Os outstanding at most.
    #[arg(short = 'q', long = "queue-depth", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub queue_depth: u32,
    /// I/O size: bytes or with a suffix (`4k`, `128k`, `1M`), 4 KiB to
    /// 1 MiB, a multiple of the LBA size. Offsets are aligned to it.
    #[arg(short = 'o', long = "io-size", value_name = "BYTES", default_value = "4k", value_parser = crate::cmd::nbd_gateway::parse_size)]
    pub io_size: u64,
    /// I/O pattern.
    #[arg(short = 'w', long = "workload", value_enum, default_value_t = NvmePattern::Randread)]
    pub workload: NvmePattern,
    /// Reads, percent of the I/Os of `-w rw` and `-w randrw`.
    #[arg(short = 'M', long = "rwmixread", default_value_t = 50, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub read_percent: u8,
    /// Run this many seconds (default 5; not with `--ios`).
    #[arg(
        short = 't',
        long = "time",
        value_name = "SECONDS",
        conflicts_with = "ios"
    )]
    pub time: Option<f64>,
    /// Run this many I/Os instead of a time.
    #[arg(long, value_name = "N")]
    pub ios: Option<u64>,
    /// Check every read against what was written: each write fills its
    /// blocks (data and metadata) with a pattern keyed by LBA and the
    /// write's generation; a read expects the last generation written
    /// there (in process: zeroes before the first; a remote namespace's
    /// earlier contents are unknown, so a read is checked once this run
    /// wrote its offset). I/Os never overlap one in flight.
    #[arg(long)]
    pub verify: bool,
    /// LBA size of the in-process namespace (a remote one has its own)
    /// [default 512].
    #[arg(long, value_name = "512|4096")]
    pub lba_size: Option<u32>,
    /// Metadata bytes per block of the in-process namespace (separate
    /// buffers, MSET = 0; no PI) [default 0].
    #[arg(long, value_name = "0|8|16")]
    pub metadata: Option<u32>,
    /// The bytes the I/Os cover: the in-process namespace's size (RAM,
    /// sparse); of a remote namespace, its first SIZE bytes (all of a
    /// smaller one). Bytes or with a suffix.
    #[arg(long, value_name = "BYTES", default_value = "256M", value_parser = crate::cmd::nbd_gateway::parse_size)]
    pub size: u64,
    /// Lose and reorder this percentage of the frames each way on the
    /// in-process loopback (seeded by `--seed`).
    #[arg(long, value_name = "PERCENT", default_value_t = 0.0)]
    pub loss: f64,
    /// Seed of the offsets, the read/write mix and the faults.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The remote target's connection manager, HOST:PORT (its
    /// `node.control`).
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "remote")]
    pub connect: Option<String>,
    /// The remote target as spdk_nvme_perf names it:
    /// `trtype:UDP traddr:HOST trsvcid:PORT` (the same as `--connect
    /// HOST:PORT`).
    #[arg(short = 'r', long = "transport-id", value_name = "TRID")]
    pub remote: Option<String>,
    /// With a remote target: the port this initiator's frames go over:
    /// `udp`, a kernel UDP socket (`--bind`); `memif`, a DPDK shared-memory
    /// interface to a target on this host whose `port.eal_args` serve it
    /// (`--socket`); `af-packet` or `af-xdp`, a DPDK port on a kernel
    /// interface (`--iface`). The DPDK ports need a falcon built with
    /// `--features dpdk`; the process is then one EAL on `--core`.
    #[arg(long, value_enum, default_value_t = PortKind::Udp)]
    pub port: PortKind,
    /// With a remote target: this initiator's UDP socket (port 0: any).
    #[arg(long, value_name = "ADDR:PORT", default_value = "0.0.0.0:0")]
    pub bind: std::net::SocketAddr,
    /// The memif control socket (`--port memif`; the target serves it).
    #[arg(
        long,
        value_name = "PATH",
        default_value = "/tmp/falcon-nvme-memif.sock"
    )]
    pub socket: PathBuf,
    /// The kernel interface of `--port af-packet` / `af-xdp`.
    #[arg(long, value_name = "NAME", required_if_eq_any([("port", "af-packet"), ("port", "af-xdp")]))]
    pub iface: Option<String>,
    /// With a remote target: the namespace to run on (one it exports).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub nsid: u32,
    /// With a remote target: how long to keep reconnecting once it is
    /// lost, seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0)]
    pub reconnect_timeout: f64,
    /// With a remote target: PSP on the connection (as the target's
    /// `[psp] enabled`).
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub psp: OnOff,
    /// Pin this process to CPU core N (a busy-polling loop: give it a CPU
    /// of its own, not the target's).
    #[arg(long, value_name = "N")]
    pub core: Option<usize>,
    /// Non-success NVMe statuses do not fail the run (they are counted).
    #[arg(long)]
    pub allow_errors: bool,
    /// No per-second lines on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// The summary as one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}

/// `falcon pktgen`: one side of a generator/reflector pair.
#[derive(Debug, Clone, Args)]
pub struct PktgenArgs {
    /// Which side: the generator connects to the reflector's control
    /// address, sets up `--connections` connections and sends; the
    /// reflector listens, accepts every connection offered and answers.
    #[arg(long, value_enum)]
    pub role: PktgenRole,
    /// The DPDK port: `memif`, shared memory between two processes on this
    /// host (the reflector serves the socket, the generator connects; no
    /// root); `af-packet` or `af-xdp` on a kernel interface (`--iface`).
    /// Each process is one EAL (no hugepages, no PCI) on `--core`.
    #[arg(long, value_enum, default_value_t = PktgenPort::Memif)]
    pub port: PktgenPort,
    /// The memif control socket (`--port memif`).
    #[arg(
        long,
        value_name = "PATH",
        default_value = "/tmp/falcon-pktgen-memif.sock"
    )]
    pub socket: PathBuf,
    /// The kernel interface of `--port af-packet` / `af-xdp`.
    #[arg(long, value_name = "NAME", required_if_eq_any([("port", "af-packet"), ("port", "af-xdp")]))]
    pub iface: Option<String>,
    /// The control channel (TCP): the reflector listens on it (a minute at
    /// most for the generator to come), the generator connects. Carries
    /// each connection's setup (CIDs, PSP SPIs
    /// and SA keys, in clear: loopback and trusted networks only) and both
    /// sides' counts at the end.
    #[arg(long, value_name = "ADDR:PORT")]
    pub control: std::net::SocketAddr,
    /// The EAL's one lcore, this process pinned to it. Give each side its
    /// own core: two polling processes on one core starve each other.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub core: usize,
    /// PSP encryption of every frame.
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub psp: OnOff,
    /// Generator: `push` (Push Data only) or `push-pull[:N]` (N pushes, then
    /// a pull of the next size the reflector serves; N defaults to 1).
    #[arg(long, default_value = "push", value_name = "push|push-pull[:N]")]
    pub mix: crate::cmd::pktgen::traffic::Mix,
    /// Generator: Falcon connections, used round robin (a connection out of
    /// credits passes its turn).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub connections: u32,
    /// Generator: each transaction's payload bytes (the 8-byte pktgen
    /// header naming its slice of the data pattern, then the data): `64`;
    /// a list cycled in order, `64,512,4096`; or a range drawn uniformly
    /// from `--seed`, `64-4096`. At least 16, at most what a frame carries
    /// (4096 over memif).
    #[arg(
        long,
        default_value = "64",
        value_name = "BYTES|A,B,..|LO-HI",
        conflicts_with = "imix"
    )]
    pub size: crate::cmd::pktgen::traffic::SizeSpec,
    /// Generator: the simple IMIX by count, 7 × 64 B, 4 × 576 B, 1 × 1500 B
    /// in every 12 transactions (interleaved, in a fixed order), instead of
    /// `--size`.
    #[arg(long)]
    pub imix: bool,
    /// Seed of `--size LO-HI`.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Generator: offer this many Gbit/s of payload (pushes and pulls
    /// alike), each transaction released `size × 8 / rate` after the one
    /// before; behind schedule it catches up by at most 32 transactions at
    /// once. Default: flat out, as fast as `--inflight` and the transport
    /// allow.
    #[arg(long, value_name = "GBPS", conflicts_with = "rate_mpps")]
    pub rate_gbps: Option<f64>,
    /// Generator: offer this many million transactions a second (each a
    /// Push Data or a Pull Request packet), on the same schedule.
    #[arg(long, value_name = "MPPS")]
    pub rate_mpps: Option<f64>,
    /// Generator: transactions outstanding at most, over all connections.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=8192))]
    pub inflight: u32,
    /// Generator: seconds of traffic (default 5 unless `--count`).
    /// Reflector: give up after this long without the generator's end
    /// (default: wait as long as the control channel is open).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Generator: transactions to send in all, instead of `--seconds`.
    #[arg(long, conflicts_with = "seconds")]
    pub count: Option<u64>,
    /// Check every byte against the data pattern: the reflector every push,
    /// the generator every pull (pulls are always served from the pattern).
    #[arg(long)]
    pub verify: bool,
    /// Congestion control: `swift` (the RUE inline, as `falcon node`), or
    /// `off` (every connection keeps its initial windows, 32 packets and 64
    /// requests, and `--min-rto-us`: the datapath alone, whatever the
    /// delays a shared host adds).
    #[arg(long, value_enum, default_value_t = PktgenCc::Swift)]
    pub cc: PktgenCc,
    /// Swift's base target delay, µs (as `falcon node`): the two processes
    /// share their host's cores, and a preempted one stalls for a
    /// scheduler slice.
    #[arg(long, value_name = "US", default_value_t = NODE_TARGET_DELAY_US)]
    pub target_delay_us: f64,
    /// Smallest retransmit timeout (and the initial one), µs.
    #[arg(long, value_name = "US", default_value_t = NODE_MIN_RTO_US)]
    pub min_rto_us: f64,
    /// No stats lines on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// One JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}

/// A side of `falcon pktgen`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PktgenRole {
    Generator,
    Reflector,
}

impl PktgenRole {
    pub fn name(self) -> &'static str {
        match self {
            PktgenRole::Generator => "generator",
            PktgenRole::Reflector => "reflector",
        }
    }
}

/// `falcon pktgen --cc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PktgenCc {
    Swift,
    Off,
}

/// The DPDK port of `falcon pktgen`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PktgenPort {
    /// DPDK `net_memif`.
    Memif,
    /// DPDK `net_af_packet` on `--iface`.
    AfPacket,
    /// DPDK `net_af_xdp` on `--iface`.
    AfXdp,
}

impl PktgenPort {
    /// The same port as `falcon node` names it.
    pub fn kind(self) -> PortKind {
        match self {
            PktgenPort::Memif => PortKind::Memif,
            PktgenPort::AfPacket => PortKind::AfPacket,
            PktgenPort::AfXdp => PortKind::AfXdp,
        }
    }
}

/// `falcon run`: the appliance on a node configuration.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// The node configuration (TOML; commented examples in configs/).
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// Stop after this many seconds (default: run until SIGINT/SIGTERM or
    /// until every initiator connection's work is done).
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// How long stopping waits for outstanding transactions to complete
    /// before reporting them as not drained.
    #[arg(long, value_name = "SECONDS", default_value_t = 2.0)]
    pub drain: f64,
    /// Check the configuration, print the plan, and exit without starting
    /// DPDK.
    #[arg(long)]
    pub check: bool,
    /// Serve Prometheus metrics on this address (overrides
    /// `[stats] metrics`).
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<std::net::SocketAddr>,
    /// A stats line per datapath lcore under the node's, each second.
    #[arg(long)]
    pub verbose: bool,
    /// No stats lines.
    #[arg(long)]
    pub quiet: bool,
    /// Print the final report as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// `falcon node --target-delay-us` by default.
pub const NODE_TARGET_DELAY_US: f64 = 200.0;
/// `falcon node --min-rto-us` by default.
pub const NODE_MIN_RTO_US: f64 = 10_000.0;

/// `falcon node`: one side of a two-process run.
#[derive(Debug, Clone, Args)]
pub struct NodeArgs {
    /// Which side: the initiator connects to the target's control address
    /// and runs the workload; the target listens and answers.
    #[arg(long, value_enum)]
    pub role: NodeRole,
    /// The port the engine runs on: `udp`, a kernel UDP socket (the
    /// engine's frames as UDP payload, PSP header onward); `memif`, a DPDK
    /// shared-memory interface between two processes on this host (the
    /// target serves the socket, the initiator connects); `af-packet` or
    /// `af-xdp`, a DPDK port on a kernel interface (`--iface`, e.g. one end
    /// of a veth pair). The DPDK ports need a falcon built with
    /// `--features dpdk`; each process is one EAL on `--core`.
    #[arg(long, value_enum, default_value_t = PortKind::Udp)]
    pub port: PortKind,
    /// This node's UDP socket address (`--port udp`).
    #[arg(long, value_name = "ADDR:PORT", required_if_eq("port", "udp"))]
    pub bind: Option<std::net::SocketAddr>,
    /// The peer's UDP socket address (`--port udp`).
    #[arg(long, value_name = "ADDR:PORT", required_if_eq("port", "udp"))]
    pub peer: Option<std::net::SocketAddr>,
    /// The memif control socket (`--port memif`): the target creates it,
    /// the initiator connects to it.
    #[arg(
        long,
        value_name = "PATH",
        default_value = "/tmp/falcon-node-memif.sock"
    )]
    pub socket: std::path::PathBuf,
    /// The kernel interface of `--port af-packet` / `af-xdp`.
    #[arg(long, value_name = "NAME", required_if_eq_any([("port", "af-packet"), ("port", "af-xdp")]))]
    pub iface: Option<String>,
    /// The control channel (TCP): the target listens on it, the initiator
    /// connects to it. Carries the connection setup (CIDs, addresses, PSP
    /// SPIs and SA keys, in clear: loopback and trusted networks only) and
    /// the end of the run.
    #[arg(long, value_name = "ADDR:PORT")]
    pub control: std::net::SocketAddr,
    /// Pin this process to CPU core N (with a DPDK port: the EAL's one
    /// lcore, default 0). Two polling processes on one core starve each
    /// other: give each its own.
    #[arg(long, value_name = "N")]
    pub core: Option<usize>,
    /// What the initiator runs (the target answers whatever comes).
    #[arg(long, value_enum, default_value_t = NodeWorkload::Verify)]
    pub workload: NodeWorkload,
    /// Data bytes per transaction [verify: the largest, default 4000;
    /// bulk: default the largest a frame carries; rr: default 4096].
    #[arg(long)]
    pub size: Option<usize>,
    /// Ops the initiator keeps outstanding (an rr op is a push and its
    /// answer, an rr-pull op a push and a pull)
    /// [default 64; rr 100].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub inflight: Option<u32>,
    /// Transactions of the verify workload.
    #[arg(long, default_value_t = 20_000)]
    pub transactions: u64,
    /// Fraction of frames this node's port drops on transmit (seeded; 0.01
    /// = 1 %; at most 0.5).
    #[arg(long, default_value_t = 0.0)]
    pub loss: f64,
    /// bulk and rr: seconds to measure (default 5). verify: a limit. The
    /// target: give up after this long without the initiator's end.
    #[arg(long)]
    pub seconds: Option<f64>,
    /// PSP encryption of every frame.
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub psp: OnOff,
    /// UDP segmentation offload: GSO on transmit, GRO on receive (runs of
    /// frames cross the kernel as one datagram).
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub udp_offload: OnOff,
    /// Swift's base target delay, µs. The kernel's UDP path adds tens of
    /// µs each way that a DPDK port does not, above Swift's 25 µs default.
    #[arg(long, value_name = "US", default_value_t = NODE_TARGET_DELAY_US)]
    pub target_delay_us: f64,
    /// Smallest retransmit timeout (and the initial one), µs. A process
    /// preempted for a scheduler tick must not look like loss.
    #[arg(long, value_name = "US", default_value_t = NODE_MIN_RTO_US)]
    pub min_rto_us: f64,
    /// Serve the node's figures as Prometheus text on
    /// `http://ADDR/metrics` (counters `_total`, units in the names, drop
    /// reasons as a label), refreshed once a second.
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<std::net::SocketAddr>,
    /// No stats lines on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// One JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}

/// A side of `falcon node`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum NodeRole {
    Initiator,
    Target,
}

impl NodeRole {
    pub fn name(self) -> &'static str {
        match self {
            NodeRole::Initiator => "initiator",
            NodeRole::Target => "target",
        }
    }
}

/// The initiator's workload of `falcon node`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum NodeWorkload {
    /// Pushes and pulls (every third) of 1..=--size bytes, all checked.
    Verify,
    /// Pushes of --size flat out: goodput.
    Bulk,
    /// Request/response: a push of --size, answered with a push of --size
    /// from the target's ULP: ops/s and latency.
    Rr,
    /// Request/response with Falcon's pull: a push of --size then a pull
    /// of --size per op.
    RrPull,
}

impl NodeWorkload {
    pub fn name(self) -> &'static str {
        match self {
            NodeWorkload::Verify => "verify",
            NodeWorkload::Bulk => "bulk",
            NodeWorkload::Rr => "rr",
            NodeWorkload::RrPull => "rr-pull",
        }
    }
}

/// The port a node runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PortKind {
    /// A kernel UDP socket.
    Udp,
    /// DPDK `net_memif` (shared memory between two processes).
    Memif,
    /// DPDK `net_af_packet` on `--iface`.
    AfPacket,
    /// DPDK `net_af_xdp` on `--iface`.
    AfXdp,
}

impl PortKind {
    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            PortKind::Udp => "udp",
            PortKind::Memif => "memif",
            PortKind::AfPacket => "af-packet",
            PortKind::AfXdp => "af-xdp",
        }
    }
}

/// On or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

/// `falcon demo`. Values come from the embedded default, then `--config`,
/// then the flags given here; each flag names the key it overrides.
#[derive(Debug, Clone, Default, Args)]
pub struct DemoArgs {
    /// Configuration file (TOML): addresses, PSP, connection (CIDs, initial
    /// PSNs and RSNs, ordering), delivery windows and timers, resources,
    /// RUE, workload and faults. Every key is optional; configs/demo.toml
    /// is the embedded default with a comment per key.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print the effective configuration (default, file, flags) as TOML
    /// and exit.
    #[arg(long)]
    pub print_config: bool,
    /// Transactions to complete [workload.transactions, default 50000].
    #[arg(long)]
    pub transactions: Option<u64>,
    /// Transactions the initiator keeps outstanding [workload.depth, default 64].
    #[arg(long)]
    pub depth: Option<usize>,
    /// Fraction of frames lost, each direction (0.01 = 1 %; at most 0.5)
    /// [faults.loss, default 0.01].
    #[arg(long)]
    pub loss: Option<f64>,
    /// Fraction of frames held back (up to faults.reorder_delay_us) so
    /// later ones overtake them [faults.reorder, default 0.02].
    #[arg(long)]
    pub reorder: Option<f64>,
    /// Fraction of frames delivered twice [faults.duplicate, default 0.001].
    #[arg(long)]
    pub duplicate: Option<f64>,
    /// Fraction of frames with one random bit flipped, anywhere in the
    /// frame (at most 0.5; needs PSP). Each is dropped by name and
    /// retransmitted, or lands in a field no receiver checks; the report
    /// accounts for every one [faults.corrupt, default 0].
    #[arg(long, value_name = "FRACTION")]
    pub corrupt: Option<f64>,
    /// Fraction of first deliveries the target's ULP answers with an RNR
    /// NACK; the redelivery is accepted (a push is retransmitted by the
    /// initiator, a pull redelivered by the target after the timeout)
    /// [target_ulp.rnr, default 0].
    #[arg(long, value_name = "FRACTION")]
    pub rnr: Option<f64>,
    /// The RNR timeout the target's ULP asks for, ms; the nearest code of
    /// the RNR timeout table is sent (0.01 ..= 655.36 ms)
    /// [target_ulp.rnr_timeout_ms, default 1].
    #[arg(long, value_name = "MS")]
    pub rnr_timeout_ms: Option<f64>,
    /// Fraction of transactions the target's ULP completes in error (CIE
    /// NACK, or a zero-length Pull Data for a pull); they complete with
    /// kCmplTargetNackCIE, are counted apart and are not failures
    /// [target_ulp.cie, default 0].
    #[arg(long, value_name = "FRACTION")]
    pub cie: Option<f64>,
    /// Fraction of transactions that are pushes (the rest are pulls)
    /// [workload.push_fraction, default 0.5].
    #[arg(long)]
    pub push_fraction: Option<f64>,
    /// Seed of the faults and the transaction mix [workload.seed, default 1].
    #[arg(long)]
    pub seed: Option<u64>,
    /// Give up (and fail) when no transaction completes for this many
    /// seconds [workload.timeout_s, default 120].
    #[arg(long)]
    pub timeout: Option<f64>,
    /// Rotate the PSP master keys of both nodes and rekey the connection
    /// every N completed transactions, live [psp.rotate_every_transactions,
    /// default 0 = never].
    #[arg(long, value_name = "N")]
    pub rotate_keys_every: Option<u64>,
    /// Run the RUE on its own thread, serving both nodes through one queue
    /// pair each, instead of inline [rue.placement = "thread"].
    #[arg(long)]
    pub rue_thread: bool,
    /// NVMe commands of the NVMe phase after the Falcon workload: reads
    /// and writes of mixed sizes over NVMe over Falcon, every write read
    /// back and compared [nvme.commands, default 2000].
    #[arg(long, value_name = "N")]
    pub nvme_commands: Option<u64>,
    /// Skip the NVMe phase [nvme.enabled = false].
    #[arg(long)]
    pub no_nvme: bool,
    /// RDMA operations of the RDMA phase after the NVMe phase: WRITE,
    /// READ, SEND and atomics over several RC QPs of RDMA over Falcon,
    /// every byte verified [rdma.operations, default 2000].
    #[arg(long, value_name = "N")]
    pub rdma_ops: Option<u64>,
    /// Skip the RDMA phase [rdma.enabled = false].
    #[arg(long)]
    pub no_rdma: bool,
    /// One JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum PspCommand {
    /// Encapsulate and encrypt every IP packet of a pcap file with PSP.
    ///
    /// The configuration file holds master key 0 and 1 (32 hex bytes each),
    /// the SPI (hex; its top bit selects the master key), `transport` or
    /// `tunnel`, `aes-gcm-128` or `aes-gcm-256`, the transport, IPv4-tunnel
    /// and IPv6-tunnel crypt offsets (4-byte units) and `vc` or `no-vc`; see
    /// configs/psp/. The IV starts at 1 and counts packets, as the reference
    /// does. Packets that cannot be encapsulated (not IP, crypt offset beyond
    /// the payload) are skipped and counted.
    Encrypt(EncryptArgs),
    /// Authenticate, decrypt and decapsulate every PSP packet of a pcap file.
    ///
    /// The configuration file holds master key 0 and 1; the SA key of each
    /// packet is derived from its SPI. A packet that fails authentication
    /// stops the run with exit code 1, as the reference does.
    Decrypt(DecryptArgs),
}

#[derive(Debug, Args)]
pub struct EncryptArgs {
    /// Configuration file (reference format).
    #[arg(short = 'c', long = "config", default_value = "psp_encrypt.cfg")]
    pub config: PathBuf,
    /// Cleartext input pcap.
    #[arg(short = 'i', long = "input", default_value = "cleartext.pcap")]
    pub input: PathBuf,
    /// Encrypted output pcap.
    #[arg(short = 'o', long = "output", default_value = "psp_encrypt.pcap")]
    pub output: PathBuf,
    /// Print the configuration and the derived key.
    #[arg(short = 'v', long)]
    pub verbose: bool,
    /// Force a single-bit error (a reserved header bit) in every output
    /// packet after sealing, so that authentication fails at the receiver.
    #[arg(short = 'e', long = "force-error")]
    pub force_error: bool,
    /// AEAD implementation.
    #[arg(long, value_enum, default_value_t = BackendArg::Ring)]
    pub backend: BackendArg,
}

#[derive(Debug, Args)]
pub struct DecryptArgs {
    /// Configuration file with the two master keys (reference format).
    #[arg(short = 'c', long = "config", default_value = "psp_decrypt.cfg")]
    pub config: PathBuf,
    /// Encrypted input pcap.
    #[arg(short = 'i', long = "input", default_value = "psp_encrypt.pcap")]
    pub input: PathBuf,
    /// Cleartext output pcap.
    #[arg(short = 'o', long = "output", default_value = "psp_decrypt.pcap")]
    pub output: PathBuf,
    /// Print each packet's SPI and derived key.
    #[arg(short = 'v', long)]
    pub verbose: bool,
    /// AEAD implementation.
    #[arg(long, value_enum, default_value_t = BackendArg::Ring)]
    pub backend: BackendArg,
}

#[derive(Debug, Subcommand)]
pub enum PcapCommand {
    /// Print every field of every Falcon/PSP packet of a pcap file.
    ///
    /// Layers: Ethernet, IPv4/IPv6, UDP, PSP (header, SPI, IV, VC, ICV) and,
    /// when the packet can be read, the Falcon header by packet type (base
    /// header, pull request, pull data, push data, resync, BACK, EACK with its
    /// three bitmaps, NACK with code and RNR timeout, congestion-control
    /// info). With --keys the PSP payload is authenticated and decrypted.
    /// Packets that do not parse are reported with the reason and counted.
    Decode(DecodeArgs),
    /// Write a capture with one PSP-sealed packet of every Falcon type
    /// (pull request, push data, pull data, resync, BACK, EACK, NACK), to try
    /// `pcap decode` or another decoder on.
    Sample(SampleArgs),
}

#[derive(Debug, Args)]
pub struct SampleArgs {
    /// Output pcap.
    #[arg(short = 'o', long = "output", default_value = "falcon_sample.pcap")]
    pub output: PathBuf,
    /// Master keys (psp_decrypt format); the SA key is derived for SPI
    /// 0x9A345678, version 0. Default: the PSP specification's example keys,
    /// built into the binary (those of configs/psp/decrypt.cfg), so the
    /// command runs from any directory.
    #[arg(long, value_name = "FILE")]
    pub keys: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct DecodeArgs {
    /// The capture to decode (classic pcap, Ethernet link type).
    pub file: PathBuf,
    /// Master keys for decryption: a file in the `psp_decrypt` format (two
    /// lines of 32 hex bytes), e.g. configs/psp/decrypt.cfg.
    #[arg(long)]
    pub keys: Option<PathBuf>,
    /// One JSON object per packet (JSON lines) instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// PSP stage (seal and open in place, with header, SA lookup and
    /// checks) against the raw AEAD backend on the same buffers.
    ///
    /// Bars (DESIGN §8): ratio ≥ 0.9 at 4096 bytes, ≥ 0.7 at 64 bytes.
    Psp(BenchPspArgs),
    /// RUE core (queue-driven, inline on one core) with random connection
    /// ids: CC events per second, against the same events through the
    /// queues with a no-op algorithm.
    ///
    /// Bar (DESIGN §8): ≥ 20 M events/s per core at 1 000 000 connections.
    Rue(BenchRueArgs),
    /// Packet delivery sublayer, both ends of a connection on one core, in
    /// memory, no crypto: Push Data packets per second through transmit,
    /// receive, ULP ACK and the ACKs back (`delivery_mpps`).
    Core(BenchCoreArgs),
    /// One initiator and one target engine with N established connections
    /// each (PSP on, Swift inline): heap bytes per connection, measured
    /// from the allocator, and 64-byte push transactions per second on
    /// connections picked at random, against the same at 1 000
    /// connections in the same run.
    ///
    /// Bars (DESIGN §8): 1 M connections in ≤ 2 GiB (≤ 2147 bytes per
    /// connection per engine, all state included), op rate at 1 M ≥ 0.7
    /// of the rate at 1 K. Progress goes to stderr once a second.
    Scale(BenchScaleArgs),
    /// What DPDK's I/O costs through this project's wrappers: frames
    /// forwarded between two virtual ports on one lcore, straight on the
    /// bindings (`forward_mpps`, as `dpdk-testpmd --forward-mode=io`) and
    /// through `DpdkPort` and the engine's `Port` trait
    /// (`port_forward_mpps`), in interleaved slices; `port_ratio` is the
    /// median of the per-slice ratios (goal ≥ 0.9).
    ///
    /// Needs a binary built with `--features dpdk`. Runs DPDK's EAL in
    /// this process with no hugepages and no PCI (`--no-huge -m 512
    /// --no-pci`), on lcore 0.
    Pipeline(BenchPipelineArgs),
    /// Falcon between two processes over the kernel UDP port, PSP on: the
    /// target is a child `falcon node` pinned to the second core of
    /// `--cores`, the initiator runs in this process pinned to the first.
    /// Prints the initiator's summary with the target's beside it (what
    /// two `falcon node` commands print); compare with QUIC by running
    /// quinn's perf tool on the same cores (dataplane/app/PERFORMANCE.md).
    Udp(BenchUdpArgs),
}

/// `falcon bench udp`: `falcon node` twice, on two cores.
#[derive(Debug, Args)]
pub struct BenchUdpArgs {
    /// What the initiator runs.
    #[arg(long, value_enum, default_value_t = NodeWorkload::Bulk)]
    pub workload: NodeWorkload,
    /// Measuring time, seconds (verify: a limit).
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Data bytes per transaction (see `falcon node --size`).
    #[arg(long)]
    pub size: Option<usize>,
    /// Ops in flight (see `falcon node --inflight`).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub inflight: Option<u32>,
    /// Transactions of the verify workload.
    #[arg(long, default_value_t = 20_000)]
    pub transactions: u64,
    /// Fraction of frames each side's port drops on transmit.
    #[arg(long, default_value_t = 0.0)]
    pub loss: f64,
    /// PSP encryption of every frame.
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub psp: OnOff,
    /// UDP segmentation offload (GSO/GRO).
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub udp_offload: OnOff,
    /// The initiator's core and the target's.
    #[arg(long, value_name = "A,B", value_delimiter = ',', num_args = 2, default_values_t = [0, 1])]
    pub cores: Vec<usize>,
    /// No stats lines on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// One JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}

/// `falcon bench pipeline`: what DPDK's I/O costs, in two ratios: the
/// safe wrappers against plain forwarding, and a Falcon target fed over
/// DPDK against the same target fed from memory.
#[derive(Debug, Args)]
pub struct BenchPipelineArgs {
    /// Virtual devices of the forwarding ratio: `net_null` (two null ports
    /// that receive endless frames of `--size` bytes and drop what they
    /// send: the I/O framework alone). The Falcon ratio always runs over a
    /// `net_ring` pair (a generator lcore on one end, the target on the
    /// other).
    #[arg(long, default_value = "net_null")]
    pub vdev: String,
    /// Bytes: the frames forwarded, and the payload of each Push Data the
    /// Falcon target receives (at most 4096 there).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(60..=9000))]
    pub size: u32,
    /// PSP on the Falcon frames (sealed by the initiator, opened in place
    /// by the target).
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub psp: OnOff,
    /// Rounds of the Falcon ratio (each records fresh frames, then runs
    /// the memory-fed and the DPDK-fed target in alternating order).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub falcon_rounds: u32,
    /// Measuring time, seconds, cut into 10 slices alternating the two
    /// loops.
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,
    /// Datapath lcores of the scaling measurement: Falcon targets on one
    /// lcore and on N, each an engine owning a shard of one node, frames
    /// reaching their shard by receive queue and by software dispatch
    /// (per-lcore and total Mpps, scaling efficiency). Each lcore needs a
    /// CPU of its own; 1 skips the N-lcore runs.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub lcores: u16,
    /// Rounds of the scaling measurement (each records fresh frames, then
    /// runs 1 lcore, N by queue and N dispatched in rotating order).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub scaling_rounds: u32,
    /// One JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}

/// `falcon bench scale`: memory per connection and the op rate at N
/// connections against 1 000.
#[derive(Debug, Args)]
pub struct BenchScaleArgs {
    /// Connections on each engine (CIDs 1..=N; at most 2^24).
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u32).range(1..=16_777_216))]
    pub connections: u32,
    /// Measuring time, seconds, for each of the two runs (N and 1 000),
    /// cut into 10 interleaved slices; a warm-up of half a slice each comes
    /// first.
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,
    /// 64-byte push transactions the initiator keeps outstanding, each on
    /// a connection picked at random.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub depth: u32,
    /// Seed of the connection choice.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// No progress lines on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// One JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}

/// `falcon bench core`: Falcon core loop on one core, in memory, no crypto:
/// packets per second through the packet delivery sublayer.
#[derive(Debug, Args)]
pub struct BenchCoreArgs {
    /// Falcon payload bytes per packet.
    #[arg(long, default_value_t = 64)]
    pub size: u32,
    /// Measuring time, in seconds.
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,
    /// Run one engine loop alone for a fixed number of transactions
    /// (`--transactions`) instead of the whole timed report: the same work
    /// every run, for instruction counts, e.g. `valgrind --tool=callgrind
    /// falcon bench core --profile push64-psp --transactions 100000`. The
    /// crypto-only runners run alone the same way (`--transactions` counts
    /// seal + open pairs), so that `perf` can set a loop's seals and opens
    /// beside the bound's.
    #[arg(long, value_enum)]
    pub profile: Option<crate::cmd::bench_loop::Profile>,
    /// Transactions of a `--profile` run (after a warm-up of a tenth; the
    /// ACK that reaches the number may complete up to `--depth` more; the
    /// crypto bounds round up to whole batches of 64 pairs, the floor to
    /// whole rounds of `--depth`).
    #[arg(long, default_value_t = 1_000_000, requires = "profile")]
    pub transactions: u64,
    /// Push transactions each engine loop keeps outstanding (and ULP
    /// payload vectors it cycles through; frames of the 4 KiB floor).
    #[arg(long, default_value_t = Shape::DEFAULT.depth as u32, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub depth: u32,
    /// Frames an engine takes from its port per receive burst. Above 128
    /// (the receiver's data window) the target can take in more Push Data
    /// at once than its window holds: out-of-window drops, retransmitted.
    #[arg(long, default_value_t = Shape::DEFAULT.burst as u32, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub burst: u32,
    /// Frames an engine builds per transmit burst, reading the clock before
    /// each: every frame of a burst carries that time as its t1, so a
    /// frame's wait for the rest of its burst counts in the RTT the
    /// sender's Swift measures.
    #[arg(long, default_value_t = Shape::DEFAULT.tx_burst as u32, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub tx_burst: u32,
    /// Free buffers each loopback end caches and trades with the shared
    /// pool at a time (DPDK's mempool cache): with `--depth` it sets how
    /// many frame buffers circulate, so the loops' memory footprint.
    #[arg(long, default_value_t = Shape::DEFAULT.cache_batch as u32, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub cache_batch: u32,
    /// One JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}

impl BenchCoreArgs {
    /// The engine loops' shape from `--depth`, `--burst`, `--tx-burst`,
    /// `--cache-batch`.
    pub fn shape(&self) -> Shape {
        Shape {
            depth: self.depth as usize,
            burst: self.burst as usize,
            tx_burst: self.tx_burst as usize,
            cache_batch: self.cache_batch as usize,
        }
    }
}

/// `falcon bench rue`: CC events per second per core through the
/// queue-driven RUE core with random connection ids. Bar (DESIGN §8):
/// ≥ 20 M events/s per core at 1 000 000 connections.
#[derive(Debug, Args)]
pub struct BenchRueArgs {
    /// Connections whose state the RUE holds (events pick one at random).
    #[arg(long, default_value_t = 1_000_000)]
    pub connections: u32,
    /// Congestion-control algorithm.
    #[arg(long, value_enum, default_value_t = RueAlgorithmArg::Swift)]
    pub algorithm: RueAlgorithmArg,
    /// Measuring time, in seconds.
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,
    /// One JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Congestion-control algorithm of the RUE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RueAlgorithmArg {
    /// Swift (delay-based, fabric and NIC windows), the default.
    Swift,
    /// DCQCN (ECN-driven rate control).
    Dcqcn,
}

#[derive(Debug, Args)]
pub struct BenchPspArgs {
    /// Payload bytes per packet behind the PSP header (the Falcon packet).
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(4..=9000))]
    pub size: u32,
    /// Measuring time per side, in seconds (split into alternating rounds).
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,
    /// PSP version: 0 = AES-GCM-128, 1 = AES-GCM-256.
    #[arg(long = "psp-version", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub psp_version: u8,
    /// AEAD implementation.
    #[arg(long, value_enum, default_value_t = BackendArg::Ring)]
    pub backend: BackendArg,
    /// One JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}

/// AEAD backend selection on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    /// `ring` (assembly AES-GCM; the fastest here).
    Ring,
    /// RustCrypto `aes-gcm` (portable).
    Rustcrypto,
}

/// `falcon nbd-gateway`: an NBD server in front of a storage backend.
#[derive(Debug, Clone, Args)]
pub struct NbdGatewayArgs {
    /// Where clients connect: `unix:PATH` (a Unix socket; a stale socket
    /// file is replaced) or `tcp:HOST:PORT` (port 0: any free port, named
    /// on stderr). Repeat to listen on several.
    #[arg(long, value_name = "unix:PATH|tcp:HOST:PORT", required = true)]
    pub listen: Vec<crate::nbd::server::Listen>,
    /// The storage behind the export (`--connect` implies `falcon`).
    #[arg(long, value_enum, default_value_t = NbdBackendKind::Ram)]
    pub backend: NbdBackendKind,
    /// Export size: bytes, or with a binary suffix K, M, G, T (`64M` is
    /// 64 MiB). With `--connect`, the namespace's size.
    #[arg(long, value_name = "BYTES", default_value = "64M", value_parser = crate::cmd::nbd_gateway::parse_size, conflicts_with = "connect")]
    pub size: u64,
    /// Export a namespace of a target in another process (`falcon
    /// nvme-target`) whose connection manager is at HOST:PORT (its
    /// `node.control`): NVMe over Falcon over the kernel UDP port, PSP on.
    /// The export has the namespace's size and LBA size; FLUSH is offered
    /// when the target takes NVMe Flush (`[target] vendor_commands`). A
    /// lost target is reconnected to for `--reconnect-timeout` seconds:
    /// meanwhile requests wait, and those in flight are sent again (a
    /// FLUSH covering writes a restarted target may have lost fails, once).
    #[arg(long, value_name = "HOST:PORT")]
    pub connect: Option<String>,
    /// With `--connect`: the namespace to export (one the target offers).
    #[arg(long, value_name = "N", default_value_t = 1, requires = "connect")]
    pub nsid: u32,
    /// With `--connect`: this gateway's UDP socket for Falcon frames
    /// (port 0: any).
    #[arg(
        long,
        value_name = "ADDR:PORT",
        default_value = "0.0.0.0:0",
        requires = "connect"
    )]
    pub bind: std::net::SocketAddr,
    /// With `--connect`: how long to keep reconnecting to a lost target,
    /// seconds; then requests fail with EIO.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 30.0,
        requires = "connect"
    )]
    pub reconnect_timeout: f64,
    /// With `--connect`: PSP on the connection (as the target's
    /// `[psp] enabled`).
    #[arg(long, value_enum, default_value_t = OnOff::On, requires = "connect")]
    pub psp: OnOff,
    /// The export's name; clients asking for the empty (default) name get
    /// it too.
    #[arg(long, value_name = "NAME", default_value = "")]
    pub export: String,
    /// Stop after this many seconds (default: run until SIGINT/SIGTERM).
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// How long stopping waits for requests in flight before closing the
    /// connections anyway.
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0)]
    pub drain: f64,
    /// No stats lines on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// The summary as one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}

/// The storage behind `falcon nbd-gateway`'s export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum NbdBackendKind {
    /// Memory in this process, sparse (taken 1 MiB at a time where
    /// written), completed inline; lost at exit. Measures the gateway's
    /// own ceiling.
    Ram,
    /// NVMe over Falcon: each read and write is an iCMD of the NVMe
    /// initiator of an in-process pair (two engines over the in-process
    /// loopback, PSP on, Swift, unordered connection) whose target holds
    /// the export in a RAM namespace of 512-byte LBAs, on its own lcore
    /// thread. Minimum block size 512 B, maximum payload 1 MiB (one iCMD);
    /// flush and FUA; no trim or write-zeroes (NVMe over Falcon maps only
    /// Read and Write).
    Falcon,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// clap's own consistency checks over every subcommand (duplicate
    /// flags, bad defaults), which otherwise only fire when a subcommand runs.
    #[test]
    fn command_line_is_consistent() {
        Cli::command().debug_assert();
    }
}
