//! iCMD to tCMD groups and 4 KiB nCMDs, and back from an nCMD's fields to
//! its place in its tCMD.
//!
//! Layer: NVMe ULP, pure arithmetic shared by the initiator ([`split`]) and
//! the target ([`ncmd_extent`]). Owns [`Icmd`], [`Split`], [`Group`],
//! [`Ncmd`] and [`Extent`]. Allocates nothing; never panics on wire values:
//! what a command or an nCMD's fields cannot express is an error.
//!
//! NVMe-0.9 §6.5: the initiator cuts a Read or Write iCMD into 4 KiB nCMDs,
//! one Falcon transaction each. §6.6.3: an iCMD that straddles a stripe or
//! chunk boundary becomes two tCMDs (the S bit; NG = 0 for the nCMDs of the
//! first, 1 for the second), "at most two" because the virtual device's
//! MDTS is assumed not to exceed the minimum stripe (256 KiB).
//!
//! Decisions:
//!
//! - Where to split: at a boundary where the translation stops being
//!   contiguous ([`Namespace::contiguous_shift`]): every stripe when the
//!   striping group is 2^N > 1, every chunk without striping. The §6.6.3
//!   pseudo-code compares stripe numbers whatever the group; with a group
//!   of 1 ("no striping", §6.6.1) consecutive stripes are consecutive
//!   target LBAs of one chunk, and splitting there would only refuse
//!   commands (more than two tCMDs) that one tCMD serves. A group's LBAs
//!   translate to consecutive target LBAs of one row, so translating its
//!   first LBA gives the tCMD's SLBA.
//! - What cannot be expressed is refused: an iCMD over 1 MiB (256 nCMDs of
//!   4 KiB, the NCNT fields' 8 bits), one that would need a third tCMD, or
//!   an LBA range past 2^64.
//! - NCNT numbering (D8, ulp.md §3.4): NCNT Total and NCNT Offset count the
//!   nCMDs of the nCMD's group, from 0 in each group, so an nCMD's data
//!   starts NCNT Offset × 4 KiB into its tCMD and a target learns how many
//!   nCMDs its tCMD has from NCNT Total alone. The OCP text counts both
//!   over the whole iCMD; the readings agree when the iCMD is not split.
//!   SLBA and NLB of each nCMD are its group's (§8.3).
//! - A group whose size is not a multiple of 4 KiB (512-byte blocks: an
//!   iCMD of any whole number of blocks, or the first group of an unaligned
//!   split) ends with a shorter nCMD carrying its remaining whole blocks.
//!   Every other nCMD carries exactly 4 KiB.

use core::fmt;

use crate::layout::{Format, LbaSize, NCMD_DATA_LEN};
use crate::lba::Namespace;
use crate::wire::{NcmdGroup, PacketType};

/// Most nCMDs a group holds: NCNT Total is 8 bits, 0-based.
pub const MAX_NCMDS_PER_GROUP: usize = 256;

/// Largest iCMD: the initiator's MDTS, 256 nCMDs of 4 KiB.
pub const MAX_ICMD_LEN: usize = MAX_NCMDS_PER_GROUP * NCMD_DATA_LEN;

/// An NVM command NVMe-over-Falcon carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IoOpcode {
    Read,
    Write,
}

impl IoOpcode {
    /// The packet each nCMD starts with.
    pub const fn request_type(self) -> PacketType {
        match self {
            IoOpcode::Read => PacketType::ReadRequest,
            IoOpcode::Write => PacketType::WriteRequest,
        }
    }
}

/// A Read or Write iCMD, in initiator LBAs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Icmd {
    pub opcode: IoOpcode,
    pub slba: u64,
    /// Number of logical blocks, 0-based (NVMe CDW12).
    pub nlb: u16,
}

/// One tCMD's share of an iCMD.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Group {
    /// S and NG of its nCMDs.
    pub group: NcmdGroup,
    /// First initiator LBA.
    pub slba: u64,
    /// Blocks, 0-based: the NLB of its nCMDs.
    pub nlb: u16,
    /// Data bytes of the iCMD before this group.
    pub icmd_offset: usize,
    /// Data bytes.
    pub data_len: usize,
}

