//! Initiator LBA to target LBA: the NSID table, the LBA translation table
//! and the Falcon connection table (NVMe-0.9 §6.6.2).
//!
//! Layer: NVMe ULP, initiator side (the target only sees the results in a
//! request's Target NSID, SLBA and SQID). Owns [`Namespace`] (an NSID table
//! row), [`LbaRow`], [`TranslationTables`] and [`TranslationTables::translate`].
//! Never panics on an LBA or an NSID: a namespace, row or connection that
//! is missing or invalid is a [`TranslateError`]; a namespace whose
//! parameters break the spec's rules is refused when it is configured
//! ([`ConfigError`]).
//!
//! With B = log2(LBA size), C the chunk size shift (chunk = 2^C GiB), S the
//! stripe size shift (stripe = 2^S × 256 KiB) and N the striping group
//! shift (2^N chunks striped together), the §6.6.2 pseudo-code:
//!
//! ```text
//!  chunk_start  = C + N + 30 − B          stripe_start = S + 18 − B
//!  chunk_num    = lba >> chunk_start
//!  stripe_num   = (lba >> stripe_start) & ((1 << (chunk_start − stripe_start)) − 1)
//!  index        = start + ((chunk_num << N) | (stripe_num & ((1 << N) − 1)))
//!  target_lba   = (target_chunk << (chunk_start − N))
//!               | ((stripe_num >> N) << stripe_start)
//!               | (lba & ((1 << stripe_start) − 1))
//! ```
//!
//! `chunk_num` counts groups of 2^N chunks, each taking 2^N consecutive
//! rows: stripe k of a group goes to row k mod 2^N (the RAID-0 of §6.6.1).
//! §6.6.1 allows any stripe size in 256 KiB units and any chunk size in
//! 1 GB units; the NSID table of §6.6.2 encodes both as powers of two and
//! the shifts above need them, so sizes here are 2^S × 256 KiB and 2^C GiB.
//!
//! Two additions to the spec's tables, both checked when a namespace is
//! configured: a namespace has a row count (§6.6.2 only says "a set of
//! contiguous rows"), so that an LBA beyond the namespace is an error
//! instead of a lookup in the next namespace's rows; and that count is a
//! whole number of striping groups, so the namespace has no holes.
//! Initiator NSIDs are 1..=65535: the wire carries the low 16 bits (§8.3),
//! so two NSIDs differing above bit 15 would reach the target as one.

use core::fmt;

use falcon_core::ids::ConnectionId;

use crate::layout::LbaSize;

/// log2 of 1 GiB, the chunk size unit (NVMe-0.9 §6.6.2).
const GIB_SHIFT: u32 = 30;
/// log2 of 256 KiB, the stripe size unit.
const STRIPE_UNIT_SHIFT: u32 = 18;

/// An NSID table row: how a namespace's LBA space maps onto chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Namespace {
    start_index: u32,
    rows: u32,
    chunk_shift: u8,
    stripe_shift: u8,
    group_shift: u8,
    lba_size: LbaSize,
}

impl Namespace {
    /// A namespace whose chunks are LBA table rows
    /// `start_index..start_index + rows`.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] when the stripe is larger than the chunk (§6.6.1:
    /// "the chunk size must be a multiple of the stripe size"), the row
    /// count is zero or not a whole number of striping groups, the rows
    /// run past `u32`, or the namespace's LBAs do not fit 64 bits.
    pub const fn new(
        start_index: u32,
        rows: u32,
        chunk_shift: u8,
        stripe_shift: u8,
        group_shift: u8,
        lba_size: LbaSize,
    ) -> Result<Namespace, ConfigError> {
        if stripe_shift as u32 + STRIPE_UNIT_SHIFT > chunk_shift as u32 + GIB_SHIFT {
            return Err(ConfigError::StripeLargerThanChunk {
                chunk_shift,
                stripe_shift,
            });
        }
        if group_shift >= 32 || rows == 0 || rows % (1 << group_shift) != 0 {
            return Err(ConfigError::RowsNotWholeGroups { rows, group_shift });
        }
        if start_index.checked_add(rows).is_none() {
            return Err(ConfigError::RowsOverflow { start_index, rows });
        }
        // The namespace's last LBA must fit 64 bits: rows << (C + 30 − B).
        let chunk_lba_shift = chunk_shift as u32 + GIB_SHIFT - lba_size.shift();
        if chunk_lba_shift + group_shift as u32 >= 64
            || (rows as u64).leading_zeros() < chunk_lba_shift
        {
            return Err(ConfigError::CapacityOverflow { chunk_shift, rows });
        }
        Ok(Namespace {
            start_index,
            rows,
            chunk_shift,
            stripe_shift,
            group_shift,
            lba_size,
        })
    }

