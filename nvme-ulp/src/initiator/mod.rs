//! The NVMe-over-Falcon initiator: iCMDs in, nCMDs over Falcon, iCMD
//! completions out.
//!
//! Layer: NVMe ULP over `falcon-core`'s public ULP API (an
//! [`Ulp<B, NvmeData>`](Ulp) the lcore loop drives). Owns the iCMD slots,
//! the LBA translation tables (NVMe-0.9 §6.6.2, [`crate::lba`]), the
//! per-namespace format and PI policy, the nCMDs waiting for credits and
//! the completions waiting for the caller. Never reads a clock (time comes
//! with each call), never blocks, never allocates per packet: slots,
//! queues and header buffers are sized when the initiator is built, and a
//! read's data lands from the received frame straight in the caller's
//! buffer.
//!
//! # Flows (NVMe-0.9 §7, ulp.md §3.6)
//!
//! [`Initiator::submit_icmd`] translates and splits an iCMD
//! ([`crate::split`]: one or two tCMD groups, 4 KiB nCMDs numbered per
//! group) and queues one push per nCMD: NBTH as the ULP header, the
//! 32-byte command block as data ([`NvmeData::Command`]). The
//! [`Ulp::submit`] hook pushes them, on unordered connections (ulp.md
//! §3.1); one refused for credits stays queued and goes on a later turn.
//!
//! * Read: each Read Response push is ULP-ACKed, its status recorded and
//!   its DIF data placed in the caller's buffers at the nCMD's offset.
//! * Write: each Write Data Request (a Falcon pull whose header is its
//!   NBTH) is answered with [`Engine::submit_pull_data`]: the Write Data
//!   Response header (NBTH + 4 reserved bytes) and the nCMD's slice of the
//!   caller's buffers in DIX ([`NvmeData::Blocks`]). Each Write Completion
//!   push is ULP-ACKed and its status recorded; one that arrives while
//!   the group still has data to send is counted as early (§7.2 allows the
//!   target to complete all but the last nCMD before its device does).
//!
//! An iCMD completes when every nCMD has its response; its status is the
//! first non-success. A request push that Falcon does not complete with
//! ACK, a fatal connection error and the iCMD timeout fail the nCMDs left
//! ([`Status::TRANSIENT_TRANSPORT_ERROR`], [`Status::ABORTED_BY_HOST`]).
//!
//! [`Initiator::submit_flush`] flushes a whole namespace with our vendor
//! Command Request where both ends enabled it ([`flush`], ulp.md §3.9).
//!
//! # Identifiers
//!
//! The iCMD Identifier is the iCMD's slot and its generation
//! ([`SlotIds`]); the Initiator Tag is the nCMD's index in the iCMD (9
//! bits: an unaligned split of a 1 MiB iCMD makes 257 nCMDs) and the low
//! 15 bits of the same generation. A response or Write Data Request whose
//! generation no longer matches its slot's (the iCMD failed or timed out
//! and the slot was reused) is dropped and counted as stale; a stale
//! Write Data Request is answered with INV and no data, so the target
//! writes nothing and frees its tCMD.
//!
//! # Protection information
//!
//! The caller's metadata carries the PI (the host supplies it, §6.7). With
//! [`PiPolicy::Checked`] each nCMD carries PRACT = 0, the PRCHK bits of
//! the policy, reference tag = the low 32 bits of its tCMD's target SLBA
//! and application tag = its low 16 bits with mask FFFFh (§6.7 steps
//! 1–5); with [`PiPolicy::Off`], PRCHK = 0 and all-ones tags. Type 1
//! application tags do not advance per block, so an application tag
//! written by one command matches a later read only at the same SLBA:
//! a policy without [`PrInfo::APP_TAG`] checks guard and reference tag of
//! any sub-range. With `verify_writes`, the initiator checks each nCMD's
//! PI itself before sending it and marks the data invalid (INV) when a
//! check fails (§8.2): the target then writes nothing.

mod flush;
mod icmd;
mod packets;

use core::fmt;
use core::time::Duration;
use std::collections::VecDeque;
use std::sync::Arc;

use falcon_core::api::{
    ConnectionHandle, Engine, PacketBuf, Rsn, Timestamp, Transaction, Ulp, UlpEvent, UlpHeader,
};

