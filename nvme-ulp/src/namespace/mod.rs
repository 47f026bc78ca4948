//! The NVMe target's block storage: namespaces backed by RAM or files,
//! protection information, fault injection, and the per-SQID workers that
//! keep slow I/O off the datapath lcore.
//!
//! Layer: NVMe target, below the tCMD reassembly (ulp.md §3.9). Owns what
//! the control plane exports per Target NSID (ulp.md §3.9: "Target NSID →
//! block device, LBA size 512/4096, metadata 0/8/16, Target SQID → worker
//! queue") and the execution of tCMDs on it. Never parses packets, never
//! sleeps or does I/O on the caller's thread except through a
//! [`Namespace`] the caller owns: the datapath talks only to [`Workers`],
//! whose inline workers run only namespaces that never block.
//!
//! * [`config`]: [`NamespaceConfig`] → validated [`NamespaceFormat`].
//! * [`Namespace`]: Read, Write (FUA), Flush, Write Zeroes and Deallocate
//!   on a [`BlockStore`] with range, buffer and PI checks, returning NVMe
//!   statuses. Data and metadata are separate buffers (MSET = 0).
//! * [`ram`], [`file`]: the two [`Storage`] backends.
//! * [`pi`]: PI Type 1 (ulp.md §3.7).
//! * [`faults`]: injected device errors and delays.
//! * [`workers`]: threads that own namespaces, fed by bounded queues (or,
//!   for namespaces that never block, the same queues run inline).
//! * [`buffer`]: aligned buffers and their pool.

pub mod buffer;
pub mod config;
pub mod faults;
pub mod file;
pub mod pi;
pub mod ram;
pub mod store;
pub mod workers;

#[cfg(test)]
mod figures;
#[cfg(test)]
mod testing;
#[cfg(test)]
mod tests;

use std::path::Path;

pub use buffer::{BufferPool, CapacityError, IoBuffer, IO_ALIGN};
pub use config::{ConfigError, NamespaceConfig, NamespaceFormat, Protection};
pub use faults::{FaultEffect, FaultOn, FaultRule, Faults};
pub use file::{FileMode, FileOptions, FileStore};
pub use pi::{CommandPi, Pi, PrInfo};
pub use ram::RamStore;
pub use store::{BlockStore, Storage, StorageMode};
pub use workers::{
    Completion, Execution, Opcode, RejectReason, Rejected, Request, WorkerSpec, Workers,
};

use crate::status::Status;

/// One namespace: its format, its store, its injected faults and counters.
#[derive(Debug)]
pub struct Namespace<S = Storage> {
    format: NamespaceFormat,
    store: S,
    faults: Faults,
    stats: NamespaceStats,
}

/// What a namespace has done. Every command counts once under its kind;
/// a failed one also counts once under its failure class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NamespaceStats {
    pub reads: u64,
    pub writes: u64,
    pub flushes: u64,
    pub write_zeroes: u64,
    pub deallocates: u64,
    pub blocks_read: u64,
    pub blocks_written: u64,
    /// Refused for a bad range, length or field.
    pub invalid: u64,
    /// Guard, application tag or reference tag check errors.
    pub pi_errors: u64,
    /// Device errors, real or injected.
    pub media_errors: u64,
}

impl Namespace<Storage> {
    /// A namespace in RAM (sparse: see [`ram`]).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the field of an invalid config.
    pub fn ram(config: &NamespaceConfig) -> Result<Namespace, ConfigError> {
        let format = config.validate()?;
        Ok(Namespace::with_store(
            format,
            Storage::Ram(RamStore::new(format)),
        ))
    }

    /// A namespace in the file at `path` (see [`file`] for what is on
    /// disk); an existing file's size gives the block count.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] for an invalid config or an unusable file.
    pub fn file(
        config: &NamespaceConfig,
        path: impl AsRef<Path>,
        options: FileOptions,
    ) -> Result<Namespace, ConfigError> {
        let store = FileStore::open(path, config, options)?;
        Ok(Namespace::with_store(*store.format(), Storage::File(store)))
    }

