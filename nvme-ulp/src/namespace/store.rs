//! The block store behind a namespace: a trait for the storage itself and
//! the enum of the backends the target ships.
//!
//! Layer: NVMe target storage. A [`BlockStore`] moves whole blocks of data
//! and metadata at an LBA and answers with an NVMe status; it never checks
//! PI, injects faults or knows about commands (that is
//! [`super::Namespace`]'s job). Stores run on a worker thread, never on the
//! datapath lcore, so they may block; only a store that says it never
//! blocks ([`BlockStore::may_block`]) may run inline on the lcore
//! ([`super::workers::Execution::Inline`]).

use core::fmt;

use crate::status::Status;

use super::config::NamespaceFormat;
use super::file::{FileMode, FileStore};
use super::ram::RamStore;

/// Storage for one namespace's blocks. Data and metadata come in separate
/// buffers (MSET = 0, ulp.md §3.7): `data` holds whole blocks, `metadata`
/// the same number of blocks' metadata.
///
/// A block never written, zeroed or deallocated reads as zero data and
/// [`NamespaceFormat::erased_metadata`].
pub trait BlockStore: Send {
    /// Reads the blocks from `lba` into `data` and `metadata`.
    ///
    /// # Errors
    ///
    /// An NVMe status: [`Status::UNRECOVERED_READ`] for a device error,
    /// [`Status::INVALID_FIELD`] or [`Status::LBA_OUT_OF_RANGE`] for
    /// buffers that do not describe blocks inside the namespace.
    fn read(&mut self, lba: u64, data: &mut [u8], metadata: &mut [u8]) -> Result<(), Status>;

    /// Writes the blocks at `lba` from `data` and `metadata`.
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read), with [`Status::WRITE_FAULT`] for a device
    /// error.
    fn write(&mut self, lba: u64, data: &[u8], metadata: &[u8]) -> Result<(), Status>;

    /// Sets `nlb` blocks from `lba` to zero data and erased metadata.
    ///
    /// # Errors
    ///
    /// As [`write`](Self::write).
    fn write_zeroes(&mut self, lba: u64, nlb: u64) -> Result<(), Status>;

    /// Lets the store forget `nlb` blocks from `lba`; they read back as
    /// after [`write_zeroes`](Self::write_zeroes).
    ///
    /// # Errors
    ///
    /// As [`write`](Self::write).
    fn deallocate(&mut self, lba: u64, nlb: u64) -> Result<(), Status> {
        self.write_zeroes(lba, nlb)
    }

    /// Makes every completed write durable.
    ///
    /// # Errors
    ///
    /// [`Status::WRITE_FAULT`] when the device could not.
    fn flush(&mut self) -> Result<(), Status>;

    /// Whether a call may wait on a device or take unbounded time. A store
    /// that never does (memory) may run inline on the lcore; the default
    /// is the safe answer.
    fn may_block(&self) -> bool {
        true
    }
}

/// The backends a namespace is built on, dispatched without a vtable.
#[derive(Debug)]
pub enum Storage {
    Ram(RamStore),
    File(FileStore),
}

impl Storage {
    pub fn mode(&self) -> StorageMode {
        match self {
            Storage::Ram(_) => StorageMode::Ram,
            Storage::File(file) => match file.mode() {
                FileMode::Direct => StorageMode::FileDirect,
                FileMode::Buffered => StorageMode::FileBuffered,
            },
        }
    }
}

impl BlockStore for Storage {
    fn read(&mut self, lba: u64, data: &mut [u8], metadata: &mut [u8]) -> Result<(), Status> {
        match self {
            Storage::Ram(store) => store.read(lba, data, metadata),
            Storage::File(store) => store.read(lba, data, metadata),
        }
    }

    fn write(&mut self, lba: u64, data: &[u8], metadata: &[u8]) -> Result<(), Status> {
        match self {
            Storage::Ram(store) => store.write(lba, data, metadata),
            Storage::File(store) => store.write(lba, data, metadata),
        }
    }

    fn write_zeroes(&mut self, lba: u64, nlb: u64) -> Result<(), Status> {
        match self {
            Storage::Ram(store) => store.write_zeroes(lba, nlb),
            Storage::File(store) => store.write_zeroes(lba, nlb),
        }
    }

    fn deallocate(&mut self, lba: u64, nlb: u64) -> Result<(), Status> {
        match self {
            Storage::Ram(store) => store.deallocate(lba, nlb),
            Storage::File(store) => store.deallocate(lba, nlb),
        }
    }

    fn flush(&mut self) -> Result<(), Status> {
        match self {
            Storage::Ram(store) => store.flush(),
            Storage::File(store) => store.flush(),
        }
    }

    fn may_block(&self) -> bool {
        match self {
            Storage::Ram(store) => store.may_block(),
            Storage::File(store) => store.may_block(),
        }
    }
}

/// Which backend, and for a file whether O_DIRECT is in use: what the
/// target's commands print for each namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StorageMode {
    Ram,
    FileDirect,
    FileBuffered,
}

impl fmt::Display for StorageMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StorageMode::Ram => "ram",
            StorageMode::FileDirect => "file (O_DIRECT)",
            StorageMode::FileBuffered => "file (buffered)",
        })
    }
}

/// The block count `data` and `metadata` describe at `lba`, checked
/// against `format`: whole blocks, matching metadata, inside the namespace.
pub(crate) fn blocks_of(
    format: &NamespaceFormat,
    lba: u64,
    data_len: usize,
    metadata_len: usize,
) -> Result<u64, Status> {
    if data_len % format.lba_size() != 0 {
        return Err(Status::INVALID_FIELD);
    }
    let nlb = (data_len / format.lba_size()) as u64;
    if format.metadata_len(nlb) != Some(metadata_len) {
        return Err(Status::INVALID_FIELD);
    }
    format.check_range(lba, nlb)?;
    Ok(nlb)
}
