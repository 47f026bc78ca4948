//! What NVMe over Falcon transmits after a packet's ULP header: the data
//! source the engine reads when it builds a frame.
//!
//! Layer: NVMe ULP, the boundary to `falcon-core`'s transmit path. Owns
//! [`NvmeData`] (the one [`DataSource`] of NVMe transmissions), the
//! [`BlockBuffers`] trait (a command's data and metadata, MSET = 0, in the
//! ULP's memory) and [`HostBuffers`] (the initiator's caller's buffers).
//! Never copies into an intermediate buffer: the layout of a data part
//! (DIX or DIF, NVMe-0.9 §8.4, §8.7) is computed in [`DataSource::copy_to`]
//! straight from the separate data and metadata buffers into the frame,
//! on the first transmission and again on each retransmission.
//!
//! The sources:
//!
//! * [`NvmeData::Command`]: the 32-byte command block of a Read or Write
//!   Request. The ULP header holds at most 63 bytes
//!   ([`falcon_core::api::ULP_HEADER_CAPACITY`]), so a request's 64 bytes
//!   go as header = NBTH and data = command block.
//! * [`NvmeData::None`]: Write Completion, a Read Response in error.
//! * [`NvmeData::Plain`]: a byte range of a shared buffer's data.
//! * [`NvmeData::Blocks`]: whole blocks of a shared buffer pair in DIX
//!   (Write Data Response: all data, then all metadata) or DIF (Read
//!   Response: each block's metadata after it) layout.
//!
//! Buffers are shared with the engine through an `Arc`: the engine keeps a
//! source until the packet can no longer be retransmitted, so the bytes
//! must not change meanwhile (the `Arc` makes them immutable while shared).

use core::fmt;
use core::ops::Range;
use std::sync::Arc;

use falcon_core::api::DataSource;

use crate::layout::{Format, Layout};

/// Bytes of a Read or Write Request after its NBTH (NVMe-0.9 §8.3, §8.5).
pub const COMMAND_BLOCK_LEN: usize = 32;

/// A command's data and metadata as two separate buffers (MSET = 0,
/// ulp.md §3.7), whole blocks each.
pub trait BlockBuffers: Send + Sync {
    /// The data blocks.
    fn data(&self) -> &[u8];
    /// Their metadata, `metadata_size` bytes a block (empty without).
    fn metadata(&self) -> &[u8];
}

/// A host command's data and metadata buffers: what the initiator's caller
/// hands over for a write (shared, `Arc<HostBuffers>`) or a read (owned,
/// filled and handed back).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct HostBuffers {
    pub data: Vec<u8>,
    pub metadata: Vec<u8>,
}

impl HostBuffers {
    /// Buffers with `data` and no metadata.
    pub fn new(data: Vec<u8>) -> HostBuffers {
        HostBuffers {
            data,
            metadata: Vec::new(),
        }
    }

    /// Buffers with `data` and `metadata`.
    pub fn with_metadata(data: Vec<u8>, metadata: Vec<u8>) -> HostBuffers {
        HostBuffers { data, metadata }
    }
}

impl fmt::Debug for HostBuffers {
    /// The lengths, not the bytes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostBuffers")
            .field("data", &self.data.len())
            .field("metadata", &self.metadata.len())
            .finish()
    }
}

impl BlockBuffers for HostBuffers {
    fn data(&self) -> &[u8] {
        &self.data
    }

    fn metadata(&self) -> &[u8] {
        &self.metadata
    }
}

impl BlockBuffers for Vec<u8> {
    fn data(&self) -> &[u8] {
        self
    }

    fn metadata(&self) -> &[u8] {
        &[]
    }
}

/// Buffers shared between the ULP and the engine.
pub type SharedBuffers = Arc<dyn BlockBuffers>;

/// Which blocks of a [`BlockBuffers`] a data part carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockSpan {
    pub format: Format,
    /// First block, counted from the start of the buffers.
    pub first_block: u32,
    pub blocks: u32,
}

impl BlockSpan {
    /// The data bytes of the span in the data buffer.
    pub const fn data_range(&self) -> Range<usize> {
        let start = self.format.data_len(self.first_block as usize);
        start..start + self.format.data_len(self.blocks as usize)
    }