impl Group {
    /// Its nCMDs (1..=256).
    pub const fn ncmds(&self) -> usize {
        self.data_len.div_ceil(NCMD_DATA_LEN)
    }

    /// The group's `index`th nCMD. `index` must be below
    /// [`ncmds`](Self::ncmds).
    pub fn ncmd(&self, index: usize) -> Ncmd {
        let tcmd_offset = index * NCMD_DATA_LEN;
        // Fits: a group has at most 256 nCMDs (checked by `split`).
        let ncnt_total = (self.ncmds() - 1) as u8;
        Ncmd {
            group: self.group,
            ncnt_total,
            ncnt_offset: index as u8,
            icmd_offset: self.icmd_offset + tcmd_offset,
            tcmd_offset,
            data_len: (self.data_len - tcmd_offset).min(NCMD_DATA_LEN),
        }
    }
}

/// One nCMD: its NBTH numbering and the data it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ncmd {
    pub group: NcmdGroup,
    /// NCNT Total: the group's nCMDs, 0-based.
    pub ncnt_total: u8,
    /// NCNT Offset: this nCMD's index in its group.
    pub ncnt_offset: u8,
    /// Data bytes of the iCMD before this nCMD.
    pub icmd_offset: usize,
    /// Data bytes of its tCMD before this nCMD (NCNT Offset × 4 KiB).
    pub tcmd_offset: usize,
    /// Data bytes it carries (4096 but for a group's short last nCMD),
    /// metadata excluded.
    pub data_len: usize,
}

/// An iCMD cut into one or two groups of nCMDs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Split {
    pub opcode: IoOpcode,
    pub lba_size: LbaSize,
    groups: [Group; 2],
    count: usize,
}

impl Split {
    /// One group ([`NcmdGroup::Whole`]) or two (`First`, `Second`).
    pub fn groups(&self) -> &[Group] {
        &self.groups[..self.count]
    }

    /// Whether the iCMD became two tCMDs (the S bit).
    pub const fn is_split(&self) -> bool {
        self.count == 2
    }

    /// Every nCMD, the first group's first, in iCMD data order.
    pub fn ncmds(&self) -> impl Iterator<Item = Ncmd> + '_ {
        self.groups()
            .iter()
            .flat_map(|group| (0..group.ncmds()).map(|index| group.ncmd(index)))
    }

    /// How many nCMDs the iCMD became.
    pub fn ncmd_count(&self) -> usize {
        self.groups().iter().map(Group::ncmds).sum()
    }

    /// The `index`th nCMD in iCMD data order (the order of
    /// [`ncmds`](Self::ncmds)) and the index of its group, `None` past the
    /// last.
    pub fn ncmd(&self, index: usize) -> Option<(usize, Ncmd)> {
        let mut index = index;
        for (group_index, group) in self.groups().iter().enumerate() {
            if index < group.ncmds() {
                return Some((group_index, group.ncmd(index)));
            }
            index -= group.ncmds();
        }
        None
    }
}

/// Cuts `icmd` of a namespace into groups and nCMDs (NVMe-0.9 §6.5,
/// §6.6.3; decisions in the module doc).
///
/// # Errors
///
/// [`SplitError::TooLarge`] over [`MAX_ICMD_LEN`],
/// [`SplitError::LbaOverflow`] past LBA 2^64 − 1,
/// [`SplitError::MoreThanTwoGroups`] across two boundaries,
/// [`SplitError::TooManyNcmds`] for a group over 256 nCMDs.
pub fn split(icmd: Icmd, namespace: &Namespace) -> Result<Split, SplitError> {
    let lba_size = namespace.lba_size();
    let blocks = u64::from(icmd.nlb) + 1;
    let len = (blocks as usize) << lba_size.shift();
    if len > MAX_ICMD_LEN {
        return Err(SplitError::TooLarge { len });
    }
    let last = icmd
        .slba
        .checked_add(u64::from(icmd.nlb))
        .ok_or(SplitError::LbaOverflow { slba: icmd.slba })?;
    let shift = namespace.contiguous_shift();
    let unit = 1u64 << shift;
    // The first boundary after slba; none below 2^64 means none crossed.
    let boundary = ((icmd.slba >> shift) + 1).checked_mul(unit);
    let group = |group, slba: u64, last: u64| -> Result<Group, SplitError> {
        let blocks = last - slba + 1;
        let data_len = (blocks as usize) << lba_size.shift();
        let ncmds = data_len.div_ceil(NCMD_DATA_LEN);
        if ncmds > MAX_NCMDS_PER_GROUP {
            return Err(SplitError::TooManyNcmds { ncmds });
        }
        Ok(Group {
            group,
            slba,
            // Fits: a group has at most the iCMD's blocks.
            nlb: (blocks - 1) as u16,
            icmd_offset: ((slba - icmd.slba) as usize) << lba_size.shift(),
            data_len,
        })
    };
    let groups = match boundary {
        Some(boundary) if boundary <= last => {
            if last - boundary >= unit {
                return Err(SplitError::MoreThanTwoGroups {
                    slba: icmd.slba,
                    nlb: icmd.nlb,
                    boundary_blocks: unit,
                });
            }
            (
                [
                    group(NcmdGroup::First, icmd.slba, boundary - 1)?,
                    group(NcmdGroup::Second, boundary, last)?,
                ],
                2,
            )
        }
        _ => {
            let whole = group(NcmdGroup::Whole, icmd.slba, last)?;
            ([whole, whole], 1)
        }
    };
    Ok(Split {
        opcode: icmd.opcode,
        lba_size,
        groups: groups.0,
        count: groups.1,
    })
}