use crate::data::{HostBuffers, NvmeData};
use crate::layout::{Format, MetadataSize};
use crate::lba::{self, TranslateError, TranslationTables};
use crate::namespace::config::pi_offset;
use crate::namespace::PrInfo;
use crate::split::{SplitError, MAX_NCMDS_PER_GROUP};
use crate::status::{Status, StatusCounts};
use crate::tag::{SlotIds, MAX_SLOTS};
use crate::wire::InitiatorFunction;

pub use flush::FLUSH_SLOTS;
use icmd::{ActiveIcmd, Slot};

/// Most nCMDs one iCMD makes: two groups when a 1 MiB iCMD is split off
/// a 4 KiB boundary (512-byte blocks).
pub const MAX_NCMDS_PER_ICMD: usize = MAX_NCMDS_PER_GROUP + 1;

/// How the initiator runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitiatorConfig {
    /// iCMDs outstanding at most (1..=65,536): [`Initiator::submit_icmd`]
    /// refuses beyond.
    pub queue_depth: usize,
    /// How long an iCMD may wait for all its responses before it fails
    /// with [`Status::ABORTED_BY_HOST`] (Linux's default I/O timeout is
    /// 30 s).
    pub icmd_timeout: Duration,
    /// The `<Host, PF, VF>` this initiator's commands come from (NBTH
    /// word 0).
    pub initiator_function: InitiatorFunction,
    /// Our vendor Command Request and Response (ulp.md §3.9, off by
    /// default: only for targets that enabled them too): what
    /// [`Initiator::submit_flush`] needs.
    pub vendor_commands: bool,
}

impl Default for InitiatorConfig {
    fn default() -> InitiatorConfig {
        InitiatorConfig {
            queue_depth: 256,
            icmd_timeout: Duration::from_secs(30),
            initiator_function: InitiatorFunction::ZERO,
            vendor_commands: false,
        }
    }
}

/// What the initiator asks of the target's PI checks (NVMe-0.9 §6.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PiPolicy {
    /// PRCHK = 0, (E)ILBRT = FFFFFFFFh, (E)LBATM = (E)LBAT = FFFFh.
    #[default]
    Off,
    /// PRACT = 0, PRCHK = `prchk`, tags from the target LBA.
    Checked {
        /// The checks the target runs (PRCHK bits of [`PrInfo`]).
        prchk: PrInfo,
        /// Check each write nCMD's PI before sending it; a failure sends
        /// the data marked invalid (INV).
        verify_writes: bool,
    },
}

/// An initiator namespace: where its LBAs live and how its blocks look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamespaceSpec {
    /// Its NSID table row (chunks, stripes, LBA size).
    pub translation: lba::Namespace,
    /// Metadata bytes a block, as the target namespaces are formatted.
    pub metadata: MetadataSize,
    pub pi: PiPolicy,
}

/// An NVM Read or Write command from the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Icmd {
    /// The caller's name for it, returned in its completion.
    pub tag: u64,
    /// Initiator NSID (1..=65535).
    pub nsid: u32,
    pub slba: u64,
    /// Number of logical blocks, 0-based (NVMe CDW12).
    pub nlb: u16,
    /// Force Unit Access.
    pub fua: bool,
    /// Read or write, with the buffers.
    pub buffers: IcmdBuffers,
}

impl Icmd {
    /// A read of `nlb + 1` blocks from `slba` into `buffers` (resized to
    /// the command: give buffers with the capacity to read without
    /// allocating).
    pub fn read(tag: u64, nsid: u32, slba: u64, nlb: u16, buffers: HostBuffers) -> Icmd {
        Icmd {
            tag,
            nsid,
            slba,
            nlb,
            fua: false,
            buffers: IcmdBuffers::Read(buffers),
        }
    }

    /// A write of `buffers` (exactly `nlb + 1` blocks of data and their
    /// metadata) at `slba`.
    pub fn write(tag: u64, nsid: u32, slba: u64, nlb: u16, buffers: Arc<HostBuffers>) -> Icmd {
        Icmd {
            tag,
            nsid,
            slba,
            nlb,
            fua: false,
            buffers: IcmdBuffers::Write(buffers),
        }
    }

