//! How an nCMD's data and metadata sit in a packet's data part.
//!
//! Layer: NVMe ULP, between the wire codec and the data sources (host
//! buffers, namespace backends). Owns the LBA format ([`Format`]), the two
//! layouts ([`Layout::Dif`], [`Layout::Dix`]) and the copies between a
//! payload and separate data and metadata buffers. Knows nothing of packet
//! headers; never panics on a received payload's length.
//!
//! One nCMD carries 4 KiB of data (NVMe-0.9 §6.5) and the metadata of its
//! blocks: 8 × 512 or 1 × 4096 bytes of data, 0, 8 or 16 bytes of metadata
//! a block, so at most 4096 + 8 × 16 = 4224 bytes (§8.4, §8.7). The figures
//! (pp.31, 35), for 512-byte blocks with 16 bytes of metadata:
//!
//! ```text
//!  Read Response, DIF:        | B0 | M0 | B1 | M1 | … | B7 | M7 |
//!  Write Data Response, DIX:  | B0 | B1 | … | B7 | M0 | M1 | … | M7 |
//! ```
//!
//! The last nCMD of a command whose size is not a multiple of 4 KiB
//! (512-byte blocks, see [`crate::split`]) carries fewer blocks; its DIX
//! metadata then starts right after its last data block.

use core::fmt;
use core::ops::Range;

/// Data bytes of a full nCMD (NVMe-0.9 §6.5).
pub const NCMD_DATA_LEN: usize = 4096;

/// Logical block size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LbaSize {
    B512,
    B4096,
}

impl LbaSize {
    pub const ALL: [LbaSize; 2] = [LbaSize::B512, LbaSize::B4096];

    /// Bytes a block.
    pub const fn bytes(self) -> usize {
        1 << self.shift()
    }

    /// log2 of [`bytes`](Self::bytes): the `block_size_shift` of NVMe-0.9
    /// §6.6.2.
    pub const fn shift(self) -> u32 {
        match self {
            LbaSize::B512 => 9,
            LbaSize::B4096 => 12,
        }
    }

    /// From a size in bytes.
    pub const fn from_bytes(bytes: usize) -> Option<LbaSize> {
        match bytes {
            512 => Some(LbaSize::B512),
            4096 => Some(LbaSize::B4096),
            _ => None,
        }
    }
}

/// Metadata bytes a block (NVMe-0.9 §6.7: 16 when PI is on at the target).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetadataSize {
    None,
    B8,
    B16,
}

impl MetadataSize {
    pub const ALL: [MetadataSize; 3] = [MetadataSize::None, MetadataSize::B8, MetadataSize::B16];

    pub const fn bytes(self) -> usize {
        match self {
            MetadataSize::None => 0,
            MetadataSize::B8 => 8,
            MetadataSize::B16 => 16,
        }
    }

    /// From a size in bytes.
    pub const fn from_bytes(bytes: usize) -> Option<MetadataSize> {
        match bytes {
            0 => Some(MetadataSize::None),
            8 => Some(MetadataSize::B8),
            16 => Some(MetadataSize::B16),
            _ => None,
        }
    }
}

/// A namespace's LBA format: block size and metadata a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Format {
    pub lba_size: LbaSize,
    pub metadata: MetadataSize,
}

impl Format {
    /// The six formats NVMe-over-Falcon carries.
    pub const ALL: [Format; 6] = {
        let mut all = [Format {
            lba_size: LbaSize::B512,
            metadata: MetadataSize::None,
        }; 6];
        let mut i = 0;
        while i < 6 {
            all[i] = Format {
                lba_size: LbaSize::ALL[i / 3],
                metadata: MetadataSize::ALL[i % 3],
            };
            i += 1;
        }
        all
    };

    /// Data and metadata bytes of one block.
    pub const fn block_len(self) -> usize {
        self.lba_size.bytes() + self.metadata.bytes()
    }

    /// Blocks in a full nCMD: 8 or 1.
    pub const fn blocks_per_ncmd(self) -> usize {
        NCMD_DATA_LEN / self.lba_size.bytes()
    }

    /// Data-part length of an nCMD of `blocks` blocks, in either layout.
    pub const fn payload_len(self, blocks: usize) -> usize {
        blocks * self.block_len()
    }

    /// Data-part length of a full nCMD: 4096, 4104, 4112, 4160 or 4224.
    pub const fn ncmd_payload_len(self) -> usize {
        self.payload_len(self.blocks_per_ncmd())
    }

