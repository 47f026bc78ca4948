//! Namespace configuration: what the control plane exports for one Target
//! NSID (ulp.md §3.9: "Target NSID → block device, LBA size 512/4096,
//! metadata 0/8/16") and its validated form, [`NamespaceFormat`].
//!
//! Layer: NVMe target storage. Owns the rules for valid combinations; every
//! refusal names the config field. Never opens a file or touches data.
//! The LBA format itself (block and metadata sizes) is
//! [`layout::Format`](crate::layout::Format), the one the wire layouts,
//! the splitting and the initiator use; a namespace adds its NSID, size and
//! protection.

use core::fmt;
use core::str::FromStr;
use std::io;
use std::path::PathBuf;

use crate::layout::{Format, LbaSize, MetadataSize};
use crate::status::Status;

/// Bytes of protection information in a block's metadata (16-bit guard PI).
pub const PI_LEN: usize = 8;

/// The largest metadata size a namespace may have.
pub const MAX_METADATA: usize = 16;

/// What the namespace does with protection information (ulp.md §3.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Protection {
    /// No PI; metadata, if any, is stored and returned as bytes.
    #[default]
    Off,
    /// PI Type 1 in the format, stored and returned as bytes without any
    /// check: the "block-device-backed target without real PI" of ulp.md
    /// §3.7. The initiator does the checking.
    Opaque,
    /// PI Type 1, PIL = 0, checked by the target on every write and read
    /// as the command's PRCHK bits ask.
    Verified,
}

impl Protection {
    /// Whether the format carries PI (checked or not).
    pub const fn has_pi(self) -> bool {
        !matches!(self, Protection::Off)
    }
}

impl fmt::Display for Protection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protection::Off => "off",
            Protection::Opaque => "opaque",
            Protection::Verified => "verified",
        })
    }
}

impl FromStr for Protection {
    type Err = ConfigError;

    fn from_str(text: &str) -> Result<Protection, ConfigError> {
        match text {
            "off" => Ok(Protection::Off),
            "opaque" => Ok(Protection::Opaque),
            "verified" => Ok(Protection::Verified),
            _ => Err(ConfigError::invalid(
                "protection",
                text,
                "must be off, opaque or verified",
            )),
        }
    }
}

/// One namespace as configured: raw values, checked by [`validate`].
///
/// [`validate`]: NamespaceConfig::validate
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamespaceConfig {
    /// Target NSID: the low 16 bits the Read and Write Requests carry
    /// (NVMe-0.9 §8.3, ulp.md §3.4 word 8).
    pub nsid: u16,
    /// Size in logical blocks. A file namespace uses it only to create a
    /// missing file; an existing file's size gives the block count.
    pub blocks: u64,
    /// Logical block size in bytes: 512 or 4096.
    pub lba_size: u32,
    /// Metadata bytes per block: 0, 8 or 16.
    pub metadata_size: u32,
    pub protection: Protection,
}

impl NamespaceConfig {
    /// A namespace without metadata.
    pub const fn new(nsid: u16, blocks: u64, lba_size: u32) -> NamespaceConfig {
        NamespaceConfig {
            nsid,
            blocks,
            lba_size,
            metadata_size: 0,
            protection: Protection::Off,
        }
    }

    /// The same namespace with `metadata_size` bytes of metadata per block
    /// and the given protection.
    pub const fn with_metadata(
        self,
        metadata_size: u32,
        protection: Protection,
    ) -> NamespaceConfig {
        NamespaceConfig {
            metadata_size,
            protection,
            ..self
        }
    }

    /// Checks every field and their combinations.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Invalid`] naming the first field at fault.
    pub fn validate(&self) -> Result<NamespaceFormat, ConfigError> {
        // NVMe Base 2.0 §3.2.1: NSID 0 is never a valid namespace.
        if self.nsid == 0 {
            return Err(ConfigError::invalid(
                "nsid",
                self.nsid,
                "0 is not a namespace ID",
            ));
        }
        let Some(lba_size) = LbaSize::from_bytes(self.lba_size as usize) else {
            return Err(ConfigError::invalid(
                "lba_size",
                self.lba_size,
                "must be 512 or 4096",
            ));
        };
        let Some(metadata) = MetadataSize::from_bytes(self.metadata_size as usize) else {
            return Err(ConfigError::invalid(
                "metadata_size",
                self.metadata_size,
                "must be 0, 8 or 16",
            ));
        };
        // ulp.md §3.7: the 8-byte PI lives in the metadata.
        if self.protection.has_pi() && (self.metadata_size as usize) < PI_LEN {
            return Err(ConfigError::invalid(
                "protection",
                self.protection,
                "needs metadata_size 8 or 16",
            ));
        }
        if self.blocks == 0 {
            return Err(ConfigError::invalid("blocks", self.blocks, "must be > 0"));
        }
        let block_bytes = u64::from(self.lba_size) + u64::from(self.metadata_size);
        let fits = self
            .blocks
            .checked_mul(block_bytes)
            .is_some_and(|bytes| usize::try_from(bytes).is_ok() && bytes <= i64::MAX as u64);
        if !fits {
            return Err(ConfigError::invalid(
                "blocks",
                self.blocks,
                "namespace larger than the address space",
            ));
        }
        Ok(NamespaceFormat {
            nsid: self.nsid,
            blocks: self.blocks,
            format: Format { lba_size, metadata },
            protection: self.protection,
        })
    }
}