    /// The same command with FUA set.
    pub fn with_fua(self) -> Icmd {
        Icmd { fua: true, ..self }
    }

    pub fn is_write(&self) -> bool {
        matches!(self.buffers, IcmdBuffers::Write(_))
    }
}

/// A command's buffers, which also say whether it reads or writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IcmdBuffers {
    /// Filled by the read; handed back in the completion.
    Read(HostBuffers),
    /// Sent by the write; the engine may hold a clone of the `Arc` until
    /// the last Write Data Response can no longer be retransmitted.
    Write(Arc<HostBuffers>),
}

/// A finished iCMD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IcmdCompletion {
    pub tag: u64,
    /// The first non-success status of its nCMDs, or success.
    pub status: Status,
    /// The read data (valid when the status is success) or the write's
    /// buffers, handed back.
    pub buffers: IcmdBuffers,
    /// From [`Initiator::submit_icmd`] to the last response.
    pub latency: Duration,
    /// nCMDs it was cut into.
    pub ncmds: u16,
}

/// Why [`Initiator::submit_icmd`] refused a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefuseReason {
    /// `queue_depth` iCMDs are outstanding: poll completions first.
    QueueFull,
    UnknownNamespace(u32),
    /// A write's data or metadata buffer is not the command's size.
    BufferLength {
        what: &'static str,
        expected: usize,
        actual: usize,
    },
    Translate(TranslateError),
    Split(SplitError),
    /// A flush without the vendor command extension.
    VendorCommandsOff,
    /// A flush of a namespace spread over more destinations than an
    /// Initiator Tag numbers.
    TooManyDestinations,
}

impl fmt::Display for RefuseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RefuseReason::QueueFull => f.write_str("queue full"),
            RefuseReason::UnknownNamespace(nsid) => write!(f, "unknown namespace {nsid}"),
            RefuseReason::BufferLength {
                what,
                expected,
                actual,
            } => write!(
                f,
                "{what} buffer of {actual} bytes, the command has {expected}"
            ),
            RefuseReason::Translate(e) => fmt::Display::fmt(e, f),
            RefuseReason::Split(e) => fmt::Display::fmt(e, f),
            RefuseReason::VendorCommandsOff => {
                f.write_str("flush needs the vendor command extension, which is off")
            }
            RefuseReason::TooManyDestinations => {
                f.write_str("namespace spread over more than 512 target queues")
            }
        }
    }
}

/// A command [`Initiator::submit_icmd`] did not take, handed back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub reason: RefuseReason,
    pub icmd: Icmd,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.reason, f)
    }
}

impl std::error::Error for Refused {}

/// Why [`Initiator::new`] or [`Initiator::add_namespace`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigError {
    /// `queue_depth` outside 1..=65,536.
    QueueDepth(usize),
    Table(lba::ConfigError),
    /// A PI policy on a namespace without 8 bytes of metadata a block.
    PiWithoutMetadata {
        nsid: u32,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::QueueDepth(depth) => {
                write!(f, "queue_depth {depth} outside 1..={MAX_SLOTS}")
            }
            ConfigError::Table(e) => fmt::Display::fmt(e, f),
            ConfigError::PiWithoutMetadata { nsid } => {
                write!(f, "namespace {nsid}: PI needs 8 or 16 bytes of metadata")
            }
        }
    }
}

impl std::error::Error for ConfigError {}