    /// First LBA table row.
    pub const fn start_index(&self) -> u32 {
        self.start_index
    }

    /// LBA table rows (chunks) of the namespace.
    pub const fn rows(&self) -> u32 {
        self.rows
    }

    /// C: chunk = 2^C GiB.
    pub const fn chunk_shift(&self) -> u8 {
        self.chunk_shift
    }

    /// S: stripe = 2^S × 256 KiB.
    pub const fn stripe_shift(&self) -> u8 {
        self.stripe_shift
    }

    /// N: 2^N chunks striped together.
    pub const fn group_shift(&self) -> u8 {
        self.group_shift
    }

    pub const fn lba_size(&self) -> LbaSize {
        self.lba_size
    }

    /// `chunk_start` of §6.6.2: log2 of a striping group's blocks.
    pub const fn chunk_start(&self) -> u32 {
        self.chunk_shift as u32 + self.group_shift as u32 + GIB_SHIFT - self.lba_size.shift()
    }

    /// `stripe_start` of §6.6.2: log2 of a stripe's blocks.
    pub const fn stripe_start(&self) -> u32 {
        self.stripe_shift as u32 + STRIPE_UNIT_SHIFT - self.lba_size.shift()
    }

    /// Blocks of one chunk.
    pub const fn chunk_blocks(&self) -> u64 {
        1 << (self.chunk_start() - self.group_shift as u32)
    }

    /// Blocks of one stripe.
    pub const fn stripe_blocks(&self) -> u64 {
        1 << self.stripe_start()
    }

    /// Blocks of the namespace.
    pub const fn capacity_blocks(&self) -> u64 {
        (self.rows as u64) << (self.chunk_start() - self.group_shift as u32)
    }

    /// log2 of the blocks that map to consecutive target LBAs of one row:
    /// a stripe when striping (N > 0), a chunk without it (the value 1 of
    /// the striping group "indicates no striping", §6.6.1). A command that
    /// crosses such a boundary is split ([`crate::split`]).
    pub const fn contiguous_shift(&self) -> u32 {
        if self.group_shift == 0 {
            self.chunk_start()
        } else {
            self.stripe_start()
        }
    }
}

/// An LBA translation table row: where one initiator chunk lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct LbaRow {
    /// Set when the row holds a translation (cleared rows are what an
    /// online resize leaves behind, §6.6.2).
    pub valid: bool,
    /// Submission queue at the target.
    pub target_sqid: u8,
    /// Index into the Falcon connection table.
    pub connection_index: u32,
    /// NSID at the target; the wire carries 16 bits (§8.3).
    pub target_nsid: u16,
    /// The chunk's number at the target, in chunk-size units.
    pub target_chunk: u64,
}

/// Where one initiator LBA lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Target {
    /// The LBA translation table row used.
    pub row_index: u32,
    pub target_sqid: u8,
    pub connection_index: u32,
    /// The connection to the target (Falcon connection table).
    pub connection_id: ConnectionId,
    pub target_nsid: u16,
    pub target_lba: u64,
}

/// The three tables of NVMe-0.9 §6.6.2.
#[derive(Debug, Clone, Default)]
pub struct TranslationTables {
    /// Indexed by initiator NSID.
    namespaces: Vec<Option<Namespace>>,
    rows: Vec<LbaRow>,
    connections: Vec<Option<ConnectionId>>,
}

