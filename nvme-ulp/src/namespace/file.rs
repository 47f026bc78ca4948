//! The file backend: a namespace in a regular file, with O_DIRECT where
//! the file system allows it.
//!
//! Layer: NVMe target storage. Owns the data file, its metadata sidecar
//! and the choice between direct and buffered I/O. Never checks PI.
//!
//! On disk:
//!
//! * `PATH` holds the data, block `n` at byte `n × lba_size`. A missing
//!   file is created at the configured size (sparse); an existing file's
//!   size, a positive multiple of the LBA size, gives the block count.
//! * `PATH.meta` (only with metadata) holds block `n`'s metadata at byte
//!   `n × metadata_size`, **XORed with the erased metadata** (the PI bytes
//!   inverted in a PI format). So a hole, or a sidecar just created by
//!   `set_len`, reads back as erased metadata (PI all FFh) without the
//!   target writing the whole sidecar. Its size must be `blocks ×
//!   metadata_size`; a missing sidecar is created.
//!
//! Data I/O uses O_DIRECT when asked and the file system takes it: an
//! EINVAL from `open` or from the first aligned read (done at open) or from
//! a later I/O switches the store to buffered I/O for good, which
//! [`FileStore::mode`] reports. A caller's buffer that is not aligned to
//! [`IO_ALIGN`] goes through a bounce buffer; [`IoBuffer`]s never do. The
//! sidecar is always buffered: its I/O is 8 or 16 bytes per block, below
//! any device's O_DIRECT granularity. FUA and flush call `sync_data` on
//! both files.

use core::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::status::Status;

use super::buffer::{is_aligned, IoBuffer, IO_ALIGN};
use super::config::{ConfigError, NamespaceConfig, NamespaceFormat};
use super::store::{blocks_of, BlockStore};

/// Bytes written per call when zeroing: 256 KiB of zeroes kept once.
const ZEROES_LEN: usize = 256 * 1024;

/// How the data file is accessed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileMode {
    /// O_DIRECT: no page cache between the namespace and the device.
    Direct,
    /// Through the page cache.
    Buffered,
}

impl fmt::Display for FileMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FileMode::Direct => "O_DIRECT",
            FileMode::Buffered => "buffered",
        })
    }
}

/// How to open a file namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileOptions {
    /// Try O_DIRECT first (falls back to buffered on EINVAL). `false`
    /// forces buffered I/O.
    pub try_direct: bool,
}

impl Default for FileOptions {
    fn default() -> FileOptions {
        FileOptions { try_direct: true }
    }
}

/// The metadata sidecar of the data file at `path`: `PATH.meta`.
pub fn sidecar_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".meta");
    PathBuf::from(name)
}

/// A namespace stored in a file (and its metadata sidecar).
#[derive(Debug)]
pub struct FileStore {
    path: PathBuf,
    format: NamespaceFormat,
    data: File,
    sidecar: Option<File>,
    mode: FileMode,
    /// Bounce buffer for unaligned caller buffers in direct mode; grows to
    /// the largest such request, then is reused.
    bounce: IoBuffer,
    /// Zeroes for [`BlockStore::write_zeroes`], allocated on first use.
    zeroes: IoBuffer,
    /// Metadata as stored (XORed), reused across writes.
    stored_metadata: Vec<u8>,
    last_error: Option<io::Error>,
}