/// What the initiator has done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InitiatorStats {
    /// iCMDs taken by `submit_icmd`.
    pub submitted: u64,
    /// iCMDs refused (queue full and bad commands).
    pub refused: u64,
    pub queue_full: u64,
    /// iCMDs completed, by status.
    pub completed: StatusCounts,
    pub reads: u64,
    pub writes: u64,
    /// nCMD request pushes the engine took.
    pub ncmds_sent: u64,
    /// nCMDs finished (every response counted once), by status.
    pub ncmds: StatusCounts,
    /// Data bytes read (successful reads) and written (acknowledged).
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Write Data Responses sent (their data, or INV).
    pub write_data_responses: u64,
    /// Of them, marked INV by the initiator's own PI check.
    pub invalidated: u64,
    /// Write Completions received while their group still had data to
    /// send: the target completed those nCMDs before writing.
    pub early_write_completions: u64,
    /// Submissions refused for credits and kept for a later turn.
    pub credit_waits: u64,
    /// Request pushes that Falcon did not complete with ACK.
    pub push_failures: u64,
    pub connection_errors: u64,
    /// Flushes taken by `submit_flush` (also counted in `submitted`).
    pub flushes: u64,
    /// iCMDs failed by their timeout.
    pub timeouts: u64,
    /// Responses and Write Data Requests naming an iCMD or nCMD that is
    /// gone (late, after a failure or timeout): dropped.
    pub stale: u64,
    /// Packets that do not parse, are of a type an initiator never gets,
    /// or disagree with their nCMD: dropped (a request is NACKed).
    pub malformed: u64,
    pub xoff: u64,
    pub xon: u64,
}

/// The NVMe-over-Falcon initiator (see the module doc).
#[derive(Debug)]
pub struct Initiator {
    config: InitiatorConfig,
    ids: SlotIds,
    tables: TranslationTables,
    /// Indexed by initiator NSID.
    namespaces: Vec<Option<NamespaceEntry>>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// nCMDs to push, in submission order.
    to_send: VecDeque<NcmdRef>,
    /// Write Data Responses refused for credits.
    pull_answers: VecDeque<PullAnswer>,
    /// Connections out of credits this turn.
    blocked: Vec<ConnectionHandle>,
    completions: VecDeque<IcmdCompletion>,
    flushes: flush::Flushes,
    stats: InitiatorStats,
    /// The earliest deadline of an outstanding iCMD (or earlier).
    next_deadline: Option<Timestamp>,
}

/// An initiator namespace as the datapath uses it.
#[derive(Debug, Clone, Copy)]
struct NamespaceEntry {
    spec: NamespaceSpec,
    format: Format,
}

/// One nCMD of one iCMD, as queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NcmdRef {
    slot: u32,
    generation: u32,
    index: u16,
}

/// A Write Data Response waiting for Pull Data credits.
#[derive(Debug)]
struct PullAnswer {
    connection: ConnectionHandle,
    rsn: Rsn,
    header: UlpHeader,
    data: NvmeData,
}

impl Initiator {
    /// An initiator with `tables` (rows and connections; namespaces come
    /// through [`add_namespace`](Self::add_namespace)).
    ///
    /// # Errors
    ///
    /// [`ConfigError::QueueDepth`] outside 1..=65,536.
    pub fn new(
        config: InitiatorConfig,
        tables: TranslationTables,
    ) -> Result<Initiator, ConfigError> {
        let ids = SlotIds::for_slots(config.queue_depth)
            .ok_or(ConfigError::QueueDepth(config.queue_depth))?;
        let depth = config.queue_depth;
        Ok(Initiator {
            config,
            ids,
            tables,
            namespaces: Vec::new(),
            slots: (0..depth).map(|_| Slot::default()).collect(),
            free: (0..depth as u32).rev().collect(),
            to_send: VecDeque::with_capacity(depth * 8),
            pull_answers: VecDeque::with_capacity(depth),
            blocked: Vec::with_capacity(8),
            completions: VecDeque::with_capacity(depth),
            flushes: flush::Flushes::new(),
            stats: InitiatorStats::default(),
            next_deadline: None,
        })
    }

    /// Installs (or replaces) initiator namespace `nsid`.
    ///
    /// # Errors
    ///
    /// The translation tables' refusal ([`ConfigError::Table`]), or a PI
    /// policy without room for PI in the metadata.
    pub fn add_namespace(&mut self, nsid: u32, spec: NamespaceSpec) -> Result<(), ConfigError> {
        let format = Format {
            lba_size: spec.translation.lba_size(),
            metadata: spec.metadata,
        };
        if matches!(spec.pi, PiPolicy::Checked { .. }) && pi_offset(format).is_none() {
            return Err(ConfigError::PiWithoutMetadata { nsid });
        }
        self.tables
            .set_namespace(nsid, spec.translation)
            .map_err(ConfigError::Table)?;
        let index = nsid as usize;
        if self.namespaces.len() <= index {
            self.namespaces.resize(index + 1, None);
        }
        self.namespaces[index] = Some(NamespaceEntry { spec, format });
        Ok(())
    }