    /// Data bytes of `blocks` blocks.
    pub const fn data_len(self, blocks: usize) -> usize {
        blocks * self.lba_size.bytes()
    }

    /// Metadata bytes of `blocks` blocks.
    pub const fn metadata_len(self, blocks: usize) -> usize {
        blocks * self.metadata.bytes()
    }

    /// The blocks a received data part of `len` bytes holds.
    ///
    /// # Errors
    ///
    /// [`LayoutError::NotWholeBlocks`] unless `len` is a multiple of
    /// [`block_len`](Self::block_len), [`LayoutError::TooManyBlocks`] above
    /// one nCMD.
    pub const fn blocks_in_payload(self, len: usize) -> Result<usize, LayoutError> {
        let block_len = self.block_len();
        if len % block_len != 0 {
            return Err(LayoutError::NotWholeBlocks { len, block_len });
        }
        self.check_blocks(len / block_len)
    }

    const fn check_blocks(self, blocks: usize) -> Result<usize, LayoutError> {
        let max = self.blocks_per_ncmd();
        if blocks > max {
            return Err(LayoutError::TooManyBlocks { blocks, max });
        }
        Ok(blocks)
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}+{}", self.lba_size.bytes(), self.metadata.bytes())
    }
}

/// Where each block's metadata goes in a data part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layout {
    /// Each block's metadata right after the block: Read Response (§8.4).
    Dif,
    /// All data blocks, then all metadata: Write Data Response (§8.7).
    Dix,
}

impl Layout {
    /// The layout of a Read Response's data (NVMe-0.9 §8.4).
    pub const READ_RESPONSE: Layout = Layout::Dif;
    /// The layout of a Write Data Response's data (NVMe-0.9 §8.7).
    pub const WRITE_DATA_RESPONSE: Layout = Layout::Dix;

    /// The bytes of block `block`'s data in a data part (in both layouts
    /// independent of the number of blocks).
    pub const fn data_range(self, format: Format, block: usize) -> Range<usize> {
        let lba = format.lba_size.bytes();
        let start = match self {
            Layout::Dif => block * format.block_len(),
            Layout::Dix => block * lba,
        };
        start..start + lba
    }

    /// The bytes of block `block`'s metadata in a data part of `blocks`
    /// blocks.
    pub const fn metadata_range(self, format: Format, blocks: usize, block: usize) -> Range<usize> {
        let md = format.metadata.bytes();
        let start = match self {
            Layout::Dif => block * format.block_len() + format.lba_size.bytes(),
            Layout::Dix => format.data_len(blocks) + block * md,
        };
        start..start + md
    }

    /// Writes `data` (whole blocks) and `metadata` (theirs) into
    /// `payload` in this layout; returns the bytes written.
    ///
    /// # Errors
    ///
    /// [`LayoutError::NotWholeBlocks`], [`LayoutError::TooManyBlocks`] above
    /// one nCMD, [`LayoutError::MetadataLength`] unless `metadata` is the
    /// blocks' metadata exactly, [`LayoutError::BufferTooShort`].
    pub fn pack(
        self,
        format: Format,
        data: &[u8],
        metadata: &[u8],
        payload: &mut [u8],
    ) -> Result<usize, LayoutError> {
        let lba = format.lba_size.bytes();
        if data.len() % lba != 0 {
            return Err(LayoutError::NotWholeBlocks {
                len: data.len(),
                block_len: lba,
            });
        }
        let blocks = format.check_blocks(data.len() / lba)?;
        let expected = format.metadata_len(blocks);
        if metadata.len() != expected {
            return Err(LayoutError::MetadataLength {
                expected,
                actual: metadata.len(),
            });
        }
        let len = format.payload_len(blocks);
        let Some(payload) = payload.get_mut(..len) else {
            return Err(LayoutError::BufferTooShort {
                need: len,
                have: payload.len(),
            });
        };
        match self {
            Layout::Dix => {
                payload[..data.len()].copy_from_slice(data);
                payload[data.len()..].copy_from_slice(metadata);
            }
            Layout::Dif => {
                let md = format.metadata.bytes();
                for (i, (block, out)) in data
                    .chunks_exact(lba)
                    .zip(payload.chunks_exact_mut(format.block_len()))
                    .enumerate()
                {
                    out[..lba].copy_from_slice(block);
                    out[lba..].copy_from_slice(&metadata[i * md..(i + 1) * md]);
                }
            }
        }
        Ok(len)
    }