/// A validated namespace: its NSID, size, LBA format and protection. Byte
/// counts derived from it do not overflow for any block range inside the
/// namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NamespaceFormat {
    nsid: u16,
    blocks: u64,
    format: Format,
    protection: Protection,
}

impl NamespaceFormat {
    pub const fn nsid(&self) -> u16 {
        self.nsid
    }

    pub const fn blocks(&self) -> u64 {
        self.blocks
    }

    /// The LBA format: block size and metadata a block.
    pub const fn format(&self) -> Format {
        self.format
    }

    /// Bytes a block ([`format`](Self::format)'s LBA size).
    pub const fn lba_size(&self) -> usize {
        self.format.lba_size.bytes()
    }

    /// Metadata bytes a block ([`format`](Self::format)'s metadata).
    pub const fn metadata_size(&self) -> usize {
        self.format.metadata.bytes()
    }

    pub const fn protection(&self) -> Protection {
        self.protection
    }

    /// Offset of the 8-byte PI inside a block's metadata: PIL = 0 puts it
    /// in the last 8 bytes (ulp.md §3.7). `None` without PI.
    pub const fn pi_offset(&self) -> Option<usize> {
        if self.protection.has_pi() {
            pi_offset(self.format)
        } else {
            None
        }
    }

    /// Data bytes of `nlb` blocks, `None` on overflow.
    pub fn data_len(&self, nlb: u64) -> Option<usize> {
        usize::try_from(nlb).ok()?.checked_mul(self.lba_size())
    }

    /// Metadata bytes of `nlb` blocks, `None` on overflow.
    pub fn metadata_len(&self, nlb: u64) -> Option<usize> {
        usize::try_from(nlb).ok()?.checked_mul(self.metadata_size())
    }

    /// The metadata of a block never written, zeroed or deallocated: zero
    /// bytes, and in a PI format a PI of all FFh. NVMe Base 1.4 §8.3.1: in
    /// Type 1 an Application Tag of FFFFh disables the checks of that
    /// block, so such a block reads back without a check error at the
    /// target and at the initiator. Only the first
    /// [`metadata_size`](Self::metadata_size) bytes are meaningful.
    pub fn erased_metadata(&self) -> [u8; MAX_METADATA] {
        let mut erased = [0; MAX_METADATA];
        if let Some(offset) = self.pi_offset() {
            erased[offset..offset + PI_LEN].fill(0xFF);
        }
        erased
    }

    /// Fills `metadata`, whole blocks' worth, with erased metadata.
    pub fn fill_erased_metadata(&self, metadata: &mut [u8]) {
        if self.pi_offset().is_none() {
            metadata.fill(0);
            return;
        }
        let erased = self.erased_metadata();
        for block in metadata.chunks_mut(self.metadata_size()) {
            block.copy_from_slice(&erased[..block.len()]);
        }
    }

    /// `Ok` when `nlb` blocks from `slba` lie inside the namespace.
    ///
    /// # Errors
    ///
    /// [`Status::LBA_OUT_OF_RANGE`] past the end or when `slba + nlb`
    /// overflows; [`Status::INVALID_FIELD`] for `nlb == 0`.
    pub fn check_range(&self, slba: u64, nlb: u64) -> Result<(), Status> {
        if nlb == 0 {
            return Err(Status::INVALID_FIELD);
        }
        match slba.checked_add(nlb) {
            Some(end) if end <= self.blocks => Ok(()),
            _ => Err(Status::LBA_OUT_OF_RANGE),
        }
    }
}

/// Where the 8-byte PI sits in a block's metadata of `format`: its last 8
/// bytes (PIL = 0, ulp.md §3.7); `None` with less than 8 bytes.
pub const fn pi_offset(format: Format) -> Option<usize> {
    format.metadata.bytes().checked_sub(PI_LEN)
}