impl TranslationTables {
    /// Tables of `rows` LBA table rows (all invalid) and `connections`
    /// connection slots (all empty).
    pub fn new(rows: u32, connections: u32) -> TranslationTables {
        TranslationTables {
            namespaces: Vec::new(),
            rows: vec![LbaRow::default(); rows as usize],
            connections: vec![None; connections as usize],
        }
    }

    /// Installs (or replaces) initiator namespace `nsid`.
    ///
    /// # Errors
    ///
    /// [`ConfigError::BadNsid`] outside 1..=65535,
    /// [`ConfigError::RowsOutsideTable`] when its rows pass the table's end.
    pub fn set_namespace(&mut self, nsid: u32, namespace: Namespace) -> Result<(), ConfigError> {
        if nsid == 0 || nsid > u32::from(u16::MAX) {
            return Err(ConfigError::BadNsid(nsid));
        }
        let end = namespace.start_index as usize + namespace.rows as usize;
        if end > self.rows.len() {
            return Err(ConfigError::RowsOutsideTable {
                end,
                table: self.rows.len(),
            });
        }
        let index = nsid as usize;
        if self.namespaces.len() <= index {
            self.namespaces.resize(index + 1, None);
        }
        self.namespaces[index] = Some(namespace);
        Ok(())
    }

    /// Removes initiator namespace `nsid`.
    pub fn remove_namespace(&mut self, nsid: u32) {
        if let Some(slot) = self.namespaces.get_mut(nsid as usize) {
            *slot = None;
        }
    }

    pub fn namespace(&self, nsid: u32) -> Option<&Namespace> {
        self.namespaces.get(nsid as usize)?.as_ref()
    }

    /// Writes LBA table row `index`.
    ///
    /// # Errors
    ///
    /// [`ConfigError::RowsOutsideTable`] past the table's end.
    pub fn set_row(&mut self, index: u32, row: LbaRow) -> Result<(), ConfigError> {
        let table = self.rows.len();
        let slot = self
            .rows
            .get_mut(index as usize)
            .ok_or(ConfigError::RowsOutsideTable {
                end: index as usize + 1,
                table,
            })?;
        *slot = row;
        Ok(())
    }

    pub fn row(&self, index: u32) -> Option<&LbaRow> {
        self.rows.get(index as usize)
    }

    /// Sets (or with `None` clears) connection table entry `index`.
    ///
    /// # Errors
    ///
    /// [`ConfigError::ConnectionOutsideTable`] past the table's end.
    pub fn set_connection(
        &mut self,
        index: u32,
        connection: Option<ConnectionId>,
    ) -> Result<(), ConfigError> {
        let table = self.connections.len();
        let slot = self
            .connections
            .get_mut(index as usize)
            .ok_or(ConfigError::ConnectionOutsideTable { index, table })?;
        *slot = connection;
        Ok(())
    }

