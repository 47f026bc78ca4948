//! The NVMe-over-Falcon target: nCMDs in, tCMDs on the storage workers,
//! a response per nCMD out.
//!
//! Layer: NVMe ULP over `falcon-core`'s public ULP API (an
//! [`Ulp<B, NvmeData>`](Ulp) the lcore loop drives), above the namespace
//! workers. Owns the [`Workers`] (per-SQID workers that own the
//! namespaces), the tCMD table, the tCMD buffers and the transactions
//! waiting for credits. Never blocks and never waits on I/O on the lcore:
//! storage runs on the workers, whose completions are polled in the
//! [`Ulp::submit`] hook; a worker runs on the lcore itself only when its
//! [`WorkerSpec`] says [`Execution::Inline`](crate::namespace::Execution),
//! which [`Workers`] allows only for namespaces that never block (RAM).
//! Never allocates per packet: slots, buffers and queues are sized when
//! the target is built.
//!
//! # Reassembly (ulp.md §3.9)
//!
//! nCMDs of one tCMD share the key (source connection, Initiator
//! Function, iCMD Identifier, NG); the first to arrive takes a tCMD slot
//! and a buffer, and its Target Tag (24 bits: slot and generation,
//! [`SlotIds`]) names the tCMD in every packet the target sends and in the
//! Write Data Responses that come back. NCNT Total (0-based) gives the
//! tCMD's nCMD count and NCNT Offset × 4 KiB an nCMD's place in it
//! (decision D8, [`crate::split::ncmd_extent`]).
//!
//! * Read (NVMe-0.9 §7.1): the first Read Request issues the whole tCMD
//!   read to its SQID's worker; each nCMD gets its Read Response (NBTH, 2
//!   reserved bytes, status, its blocks in DIF straight from the tCMD
//!   buffer) once the read is done, at once for an nCMD that arrives
//!   later. A response in error carries no data (ulp.md §3.9).
//! * Write (§7.2): each Write Request gets a Write Data Request, a Falcon
//!   pull whose Request Length covers the Write Data Response (NBTH, 4
//!   reserved bytes, the nCMD's data and metadata). Each response's DIX
//!   data is unpacked into the tCMD buffer; every nCMD but the last to
//!   arrive is completed at once (the early Write Completions §7.2
//!   allows), the last after the tCMD is written, with the device's
//!   status. INV, a pull Falcon could not complete, or data that is not
//!   the nCMD's blocks: the tCMD is never written and every completion
//!   still to send carries the error (Data Transfer Error for INV, §8.2,
//!   ulp.md §3.9).
//!
//! # Errors and back-pressure
//!
//! An unknown namespace (Invalid Namespace), an LBA range past the
//! namespace (LBA Out of Range), NCNT fields that do not fit the command
//! or an unknown SQID (Invalid Field) are answered in the nCMD's own
//! response without a tCMD; device errors come back from the workers.
//! Either way the connection carries on. When a new tCMD cannot start (no
//! slot, no buffer, its worker's queue full) the request is NACKed
//! receiver-not-ready and Falcon delivers it again after the RNR timeout
//! (Falcon 0.9 §8.5.3.4): nothing is dropped. A fatal connection error
//! aborts the connection's tCMDs (one whose I/O is on a worker is freed
//! when the I/O completes); a tCMD that has not finished by its timeout
//! (an nCMD or its data never came) answers what it owes with Transient
//! Transport Error and is freed.

mod commands;
mod requests;
mod tcmd;

pub use commands::COMMAND_SLOTS;

use core::fmt;
use core::time::Duration;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use falcon_core::api::{
    ConnectionHandle, Engine, PacketBuf, RejectReason as EngineReject, RnrTimeout, Timestamp,
    Transaction, Ulp, UlpEvent,
};

use crate::data::{BlockBuffers, NvmeData};
use crate::layout::{Format, LbaSize, MetadataSize};
use crate::namespace::workers::Completion as IoCompletion;
use crate::namespace::{BlockStore, ConfigError, IoBuffer, Storage, WorkerSpec, Workers};
use crate::split::MAX_ICMD_LEN;
use crate::status::StatusCounts;
use crate::tag::SlotIds;

use tcmd::{Key, TcmdSlot};