    /// The translation tables (rows and connections may change between
    /// commands: an online resize, a new path).
    pub fn tables_mut(&mut self) -> &mut TranslationTables {
        &mut self.tables
    }

    pub fn tables(&self) -> &TranslationTables {
        &self.tables
    }

    pub fn config(&self) -> &InitiatorConfig {
        &self.config
    }

    /// Changes the iCMD timeout of commands submitted from now on.
    pub fn set_icmd_timeout(&mut self, timeout: Duration) {
        self.config.icmd_timeout = timeout;
    }

    /// Takes a command: translated, split and queued; its nCMDs go out on
    /// the next [`Ulp::submit`] turn.
    ///
    /// # Errors
    ///
    /// [`Refused`] with the command: queue full, unknown namespace, a
    /// write buffer of the wrong size, an LBA that does not translate, a
    /// command that cannot be split ([`SplitError`]).
    // The command comes back whole, buffers included, so the caller keeps
    // them; boxing it would allocate on every refusal.
    #[allow(clippy::result_large_err)]
    pub fn submit_icmd(&mut self, now: Timestamp, icmd: Icmd) -> Result<(), Refused> {
        let refuse = |stats: &mut InitiatorStats, reason, icmd| {
            stats.refused += 1;
            Err(Refused { reason, icmd })
        };
        let Some(&slot) = self.free.last() else {
            self.stats.queue_full += 1;
            return refuse(&mut self.stats, RefuseReason::QueueFull, icmd);
        };
        let Some(namespace) = self.namespaces.get(icmd.nsid as usize).copied().flatten() else {
            let reason = RefuseReason::UnknownNamespace(icmd.nsid);
            return refuse(&mut self.stats, reason, icmd);
        };
        let generation = self.slots[slot as usize].generation;
        let deadline = now.saturating_add(self.config.icmd_timeout);
        match ActiveIcmd::new(icmd, &namespace, &self.tables, now, deadline) {
            Ok(active) => {
                self.free.pop();
                let ncmds = active.ncmds;
                if active.is_write() {
                    self.stats.writes += 1;
                } else {
                    self.stats.reads += 1;
                }
                self.slots[slot as usize].icmd = Some(active);
                for index in 0..ncmds {
                    self.to_send.push_back(NcmdRef {
                        slot,
                        generation,
                        index,
                    });
                }
                self.stats.submitted += 1;
                self.next_deadline = Some(self.next_deadline.map_or(deadline, |d| d.min(deadline)));
                Ok(())
            }
            Err((reason, icmd)) => refuse(&mut self.stats, reason, icmd),
        }
    }

    /// A finished iCMD, if any.
    pub fn poll_completion(&mut self) -> Option<IcmdCompletion> {
        self.completions.pop_front()
    }

    /// iCMDs and flushes submitted and not yet completed (completions not
    /// yet polled do not count).
    pub fn outstanding(&self) -> usize {
        self.config.queue_depth - self.free.len() + self.flushes.outstanding()
    }

