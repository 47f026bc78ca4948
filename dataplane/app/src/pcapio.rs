//! Reading and writing classic libpcap files for the offline tools.
//!
//! Output files carry the same global header as the reference PSP tools
//! write through libpcap (`pcap_open_dead(DLT_EN10MB, 9014)`: version 2.4,
//! microsecond timestamps, host byte order, snap length 9014), so that a
//! `cmp` against the reference output compares packets, not file headers.

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::{DataLink, Endianness, TsResolution};

use crate::error::{AppError, Result};

/// Snap length the reference tools write (`ETH_JUMBO_MAX_OCTETS`).
pub const REFERENCE_SNAPLEN: u32 = 9014;

/// One captured frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub timestamp: Duration,
    pub data: Vec<u8>,
}

/// Reads every frame of an Ethernet pcap file. Truncated captures are
/// refused (a frame whose captured length differs from its wire length
/// cannot be authenticated), as the reference tools do.
pub fn read_all(path: &Path) -> Result<Vec<Frame>> {
    let file = File::open(path).map_err(|e| AppError::io(path, e))?;
    let mut reader = PcapReader::new(BufReader::new(file)).map_err(|e| AppError::pcap(path, e))?;
    let link = reader.header().datalink;
    if link != DataLink::ETHERNET {
        return Err(AppError::pcap(
            path,
            format!("link type {link:?}; only Ethernet (1) is supported"),
        ));
    }
    let mut frames = Vec::new();
    while let Some(packet) = reader.next_packet() {
        let packet = packet
            .map_err(|e| AppError::pcap(path, format!("packet {}: {e}", frames.len() + 1)))?;
        if packet.data.len() as u64 != u64::from(packet.orig_len) {
            return Err(AppError::pcap(
                path,
                format!(
                    "packet {}: partial capture ({} of {} bytes); capture with a larger snap length",
                    frames.len() + 1,
                    packet.data.len(),
                    packet.orig_len
                ),
            ));
        }
        frames.push(Frame {
            timestamp: packet.timestamp,
            data: packet.data.into_owned(),
        });
    }
    Ok(frames)
}

/// A pcap file being written.
pub struct Writer {
    path: PathBuf,
    inner: PcapWriter<BufWriter<File>>,
    snaplen: u32,
}

impl Writer {
    /// Creates (truncates) `path` with a reference-compatible global header.
    pub fn create(path: &Path) -> Result<Self> {
        let file = File::create(path).map_err(|e| AppError::io(path, e))?;
        let header = PcapHeader {
            version_major: 2,
            version_minor: 4,
            ts_correction: 0,
            ts_accuracy: 0,
            snaplen: REFERENCE_SNAPLEN,
            datalink: DataLink::ETHERNET,
            ts_resolution: TsResolution::MicroSecond,
            endianness: Endianness::native(),
        };
        let inner = PcapWriter::with_header(BufWriter::new(file), header)
            .map_err(|e| AppError::pcap(path, e))?;
        Ok(Writer {
            path: path.to_path_buf(),
            inner,
            snaplen: REFERENCE_SNAPLEN,
        })
    }

    /// Appends one frame.
    pub fn write(&mut self, frame: &Frame) -> Result<()> {
        if frame.data.len() > self.snaplen as usize {
            return Err(AppError::Failed(format!(
                "{}: frame of {} bytes exceeds the {}-byte jumbo limit",
                self.path.display(),
                frame.data.len(),
                self.snaplen
            )));
        }
        // The length check above bounds data.len() by the u32 snap length.
        let packet = PcapPacket::new(frame.timestamp, frame.data.len() as u32, &frame.data);
        self.inner
            .write_packet(&packet)
            .map_err(|e| AppError::pcap(&self.path, e))?;
        Ok(())
    }

    /// Flushes and closes the file.
    pub fn finish(self) -> Result<()> {
        let path = self.path;
        self.inner
            .into_writer()
            .flush()
            .map_err(|e| AppError::io(&path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_header_bytes() {
        let dir = std::env::temp_dir().join(format!("falcon-pcapio-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("rt.pcap");
        let frames = vec![
            Frame {
                timestamp: Duration::from_micros(1_500_000),
                data: vec![1, 2, 3],
            },
            Frame {
                timestamp: Duration::from_micros(2_000_001),
                data: vec![0xaa; 60],
            },
        ];
        let mut w = Writer::create(&path).unwrap();
        for f in &frames {
            w.write(f).unwrap();
        }
        w.finish().unwrap();

        let bytes = std::fs::read(&path).unwrap();
        // libpcap's native-order header: magic, 2.4, zone 0, sigfigs 0, snaplen 9014, DLT_EN10MB.
        let mut expect = Vec::new();
        expect.extend_from_slice(&0xa1b2_c3d4u32.to_ne_bytes());
        expect.extend_from_slice(&2u16.to_ne_bytes());
        expect.extend_from_slice(&4u16.to_ne_bytes());
        expect.extend_from_slice(&0i32.to_ne_bytes());
        expect.extend_from_slice(&0u32.to_ne_bytes());
        expect.extend_from_slice(&9014u32.to_ne_bytes());
        expect.extend_from_slice(&1u32.to_ne_bytes());
        assert_eq!(&bytes[..24], &expect[..]);

        assert_eq!(read_all(&path).unwrap(), frames);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn garbage_file_is_a_named_error() {
        let dir = std::env::temp_dir().join(format!("falcon-pcapio-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad.pcap");
        std::fs::write(&path, b"not a pcap file at all").unwrap();
        let err = read_all(&path).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert!(
            err.to_string().starts_with(&path.display().to_string()),
            "{err}"
        );
        let missing = read_all(&dir.join("missing.pcap")).unwrap_err();
        assert!(missing.to_string().contains("missing.pcap"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