impl FileStore {
    /// Opens (or creates) the namespace file at `path` with the format of
    /// `config`; its `blocks` counts only when the file is created.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Invalid`] for a bad config, a path that is not a
    /// regular file, or a file or sidecar whose size does not fit the
    /// format (field `path`); [`ConfigError::Io`] when a file cannot be
    /// created, opened or read.
    pub fn open(
        path: impl AsRef<Path>,
        config: &NamespaceConfig,
        options: FileOptions,
    ) -> Result<FileStore, ConfigError> {
        let path = path.as_ref();
        let lba_size = u64::from(config.lba_size);
        let existing = match fs::metadata(path) {
            Ok(info) => Some(info),
            Err(error) if error.kind() == io::ErrorKind::NotFound => None,
            Err(error) => return Err(ConfigError::io(path, error)),
        };
        let blocks = match &existing {
            Some(info) if !info.is_file() => {
                return Err(ConfigError::invalid(
                    "path",
                    path.display(),
                    "not a regular file",
                ))
            }
            // The LBA size is checked by `validate` below; 0 must not
            // divide here.
            Some(info) if lba_size != 0 => {
                if info.len() == 0 || info.len() % lba_size != 0 {
                    return Err(ConfigError::invalid(
                        "path",
                        path.display(),
                        "file size is not a positive multiple of lba_size",
                    ));
                }
                info.len() / lba_size
            }
            _ => config.blocks,
        };
        let format = NamespaceConfig { blocks, ..*config }.validate()?;
        let data_bytes = blocks * lba_size;
        if existing.is_none() {
            create_sized(path, data_bytes)?;
        }
        let sidecar = match format.metadata_size() {
            0 => None,
            metadata_size => Some(open_sidecar(path, blocks * metadata_size as u64)?),
        };
        let (data, mode) =
            open_data(path, options.try_direct).map_err(|error| ConfigError::io(path, error))?;
        let mut store = FileStore {
            path: path.to_owned(),
            format,
            data,
            sidecar,
            mode,
            bounce: IoBuffer::new(),
            zeroes: IoBuffer::new(),
            stored_metadata: Vec::new(),
            last_error: None,
        };
        // The first aligned I/O: a device whose logical block is larger
        // than the LBA size refuses it with EINVAL.
        let mut first = IoBuffer::zeroed(format.lba_size());
        store
            .read_data(0, &mut first)
            .map_err(|error| ConfigError::io(path, error))?;
        Ok(store)
    }

    pub fn format(&self) -> &NamespaceFormat {
        &self.format
    }

    pub fn mode(&self) -> FileMode {
        self.mode
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The last I/O error behind a failed status, for the operator.
    pub fn last_error(&self) -> Option<&io::Error> {
        self.last_error.as_ref()
    }

    /// Reopens the data file without O_DIRECT.
    fn fall_back_to_buffered(&mut self) -> io::Result<()> {
        let (data, mode) = open_data(&self.path, false)?;
        self.data = data;
        self.mode = mode;
        Ok(())
    }

    fn read_data(&mut self, offset: u64, data: &mut [u8]) -> io::Result<()> {
        match self.read_data_once(offset, data) {
            Err(error) if self.mode == FileMode::Direct && refuses_direct(&error) => {
                self.fall_back_to_buffered()?;
                self.read_data_once(offset, data)
            }
            result => result,
        }
    }

    fn read_data_once(&mut self, offset: u64, data: &mut [u8]) -> io::Result<()> {
        if self.mode == FileMode::Buffered || is_aligned(data) {
            return self.data.read_exact_at(data, offset);
        }
        let bounce = bounce(&mut self.bounce, data.len());
        self.data.read_exact_at(bounce, offset)?;
        data.copy_from_slice(bounce);
        Ok(())
    }

    fn write_data(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        match self.write_data_once(offset, data) {
            Err(error) if self.mode == FileMode::Direct && refuses_direct(&error) => {
                self.fall_back_to_buffered()?;
                self.write_data_once(offset, data)
            }
            result => result,
        }
    }

    fn write_data_once(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        if self.mode == FileMode::Buffered || is_aligned(data) {
            return self.data.write_all_at(data, offset);
        }
        let bounce = bounce(&mut self.bounce, data.len());
        bounce.copy_from_slice(data);
        self.data.write_all_at(bounce, offset)
    }

    fn read_metadata(&mut self, lba: u64, metadata: &mut [u8]) -> io::Result<()> {
        let Some(sidecar) = &self.sidecar else {
            return Ok(());
        };
        let metadata_size = self.format.metadata_size();
        sidecar.read_exact_at(metadata, lba * metadata_size as u64)?;
        if self.format.pi_offset().is_some() {
            let erased = self.format.erased_metadata();
            for block in metadata.chunks_exact_mut(metadata_size) {
                xor(block, &erased[..metadata_size]);
            }
        }
        Ok(())
    }

    fn write_metadata(&mut self, lba: u64, metadata: &[u8]) -> io::Result<()> {
        let Some(sidecar) = &self.sidecar else {
            return Ok(());
        };
        let metadata_size = self.format.metadata_size();
        let offset = lba * metadata_size as u64;
        if self.format.pi_offset().is_none() {
            return sidecar.write_all_at(metadata, offset);
        }
        let erased = self.format.erased_metadata();
        self.stored_metadata.clear();
        self.stored_metadata.extend_from_slice(metadata);
        for block in self.stored_metadata.chunks_exact_mut(metadata_size) {
            xor(block, &erased[..metadata_size]);
        }
        sidecar.write_all_at(&self.stored_metadata, offset)
    }

    fn zero_range(&mut self, lba: u64, nlb: u64) -> io::Result<()> {
        if self.zeroes.is_empty() {
            self.zeroes = IoBuffer::zeroed(ZEROES_LEN);
        }
        let lba_size = self.format.lba_size() as u64;
        let metadata_size = self.format.metadata_size() as u64;
        let step = ZEROES_LEN as u64 / lba_size;
        let mut done = 0;
        while done < nlb {
            let count = step.min(nlb - done);
            let data_offset = (lba + done) * lba_size;
            let zeroes = core::mem::take(&mut self.zeroes);
            let result = self.write_data(data_offset, &zeroes[..(count * lba_size) as usize]);
            self.zeroes = zeroes;
            result?;
            // Stored metadata is XORed with the erased metadata: zero
            // bytes on disk are erased metadata.
            if let Some(sidecar) = &self.sidecar {
                let bytes = (count * metadata_size) as usize;
                sidecar.write_all_at(&self.zeroes[..bytes], (lba + done) * metadata_size)?;
            }
            done += count;
        }
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        self.data.sync_data()?;
        if let Some(sidecar) = &self.sidecar {
            sidecar.sync_data()?;
        }
        Ok(())
    }

    /// Records `error` and gives `status` for it.
    fn failed(&mut self, error: io::Error, status: Status) -> Status {
        self.last_error = Some(error);
        status
    }
}

impl BlockStore for FileStore {
    fn read(&mut self, lba: u64, data: &mut [u8], metadata: &mut [u8]) -> Result<(), Status> {
        blocks_of(&self.format, lba, data.len(), metadata.len())?;
        let offset = lba * self.format.lba_size() as u64;
        let result = self
            .read_data(offset, data)
            .and_then(|()| self.read_metadata(lba, metadata));
        result.map_err(|error| self.failed(error, Status::UNRECOVERED_READ))
    }