    /// Copies a received `payload` in this layout into `data` and
    /// `metadata` (from their starts); returns the number of blocks.
    ///
    /// # Errors
    ///
    /// [`LayoutError::NotWholeBlocks`] or [`LayoutError::TooManyBlocks`]
    /// for the payload's length ([`Format::blocks_in_payload`]),
    /// [`LayoutError::BufferTooShort`] for `data` or `metadata`.
    pub fn unpack(
        self,
        format: Format,
        payload: &[u8],
        data: &mut [u8],
        metadata: &mut [u8],
    ) -> Result<usize, LayoutError> {
        let blocks = format.blocks_in_payload(payload.len())?;
        let data_len = format.data_len(blocks);
        let metadata_len = format.metadata_len(blocks);
        let (Some(data), Some(metadata)) =
            (data.get_mut(..data_len), metadata.get_mut(..metadata_len))
        else {
            return Err(LayoutError::BufferTooShort {
                need: data_len + metadata_len,
                have: data.len().min(data_len) + metadata.len().min(metadata_len),
            });
        };
        match self {
            Layout::Dix => {
                data.copy_from_slice(&payload[..data_len]);
                metadata.copy_from_slice(&payload[data_len..]);
            }
            Layout::Dif => {
                let lba = format.lba_size.bytes();
                let md = format.metadata.bytes();
                for (i, (block, out)) in payload
                    .chunks_exact(format.block_len())
                    .zip(data.chunks_exact_mut(lba))
                    .enumerate()
                {
                    out.copy_from_slice(&block[..lba]);
                    metadata[i * md..(i + 1) * md].copy_from_slice(&block[lba..]);
                }
            }
        }
        Ok(blocks)
    }
}

/// Why data cannot be laid out, or a received data part read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayoutError {
    /// A length that is not a whole number of blocks.
    NotWholeBlocks { len: usize, block_len: usize },
    /// More blocks than one nCMD carries.
    TooManyBlocks { blocks: usize, max: usize },
    /// The metadata does not match the blocks.
    MetadataLength { expected: usize, actual: usize },
    /// A destination buffer is too short.
    BufferTooShort { need: usize, have: usize },
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            LayoutError::NotWholeBlocks { len, block_len } => {
                write!(f, "{len} bytes are not whole {block_len}-byte blocks")
            }
            LayoutError::TooManyBlocks { blocks, max } => {
                write!(f, "{blocks} blocks exceed one nCMD ({max})")
            }
            LayoutError::MetadataLength { expected, actual } => {
                write!(f, "metadata is {actual} bytes, the blocks have {expected}")
            }
            LayoutError::BufferTooShort { need, have } => {
                write!(f, "buffer too short: need {need} bytes, have {have}")
            }
        }
    }
}