/// How the target runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TargetConfig {
    /// tCMDs in progress at most (1..=65,536).
    pub tcmd_slots: usize,
    /// tCMD buffers (each `max_tcmd_len` bytes of data and its metadata);
    /// one per tCMD in progress.
    pub buffers: usize,
    /// Largest tCMD, in data bytes: the initiator's MDTS (1 MiB, 256
    /// nCMDs) unless the control plane set it lower (NVMe-0.9 §6.5).
    pub max_tcmd_len: usize,
    /// Requests each worker holds at most; a tCMD that would start on a
    /// full worker is refused with RNR.
    pub worker_queue_depth: usize,
    /// How long a tCMD may wait for its nCMDs and their data.
    pub tcmd_timeout: Duration,
    /// nCMDs accepted and parked until a tCMD can start for them, where an
    /// RNR would block the data a write on their connection waits for (see
    /// `target::requests`); beyond, RNR.
    pub parked_ncmds: usize,
    /// The RNR NACK's timeout: when Falcon delivers a refused request
    /// again.
    pub rnr_timeout: RnrTimeout,
    /// Our vendor Command Request and Response (ulp.md §3.9, off by
    /// default): Flush from initiators that enabled them too.
    pub vendor_commands: bool,
}

impl Default for TargetConfig {
    fn default() -> TargetConfig {
        TargetConfig {
            tcmd_slots: 256,
            buffers: 64,
            max_tcmd_len: MAX_ICMD_LEN,
            worker_queue_depth: 32,
            tcmd_timeout: Duration::from_secs(10),
            parked_ncmds: 4096,
            // A worker turns a 1 MiB RAM tCMD around in a few hundred
            // microseconds: a short wait, retried, keeps the queue full.
            rnr_timeout: RnrTimeout::nearest(Duration::from_micros(160)),
            vendor_commands: false,
        }
    }
}

/// What the target has done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TargetStats {
    pub read_tcmds: u64,
    pub write_tcmds: u64,
    pub read_ncmds: u64,
    pub write_ncmds: u64,
    /// Data bytes the workers read and wrote successfully.
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Responses sent (Read Responses and Write Completions), by status.
    pub responses: StatusCounts,
    /// Storage I/O completions, by status.
    pub io: StatusCounts,
    /// Write Completions sent before their tCMD was written.
    pub early_write_completions: u64,
    pub write_data_requests: u64,
    /// Write Data Responses that came with INV.
    pub invalid_data: u64,
    /// Requests NACKed receiver-not-ready, by what was missing.
    pub rnr_no_slot: u64,
    pub rnr_no_buffer: u64,
    pub rnr_worker_busy: u64,
    /// Requests NACKed RNR because parked requests wait for the next tCMD.
    pub rnr_behind_parked: u64,
    /// Requests accepted and parked until a tCMD could start for them.
    pub parked: u64,
    /// Transactions that Falcon did not complete with ACK, or that the
    /// engine refused for another reason than credits.
    pub transport_failures: u64,
    /// Transactions refused for credits and kept for a later turn.
    pub credit_waits: u64,
    /// tCMDs ended by a connection error.
    pub aborted_tcmds: u64,
    pub timed_out_tcmds: u64,
    /// Packets or completions naming a tCMD that is gone.
    pub stale: u64,
    /// Requests that do not parse, are of a type a target never gets, or
    /// disagree with their tCMD.
    pub malformed: u64,
    pub connection_errors: u64,
    pub xoff: u64,
    pub xon: u64,
    /// Command Requests taken (vendor extension), and the flushes of them
    /// that succeeded.
    pub commands: u64,
    pub flushes: u64,
}

/// Why [`Target::new`] refused.
#[derive(Debug)]
pub enum TargetError {
    /// A config field out of range.
    Config {
        field: &'static str,
        reason: &'static str,
    },
    /// The workers or their namespaces.
    Workers(ConfigError),
}

impl fmt::Display for TargetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TargetError::Config { field, reason } => write!(f, "target {field}: {reason}"),
            TargetError::Workers(e) => fmt::Display::fmt(e, f),
        }
    }
}

impl std::error::Error for TargetError {}

/// A namespace as the datapath sees it: its format and size (the
/// namespace itself lives on its worker).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NamespaceInfo {
    format: Format,
    blocks: u64,
}

/// A tCMD's data and metadata (MSET = 0), shared with the engine while
/// Read Responses carry it.
#[derive(Debug, Default)]
struct TcmdBuffers {
    data: IoBuffer,
    metadata: IoBuffer,
}

impl BlockBuffers for TcmdBuffers {
    fn data(&self) -> &[u8] {
        &self.data
    }

    fn metadata(&self) -> &[u8] {
        &self.metadata
    }
}

/// A transaction refused for credits, kept for a later turn.
#[derive(Debug)]
struct Outgoing {
    connection: ConnectionHandle,
    transaction: Transaction<NvmeData>,
}