    fn write(&mut self, lba: u64, data: &[u8], metadata: &[u8]) -> Result<(), Status> {
        blocks_of(&self.format, lba, data.len(), metadata.len())?;
        let offset = lba * self.format.lba_size() as u64;
        let result = self
            .write_data(offset, data)
            .and_then(|()| self.write_metadata(lba, metadata));
        result.map_err(|error| self.failed(error, Status::WRITE_FAULT))
    }

    fn write_zeroes(&mut self, lba: u64, nlb: u64) -> Result<(), Status> {
        self.format.check_range(lba, nlb)?;
        self.zero_range(lba, nlb)
            .map_err(|error| self.failed(error, Status::WRITE_FAULT))
    }

    fn flush(&mut self) -> Result<(), Status> {
        self.sync()
            .map_err(|error| self.failed(error, Status::WRITE_FAULT))
    }
}

/// The first `len` bytes of the bounce buffer, grown if needed.
fn bounce(buffer: &mut IoBuffer, len: usize) -> &mut [u8] {
    if buffer.capacity() < len {
        *buffer = IoBuffer::with_capacity(len.next_multiple_of(IO_ALIGN));
    }
    // The capacity was just made at least `len`.
    let _ = buffer.set_len(len);
    &mut buffer[..len]
}

fn xor(bytes: &mut [u8], mask: &[u8]) {
    for (byte, mask) in bytes.iter_mut().zip(mask) {
        *byte ^= mask;
    }
}

/// Whether an error is the kernel refusing O_DIRECT (unsupported by the
/// file system, or an alignment it does not take).
fn refuses_direct(error: &io::Error) -> bool {
    error.raw_os_error() == Some(libc::EINVAL)
}

/// Creates a file of `len` bytes (sparse where the file system can).
fn create_sized(path: &Path, len: u64) -> Result<(), ConfigError> {
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|error| ConfigError::io(path, error))?;
    file.set_len(len)
        .map_err(|error| ConfigError::io(path, error))
}

/// Opens (creating if missing) the sidecar of `path`, `len` bytes long.
fn open_sidecar(path: &Path, len: u64) -> Result<File, ConfigError> {
    let sidecar = sidecar_path(path);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&sidecar)
        .map_err(|error| ConfigError::io(&sidecar, error))?;
    let have = file
        .metadata()
        .map_err(|error| ConfigError::io(&sidecar, error))?
        .len();
    if have == 0 && len != 0 {
        file.set_len(len)
            .map_err(|error| ConfigError::io(&sidecar, error))?;
    } else if have != len {
        return Err(ConfigError::invalid(
            "path",
            sidecar.display(),
            "metadata sidecar size is not blocks × metadata_size",
        ));
    }
    Ok(file)
}