/// A namespace, file or worker configuration that cannot be used.
#[derive(Debug)]
pub enum ConfigError {
    /// A field's value, alone or with another field's, is not allowed.
    Invalid {
        field: &'static str,
        value: String,
        reason: &'static str,
    },
    /// The backing file (or a worker thread) could not be set up.
    Io { what: PathBuf, error: io::Error },
}

impl ConfigError {
    pub(crate) fn invalid(
        field: &'static str,
        value: impl fmt::Display,
        reason: &'static str,
    ) -> ConfigError {
        ConfigError::Invalid {
            field,
            value: value.to_string(),
            reason,
        }
    }

    pub(crate) fn io(what: impl Into<PathBuf>, error: io::Error) -> ConfigError {
        ConfigError::Io {
            what: what.into(),
            error,
        }
    }

    /// The config field at fault, if the error is about one.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            ConfigError::Invalid { field, .. } => Some(field),
            ConfigError::Io { .. } => None,
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Invalid {
                field,
                value,
                reason,
            } => write!(f, "namespace {field} = {value}: {reason}"),
            ConfigError::Io { what, error } => write!(f, "{}: {error}", what.display()),
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConfigError::Invalid { .. } => None,
            ConfigError::Io { error, .. } => Some(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(config: NamespaceConfig) -> Option<&'static str> {
        config.validate().err().and_then(|error| error.field())
    }

    #[test]
    fn valid_formats() {
        for lba_size in [512, 4096] {
            for (metadata_size, protection) in [
                (0, Protection::Off),
                (8, Protection::Off),
                (16, Protection::Off),
                (8, Protection::Opaque),
                (16, Protection::Opaque),
                (8, Protection::Verified),
                (16, Protection::Verified),
            ] {
                let config =
                    NamespaceConfig::new(1, 64, lba_size).with_metadata(metadata_size, protection);
                let format = config.validate().expect("valid");
                assert_eq!(format.lba_size(), lba_size as usize);
                assert_eq!(format.metadata_size(), metadata_size as usize);
            }
        }
    }

    #[test]
    fn invalid_combinations_name_the_field() {
        let base = NamespaceConfig::new(1, 64, 512);
        assert_eq!(field_of(NamespaceConfig { nsid: 0, ..base }), Some("nsid"));
        assert_eq!(
            field_of(NamespaceConfig {
                lba_size: 1024,
                ..base
            }),
            Some("lba_size")
        );
        assert_eq!(
            field_of(base.with_metadata(4, Protection::Off)),
            Some("metadata_size")
        );
        assert_eq!(
            field_of(base.with_metadata(0, Protection::Verified)),
            Some("protection")
        );
        assert_eq!(
            field_of(base.with_metadata(0, Protection::Opaque)),
            Some("protection")
        );
        assert_eq!(
            field_of(NamespaceConfig { blocks: 0, ..base }),
            Some("blocks")
        );
        assert_eq!(
            field_of(NamespaceConfig {
                blocks: u64::MAX / 512,
                ..base
            }),
            Some("blocks")
        );
        let error = NamespaceConfig {
            lba_size: 1000,
            ..base
        }
        .validate()
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "namespace lba_size = 1000: must be 512 or 4096"
        );
        assert_eq!(
            "checked".parse::<Protection>().unwrap_err().field(),
            Some("protection")
        );
    }

    #[test]
    fn pi_sits_at_the_end_of_the_metadata() {
        let format = NamespaceConfig::new(1, 8, 512)
            .with_metadata(16, Protection::Verified)
            .validate()
            .unwrap();
        assert_eq!(format.pi_offset(), Some(8));
        assert_eq!(
            &format.erased_metadata()[..16],
            &[[0; 8], [0xFF; 8]].concat()[..]
        );
        let format = NamespaceConfig::new(1, 8, 512)
            .with_metadata(16, Protection::Off)
            .validate()
            .unwrap();
        assert_eq!(format.pi_offset(), None);
        assert_eq!(format.erased_metadata(), [0; 16]);
    }

    #[test]
    fn range_checks() {
        let format = NamespaceConfig::new(1, 100, 512).validate().unwrap();
        assert_eq!(format.check_range(0, 100), Ok(()));
        assert_eq!(format.check_range(99, 1), Ok(()));
        assert_eq!(format.check_range(99, 2), Err(Status::LBA_OUT_OF_RANGE));
        assert_eq!(format.check_range(100, 1), Err(Status::LBA_OUT_OF_RANGE));
        assert_eq!(
            format.check_range(u64::MAX, 2),
            Err(Status::LBA_OUT_OF_RANGE)
        );
        assert_eq!(format.check_range(0, 0), Err(Status::INVALID_FIELD));
    }
}