/// The NVMe-over-Falcon target (see the module doc).
pub struct Target<S: BlockStore + 'static = Storage> {
    config: TargetConfig,
    ids: SlotIds,
    workers: Workers<S>,
    /// Sorted by NSID.
    namespaces: Vec<(u16, NamespaceInfo)>,
    slots: Vec<TcmdSlot>,
    free: Vec<u32>,
    by_key: HashMap<Key, u32>,
    /// Free buffers, each held by nothing else.
    pool: Vec<Arc<TcmdBuffers>>,
    /// Buffers of freed tCMDs that the engine still holds (a Read Response
    /// it may retransmit): back to the pool once it lets go.
    lent: Vec<Arc<TcmdBuffers>>,
    tx: VecDeque<Outgoing>,
    parked: VecDeque<tcmd::Parked>,
    /// tCMDs whose I/O waits for room on their worker: (slot, generation).
    io_backlog: VecDeque<(u32, u32)>,
    /// Worker completions collected by [`wait_for_storage`](Self::wait_for_storage).
    ready: VecDeque<IoCompletion>,
    /// Connections out of credits this turn.
    blocked: Vec<ConnectionHandle>,
    commands: commands::Commands,
    stats: TargetStats,
    next_deadline: Option<Timestamp>,
}

impl<S: BlockStore + 'static> Target<S> {
    /// A target whose workers serve `specs` (each worker's SQIDs, the
    /// namespaces it owns and where it runs); the namespaces' formats are
    /// recorded here before they move to their workers.
    ///
    /// # Errors
    ///
    /// [`TargetError::Config`] for a slot, buffer or size out of range,
    /// [`TargetError::Workers`] for the workers' refusal (an SQID or NSID
    /// twice, a thread that does not start).
    pub fn new(config: TargetConfig, specs: Vec<WorkerSpec<S>>) -> Result<Target<S>, TargetError> {
        let refuse = |field, reason| Err(TargetError::Config { field, reason });
        let Some(ids) = SlotIds::for_slots(config.tcmd_slots) else {
            return refuse("tcmd_slots", "must be 1..=65536");
        };
        if config.buffers == 0 {
            return refuse("buffers", "must be > 0");
        }
        if config.max_tcmd_len == 0 || config.max_tcmd_len > MAX_ICMD_LEN {
            return refuse("max_tcmd_len", "must be 1..=1 MiB");
        }
        let mut namespaces = Vec::new();
        for namespace in specs.iter().flat_map(|spec| &spec.namespaces) {
            let format = namespace.format();
            if namespaces.iter().any(|(nsid, _)| *nsid == format.nsid()) {
                return refuse("namespaces", "an NSID on two workers");
            }
            namespaces.push((
                format.nsid(),
                NamespaceInfo {
                    format: format.format(),
                    blocks: format.blocks(),
                },
            ));
        }
        namespaces.sort_by_key(|(nsid, _)| *nsid);
        let workers =
            Workers::spawn(specs, config.worker_queue_depth).map_err(TargetError::Workers)?;
        // The most metadata a tCMD carries: 16 bytes for each 512-byte
        // block.
        let metadata_len = config.max_tcmd_len / LbaSize::B512.bytes() * MetadataSize::B16.bytes();
        let pool = (0..config.buffers)
            .map(|_| {
                Arc::new(TcmdBuffers {
                    data: IoBuffer::with_capacity(config.max_tcmd_len),
                    metadata: IoBuffer::with_capacity(metadata_len),
                })
            })
            .collect();
        let slots = config.tcmd_slots;
        Ok(Target {
            config,
            ids,
            workers,
            namespaces,
            slots: (0..slots).map(|_| TcmdSlot::new()).collect(),
            free: (0..slots as u32).rev().collect(),
            by_key: HashMap::with_capacity(slots),
            pool,
            lent: Vec::with_capacity(config.buffers),
            tx: VecDeque::with_capacity(slots * 4),
            parked: VecDeque::with_capacity(config.parked_ncmds),
            io_backlog: VecDeque::with_capacity(slots),
            ready: VecDeque::with_capacity(slots),
            blocked: Vec::with_capacity(8),
            commands: commands::Commands::new(),
            stats: TargetStats::default(),
            next_deadline: None,
        })
    }

    pub fn config(&self) -> &TargetConfig {
        &self.config
    }

    pub fn stats(&self) -> &TargetStats {
        &self.stats
    }

    /// tCMDs in progress.
    pub fn tcmds(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Storage requests on the workers (submitted, completion not yet
    /// handled).
    pub fn io_in_flight(&self) -> usize {
        self.workers.in_flight()
    }

    /// When the earliest tCMD times out.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        if self.tcmds() == 0 {
            return None;
        }
        self.next_deadline
    }

    /// Blocks until every storage request on the workers has completed (or
    /// `timeout` passes), keeping the completions for the next
    /// [`Ulp::submit`] turn; returns how many it collected. For tests that
    /// run the loop in virtual time (the storage then takes no virtual
    /// time) and for shutdown; never on an lcore.
    pub fn wait_for_storage(&mut self, timeout: Duration) -> usize {
        let start = Instant::now();
        let mut collected = 0;
        while self.workers.in_flight() > 0 && start.elapsed() < timeout {
            match self.workers.poll_completion() {
                Some(completion) => {
                    self.ready.push_back(completion);
                    collected += 1;
                }
                None => std::thread::sleep(Duration::from_micros(20)),
            }
        }
        collected
    }

    /// Stops the workers (each finishes its queue) and returns their
    /// namespaces.
    pub fn shutdown(self) -> Vec<crate::namespace::Namespace<S>> {
        self.workers.shutdown()
    }

    fn namespace(&self, nsid: u16) -> Option<NamespaceInfo> {
        let index = self
            .namespaces
            .binary_search_by_key(&nsid, |(n, _)| *n)
            .ok()?;
        Some(self.namespaces[index].1)
    }

    /// Sends `transaction`, or keeps it for a later turn when the
    /// connection is out of credits.
    fn transmit<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, NvmeData>,
        connection: ConnectionHandle,
        transaction: Transaction<NvmeData>,
    ) {
        if self.blocked.contains(&connection) {
            self.tx.push_back(Outgoing {
                connection,
                transaction,
            });
            return;
        }
        match engine.submit(now, connection, transaction) {
            Ok(_) => {}
            Err(rejected) => match rejected.reason {
                EngineReject::NoResources(_) => {
                    self.stats.credit_waits += 1;
                    self.blocked.push(connection);
                    self.tx.push_back(Outgoing {
                        connection,
                        transaction: rejected.returned,
                    });
                }
                _ => {
                    self.stats.transport_failures += 1;
                    self.transaction_failed(now, engine, rejected.returned.tag);
                }
            },
        }
    }

    /// Transactions that waited for credits.
    fn retransmit<B: PacketBuf>(&mut self, now: Timestamp, engine: &mut Engine<B, NvmeData>) {
        for _ in 0..self.tx.len() {
            let Some(outgoing) = self.tx.pop_front() else {
                break;
            };
            self.transmit(now, engine, outgoing.connection, outgoing.transaction);
        }
    }

    /// Buffers the engine has let go of go back to the pool.
    fn reclaim(&mut self) {
        let mut i = 0;
        while i < self.lent.len() {
            if Arc::strong_count(&self.lent[i]) == 1 {
                let buffers = self.lent.swap_remove(i);
                self.pool.push(buffers);
            } else {
                i += 1;
            }
        }
    }

    /// Worker completions: collected ones first, then the workers' queue.
    fn poll_storage<B: PacketBuf>(&mut self, now: Timestamp, engine: &mut Engine<B, NvmeData>) {
        while let Some(completion) = self.ready.pop_front() {
            self.on_io_done(now, engine, completion);
        }
        while let Some(completion) = self.workers.poll_completion() {
            self.on_io_done(now, engine, completion);
        }
    }
}