impl std::error::Error for LayoutError {}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const F512_16: Format = Format {
        lba_size: LbaSize::B512,
        metadata: MetadataSize::B16,
    };

    /// Block `i`'s data is `i + 1` repeated, its metadata `0x80 | i`.
    fn blocks(format: Format, n: usize) -> (Vec<u8>, Vec<u8>) {
        let data = (0..n)
            .flat_map(|i| core::iter::repeat(i as u8 + 1).take(format.lba_size.bytes()))
            .collect();
        let metadata = (0..n)
            .flat_map(|i| core::iter::repeat(0x80 | i as u8).take(format.metadata.bytes()))
            .collect();
        (data, metadata)
    }

    /// The layouts written out by hand: DIF block by block, DIX data then
    /// metadata.
    fn oracle(layout: Layout, format: Format, data: &[u8], metadata: &[u8]) -> Vec<u8> {
        match layout {
            Layout::Dix => [data, metadata].concat(),
            Layout::Dif => {
                let md = format.metadata.bytes().max(1);
                let mut out = Vec::new();
                let mut metadata = metadata.chunks(md);
                for block in data.chunks(format.lba_size.bytes()) {
                    out.extend_from_slice(block);
                    out.extend_from_slice(metadata.next().unwrap_or(&[]));
                }
                out
            }
        }
    }

    #[test]
    fn full_ncmd_lengths() {
        let lens: Vec<_> = Format::ALL
            .iter()
            .map(|f| (f.lba_size.bytes(), f.metadata.bytes(), f.ncmd_payload_len()))
            .collect();
        assert_eq!(
            lens,
            [
                (512, 0, 4096),
                (512, 8, 4160),
                (512, 16, 4224),
                (4096, 0, 4096),
                (4096, 8, 4104),
                (4096, 16, 4112),
            ]
        );
        assert!(Format::ALL
            .iter()
            .all(|f| f.ncmd_payload_len() <= crate::wire::MAX_DATA_LEN));
    }

    #[test]
    fn dif_and_dix_byte_positions_512_16() {
        let (data, metadata) = blocks(F512_16, 8);
        let mut dif = vec![0u8; 4224];
        let mut dix = vec![0u8; 4224];
        assert_eq!(
            Layout::Dif.pack(F512_16, &data, &metadata, &mut dif),
            Ok(4224)
        );
        assert_eq!(
            Layout::Dix.pack(F512_16, &data, &metadata, &mut dix),
            Ok(4224)
        );
        // DIF: block 0 data 0..512, its metadata 512..528, block 1 at 528.
        assert_eq!(&dif[..512], &[1; 512][..]);
        assert_eq!(&dif[512..528], &[0x80; 16]);
        assert_eq!(&dif[528..1040], &[2; 512][..]);
        assert_eq!(&dif[1040..1056], &[0x81; 16]);
        assert_eq!(&dif[7 * 528..7 * 528 + 512], &[8; 512][..]);
        assert_eq!(&dif[4208..4224], &[0x87; 16]);
        // DIX: the eight blocks in 0..4096, the metadata from 4096 on.
        assert_eq!(&dix[3584..4096], &[8; 512][..]);
        assert_eq!(&dix[4096..4112], &[0x80; 16]);
        assert_eq!(&dix[4208..4224], &[0x87; 16]);
        assert_eq!(Layout::Dif.metadata_range(F512_16, 8, 1), 1040..1056);
        assert_eq!(Layout::Dix.metadata_range(F512_16, 8, 1), 4112..4128);
        assert_eq!(Layout::Dix.data_range(F512_16, 7), 3584..4096);
    }

    #[test]
    fn ranges_of_every_format_by_hand() {
        // (format index in Format::ALL, block, DIF data, DIF metadata, DIX
        // data, DIX metadata), for a full nCMD.
        let cases = [
            (0, 1, 512..1024, 1024..1024, 512..1024, 4096..4096),
            (1, 1, 520..1032, 1032..1040, 512..1024, 4104..4112),
            (1, 7, 3640..4152, 4152..4160, 3584..4096, 4152..4160),
            (2, 1, 528..1040, 1040..1056, 512..1024, 4112..4128),
            (2, 7, 3696..4208, 4208..4224, 3584..4096, 4208..4224),
            (3, 0, 0..4096, 4096..4096, 0..4096, 4096..4096),
            (4, 0, 0..4096, 4096..4104, 0..4096, 4096..4104),
            (5, 0, 0..4096, 4096..4112, 0..4096, 4096..4112),
        ];
        for (index, block, dif_data, dif_md, dix_data, dix_md) in cases {
            let format = Format::ALL[index];
            let blocks = format.blocks_per_ncmd();
            assert_eq!(Layout::Dif.data_range(format, block), dif_data, "{format}");
            assert_eq!(Layout::Dif.metadata_range(format, blocks, block), dif_md);
            assert_eq!(Layout::Dix.data_range(format, block), dix_data);
            assert_eq!(Layout::Dix.metadata_range(format, blocks, block), dix_md);
        }
    }

    #[test]
    fn short_ncmd_dix_metadata_follows_its_last_block() {
        let (data, metadata) = blocks(F512_16, 3);
        let mut dix = vec![0u8; 4224];
        assert_eq!(
            Layout::Dix.pack(F512_16, &data, &metadata, &mut dix),
            Ok(3 * 528)
        );
        assert_eq!(&dix[1536..1552], &[0x80; 16]);
        assert_eq!(Layout::Dix.metadata_range(F512_16, 3, 2), 1568..1584);
    }

    #[test]
    fn every_format_and_layout_round_trips_at_the_ranges() {
        for format in Format::ALL {
            for layout in [Layout::Dif, Layout::Dix] {
                for n in 0..=format.blocks_per_ncmd() {
                    let (data, metadata) = blocks(format, n);
                    let mut payload = vec![0u8; format.payload_len(n)];
                    let written = layout.pack(format, &data, &metadata, &mut payload);
                    assert_eq!(written, Ok(payload.len()), "{format} {layout:?} {n}");
                    assert_eq!(payload, oracle(layout, format, &data, &metadata));
                    for i in 0..n {
                        let d = layout.data_range(format, i);
                        assert!(payload[d].iter().all(|&b| b == i as u8 + 1));
                        let m = layout.metadata_range(format, n, i);
                        assert_eq!(m.len(), format.metadata.bytes());
                        assert!(payload[m].iter().all(|&b| b == 0x80 | i as u8));
                    }
                    let mut data_out = vec![0u8; 4096];
                    let mut md_out = vec![0u8; 128];
                    assert_eq!(
                        layout.unpack(format, &payload, &mut data_out, &mut md_out),
                        Ok(n)
                    );
                    assert_eq!(&data_out[..data.len()], &data[..]);
                    assert_eq!(&md_out[..metadata.len()], &metadata[..]);
                }
            }
        }
    }

    #[test]
    fn bad_lengths_are_errors() {
        let f4096_8 = Format {
            lba_size: LbaSize::B4096,
            metadata: MetadataSize::B8,
        };
        let mut out = [0u8; 8192];
        assert_eq!(
            Layout::Dif.pack(f4096_8, &[0; 100], &[], &mut out),
            Err(LayoutError::NotWholeBlocks {
                len: 100,
                block_len: 4096
            })
        );
        assert_eq!(
            Layout::Dif.pack(f4096_8, &[0; 8192], &[0; 16], &mut out),
            Err(LayoutError::TooManyBlocks { blocks: 2, max: 1 })
        );
        assert_eq!(
            Layout::Dix.pack(f4096_8, &[0; 4096], &[0; 7], &mut out),
            Err(LayoutError::MetadataLength {
                expected: 8,
                actual: 7
            })
        );
        assert_eq!(
            Layout::Dix.pack(f4096_8, &[0; 4096], &[0; 8], &mut out[..4103]),
            Err(LayoutError::BufferTooShort {
                need: 4104,
                have: 4103
            })
        );
        assert_eq!(
            F512_16.blocks_in_payload(4224 + 528),
            Err(LayoutError::TooManyBlocks { blocks: 9, max: 8 })
        );
        assert_eq!(
            Layout::Dif.unpack(F512_16, &[0; 527], &mut [0; 4096], &mut [0; 128]),
            Err(LayoutError::NotWholeBlocks {
                len: 527,
                block_len: 528
            })
        );
        assert!(matches!(
            Layout::Dif.unpack(F512_16, &[0; 1056], &mut [0; 1024], &mut [0; 31]),
            Err(LayoutError::BufferTooShort { need: 1056, .. })
        ));
    }

    proptest! {
        #[test]
        fn pack_matches_the_oracle_and_unpack_inverts_it(
            format in proptest::sample::select(Format::ALL.to_vec()),
            dif in any::<bool>(),
            seed in proptest::collection::vec(any::<u8>(), 4224),
            n in 0usize..=8,
        ) {
            let layout = if dif { Layout::Dif } else { Layout::Dix };
            let n = n.min(format.blocks_per_ncmd());
            let data = &seed[..format.data_len(n)];
            let metadata = &seed[4096..4096 + format.metadata_len(n)];
            let mut payload = vec![0u8; format.payload_len(n)];
            prop_assert_eq!(layout.pack(format, data, metadata, &mut payload), Ok(payload.len()));
            prop_assert_eq!(&payload, &oracle(layout, format, data, metadata));
            let mut data_out = vec![0u8; data.len()];
            let mut md_out = vec![0u8; metadata.len()];
            prop_assert_eq!(layout.unpack(format, &payload, &mut data_out, &mut md_out), Ok(n));
            prop_assert_eq!(&data_out[..], data);
            prop_assert_eq!(&md_out[..], metadata);
        }

        #[test]
        fn unpack_never_panics(
            format in proptest::sample::select(Format::ALL.to_vec()),
            dif in any::<bool>(),
            len in 0usize..5000,
            data_len in 0usize..5000,
            md_len in 0usize..200,
        ) {
            let layout = if dif { Layout::Dif } else { Layout::Dix };
            let payload = vec![7u8; len];
            let result = layout.unpack(format, &payload, &mut vec![0; data_len], &mut vec![0; md_len]);
            let whole = len % format.block_len() == 0 && len / format.block_len() <= format.blocks_per_ncmd();
            let short = matches!(result, Err(LayoutError::BufferTooShort { .. }));
            prop_assert!(!whole || result.is_ok() || short, "{:?}", result);
            prop_assert!(whole || result.is_err());
        }
    }
}