    /// The metadata bytes of the span in the metadata buffer.
    pub const fn metadata_range(&self) -> Range<usize> {
        let start = self.format.metadata_len(self.first_block as usize);
        start..start + self.format.metadata_len(self.blocks as usize)
    }

    /// Bytes of the data part: data and metadata.
    pub const fn payload_len(&self) -> usize {
        self.format.payload_len(self.blocks as usize)
    }
}

/// The data part of an NVMe-over-Falcon transmission (see the module doc).
#[derive(Clone, Default)]
pub enum NvmeData {
    /// No data.
    #[default]
    None,
    /// The command block of a Read or Write Request.
    Command([u8; COMMAND_BLOCK_LEN]),
    /// Bytes `range` of the buffers' data.
    Plain {
        buffers: SharedBuffers,
        range: Range<usize>,
    },
    /// Whole blocks, data and metadata, in `layout`.
    Blocks {
        buffers: SharedBuffers,
        span: BlockSpan,
        layout: Layout,
    },
}

impl NvmeData {
    /// `span` of `buffers` in `layout`.
    pub fn blocks(buffers: SharedBuffers, span: BlockSpan, layout: Layout) -> NvmeData {
        NvmeData::Blocks {
            buffers,
            span,
            layout,
        }
    }
}

impl DataSource for NvmeData {
    #[inline]
    fn len(&self) -> usize {
        match self {
            NvmeData::None => 0,
            NvmeData::Command(block) => block.len(),
            NvmeData::Plain { range, .. } => range.len(),
            NvmeData::Blocks { span, .. } => span.payload_len(),
        }
    }

    /// Bytes past what the buffers hold (never, for buffers sized to the
    /// span) are zero-filled: the engine's frame never sees stale bytes.
    fn copy_to(&self, offset: usize, dst: &mut [u8]) {
        match self {
            NvmeData::None => dst.fill(0),
            NvmeData::Command(block) => copy_window(block, offset, dst),
            NvmeData::Plain { buffers, range } => {
                copy_window(clamp(buffers.data(), range.clone()), offset, dst);
            }
            NvmeData::Blocks {
                buffers,
                span,
                layout,
            } => {
                let data = clamp(buffers.data(), span.data_range());
                let metadata = clamp(buffers.metadata(), span.metadata_range());
                match layout {
                    Layout::Dix => copy_dix(data, metadata, span, offset, dst),
                    Layout::Dif => copy_dif(data, metadata, span, offset, dst),
                }
            }
        }
    }
}

impl fmt::Debug for NvmeData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NvmeData::None => f.write_str("None"),
            NvmeData::Command(_) => f.write_str("Command"),
            NvmeData::Plain { range, .. } => write!(f, "Plain({range:?})"),
            NvmeData::Blocks { span, layout, .. } => write!(
                f,
                "Blocks({layout:?} {} blocks {}+{})",
                span.format, span.first_block, span.blocks
            ),
        }
    }
}

/// The part of `range` that `bytes` holds.
#[inline]
fn clamp(bytes: &[u8], range: Range<usize>) -> &[u8] {
    let end = range.end.min(bytes.len());
    bytes.get(range.start..end).unwrap_or_default()
}

/// `src[offset..][..dst.len()]` into `dst`, zero-filling what `src` lacks.
#[inline]
fn copy_window(src: &[u8], offset: usize, dst: &mut [u8]) {
    let available = src.get(offset..).unwrap_or_default();
    let n = available.len().min(dst.len());
    dst[..n].copy_from_slice(&available[..n]);
    dst[n..].fill(0);
}

/// DIX: the span's data, then its metadata (NVMe-0.9 §8.7).
fn copy_dix(data: &[u8], metadata: &[u8], span: &BlockSpan, offset: usize, dst: &mut [u8]) {
    let data_len = span.format.data_len(span.blocks as usize);
    let split = data_len.saturating_sub(offset).min(dst.len());
    let (head, tail) = dst.split_at_mut(split);
    if !head.is_empty() {
        copy_window(data, offset, head);
    }
    if !tail.is_empty() {
        copy_window(metadata, (offset + split) - data_len, tail);
    }
}