/// Opens the data file read-write, with O_DIRECT when `try_direct` and the
/// file system takes it.
fn open_data(path: &Path, try_direct: bool) -> io::Result<(File, FileMode)> {
    let mut options = OpenOptions::new();
    options.read(true).write(true);
    #[cfg(target_os = "linux")]
    if try_direct {
        use std::os::unix::fs::OpenOptionsExt;

        let mut direct = options.clone();
        direct.custom_flags(libc::O_DIRECT);
        match direct.open(path) {
            Ok(file) => return Ok((file, FileMode::Direct)),
            Err(error) if refuses_direct(&error) => {}
            Err(error) => return Err(error),
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = try_direct;
    Ok((options.open(path)?, FileMode::Buffered))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::namespace::config::Protection;
    use crate::namespace::testing::TempDir;

    fn config(blocks: u64, lba_size: u32, metadata_size: u32) -> NamespaceConfig {
        let protection = if metadata_size == 0 {
            Protection::Off
        } else {
            Protection::Opaque
        };
        NamespaceConfig::new(1, blocks, lba_size).with_metadata(metadata_size, protection)
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect()
    }

    /// Writes and reads back through `store`, with aligned and unaligned
    /// caller buffers.
    fn round_trip(store: &mut FileStore) {
        let format = *store.format();
        let (lba_size, metadata_size) = (format.lba_size(), format.metadata_size());
        let data = IoBuffer::from_slice(&pattern(3 * lba_size, 1));
        let metadata = pattern(3 * metadata_size, 2);
        store.write(5, &data, &metadata).unwrap();
        let mut back = IoBuffer::zeroed(3 * lba_size);
        let mut back_metadata = vec![0; 3 * metadata_size];
        store.read(5, &mut back, &mut back_metadata).unwrap();
        assert_eq!(&back[..], &data[..]);
        assert_eq!(back_metadata, metadata);

        // A Vec one byte into an aligned buffer is unaligned.
        let mut unaligned = IoBuffer::zeroed(2 * lba_size + 1);
        let written = pattern(2 * lba_size, 3);
        unaligned[1..].copy_from_slice(&written);
        store
            .write(9, &unaligned[1..], &pattern(2 * metadata_size, 4))
            .unwrap();
        unaligned.fill(0);
        store
            .read(9, &mut unaligned[1..], &mut vec![0; 2 * metadata_size])
            .unwrap();
        assert_eq!(&unaligned[1..], &written[..]);
        store.flush().unwrap();
    }

    #[test]
    fn creates_the_file_then_reopens_it_by_size() {
        let dir = TempDir::new("file-create");
        let path = dir.path().join("ns1");
        let mut store =
            FileStore::open(&path, &config(64, 4096, 16), FileOptions::default()).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), 64 * 4096);
        assert_eq!(fs::metadata(sidecar_path(&path)).unwrap().len(), 64 * 16);
        round_trip(&mut store);
        drop(store);

        // An existing file's size wins over `blocks`.
        let mut store =
            FileStore::open(&path, &config(7, 4096, 16), FileOptions::default()).unwrap();
        assert_eq!(store.format().blocks(), 64);
        let mut back = vec![0; 3 * 4096];
        let mut back_metadata = vec![0; 3 * 16];
        store.read(5, &mut back, &mut back_metadata).unwrap();
        assert_eq!(back, pattern(3 * 4096, 1));
        assert_eq!(back_metadata, pattern(3 * 16, 2));
    }

    #[test]
    fn unusable_files_are_config_errors() {
        let dir = TempDir::new("file-bad");
        let odd = dir.path().join("odd");
        fs::write(&odd, vec![0; 1000]).unwrap();
        let error = FileStore::open(&odd, &config(8, 512, 0), FileOptions::default()).unwrap_err();
        assert_eq!(error.field(), Some("path"));

        let error =
            FileStore::open(dir.path(), &config(8, 512, 0), FileOptions::default()).unwrap_err();
        assert_eq!(error.field(), Some("path"));

        let sized = dir.path().join("sized");
        fs::write(&sized, vec![0; 4096]).unwrap();
        fs::write(sidecar_path(&sized), vec![0; 3]).unwrap();
        let error =
            FileStore::open(&sized, &config(8, 512, 8), FileOptions::default()).unwrap_err();
        assert_eq!(error.field(), Some("path"));

        let missing = dir.path().join("missing");
        let error =
            FileStore::open(&missing, &config(0, 512, 0), FileOptions::default()).unwrap_err();
        assert_eq!(error.field(), Some("blocks"));
        assert!(!missing.exists(), "nothing created for a bad config");
    }

    /// O_DIRECT where the temp file system takes it (ext4 and, since Linux
    /// 6.6, tmpfs do); where it does not, the fallback must be justified
    /// by the kernel refusing an O_DIRECT open.
    #[test]
    fn direct_io_round_trips() {
        for dir in [
            TempDir::new("file-direct"),
            TempDir::in_target("file-direct"),
        ] {
            for lba_size in [512, 4096] {
                let path = dir.path().join(format!("ns-{lba_size}"));
                let mut store =
                    FileStore::open(&path, &config(32, lba_size, 8), FileOptions::default())
                        .unwrap();
                if store.mode() == FileMode::Buffered {
                    let probe = dir.path().join("probe");
                    fs::write(&probe, vec![0; 4096]).unwrap();
                    let refused = open_data(&probe, true).map(|(_, mode)| mode);
                    assert_eq!(
                        refused.unwrap(),
                        FileMode::Buffered,
                        "{}",
                        dir.path().display()
                    );
                }
                round_trip(&mut store);
                assert_eq!(
                    store.bounce.capacity() > 0,
                    store.mode() == FileMode::Direct
                );
            }
        }
    }

    #[test]
    fn forced_buffered_round_trips() {
        let dir = TempDir::new("file-buffered");
        for lba_size in [512, 4096] {
            let path = dir.path().join(format!("ns-{lba_size}"));
            let options = FileOptions { try_direct: false };
            let mut store = FileStore::open(&path, &config(32, lba_size, 16), options).unwrap();
            assert_eq!(store.mode(), FileMode::Buffered);
            round_trip(&mut store);
            assert_eq!(store.bounce.capacity(), 0, "no bounce when buffered");
        }
    }

    #[test]
    fn falling_back_keeps_the_data() {
        let dir = TempDir::new("file-fallback");
        let path = dir.path().join("ns");
        let mut store =
            FileStore::open(&path, &config(16, 512, 0), FileOptions::default()).unwrap();
        store.write(3, &pattern(512, 9), &[]).unwrap();
        store.fall_back_to_buffered().unwrap();
        assert_eq!(store.mode(), FileMode::Buffered);
        let mut back = vec![0; 512];
        store.read(3, &mut back, &mut []).unwrap();
        assert_eq!(back, pattern(512, 9));
        assert!(refuses_direct(&io::Error::from_raw_os_error(libc::EINVAL)));
        assert!(!refuses_direct(&io::Error::from_raw_os_error(libc::EIO)));
    }

    #[test]
    fn sidecar_holes_read_as_erased_metadata() {
        let dir = TempDir::new("file-sidecar");
        let path = dir.path().join("ns");
        let config = config(16, 512, 16);
        let mut store = FileStore::open(&path, &config, FileOptions::default()).unwrap();
        let mut data = vec![7; 512];
        let mut metadata = vec![7; 16];
        store.read(2, &mut data, &mut metadata).unwrap();
        assert_eq!(data, vec![0; 512]);
        assert_eq!(metadata, [[0; 8], [0xFF; 8]].concat());

        let written: Vec<u8> = (1..=16).collect();
        store.write(2, &[1; 512], &written).unwrap();
        store.flush().unwrap();
        let raw = fs::read(sidecar_path(&path)).unwrap();
        let mut stored = written.clone();
        xor(&mut stored[8..], &[0xFF; 8]);
        assert_eq!(&raw[32..48], &stored[..], "PI bytes stored inverted");
        store.read(2, &mut data, &mut metadata).unwrap();
        assert_eq!(metadata, written);

        store.write_zeroes(0, 16).unwrap();
        store.read(2, &mut data, &mut metadata).unwrap();
        assert_eq!(data, vec![0; 512]);
        assert_eq!(metadata, [[0; 8], [0xFF; 8]].concat());
        assert!(fs::read(sidecar_path(&path))
            .unwrap()
            .iter()
            .all(|&b| b == 0));
    }

    #[test]
    fn device_errors_become_media_statuses() {
        let dir = TempDir::new("file-error");
        let path = dir.path().join("ns");
        let mut store =
            FileStore::open(&path, &config(16, 512, 0), FileOptions::default()).unwrap();
        // Another process shrinks the file under the namespace.
        OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(4 * 512)
            .unwrap();
        let mut back = IoBuffer::zeroed(512);
        assert_eq!(
            store.read(10, &mut back, &mut []),
            Err(Status::UNRECOVERED_READ)
        );
        assert!(store.last_error().is_some());
        assert_eq!(store.read(1, &mut back, &mut []), Ok(()));
    }
}