    /// Translates initiator LBA `lba` of initiator namespace `nsid`
    /// (NVMe-0.9 §6.6.2 steps 1–4).
    ///
    /// # Errors
    ///
    /// [`TranslateError`] naming the missing namespace, the LBA beyond the
    /// namespace, the invalid row, the missing connection, or a target LBA
    /// that does not fit 64 bits.
    pub fn translate(&self, nsid: u32, lba: u64) -> Result<Target, TranslateError> {
        let namespace = self
            .namespace(nsid)
            .ok_or(TranslateError::UnknownNamespace(nsid))?;
        let group_shift = u32::from(namespace.group_shift);
        let chunk_start = namespace.chunk_start();
        let stripe_start = namespace.stripe_start();
        // Step 2, the table index (§6.6.2 ComputeLBATableIndex).
        let chunk_num = lba >> chunk_start;
        let stripe_num = (lba >> stripe_start) & ((1u64 << (chunk_start - stripe_start)) - 1);
        let relative = (chunk_num << group_shift) | (stripe_num & ((1u64 << group_shift) - 1));
        if relative >= u64::from(namespace.rows) {
            return Err(TranslateError::LbaOutOfRange {
                nsid,
                lba,
                capacity: namespace.capacity_blocks(),
            });
        }
        // Fits: relative < rows, and start + rows fits u32 (Namespace::new).
        let row_index = namespace.start_index + relative as u32;
        let row = self
            .rows
            .get(row_index as usize)
            .ok_or(TranslateError::MissingRow(row_index))?;
        if !row.valid {
            return Err(TranslateError::InvalidRow(row_index));
        }
        // Step 4, the connection.
        let connection_id = self
            .connections
            .get(row.connection_index as usize)
            .copied()
            .flatten()
            .ok_or(TranslateError::UnknownConnection {
                row_index,
                connection_index: row.connection_index,
            })?;
        // Step 3, the target LBA (§6.6.2 ComputeTargetLBA).
        let chunk_lba_shift = chunk_start - group_shift;
        if row.target_chunk >> (64 - chunk_lba_shift) != 0 {
            return Err(TranslateError::TargetLbaOverflow {
                row_index,
                target_chunk: row.target_chunk,
            });
        }
        let offset_in_stripe = lba & ((1u64 << stripe_start) - 1);
        let target_lba = (row.target_chunk << chunk_lba_shift)
            | ((stripe_num >> group_shift) << stripe_start)
            | offset_in_stripe;
        Ok(Target {
            row_index,
            target_sqid: row.target_sqid,
            connection_index: row.connection_index,
            connection_id,
            target_nsid: row.target_nsid,
            target_lba,
        })
    }
}

/// Where a whole-namespace command (a Flush) goes: one target namespace
/// on one queue of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Destination {
    pub connection_id: ConnectionId,
    pub target_nsid: u16,
    pub target_sqid: u8,
}

impl TranslationTables {
    /// Every distinct destination of initiator namespace `nsid`'s valid
    /// rows, in row order: what a command on the whole namespace must
    /// reach. Invalid rows map no data and are passed over.
    ///
    /// # Errors
    ///
    /// [`TranslateError::UnknownNamespace`], or the first valid row whose
    /// row or connection is missing.
    pub fn destinations(&self, nsid: u32) -> Result<Vec<Destination>, TranslateError> {
        let namespace = self
            .namespace(nsid)
            .ok_or(TranslateError::UnknownNamespace(nsid))?;
        let mut out: Vec<Destination> = Vec::new();
        for row_index in namespace.start_index..namespace.start_index + namespace.rows {
            let row = self
                .rows
                .get(row_index as usize)
                .ok_or(TranslateError::MissingRow(row_index))?;
            if !row.valid {
                continue;
            }
            let connection_id = self
                .connections
                .get(row.connection_index as usize)
                .copied()
                .flatten()
                .ok_or(TranslateError::UnknownConnection {
                    row_index,
                    connection_index: row.connection_index,
                })?;
            let destination = Destination {
                connection_id,
                target_nsid: row.target_nsid,
                target_sqid: row.target_sqid,
            };
            if !out.contains(&destination) {
                out.push(destination);
            }
        }
        Ok(out)
    }
}