/// Where an nCMD's data sits in its tCMD, from the fields a target receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Extent {
    /// Data bytes of the tCMD before the nCMD's (NCNT Offset × 4 KiB).
    pub data_offset: usize,
    /// Data bytes the nCMD carries, metadata excluded.
    pub data_len: usize,
    /// First block, counted from the tCMD's SLBA.
    pub first_block: u32,
    /// Blocks the nCMD carries.
    pub blocks: u32,
}

impl Extent {
    /// Metadata bytes of the tCMD before the nCMD's.
    pub const fn metadata_offset(&self, format: Format) -> usize {
        format.metadata_len(self.first_block as usize)
    }

    /// Metadata bytes the nCMD carries.
    pub const fn metadata_len(&self, format: Format) -> usize {
        format.metadata_len(self.blocks as usize)
    }

    /// The data-part length of its Read Response or Write Data Response.
    pub const fn payload_len(&self, format: Format) -> usize {
        format.payload_len(self.blocks as usize)
    }
}

/// An nCMD's place in its tCMD, from its request's NLB and NBTH NCNT
/// fields (decision D8: offset = NCNT Offset × 4 KiB).
///
/// # Errors
///
/// [`ExtentError::TooManyNcmds`] when the tCMD needs more than 256 nCMDs,
/// [`ExtentError::NcntTotalMismatch`] when NCNT Total disagrees with NLB,
/// [`ExtentError::NcntOffsetBeyondTotal`].
pub fn ncmd_extent(
    lba_size: LbaSize,
    nlb: u16,
    ncnt_total: u8,
    ncnt_offset: u8,
) -> Result<Extent, ExtentError> {
    let len = (usize::from(nlb) + 1) << lba_size.shift();
    let ncmds = len.div_ceil(NCMD_DATA_LEN);
    if ncmds > MAX_NCMDS_PER_GROUP {
        return Err(ExtentError::TooManyNcmds { nlb, ncmds });
    }
    if usize::from(ncnt_total) + 1 != ncmds {
        return Err(ExtentError::NcntTotalMismatch {
            nlb,
            ncnt_total,
            ncmds,
        });
    }
    if ncnt_offset > ncnt_total {
        return Err(ExtentError::NcntOffsetBeyondTotal {
            ncnt_offset,
            ncnt_total,
        });
    }
    let data_offset = usize::from(ncnt_offset) * NCMD_DATA_LEN;
    let data_len = (len - data_offset).min(NCMD_DATA_LEN);
    Ok(Extent {
        data_offset,
        data_len,
        // Fit: at most 1 MiB / 512 = 2048 blocks.
        first_block: (data_offset >> lba_size.shift()) as u32,
        blocks: (data_len >> lba_size.shift()) as u32,
    })
}