    /// When the earliest outstanding iCMD times out: the caller runs a
    /// turn by then (virtual-time loops; an lcore turns anyway).
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        if self.outstanding() == 0 {
            return None;
        }
        self.next_deadline
    }

    pub fn stats(&self) -> &InitiatorStats {
        &self.stats
    }

    /// iCMDs past their deadline fail with Command Aborted By Host.
    fn expire(&mut self, now: Timestamp) {
        match self.next_deadline {
            Some(deadline) if deadline <= now => {}
            _ => return,
        }
        let mut next: Option<Timestamp> = None;
        for slot in 0..self.slots.len() as u32 {
            let Some(icmd) = &self.slots[slot as usize].icmd else {
                continue;
            };
            if icmd.deadline <= now {
                self.stats.timeouts += 1;
                self.fail_icmd(now, slot, Status::ABORTED_BY_HOST);
            } else {
                next = Some(next.map_or(icmd.deadline, |n| n.min(icmd.deadline)));
            }
        }
        self.expire_flushes(now);
        self.next_deadline = match (next, self.flushes.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    /// Pushes queued nCMDs; a connection out of credits keeps its nCMDs
    /// for a later turn (Falcon 0.9 §8.2.3: the engine refuses what it has
    /// no resources for and raises Xoff).
    fn send_ncmds<B: PacketBuf>(&mut self, now: Timestamp, engine: &mut Engine<B, NvmeData>) {
        for _ in 0..self.to_send.len() {
            let Some(ncmd) = self.to_send.pop_front() else {
                break;
            };
            let Some(entry) = self.slots.get_mut(ncmd.slot as usize) else {
                continue;
            };
            let icmd = match entry.icmd.as_mut() {
                Some(icmd) if entry.generation == ncmd.generation && !icmd.is_done(ncmd.index) => {
                    icmd
                }
                _ => continue,
            };
            let Some((group, _)) = icmd.ncmd(ncmd.index) else {
                continue;
            };
            let Some(connection) = icmd.connection(group, engine) else {
                self.fail_icmd(now, ncmd.slot, Status::TRANSIENT_TRANSPORT_ERROR);
                continue;
            };
            if self.blocked.contains(&connection) {
                self.to_send.push_back(ncmd);
                continue;
            }
            let Some((header, block)) = icmd.request(
                &self.ids,
                self.config.initiator_function,
                ncmd.slot,
                ncmd.generation,
                ncmd.index,
            ) else {
                self.finish_ncmd(now, ncmd.slot, ncmd.index, Status::INTERNAL_ERROR);
                continue;
            };
            let tag = engine_tag(ncmd);
            let transaction = Transaction::push(tag, NvmeData::Command(block)).with_header(header);
            match engine.submit(now, connection, transaction) {
                Ok(_) => self.stats.ncmds_sent += 1,
                Err(rejected) => match rejected.reason {
                    falcon_core::api::RejectReason::NoResources(_) => {
                        self.stats.credit_waits += 1;
                        self.blocked.push(connection);
                        self.to_send.push_back(ncmd);
                    }
                    _ => self.finish_ncmd(
                        now,
                        ncmd.slot,
                        ncmd.index,
                        Status::TRANSIENT_TRANSPORT_ERROR,
                    ),
                },
            }
        }
    }

    /// Write Data Responses that waited for credits.
    fn send_pull_answers<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, NvmeData>,
    ) {
        for _ in 0..self.pull_answers.len() {
            let Some(answer) = self.pull_answers.pop_front() else {
                break;
            };
            if self.blocked.contains(&answer.connection) {
                self.pull_answers.push_back(answer);
                continue;
            }
            self.answer_pull(now, engine, answer);
        }
    }

    /// Sends one Write Data Response, or keeps it when out of credits.
    fn answer_pull<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, NvmeData>,
        answer: PullAnswer,
    ) {
        let PullAnswer {
            connection,
            rsn,
            header,
            data,
        } = answer;
        match engine.submit_pull_data(now, connection, rsn, header, data) {
            Ok(()) => self.stats.write_data_responses += 1,
            Err(rejected) => match rejected.reason {
                falcon_core::api::RejectReason::NoResources(_) => {
                    self.stats.credit_waits += 1;
                    self.blocked.push(connection);
                    self.pull_answers.push_back(PullAnswer {
                        connection,
                        rsn,
                        header,
                        data: rejected.returned,
                    });
                }
                // The connection died (its iCMDs fail with it) or the
                // request is gone: nothing waits for this answer.
                _ => self.stats.push_failures += 1,
            },
        }
    }

    /// The live iCMD in `slot` if its generation is `generation`.
    fn live_icmd(&self, slot: u32, generation: u32) -> Option<&ActiveIcmd> {
        let slot = self.slots.get(slot as usize)?;
        if slot.generation != generation {
            return None;
        }
        slot.icmd.as_ref()
    }

    /// Records nCMD `index`'s final status; completes the iCMD after its
    /// last. A second status for one nCMD is ignored.
    fn finish_ncmd(&mut self, now: Timestamp, slot: u32, index: u16, status: Status) {
        let Some(icmd) = self.slots[slot as usize].icmd.as_mut() else {
            return;
        };
        if !icmd.mark_done(index, status) {
            return;
        }
        self.stats.ncmds.record(status);
        if icmd.all_done() {
            self.complete_icmd(now, slot);
        }
    }

    /// Fails every nCMD of the iCMD in `slot` still waiting, with `status`.
    fn fail_icmd(&mut self, now: Timestamp, slot: u32, status: Status) {
        let Some(icmd) = self.slots[slot as usize].icmd.as_mut() else {
            return;
        };
        for index in 0..icmd.ncmds {
            if icmd.mark_done(index, status) {
                self.stats.ncmds.record(status);
            }
        }
        self.complete_icmd(now, slot);
    }

    /// Frees `slot` and queues its completion.
    fn complete_icmd(&mut self, now: Timestamp, slot: u32) {
        let entry = &mut self.slots[slot as usize];
        let Some(icmd) = entry.icmd.take() else {
            return;
        };
        entry.generation = self.ids.next_generation(entry.generation);
        self.free.push(slot);
        let completion = icmd.into_completion(now);
        self.stats.completed.record(completion.status);
        if completion.status.is_success() {
            match &completion.buffers {
                IcmdBuffers::Read(buffers) => self.stats.bytes_read += buffers.data.len() as u64,
                IcmdBuffers::Write(buffers) => {
                    self.stats.bytes_written += buffers.data.len() as u64;
                }
            }
        }
        self.completions.push_back(completion);
    }

    /// `connection` is gone (closed by the control plane, which the engine
    /// does not report as an event, or failed): every iCMD with an nCMD on
    /// it fails with Transient Transport Error, including those whose
    /// requests were delivered and whose responses can no longer come.
    pub fn handle_connection_closed(&mut self, now: Timestamp, connection: ConnectionHandle) {
        for slot in 0..self.slots.len() as u32 {
            let uses = self.slots[slot as usize]
                .icmd
                .as_ref()
                .is_some_and(|icmd| icmd.uses(connection));
            if uses {
                self.fail_icmd(now, slot, Status::TRANSIENT_TRANSPORT_ERROR);
            }
        }
        self.fail_flushes_on(now, connection);
    }
}