/// A namespace or table entry the spec's rules refuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigError {
    StripeLargerThanChunk { chunk_shift: u8, stripe_shift: u8 },
    RowsNotWholeGroups { rows: u32, group_shift: u8 },
    RowsOverflow { start_index: u32, rows: u32 },
    CapacityOverflow { chunk_shift: u8, rows: u32 },
    BadNsid(u32),
    RowsOutsideTable { end: usize, table: usize },
    ConnectionOutsideTable { index: u32, table: usize },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ConfigError::StripeLargerThanChunk {
                chunk_shift,
                stripe_shift,
            } => write!(
                f,
                "stripe 2^{stripe_shift} x 256 KiB is larger than chunk 2^{chunk_shift} GiB"
            ),
            ConfigError::RowsNotWholeGroups { rows, group_shift } => write!(
                f,
                "{rows} rows are not a positive multiple of the striping group 2^{group_shift}"
            ),
            ConfigError::RowsOverflow { start_index, rows } => {
                write!(f, "rows {start_index}+{rows} overflow the row index")
            }
            ConfigError::CapacityOverflow { chunk_shift, rows } => write!(
                f,
                "{rows} chunks of 2^{chunk_shift} GiB do not fit 64-bit LBAs"
            ),
            ConfigError::BadNsid(nsid) => write!(f, "NSID {nsid} outside 1..=65535"),
            ConfigError::RowsOutsideTable { end, table } => {
                write!(f, "rows up to {end} exceed the {table}-row LBA table")
            }
            ConfigError::ConnectionOutsideTable { index, table } => write!(
                f,
                "connection index {index} exceeds the {table}-entry connection table"
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Why an LBA has no target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TranslateError {
    UnknownNamespace(u32),
    LbaOutOfRange {
        nsid: u32,
        lba: u64,
        capacity: u64,
    },
    /// The row index is beyond the table (the namespace was configured
    /// against a larger table).
    MissingRow(u32),
    /// The row's Valid flag is clear.
    InvalidRow(u32),
    UnknownConnection {
        row_index: u32,
        connection_index: u32,
    },
    TargetLbaOverflow {
        row_index: u32,
        target_chunk: u64,
    },
}

impl fmt::Display for TranslateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            TranslateError::UnknownNamespace(nsid) => write!(f, "unknown namespace {nsid}"),
            TranslateError::LbaOutOfRange {
                nsid,
                lba,
                capacity,
            } => write!(f, "LBA {lba} beyond namespace {nsid} ({capacity} blocks)"),
            TranslateError::MissingRow(row) => write!(f, "LBA table row {row} does not exist"),
            TranslateError::InvalidRow(row) => write!(f, "LBA table row {row} is not valid"),
            TranslateError::UnknownConnection {
                row_index,
                connection_index,
            } => write!(
                f,
                "LBA table row {row_index} names connection {connection_index}, which is not set"
            ),
            TranslateError::TargetLbaOverflow {
                row_index,
                target_chunk,
            } => write!(
                f,
                "target chunk {target_chunk} of row {row_index} overflows a 64-bit LBA"
            ),
        }
    }
}