    /// The backend, and for a file whether O_DIRECT is in use.
    pub fn mode(&self) -> StorageMode {
        self.store.mode()
    }
}

impl<S: BlockStore> Namespace<S> {
    /// A namespace of `format` on `store`, which must hold that format.
    pub fn with_store(format: NamespaceFormat, store: S) -> Namespace<S> {
        Namespace {
            format,
            store,
            faults: Faults::default(),
            stats: NamespaceStats::default(),
        }
    }

    pub fn nsid(&self) -> u16 {
        self.format.nsid()
    }

    pub fn format(&self) -> &NamespaceFormat {
        &self.format
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    pub fn stats(&self) -> &NamespaceStats {
        &self.stats
    }

    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    pub fn faults_mut(&mut self) -> &mut Faults {
        &mut self.faults
    }

    /// Whether a command may wait: its store may block, or a delay fault
    /// would sleep (see [`workers::Execution`]).
    pub fn may_block(&self) -> bool {
        self.store.may_block()
            || self
                .faults
                .rules()
                .iter()
                .any(|rule| matches!(rule.effect, FaultEffect::Delay(_)))
    }

    /// Reads `nlb` blocks (a count: the wire's 0-based NLB + 1) from
    /// `slba` into `data` (`nlb × lba_size` bytes) and `metadata` (`nlb ×
    /// metadata_size`). A verified namespace checks the stored PI as
    /// `pi.prinfo` asks, against EILBRT/ELBAT/ELBATM in `pi`.
    ///
    /// # Errors
    ///
    /// [`Status::LBA_OUT_OF_RANGE`], [`Status::INVALID_FIELD`] (zero
    /// blocks, a buffer of the wrong length, PRACT set in a verified
    /// namespace), a PI check error, or the store's (or an injected)
    /// device error. The buffers' contents are then unspecified.
    pub fn read(
        &mut self,
        slba: u64,
        nlb: u32,
        pi: &CommandPi,
        data: &mut [u8],
        metadata: &mut [u8],
    ) -> Result<(), Status> {
        self.stats.reads += 1;
        let result = self.read_blocks(slba, nlb, pi, data, metadata);
        if result.is_ok() {
            self.stats.blocks_read += u64::from(nlb);
        }
        self.counted(result)
    }

    /// Writes `nlb` blocks at `slba` from `data` and `metadata`, then with
    /// `fua` makes them durable before completing. A verified namespace
    /// checks the PI first as `pi.prinfo` asks, against ILBRT/LBAT/LBATM
    /// in `pi`, and writes nothing when a check fails.
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read); nothing is written unless the status is a
    /// device error from the store itself.
    pub fn write(
        &mut self,
        slba: u64,
        nlb: u32,
        pi: &CommandPi,
        data: &[u8],
        metadata: &[u8],
        fua: bool,
    ) -> Result<(), Status> {
        self.stats.writes += 1;
        let result = self.write_blocks(slba, nlb, pi, data, metadata, fua);
        if result.is_ok() {
            self.stats.blocks_written += u64::from(nlb);
        }
        self.counted(result)
    }

    /// Makes every completed write durable (NVMe Flush).
    ///
    /// # Errors
    ///
    /// The store's device error.
    pub fn flush(&mut self) -> Result<(), Status> {
        self.stats.flushes += 1;
        let result = self.store.flush();
        self.counted(result)
    }

    /// Sets `nlb` blocks from `slba` to zero data and erased metadata (PI
    /// all FFh in a PI format: see [`NamespaceFormat::erased_metadata`]). Serves
    /// NVMe Write Zeroes and NBD WRITE_ZEROES.
    ///
    /// # Errors
    ///
    /// [`Status::LBA_OUT_OF_RANGE`], [`Status::INVALID_FIELD`] for zero
    /// blocks, or a device error.
    pub fn write_zeroes(&mut self, slba: u64, nlb: u32) -> Result<(), Status> {
        self.stats.write_zeroes += 1;
        let result = self.zero_blocks(slba, nlb, false);
        self.counted(result)
    }