/// Why an iCMD cannot be cut into nCMDs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitError {
    /// More data than [`MAX_ICMD_LEN`].
    TooLarge { len: usize },
    /// SLBA + NLB passes the last 64-bit LBA.
    LbaOverflow { slba: u64 },
    /// The command crosses two stripe or chunk boundaries.
    MoreThanTwoGroups {
        slba: u64,
        nlb: u16,
        boundary_blocks: u64,
    },
    /// A group of more than 256 nCMDs.
    TooManyNcmds { ncmds: usize },
}

impl fmt::Display for SplitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SplitError::TooLarge { len } => {
                write!(f, "iCMD of {len} bytes exceeds {MAX_ICMD_LEN}")
            }
            SplitError::LbaOverflow { slba } => write!(f, "iCMD at LBA {slba} passes LBA 2^64"),
            SplitError::MoreThanTwoGroups {
                slba,
                nlb,
                boundary_blocks,
            } => write!(
                f,
                "iCMD at LBA {slba}, NLB {nlb} crosses two {boundary_blocks}-block boundaries"
            ),
            SplitError::TooManyNcmds { ncmds } => {
                write!(f, "group of {ncmds} nCMDs exceeds {MAX_NCMDS_PER_GROUP}")
            }
        }
    }
}

impl std::error::Error for SplitError {}

/// Why a received nCMD's fields do not place it in its tCMD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtentError {
    TooManyNcmds {
        nlb: u16,
        ncmds: usize,
    },
    NcntTotalMismatch {
        nlb: u16,
        ncnt_total: u8,
        ncmds: usize,
    },
    NcntOffsetBeyondTotal {
        ncnt_offset: u8,
        ncnt_total: u8,
    },
}

impl fmt::Display for ExtentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ExtentError::TooManyNcmds { nlb, ncmds } => write!(
                f,
                "NLB {nlb} needs {ncmds} nCMDs, more than {MAX_NCMDS_PER_GROUP}"
            ),
            ExtentError::NcntTotalMismatch {
                nlb,
                ncnt_total,
                ncmds,
            } => write!(
                f,
                "NCNT Total {ncnt_total} but NLB {nlb} makes {ncmds} nCMDs"
            ),
            ExtentError::NcntOffsetBeyondTotal {
                ncnt_offset,
                ncnt_total,
            } => write!(
                f,
                "NCNT Offset {ncnt_offset} beyond NCNT Total {ncnt_total}"
            ),
        }
    }
}

