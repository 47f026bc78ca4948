//! The RAM backend: a sparse namespace in memory.
//!
//! Layer: NVMe target storage. Owns the blocks of one namespace in chunks
//! of [`CHUNK_DATA_BYTES`] of data (plus their metadata), allocated on the
//! first write that touches them. A 64 MiB namespace costs a few hundred
//! bytes until it is written; a chunk costs 64 KiB + its metadata once
//! written. A chunk that a zeroing covers whole is freed. Never fails: a
//! RAM store has no device errors (see [`super::faults`] to make some).

use core::ops::Range;
use std::collections::BTreeMap;

use crate::status::Status;

use super::config::NamespaceFormat;
use super::store::{blocks_of, BlockStore};

/// Data bytes per chunk: 128 blocks of 512 B or 16 of 4 KiB. Small enough
/// that a scattered workload does not inflate memory much, large enough
/// that the chunk map stays small (1,024 entries for a full 64 MiB).
pub const CHUNK_DATA_BYTES: usize = 64 * 1024;

/// A sparse in-memory block store.
#[derive(Debug)]
pub struct RamStore {
    format: NamespaceFormat,
    chunk_blocks: u64,
    /// Chunk index → data of `chunk_blocks` blocks, then their metadata.
    chunks: BTreeMap<u64, Box<[u8]>>,
}

impl RamStore {
    pub fn new(format: NamespaceFormat) -> RamStore {
        RamStore {
            format,
            chunk_blocks: (CHUNK_DATA_BYTES / format.lba_size()) as u64,
            chunks: BTreeMap::new(),
        }
    }

    pub fn format(&self) -> &NamespaceFormat {
        &self.format
    }

    /// Bytes of block storage allocated so far.
    pub fn resident_bytes(&self) -> usize {
        self.chunks.len() * self.chunk_len()
    }

    fn chunk_len(&self) -> usize {
        self.chunk_blocks as usize * (self.format.lba_size() + self.format.metadata_size())
    }

    /// A new chunk holding erased blocks.
    fn erased_chunk(&self) -> Box<[u8]> {
        let mut chunk = vec![0; self.chunk_len()].into_boxed_slice();
        let data_len = self.chunk_blocks as usize * self.format.lba_size();
        self.format.fill_erased_metadata(&mut chunk[data_len..]);
        chunk
    }

    /// Byte ranges of a piece inside its chunk: (data, metadata).
    fn ranges(&self, piece: &Piece) -> (Range<usize>, Range<usize>) {
        let (lba_size, metadata_size) = (self.format.lba_size(), self.format.metadata_size());
        let data_start = piece.first * lba_size;
        let metadata_base = self.chunk_blocks as usize * lba_size;
        let metadata_start = metadata_base + piece.first * metadata_size;
        (
            data_start..data_start + piece.count * lba_size,
            metadata_start..metadata_start + piece.count * metadata_size,
        )
    }
}

/// `nlb` blocks from `lba` split at chunk boundaries.
fn pieces(chunk_blocks: u64, lba: u64, nlb: u64) -> impl Iterator<Item = Piece> {
    let mut done = 0;
    core::iter::from_fn(move || {
        if done == nlb {
            return None;
        }
        let at = lba + done;
        let first = at % chunk_blocks;
        let count = (chunk_blocks - first).min(nlb - done);
        let piece = Piece {
            chunk: at / chunk_blocks,
            first: first as usize,
            count: count as usize,
            before: done as usize,
        };
        done += count;
        Some(piece)
    })
}

/// Part of a block range inside one chunk.
#[derive(Debug, Clone, Copy)]
struct Piece {
    chunk: u64,
    /// First block of the piece, counted from the chunk's start.
    first: usize,
    count: usize,
    /// Blocks of the range before this piece.
    before: usize,
}

impl BlockStore for RamStore {
    fn read(&mut self, lba: u64, data: &mut [u8], metadata: &mut [u8]) -> Result<(), Status> {
        let nlb = blocks_of(&self.format, lba, data.len(), metadata.len())?;
        let (lba_size, metadata_size) = (self.format.lba_size(), self.format.metadata_size());
        for piece in pieces(self.chunk_blocks, lba, nlb) {
            let out_data = &mut data[piece.before * lba_size..][..piece.count * lba_size];
            let out_metadata =
                &mut metadata[piece.before * metadata_size..][..piece.count * metadata_size];
            match self.chunks.get(&piece.chunk) {
                Some(chunk) => {
                    let (data_range, metadata_range) = self.ranges(&piece);
                    out_data.copy_from_slice(&chunk[data_range]);
                    out_metadata.copy_from_slice(&chunk[metadata_range]);
                }
                None => {
                    out_data.fill(0);
                    self.format.fill_erased_metadata(out_metadata);
                }
            }
        }
        Ok(())
    }