impl std::error::Error for TranslateError {}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn cid(n: u32) -> ConnectionId {
        ConnectionId::truncating(0x100 + n)
    }

    /// Namespace 1: 4 KiB blocks, 1 GiB chunks (2^18 blocks), 256 KiB
    /// stripes (64 blocks), striping group 4, rows 10..18, row r on target
    /// chunk 90 + r, connection r mod 3, SQID r.
    /// Namespace 2: 512-byte blocks, 2 GiB chunks (2^22 blocks), 1 MiB
    /// stripes, no striping, rows 0..2 on target chunks 5 and 0.
    /// Namespace 3: 512-byte blocks, 1 GiB chunks (2^21 blocks), 256 KiB
    /// stripes (512 blocks), striping group 2, rows 20..24 on target chunks
    /// 1..=4.
    fn tables() -> TranslationTables {
        let mut tables = TranslationTables::new(32, 3);
        for i in 0..3 {
            tables.set_connection(i, Some(cid(i))).unwrap();
        }
        let row = |chunk: u64, connection_index: u32, sqid: u8| LbaRow {
            valid: true,
            target_sqid: sqid,
            connection_index,
            target_nsid: 7,
            target_chunk: chunk,
        };
        for r in 10..18 {
            tables
                .set_row(r, row(90 + u64::from(r), r % 3, r as u8))
                .unwrap();
        }
        tables.set_row(0, row(5, 0, 0)).unwrap();
        tables.set_row(1, row(0, 1, 1)).unwrap();
        for r in 20..24 {
            tables.set_row(r, row(u64::from(r) - 19, 2, 9)).unwrap();
        }
        let ns1 = Namespace::new(10, 8, 0, 0, 2, LbaSize::B4096).unwrap();
        let ns2 = Namespace::new(0, 2, 1, 2, 0, LbaSize::B512).unwrap();
        let ns3 = Namespace::new(20, 4, 0, 0, 1, LbaSize::B512).unwrap();
        tables.set_namespace(1, ns1).unwrap();
        tables.set_namespace(2, ns2).unwrap();
        tables.set_namespace(3, ns3).unwrap();
        tables
    }

    #[test]
    fn hand_computed_translations() {
        let tables = tables();
        // (nsid, initiator LBA, row, target LBA)
        let chunk4k = 1u64 << 18;
        let chunk512_2g = 1u64 << 22;
        let chunk512_1g = 1u64 << 21;
        let cases = [
            // Namespace 1: chunk_start 20, stripe_start 6.
            (1, 0, 10, 100 * chunk4k),
            (1, 63, 10, 100 * chunk4k + 63),
            (1, 64, 11, 101 * chunk4k),
            (1, 255, 13, 103 * chunk4k + 63),
            (1, 256, 10, 100 * chunk4k + 64),
            (1, 260, 10, 100 * chunk4k + 68),
            (1, (1 << 20) - 1, 13, 104 * chunk4k - 1),
            (1, 1 << 20, 14, 104 * chunk4k),
            (1, (1 << 21) - 1, 17, 108 * chunk4k - 1),
            // Namespace 2: chunk_start 22, stripe_start 11, no striping:
            // stripe boundaries change nothing, chunk boundaries the row.
            (2, 2047, 0, 5 * chunk512_2g + 2047),
            (2, 2048, 0, 5 * chunk512_2g + 2048),
            (2, chunk512_2g - 1, 0, 6 * chunk512_2g - 1),
            (2, chunk512_2g, 1, 0),
            (2, 2 * chunk512_2g - 1, 1, chunk512_2g - 1),
            // Namespace 3: chunk_start 22, stripe_start 9.
            (3, 511, 20, chunk512_1g + 511),
            (3, 512, 21, 2 * chunk512_1g),
            (3, 1024, 20, chunk512_1g + 512),
            (3, 1536, 21, 2 * chunk512_1g + 512),
            (3, 1 << 22, 22, 3 * chunk512_1g),
            (3, (1 << 22) + 512 + 7, 23, 4 * chunk512_1g + 7),
        ];
        for (nsid, lba, row_index, target_lba) in cases {
            let target = tables.translate(nsid, lba).unwrap();
            assert_eq!(
                (target.row_index, target.target_lba),
                (row_index, target_lba),
                "nsid {nsid} lba {lba}"
            );
            let row = tables.row(row_index).unwrap();
            assert_eq!(target.target_sqid, row.target_sqid);
            assert_eq!(target.connection_id, cid(row.connection_index));
            assert_eq!(target.target_nsid, 7);
        }
    }

    #[test]
    fn destinations_are_the_distinct_valid_rows() {
        let mut tables = tables();
        let dest = |c: u32, sqid: u8| Destination {
            connection_id: cid(c),
            target_nsid: 7,
            target_sqid: sqid,
        };
        // Namespace 3: four rows, one connection and SQID.
        assert_eq!(tables.destinations(3), Ok(vec![dest(2, 9)]));
        // Namespace 1: rows 10..18, each its own SQID.
        let ns1: Vec<_> = (10..18).map(|r| dest(r % 3, r as u8)).collect();
        assert_eq!(tables.destinations(1), Ok(ns1));
        let mut invalid = *tables.row(0).unwrap();
        invalid.valid = false;
        tables.set_row(0, invalid).unwrap();
        assert_eq!(tables.destinations(2), Ok(vec![dest(1, 1)]));
        tables.set_connection(1, None).unwrap();
        assert_eq!(
            tables.destinations(2),
            Err(TranslateError::UnknownConnection {
                row_index: 1,
                connection_index: 1
            })
        );
        assert_eq!(
            tables.destinations(4),
            Err(TranslateError::UnknownNamespace(4))
        );
    }

    #[test]
    fn bad_lookups_are_errors() {
        let mut tables = tables();
        assert_eq!(
            tables.translate(4, 0),
            Err(TranslateError::UnknownNamespace(4))
        );
        assert_eq!(
            tables.translate(0, 0),
            Err(TranslateError::UnknownNamespace(0))
        );
        assert_eq!(
            tables.translate(u32::MAX, 0),
            Err(TranslateError::UnknownNamespace(u32::MAX))
        );
        assert_eq!(
            tables.translate(1, 1 << 21),
            Err(TranslateError::LbaOutOfRange {
                nsid: 1,
                lba: 1 << 21,
                capacity: 1 << 21
            })
        );
        assert!(matches!(
            tables.translate(1, u64::MAX),
            Err(TranslateError::LbaOutOfRange { .. })
        ));
        let mut row = *tables.row(12).unwrap();
        row.valid = false;
        tables.set_row(12, row).unwrap();
        assert_eq!(
            tables.translate(1, 128),
            Err(TranslateError::InvalidRow(12))
        );
        assert!(tables.translate(1, 64).is_ok(), "other rows still valid");
        tables.set_connection(2, None).unwrap();
        assert_eq!(
            tables.translate(3, 0),
            Err(TranslateError::UnknownConnection {
                row_index: 20,
                connection_index: 2
            })
        );
        tables
            .set_row(
                0,
                LbaRow {
                    valid: true,
                    connection_index: 0,
                    target_chunk: u64::MAX >> 20,
                    ..LbaRow::default()
                },
            )
            .unwrap();
        assert_eq!(
            tables.translate(2, 5),
            Err(TranslateError::TargetLbaOverflow {
                row_index: 0,
                target_chunk: u64::MAX >> 20
            })
        );
        tables
            .set_row(
                0,
                LbaRow {
                    valid: true,
                    connection_index: 9,
                    ..LbaRow::default()
                },
            )
            .unwrap();
        assert_eq!(
            tables.translate(2, 5),
            Err(TranslateError::UnknownConnection {
                row_index: 0,
                connection_index: 9
            })
        );
    }

    #[test]
    fn bad_configurations_are_refused() {
        assert_eq!(
            Namespace::new(0, 4, 0, 13, 0, LbaSize::B4096),
            Err(ConfigError::StripeLargerThanChunk {
                chunk_shift: 0,
                stripe_shift: 13
            })
        );
        assert!(
            Namespace::new(0, 4, 0, 12, 0, LbaSize::B4096).is_ok(),
            "stripe = chunk"
        );
        assert_eq!(
            Namespace::new(0, 6, 0, 0, 2, LbaSize::B512),
            Err(ConfigError::RowsNotWholeGroups {
                rows: 6,
                group_shift: 2
            })
        );
        assert!(Namespace::new(0, 0, 0, 0, 0, LbaSize::B512).is_err());
        assert!(Namespace::new(0, 1, 0, 0, 40, LbaSize::B512).is_err());
        assert_eq!(
            Namespace::new(u32::MAX, 1, 0, 0, 0, LbaSize::B512),
            Err(ConfigError::RowsOverflow {
                start_index: u32::MAX,
                rows: 1
            })
        );
        assert!(matches!(
            Namespace::new(0, 1, 50, 0, 0, LbaSize::B512),
            Err(ConfigError::CapacityOverflow { .. })
        ));
        assert!(matches!(
            Namespace::new(0, 1 << 20, 30, 0, 0, LbaSize::B512),
            Err(ConfigError::CapacityOverflow { .. })
        ));
        let mut tables = TranslationTables::new(4, 1);
        let ns = Namespace::new(2, 4, 0, 0, 1, LbaSize::B512).unwrap();
        assert_eq!(
            tables.set_namespace(1, ns),
            Err(ConfigError::RowsOutsideTable { end: 6, table: 4 })
        );
        let ns = Namespace::new(0, 4, 0, 0, 1, LbaSize::B512).unwrap();
        assert_eq!(tables.set_namespace(0, ns), Err(ConfigError::BadNsid(0)));
        assert_eq!(
            tables.set_namespace(65536, ns),
            Err(ConfigError::BadNsid(65536))
        );
        assert_eq!(tables.set_namespace(65535, ns), Ok(()));
        tables.remove_namespace(65535);
        assert_eq!(
            tables.translate(65535, 0),
            Err(TranslateError::UnknownNamespace(65535))
        );
        assert!(tables.set_row(4, LbaRow::default()).is_err());
        assert!(tables.set_connection(1, None).is_err());
    }

    /// A namespace with small shifts (so LBAs cross many stripes and
    /// chunks), its tables fully populated with random target chunks.
    fn geometry() -> impl Strategy<Value = (Namespace, TranslationTables)> {
        (0u8..=2, 0u8..=4, 0u8..=3, any::<bool>(), 1u32..=3, 0u32..=5)
            .prop_flat_map(|(c, s, n, small, groups, start)| {
                let lba_size = if small { LbaSize::B512 } else { LbaSize::B4096 };
                let rows = groups << n;
                let chunks = proptest::collection::vec(0u64..1 << 20, rows as usize);
                let sqids = proptest::collection::vec(any::<u8>(), rows as usize);
                (Just((c, s, n, lba_size, rows, start)), chunks, sqids)
            })
            .prop_map(|((c, s, n, lba_size, rows, start), chunks, sqids)| {
                // Invariant: s ≤ 4 ≤ c + 12, rows a positive multiple of 2^n.
                let namespace = Namespace::new(start, rows, c, s, n, lba_size).expect("valid");
                let mut tables = TranslationTables::new(start + rows, 4);
                for i in 0..4 {
                    tables
                        .set_connection(i, Some(cid(i)))
                        .expect("in the table");
                }
                for (i, (chunk, sqid)) in chunks.into_iter().zip(sqids).enumerate() {
                    let row = LbaRow {
                        valid: true,
                        target_sqid: sqid,
                        connection_index: sqid as u32 % 4,
                        target_nsid: sqid as u16,
                        target_chunk: chunk,
                    };
                    tables.set_row(start + i as u32, row).expect("in the table");
                }
                tables.set_namespace(1, namespace).expect("fits the table");
                (namespace, tables)
            })
    }

    /// §6.6.1 by division: stripes go round-robin over the 2^N chunks of a
    /// striping group.
    fn oracle(ns: &Namespace, tables: &TranslationTables, lba: u64) -> Option<(u32, u64)> {
        let chunk_blocks =
            (1u64 << (u32::from(ns.chunk_shift()) + 30)) / ns.lba_size().bytes() as u64;
        let stripe_blocks = (256u64 << 10 << ns.stripe_shift()) / ns.lba_size().bytes() as u64;
        let group = 1u64 << ns.group_shift();
        let group_blocks = chunk_blocks * group;
        let stripe_in_group = (lba % group_blocks) / stripe_blocks;
        let relative = (lba / group_blocks) * group + stripe_in_group % group;
        if relative >= u64::from(ns.rows()) {
            return None;
        }
        let row_index = ns.start_index() + relative as u32;
        let chunk = tables.row(row_index)?.target_chunk;
        let target =
            chunk * chunk_blocks + (stripe_in_group / group) * stripe_blocks + lba % stripe_blocks;
        Some((row_index, target))
    }

    proptest! {
        #[test]
        fn translate_matches_the_division_oracle(
            (namespace, tables) in geometry(),
            fraction in 0.0f64..1.1,
            near in any::<bool>(),
            delta in 0u64..3,
        ) {
            let capacity = namespace.capacity_blocks();
            let mut lba = (capacity as f64 * fraction) as u64;
            if near {
                // Around a stripe boundary.
                let stripe = namespace.stripe_blocks();
                lba = (lba / stripe * stripe + delta).saturating_sub(1);
            }
            let got = tables.translate(1, lba);
            match oracle(&namespace, &tables, lba) {
                Some((row_index, target_lba)) => {
                    let got = got.expect("in range");
                    prop_assert_eq!((got.row_index, got.target_lba), (row_index, target_lba));
                    let row = tables.row(row_index).expect("a row");
                    prop_assert_eq!(got.target_sqid, row.target_sqid);
                    prop_assert_eq!(got.connection_id, cid(row.connection_index));
                }
                None => {
                    prop_assert!(lba >= capacity);
                    let is_out_of_range = matches!(got, Err(TranslateError::LbaOutOfRange { .. }));
                    prop_assert!(is_out_of_range);
                }
            }
        }
    }
}