/// DIF: each block's data, then its metadata (NVMe-0.9 §8.4).
fn copy_dif(data: &[u8], metadata: &[u8], span: &BlockSpan, offset: usize, dst: &mut [u8]) {
    let lba = span.format.lba_size.bytes();
    let md = span.format.metadata.bytes();
    if md == 0 {
        return copy_window(data, offset, dst);
    }
    let block_len = lba + md;
    let mut at = offset;
    let mut out = dst;
    while !out.is_empty() {
        let (block, within) = (at / block_len, at % block_len);
        let (src, start, part) = if within < lba {
            (data, block * lba + within, lba - within)
        } else {
            (metadata, block * md + within - lba, block_len - within)
        };
        let n = part.min(out.len());
        let (now, rest) = out.split_at_mut(n);
        copy_window(clamp(src, 0..start + n), start, now);
        out = rest;
        at += n;
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::layout::{LbaSize, MetadataSize};

    fn buffers(format: Format, blocks: usize) -> HostBuffers {
        let data = (0..format.data_len(blocks)).map(|i| i as u8).collect();
        let metadata = (0..format.metadata_len(blocks))
            .map(|i| 0x80 | (i as u8 & 0x7F))
            .collect();
        HostBuffers::with_metadata(data, metadata)
    }

    /// What the engine would write into a frame, read in `chunk`-sized
    /// windows (as a retransmission or a segmented copy might).
    fn read_all(source: &NvmeData, chunk: usize) -> Vec<u8> {
        let mut out = vec![0xEE; source.len()];
        for (i, window) in out.chunks_mut(chunk).enumerate() {
            source.copy_to(i * chunk, window);
        }
        out
    }

    #[test]
    fn command_block_and_none() {
        let mut block = [0u8; COMMAND_BLOCK_LEN];
        block[31] = 7;
        let source = NvmeData::Command(block);
        assert_eq!(source.len(), 32);
        assert_eq!(read_all(&source, 5), block);
        assert_eq!(NvmeData::None.len(), 0);
        let mut dst = [1u8; 4];
        NvmeData::None.copy_to(0, &mut dst);
        assert_eq!(dst, [0; 4]);
    }

    #[test]
    fn plain_is_a_window_of_the_data() {
        let shared: SharedBuffers = Arc::new(HostBuffers::new((0..100).collect()));
        let source = NvmeData::Plain {
            buffers: shared,
            range: 10..30,
        };
        assert_eq!(source.len(), 20);
        assert_eq!(read_all(&source, 7), (10..30).collect::<Vec<u8>>());
    }

    proptest! {
        /// Against `Layout::pack`, the oracle: every format, every span of a
        /// 3-nCMD buffer, any window size.
        #[test]
        fn blocks_match_pack(
            format_index in 0usize..6,
            first in 0u32..16,
            count in 1u32..=8,
            dif in any::<bool>(),
            chunk in 1usize..5000,
        ) {
            let format = Format::ALL[format_index];
            let per = format.blocks_per_ncmd() as u32;
            let blocks = count.min(per);
            let first = first % (3 * per - blocks + 1);
            let host = buffers(format, 3 * per as usize);
            let span = BlockSpan { format, first_block: first, blocks };
            let layout = if dif { Layout::Dif } else { Layout::Dix };
            let mut expected = vec![0u8; span.payload_len()];
            layout
                .pack(
                    format,
                    &host.data[span.data_range()],
                    &host.metadata[span.metadata_range()],
                    &mut expected,
                )
                .expect("one nCMD");
            let source = NvmeData::blocks(Arc::new(host), span, layout);
            prop_assert_eq!(source.len(), expected.len());
            prop_assert_eq!(read_all(&source, chunk), expected);
        }
    }

    #[test]
    fn short_buffers_read_as_zeros_without_panicking() {
        let format = Format {
            lba_size: LbaSize::B512,
            metadata: MetadataSize::B8,
        };
        let span = BlockSpan {
            format,
            first_block: 0,
            blocks: 8,
        };
        for layout in [Layout::Dif, Layout::Dix] {
            let source = NvmeData::blocks(Arc::new(vec![1u8; 1000]), span, layout);
            let all = read_all(&source, 333);
            assert_eq!(all.len(), 8 * 520);
            assert_eq!(all.iter().filter(|&&b| b == 1).count(), 1000);
        }
    }
}