    /// Deallocates `nlb` blocks from `slba` (NVMe DSM Deallocate, NBD
    /// TRIM). They read back as after [`write_zeroes`](Self::write_zeroes),
    /// the deterministic behaviour NVMe's DLFEAT = 001b describes.
    ///
    /// # Errors
    ///
    /// As [`write_zeroes`](Self::write_zeroes).
    pub fn deallocate(&mut self, slba: u64, nlb: u32) -> Result<(), Status> {
        self.stats.deallocates += 1;
        let result = self.zero_blocks(slba, nlb, true);
        self.counted(result)
    }

    fn read_blocks(
        &mut self,
        slba: u64,
        nlb: u32,
        pi: &CommandPi,
        data: &mut [u8],
        metadata: &mut [u8],
    ) -> Result<(), Status> {
        self.check_command(slba, nlb, pi, data.len(), metadata.len())?;
        self.faults.apply(FaultOn::Reads, slba, u64::from(nlb))?;
        self.store.read(slba, data, metadata)?;
        if pi::checks_enabled(&self.format, pi) {
            pi::verify(self.format.format(), data, metadata, pi)?;
        }
        Ok(())
    }

    fn write_blocks(
        &mut self,
        slba: u64,
        nlb: u32,
        pi: &CommandPi,
        data: &[u8],
        metadata: &[u8],
        fua: bool,
    ) -> Result<(), Status> {
        self.check_command(slba, nlb, pi, data.len(), metadata.len())?;
        self.faults.apply(FaultOn::Writes, slba, u64::from(nlb))?;
        if pi::checks_enabled(&self.format, pi) {
            pi::verify(self.format.format(), data, metadata, pi)?;
        }
        self.store.write(slba, data, metadata)?;
        if fua {
            self.store.flush()?;
        }
        Ok(())
    }

    fn zero_blocks(&mut self, slba: u64, nlb: u32, deallocate: bool) -> Result<(), Status> {
        let nlb = u64::from(nlb);
        self.format.check_range(slba, nlb)?;
        self.faults.apply(FaultOn::Writes, slba, nlb)?;
        if deallocate {
            self.store.deallocate(slba, nlb)
        } else {
            self.store.write_zeroes(slba, nlb)
        }
    }

    /// Range, buffer lengths and PRINFO of a Read or Write.
    fn check_command(
        &self,
        slba: u64,
        nlb: u32,
        pi: &CommandPi,
        data_len: usize,
        metadata_len: usize,
    ) -> Result<(), Status> {
        let nlb = u64::from(nlb);
        self.format.check_range(slba, nlb)?;
        if self.format.data_len(nlb) != Some(data_len)
            || self.format.metadata_len(nlb) != Some(metadata_len)
        {
            return Err(Status::INVALID_FIELD);
        }
        // ulp.md §3.7: every nCMD carries PRACT = 0, so the host always
        // transfers the PI. A verified namespace refuses PRACT = 1 rather
        // than insert or strip PI the initiator never asks for.
        if self.format.protection() == Protection::Verified && pi.prinfo.contains(PrInfo::PRACT) {
            return Err(Status::INVALID_FIELD);
        }
        Ok(())
    }

    fn counted(&mut self, result: Result<(), Status>) -> Result<(), Status> {
        if let Err(status) = result {
            let counter = match status {
                Status::LBA_OUT_OF_RANGE | Status::INVALID_FIELD => &mut self.stats.invalid,
                Status::GUARD_CHECK | Status::APP_TAG_CHECK | Status::REF_TAG_CHECK => {
                    &mut self.stats.pi_errors
                }
                _ => &mut self.stats.media_errors,
            };
            *counter += 1;
        }
        result
    }
}