impl<B: PacketBuf, S: BlockStore + 'static> Ulp<B, NvmeData> for Target<S> {
    fn submit(&mut self, now: Timestamp, engine: &mut Engine<B, NvmeData>) {
        self.blocked.clear();
        self.poll_storage(now, engine);
        self.start_backlogged_io(now, engine);
        self.retransmit(now, engine);
        if !self.parked.is_empty() {
            self.start_parked(now, engine);
        }
        if !self.lent.is_empty() {
            self.reclaim();
        }
        self.expire(now, engine);
    }

    fn on_event(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, NvmeData>,
        event: UlpEvent<B, NvmeData>,
    ) {
        match event {
            UlpEvent::Request(request) => self.on_request(now, engine, request),
            UlpEvent::Completion(completion) => self.on_completion(now, engine, completion),
            UlpEvent::ConnectionError { connection, fault } => {
                self.stats.connection_errors += 1;
                if fault.is_fatal() {
                    self.handle_connection_closed(connection);
                }
            }
            UlpEvent::Xoff { .. } => self.stats.xoff += 1,
            UlpEvent::Xon { .. } => self.stats.xon += 1,
        }
    }
}

impl<S: BlockStore + 'static> fmt::Debug for Target<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("config", &self.config)
            .field("tcmds", &self.tcmds())
            .field("workers", &self.workers)
            .field("stats", &self.stats)
            .finish()
    }
}