    fn write(&mut self, lba: u64, data: &[u8], metadata: &[u8]) -> Result<(), Status> {
        let nlb = blocks_of(&self.format, lba, data.len(), metadata.len())?;
        let (lba_size, metadata_size) = (self.format.lba_size(), self.format.metadata_size());
        for piece in pieces(self.chunk_blocks, lba, nlb) {
            let (data_range, metadata_range) = self.ranges(&piece);
            if !self.chunks.contains_key(&piece.chunk) {
                let chunk = self.erased_chunk();
                self.chunks.insert(piece.chunk, chunk);
            }
            let Some(chunk) = self.chunks.get_mut(&piece.chunk) else {
                return Err(Status::INTERNAL_ERROR);
            };
            chunk[data_range]
                .copy_from_slice(&data[piece.before * lba_size..][..piece.count * lba_size]);
            chunk[metadata_range].copy_from_slice(
                &metadata[piece.before * metadata_size..][..piece.count * metadata_size],
            );
        }
        Ok(())
    }

    fn write_zeroes(&mut self, lba: u64, nlb: u64) -> Result<(), Status> {
        self.format.check_range(lba, nlb)?;
        for piece in pieces(self.chunk_blocks, lba, nlb) {
            if piece.count as u64 == self.chunk_blocks {
                self.chunks.remove(&piece.chunk);
                continue;
            }
            let (data_range, metadata_range) = self.ranges(&piece);
            if let Some(chunk) = self.chunks.get_mut(&piece.chunk) {
                chunk[data_range].fill(0);
                self.format.fill_erased_metadata(&mut chunk[metadata_range]);
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), Status> {
        Ok(())
    }

    /// A copy in memory (and, on a block's first write, an allocation of
    /// its chunk): never a wait.
    fn may_block(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::namespace::config::{NamespaceConfig, Protection};

    fn store(blocks: u64, lba_size: u32, metadata_size: u32) -> RamStore {
        let protection = if metadata_size == 0 {
            Protection::Off
        } else {
            Protection::Opaque
        };
        RamStore::new(
            NamespaceConfig::new(1, blocks, lba_size)
                .with_metadata(metadata_size, protection)
                .validate()
                .unwrap(),
        )
    }

    #[test]
    fn a_64_mib_namespace_costs_nothing_until_written() {
        let mut ram = store(64 << 20 >> 9, 512, 16);
        assert_eq!(ram.resident_bytes(), 0);
        let mut data = vec![0xEE; 512];
        let mut metadata = vec![0xEE; 16];
        ram.read(1000, &mut data, &mut metadata).unwrap();
        assert_eq!(data, vec![0; 512]);
        assert_eq!(&metadata[8..], &[0xFF; 8], "erased PI");
        assert_eq!(ram.resident_bytes(), 0, "reads allocate nothing");
        ram.write(1000, &[1; 512], &[2; 16]).unwrap();
        assert_eq!(ram.resident_bytes(), 128 * (512 + 16));
    }

    #[test]
    fn writes_across_chunks_read_back() {
        for lba_size in [512u32, 4096] {
            let mut ram = store(1024, lba_size, 8);
            let chunk_blocks = CHUNK_DATA_BYTES as u64 / u64::from(lba_size);
            let lba = chunk_blocks - 2;
            let nlb = chunk_blocks + 4;
            let data: Vec<u8> = (0..nlb as usize * lba_size as usize)
                .map(|i| (i % 251) as u8)
                .collect();
            let metadata: Vec<u8> = (0..nlb as usize * 8).map(|i| i as u8).collect();
            ram.write(lba, &data, &metadata).unwrap();
            assert_eq!(ram.chunks.len(), 3);
            let mut back = vec![0; data.len()];
            let mut back_metadata = vec![0; metadata.len()];
            ram.read(lba, &mut back, &mut back_metadata).unwrap();
            assert_eq!(back, data);
            assert_eq!(back_metadata, metadata);
        }
    }

    #[test]
    fn zeroing_a_whole_chunk_frees_it() {
        let mut ram = store(1024, 4096, 0);
        ram.write(0, &vec![5; 32 * 4096], &[]).unwrap();
        assert_eq!(ram.chunks.len(), 2);
        ram.write_zeroes(8, 24).unwrap();
        assert_eq!(ram.chunks.len(), 1, "chunk 1 (blocks 16..32) freed");
        let mut back = vec![9; 32 * 4096];
        ram.read(0, &mut back, &mut []).unwrap();
        assert!(back[..8 * 4096].iter().all(|&b| b == 5));
        assert!(back[8 * 4096..].iter().all(|&b| b == 0));
    }

    #[test]
    fn malformed_requests_are_statuses() {
        let mut ram = store(16, 512, 8);
        assert_eq!(
            ram.write(15, &[0; 1024], &[0; 16]),
            Err(Status::LBA_OUT_OF_RANGE)
        );
        assert_eq!(
            ram.write(0, &[0; 1000], &[0; 16]),
            Err(Status::INVALID_FIELD)
        );
        assert_eq!(
            ram.write(0, &[0; 1024], &[0; 8]),
            Err(Status::INVALID_FIELD)
        );
        assert_eq!(ram.write_zeroes(u64::MAX, 2), Err(Status::LBA_OUT_OF_RANGE));
        assert_eq!(ram.resident_bytes(), 0);
    }
}