impl<B: PacketBuf> Ulp<B, NvmeData> for Initiator {
    fn submit(&mut self, now: Timestamp, engine: &mut Engine<B, NvmeData>) {
        self.blocked.clear();
        self.expire(now);
        self.send_pull_answers(now, engine);
        self.send_ncmds(now, engine);
        self.send_flushes(now, engine);
    }

    fn on_event(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, NvmeData>,
        event: UlpEvent<B, NvmeData>,
    ) {
        match event {
            UlpEvent::Request(request) => self.on_request(now, engine, request),
            UlpEvent::Completion(completion) => {
                let status = completion.status;
                engine.release(completion.data);
                if self.on_command_push_done(now, completion.tag, status) {
                    return;
                }
                if let Some(ncmd) = decode_engine_tag(completion.tag) {
                    if !status.is_ok() && self.live_icmd(ncmd.slot, ncmd.generation).is_some() {
                        self.stats.push_failures += 1;
                        self.finish_ncmd(
                            now,
                            ncmd.slot,
                            ncmd.index,
                            Status::TRANSIENT_TRANSPORT_ERROR,
                        );
                    }
                }
            }
            UlpEvent::ConnectionError { connection, fault } => {
                self.stats.connection_errors += 1;
                if fault.is_fatal() {
                    self.handle_connection_closed(now, connection);
                }
            }
            UlpEvent::Xoff { .. } => self.stats.xoff += 1,
            UlpEvent::Xon { .. } => self.stats.xon += 1,
        }
    }
}

/// The engine tag of an nCMD's request push: generation, slot, index.
const fn engine_tag(ncmd: NcmdRef) -> u64 {
    ((ncmd.generation as u64) << 40) | ((ncmd.slot as u64) << 16) | ncmd.index as u64
}

const fn decode_engine_tag(tag: u64) -> Option<NcmdRef> {
    let index = (tag & 0xFFFF) as u16;
    if index as usize >= MAX_NCMDS_PER_ICMD {
        return None;
    }
    Some(NcmdRef {
        slot: ((tag >> 16) & 0xFF_FFFF) as u32,
        generation: (tag >> 40) as u32,
        index,
    })
}