impl std::error::Error for ExtentError {}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::layout::MetadataSize;
    use crate::lba::{LbaRow, TranslationTables};

    const READ: IoOpcode = IoOpcode::Read;

    /// 4 KiB blocks, 1 GiB chunks, 256 KiB stripes (64 blocks), group 4.
    fn striped_4k() -> Namespace {
        Namespace::new(0, 8, 0, 0, 2, LbaSize::B4096).unwrap()
    }

    /// 512-byte blocks, 1 GiB chunks (2^21 blocks), 256 KiB stripes (512
    /// blocks), group 2.
    fn striped_512() -> Namespace {
        Namespace::new(0, 4, 0, 0, 1, LbaSize::B512).unwrap()
    }

    /// 512-byte blocks, 1 GiB chunks (2^21 blocks), no striping.
    fn unstriped_512() -> Namespace {
        Namespace::new(0, 4, 0, 0, 0, LbaSize::B512).unwrap()
    }

    fn icmd(slba: u64, nlb: u16) -> Icmd {
        Icmd {
            opcode: READ,
            slba,
            nlb,
        }
    }

    /// (group, NCNT Total, NCNT Offset, iCMD offset, tCMD offset, length)
    fn numbering(split: &Split) -> Vec<(NcmdGroup, u8, u8, usize, usize, usize)> {
        split
            .ncmds()
            .map(|n| {
                (
                    n.group,
                    n.ncnt_total,
                    n.ncnt_offset,
                    n.icmd_offset,
                    n.tcmd_offset,
                    n.data_len,
                )
            })
            .collect()
    }

    #[test]
    fn unsplit_8k_read_is_two_ncmds() {
        let split = split(icmd(0, 1), &striped_4k()).unwrap();
        assert!(!split.is_split());
        assert_eq!(
            split.groups(),
            &[Group {
                group: NcmdGroup::Whole,
                slba: 0,
                nlb: 1,
                icmd_offset: 0,
                data_len: 8192
            }]
        );
        assert_eq!(
            numbering(&split),
            [
                (NcmdGroup::Whole, 1, 0, 0, 0, 4096),
                (NcmdGroup::Whole, 1, 1, 4096, 4096, 4096),
            ]
        );
        assert_eq!(split.opcode.request_type(), PacketType::ReadRequest);
    }

    #[test]
    fn split_at_a_stripe_numbers_each_group_from_zero() {
        // LBAs 60..=67 cross the stripe boundary at 64.
        let split = split(
            Icmd {
                opcode: IoOpcode::Write,
                slba: 60,
                nlb: 7,
            },
            &striped_4k(),
        )
        .unwrap();
        assert!(split.is_split());
        let groups: Vec<_> = split
            .groups()
            .iter()
            .map(|g| (g.group, g.slba, g.nlb, g.icmd_offset, g.data_len))
            .collect();
        assert_eq!(
            groups,
            [
                (NcmdGroup::First, 60, 3, 0, 16384),
                (NcmdGroup::Second, 64, 3, 16384, 16384)
            ]
        );
        let first = NcmdGroup::First;
        let second = NcmdGroup::Second;
        assert_eq!(
            numbering(&split),
            [
                (first, 3, 0, 0, 0, 4096),
                (first, 3, 1, 4096, 4096, 4096),
                (first, 3, 2, 8192, 8192, 4096),
                (first, 3, 3, 12288, 12288, 4096),
                (second, 3, 0, 16384, 0, 4096),
                (second, 3, 1, 20480, 4096, 4096),
                (second, 3, 2, 24576, 8192, 4096),
                (second, 3, 3, 28672, 12288, 4096),
            ]
        );
        assert_eq!(split.ncmd_count(), 8);
    }

    #[test]
    fn unaligned_512_byte_split_ends_each_group_short() {
        // LBAs 509..=524: 3 blocks before the stripe boundary at 512, 13
        // after.
        let split = split(icmd(509, 15), &striped_512()).unwrap();
        let first = NcmdGroup::First;
        let second = NcmdGroup::Second;
        assert_eq!(
            numbering(&split),
            [
                (first, 0, 0, 0, 0, 1536),
                (second, 1, 0, 1536, 0, 4096),
                (second, 1, 1, 5632, 4096, 2560),
            ]
        );
        assert_eq!(split.groups()[1].nlb, 12);
        // Unsplit and not a multiple of 4 KiB: one short nCMD.
        let split = split_ok(icmd(0, 2), &striped_512());
        assert_eq!(numbering(&split), [(NcmdGroup::Whole, 0, 0, 0, 0, 1536)]);
        let split = split_ok(icmd(0, 8), &striped_512());
        assert_eq!(
            numbering(&split),
            [
                (NcmdGroup::Whole, 1, 0, 0, 0, 4096),
                (NcmdGroup::Whole, 1, 1, 4096, 4096, 512)
            ]
        );
    }

    fn split_ok(icmd: Icmd, namespace: &Namespace) -> Split {
        split(icmd, namespace).unwrap()
    }

    #[test]
    fn without_striping_only_chunks_split() {
        let ns = unstriped_512();
        // Across the stripe boundary at 512: one tCMD.
        assert!(!split_ok(icmd(500, 31), &ns).is_split());
        // Across the chunk boundary at 2^21.
        let split = split_ok(icmd((1 << 21) - 4, 7), &ns);
        assert_eq!(split.groups()[1].slba, 1 << 21);
        assert_eq!(split.groups()[0].nlb, 3);
        // A 1 MiB iCMD spans four 256 KiB stripes but one chunk.
        let split = split_ok(icmd(100, 2047), &ns);
        assert_eq!(split.ncmd_count(), 256);
    }

    #[test]
    fn limits() {
        let ns = Namespace::new(0, 4, 0, 0, 0, LbaSize::B4096).unwrap();
        let split = split_ok(icmd(0, 255), &ns);
        assert_eq!(split.ncmd_count(), 256);
        assert_eq!(split.ncmds().last().map(|n| n.ncnt_total), Some(255));
        assert_eq!(
            super::split(icmd(0, 256), &ns),
            Err(SplitError::TooLarge {
                len: (1 << 20) + 4096
            })
        );
        assert_eq!(
            super::split(icmd(0, 2048), &unstriped_512()),
            Err(SplitError::TooLarge {
                len: (1 << 20) + 512
            })
        );
        // Striping: LBAs 32..=127 cross one boundary (64), 32..=128 two.
        assert!(split_ok(icmd(32, 95), &striped_4k()).is_split());
        assert_eq!(
            super::split(icmd(32, 96), &striped_4k()),
            Err(SplitError::MoreThanTwoGroups {
                slba: 32,
                nlb: 96,
                boundary_blocks: 64
            })
        );
        assert_eq!(
            super::split(icmd(u64::MAX, 1), &ns),
            Err(SplitError::LbaOverflow { slba: u64::MAX })
        );
        // The last LBAs of the 64-bit space: no boundary after them.
        let split = split_ok(icmd(u64::MAX - 3, 3), &ns);
        assert_eq!(numbering(&split).len(), 4);
    }

    #[test]
    fn extent_from_the_wire_fields() {
        assert_eq!(
            ncmd_extent(LbaSize::B4096, 3, 3, 2),
            Ok(Extent {
                data_offset: 8192,
                data_len: 4096,
                first_block: 2,
                blocks: 1
            })
        );
        let extent = ncmd_extent(LbaSize::B512, 12, 1, 1).unwrap();
        assert_eq!(
            extent,
            Extent {
                data_offset: 4096,
                data_len: 2560,
                first_block: 8,
                blocks: 5
            }
        );
        let format = Format {
            lba_size: LbaSize::B512,
            metadata: MetadataSize::B16,
        };
        assert_eq!(extent.metadata_offset(format), 128);
        assert_eq!(extent.metadata_len(format), 80);
        assert_eq!(extent.payload_len(format), 5 * 528);
        assert_eq!(
            ncmd_extent(LbaSize::B4096, 256, 255, 0),
            Err(ExtentError::TooManyNcmds {
                nlb: 256,
                ncmds: 257
            })
        );
        assert_eq!(
            ncmd_extent(LbaSize::B4096, u16::MAX, 255, 0),
            Err(ExtentError::TooManyNcmds {
                nlb: u16::MAX,
                ncmds: 65536
            })
        );
        assert_eq!(
            ncmd_extent(LbaSize::B512, 8, 0, 0),
            Err(ExtentError::NcntTotalMismatch {
                nlb: 8,
                ncnt_total: 0,
                ncmds: 2
            })
        );
        assert_eq!(
            ncmd_extent(LbaSize::B512, 8, 1, 2),
            Err(ExtentError::NcntOffsetBeyondTotal {
                ncnt_offset: 2,
                ncnt_total: 1
            })
        );
    }

    /// A namespace with small stripes and chunks, and its tables with every
    /// row valid on a distinct target chunk.
    fn geometry() -> impl Strategy<Value = (Namespace, TranslationTables)> {
        (0u8..=1, 0u8..=2, 0u8..=2, any::<bool>()).prop_map(|(c, s, n, small)| {
            let lba_size = if small { LbaSize::B512 } else { LbaSize::B4096 };
            let rows = 4u32 << n;
            // Invariant: s ≤ 2 ≤ c + 12; rows a multiple of 2^n.
            let namespace = Namespace::new(0, rows, c, s, n, lba_size).expect("valid");
            let mut tables = TranslationTables::new(rows, 1);
            tables
                .set_connection(0, Some(falcon_core::ids::ConnectionId::truncating(1)))
                .expect("in the table");
            for r in 0..rows {
                let row = LbaRow {
                    valid: true,
                    target_chunk: u64::from(rows - r) * 3,
                    ..LbaRow::default()
                };
                tables.set_row(r, row).expect("in the table");
            }
            tables.set_namespace(1, namespace).expect("fits");
            (namespace, tables)
        })
    }

    proptest! {
        #[test]
        fn ncmds_cover_every_byte_once_in_order(
            (namespace, tables) in geometry(),
            boundary in 1u64..64,
            before in 0u64..300,
            nlb in prop_oneof![0u16..40, 0u16..=2100],
            to_second_boundary in proptest::option::of(0u64..3),
        ) {
            let unit = 1u64 << namespace.contiguous_shift();
            // Or end one block before, at or after the second boundary.
            let nlb = to_second_boundary
                .and_then(|d| u16::try_from(before + unit + d).ok()?.checked_sub(2))
                .unwrap_or(nlb);
            // A boundary inside the namespace, so both groups translate.
            let boundary = 1 + boundary % (namespace.capacity_blocks() / unit - 1).max(1);
            let slba = (boundary * unit).saturating_sub(before);
            let icmd = Icmd { opcode: IoOpcode::Write, slba, nlb };
            let shift = namespace.lba_size().shift();
            let len = (usize::from(nlb) + 1) << shift;
            let last = slba + u64::from(nlb);
            let units = (last >> namespace.contiguous_shift()) - (slba >> namespace.contiguous_shift()) + 1;
            let split = match split(icmd, &namespace) {
                Err(SplitError::TooLarge { .. }) => {
                    prop_assert!(len > MAX_ICMD_LEN);
                    return Ok(());
                }
                Err(SplitError::MoreThanTwoGroups { .. }) => {
                    prop_assert!(len <= MAX_ICMD_LEN && units > 2);
                    return Ok(());
                }
                Err(err) => return Err(TestCaseError::fail(format!("{err}"))),
                Ok(split) => split,
            };
            prop_assert!(len <= MAX_ICMD_LEN && units <= 2);
            prop_assert_eq!(split.is_split(), units == 2);

            // Every byte once, in order.
            let mut covered = vec![0u8; len];
            let mut next = 0;
            for ncmd in split.ncmds() {
                prop_assert_eq!(ncmd.icmd_offset, next);
                prop_assert!(ncmd.data_len > 0 && ncmd.data_len <= NCMD_DATA_LEN);
                prop_assert_eq!(ncmd.data_len % namespace.lba_size().bytes(), 0);
                for byte in &mut covered[ncmd.icmd_offset..ncmd.icmd_offset + ncmd.data_len] {
                    *byte += 1;
                }
                next += ncmd.data_len;
                // D8: the target finds the same place from the wire fields.
                let group = split.groups().iter().find(|g| g.group == ncmd.group).expect("its group");
                prop_assert_eq!(ncmd.tcmd_offset, usize::from(ncmd.ncnt_offset) * NCMD_DATA_LEN);
                prop_assert_eq!(ncmd.icmd_offset, group.icmd_offset + ncmd.tcmd_offset);
                let extent = ncmd_extent(namespace.lba_size(), group.nlb, ncmd.ncnt_total, ncmd.ncnt_offset);
                prop_assert_eq!(extent.map(|e| (e.data_offset, e.data_len)), Ok((ncmd.tcmd_offset, ncmd.data_len)));
                // Only a group's last nCMD is short.
                if ncmd.ncnt_offset < ncmd.ncnt_total {
                    prop_assert_eq!(ncmd.data_len, NCMD_DATA_LEN);
                }
            }
            prop_assert_eq!(next, len);
            prop_assert!(covered.iter().all(|&c| c == 1));

            // Groups tile the iCMD; each translates to consecutive target
            // LBAs of one row.
            let mut lba = slba;
            for group in split.groups() {
                prop_assert_eq!(group.slba, lba);
                let blocks = u64::from(group.nlb) + 1;
                lba += blocks;
                let end_lba = group.slba + blocks - 1;
                if end_lba < namespace.capacity_blocks() {
                    let first = tables.translate(1, group.slba).expect("in the namespace");
                    let end = tables.translate(1, end_lba).expect("in the namespace");
                    prop_assert_eq!(first.row_index, end.row_index);
                    prop_assert_eq!(end.target_lba, first.target_lba + blocks - 1);
                }
            }
            prop_assert_eq!(lba, last + 1);
            if split.is_split() {
                prop_assert_eq!(split.groups()[1].slba % unit, 0);
            }
        }

        #[test]
        fn extent_never_panics(small in any::<bool>(), nlb in any::<u16>(), total in any::<u8>(), offset in any::<u8>()) {
            let lba_size = if small { LbaSize::B512 } else { LbaSize::B4096 };
            if let Ok(extent) = ncmd_extent(lba_size, nlb, total, offset) {
                let len = (usize::from(nlb) + 1) << lba_size.shift();
                prop_assert!(extent.data_offset + extent.data_len <= len);
                prop_assert!(extent.data_len > 0);
            }
        }
    }
}
