//! What the commands that drive NVMe I/O over an [`NvmePair`] share
//! (`falcon nvme-perf`, the NVMe phase of `falcon demo`): the I/O size
//! bounds, the block pattern writes leave, the check of a read against it,
//! and the latency summary.
//!
//! Layer: application. Owns the pattern (a block's bytes are a function of
//! its LBA and the generation of the write that left them: zeroes before
//! any) and [`Latency`]; never drives the pair itself.
//!
//! [`NvmePair`]: crate::nvme::NvmePair

use std::fmt;

use falcon_core::random::{Random, SplitMix64};
use hdrhistogram::Histogram;
use nvme_ulp::data::HostBuffers;
use nvme_ulp::layout::Format;
use serde::Serialize;

use crate::error::{AppError, Result};

/// Smallest and largest I/O: an iCMD carries 4 KiB to 1 MiB (NVMe-0.9
/// §6.5, the initiator's MDTS).
pub const MIN_IO: u64 = 4096;
pub const MAX_IO: u64 = 1 << 20;

/// The pattern a write of generation `generation` leaves in block `lba`:
/// `data` (one block) and `metadata` (its metadata). Generation 0 is a
/// block never written: zeroes.
pub fn fill_block(lba: u64, generation: u32, data: &mut [u8], metadata: &mut [u8]) {
    if generation == 0 {
        data.fill(0);
        metadata.fill(0);
        return;
    }
    let mut rng = SplitMix64::new((lba << 24) ^ u64::from(generation) ^ 0xA5A5_5A5A_0F0F_F0F0);
    for part in [data, metadata] {
        for chunk in part.chunks_mut(8) {
            let word = rng.next_u64().to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
    }
}

/// The pattern of `blocks` blocks from `slba` at `generation`.
pub fn fill(format: Format, slba: u64, generation: u32, buffers: &mut HostBuffers, blocks: usize) {
    let lba = format.lba_size.bytes();
    let md = format.metadata.bytes();
    buffers.data.resize(blocks * lba, 0);
    buffers.metadata.resize(blocks * md, 0);
    for block in 0..blocks {
        fill_block(
            slba + block as u64,
            generation,
            &mut buffers.data[block * lba..(block + 1) * lba],
            &mut buffers.metadata[block * md..(block + 1) * md],
        );
    }
}

/// How a read differs from the pattern it should hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch {
    /// The data or metadata buffer is not the read's size.
    Length {
        what: &'static str,
        expected: usize,
        actual: usize,
    },
    /// The first byte that differs.
    Byte {
        lba: u64,
        /// The generation the block should hold (0: never written).
        generation: u32,
        /// In the block's metadata rather than its data.
        metadata: bool,
        /// Byte offset in the block's data (or metadata).
        offset: usize,
        expected: u8,
        actual: u8,
    },
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Mismatch::Length {
                what,
                expected,
                actual,
            } => write!(f, "{what} buffer of {actual} bytes, {expected} expected"),
            Mismatch::Byte {
                lba,
                generation,
                metadata,
                offset,
                expected,
                actual,
            } => {
                let part = if metadata { "metadata" } else { "data" };
                let written = match generation {
                    0 => "never written: zeroes".to_string(),
                    g => format!("write generation {g}"),
                };
                write!(
                    f,
                    "LBA {lba} {part} byte {offset} is {actual:#04x}, {expected:#04x} expected ({written})"
                )
            }
        }
    }
}

/// Checks `read`, `blocks` blocks from `slba`, against the pattern of the
/// generation `generation(lba)` names for each block (`None`: unknown, a
/// write there failed; not checked). Returns the first difference.
pub fn check_read(
    format: Format,
    slba: u64,
    blocks: usize,
    generation: impl Fn(u64) -> Option<u32>,
    read: &HostBuffers,
) -> std::result::Result<(), Mismatch> {
    let lba = format.lba_size.bytes();
    let md = format.metadata.bytes();
    for (what, expected, actual) in [
        ("data", blocks * lba, read.data.len()),
        ("metadata", blocks * md, read.metadata.len()),
    ] {
        if expected != actual {
            return Err(Mismatch::Length {
                what,
                expected,
                actual,
            });
        }
    }
    let (mut data, mut metadata) = (vec![0; lba], vec![0; md]);
    for block in 0..blocks {
        let at = slba + block as u64;
        let Some(generation) = generation(at) else {
            continue;
        };
        fill_block(at, generation, &mut data, &mut metadata);
        for (is_metadata, expected, actual) in [
            (false, &data, &read.data[block * lba..(block + 1) * lba]),
            (
                true,
                &metadata,
                &read.metadata[block * md..(block + 1) * md],
            ),
        ] {
            if let Some(offset) = expected.iter().zip(actual).position(|(e, a)| e != a) {
                return Err(Mismatch::Byte {
                    lba: at,
                    generation,
                    metadata: is_metadata,
                    offset,
                    expected: expected[offset],
                    actual: actual[offset],
                });
            }
        }
    }
    Ok(())
}

/// A histogram of command latencies in ns, up to an hour.
///
/// # Errors
///
/// [`AppError::Failed`] if hdrhistogram refuses the bounds (it does not).
pub fn latency_histogram() -> Result<Histogram<u64>> {
    Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3)
        .map_err(|e| AppError::Failed(format!("histogram: {e}")))
}

/// spdk_nvme_perf's latency columns and percentile rows, in µs.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Latency {
    pub average: f64,
    pub min: f64,
    pub max: f64,
    pub p50: f64,
    pub p99: f64,
    pub p99_9: f64,
    pub p99_99: f64,
}

impl Latency {
    /// From a histogram of ns; all zero when it is empty.
    pub fn from_histogram(histogram: &Histogram<u64>) -> Latency {
        if histogram.is_empty() {
            return Latency::default();
        }
        let us = |ns: u64| ns as f64 / 1e3;
        Latency {
            average: histogram.mean() / 1e3,
            min: us(histogram.min()),
            max: us(histogram.max()),
            p50: us(histogram.value_at_quantile(0.5)),
            p99: us(histogram.value_at_quantile(0.99)),
            p99_9: us(histogram.value_at_quantile(0.999)),
            p99_99: us(histogram.value_at_quantile(0.9999)),
        }
    }
}

#[cfg(test)]
mod tests {
    use nvme_ulp::layout::{LbaSize, MetadataSize};

    use super::*;

    const FORMAT: Format = Format {
        lba_size: LbaSize::B512,
        metadata: MetadataSize::B8,
    };

    #[test]
    fn the_pattern_depends_on_lba_and_generation() {
        let mut a = HostBuffers::default();
        let mut b = HostBuffers::default();
        fill(FORMAT, 8, 1, &mut a, 2);
        fill(FORMAT, 8, 2, &mut b, 2);
        assert_ne!(a.data, b.data);
        assert_ne!(a.metadata, b.metadata);
        fill(FORMAT, 9, 1, &mut b, 2);
        assert_eq!(a.data[512..], b.data[..512]);
        assert_eq!(a.metadata[8..], b.metadata[..8]);
        fill(FORMAT, 8, 0, &mut b, 2);
        assert!(b.data.iter().chain(&b.metadata).all(|&x| x == 0));
    }

    /// Every single flipped bit of a read, in data or metadata, is found
    /// and named by block and offset; the intact read passes.
    #[test]
    fn check_read_finds_any_flipped_bit() {
        // Blocks 16..20 at generations 3, 3, 0 (never written), 7.
        let generation = |lba: u64| Some([3, 3, 0, 7][(lba - 16) as usize]);
        let mut read = HostBuffers::default();
        let mut block = HostBuffers::default();
        for lba in 16..20 {
            fill(FORMAT, lba, generation(lba).unwrap(), &mut block, 1);
            read.data.extend_from_slice(&block.data);
            read.metadata.extend_from_slice(&block.metadata);
        }
        assert_eq!(check_read(FORMAT, 16, 4, generation, &read), Ok(()));
        for (is_metadata, len) in [(false, 4 * 512), (true, 4 * 8)] {
            for byte in (0..len).step_by(37) {
                let mut wrong = read.clone();
                let (part, size) = if is_metadata {
                    (&mut wrong.metadata, 8)
                } else {
                    (&mut wrong.data, 512)
                };
                part[byte] ^= 1 << (byte % 8);
                let lba = 16 + (byte / size) as u64;
                match check_read(FORMAT, 16, 4, generation, &wrong) {
                    Err(Mismatch::Byte {
                        lba: at,
                        generation: g,
                        metadata,
                        offset,
                        expected,
                        actual,
                    }) => {
                        assert_eq!(
                            (at, g, metadata, offset),
                            (lba, generation(lba).unwrap(), is_metadata, byte % size)
                        );
                        assert_eq!(expected ^ actual, 1 << (byte % 8));
                    }
                    other => panic!("byte {byte}: {other:?}"),
                }
            }
        }
        // The block never written must read as zeroes: its neighbour's
        // pattern there is a mismatch, and says so.
        let mut stale = read.clone();
        stale.data[2 * 512..3 * 512].copy_from_slice(&read.data[..512]);
        let err = check_read(FORMAT, 16, 4, generation, &stale).unwrap_err();
        assert!(
            err.to_string().starts_with("LBA 18 data byte ")
                && err.to_string().ends_with("(never written: zeroes)"),
            "{err}"
        );
        // A block of unknown content is not checked.
        let unknown = |lba: u64| (lba != 18).then(|| generation(lba).unwrap());
        assert_eq!(check_read(FORMAT, 16, 4, unknown, &stale), Ok(()));
        // A short read is a length mismatch, not a panic.
        let mut short = read.clone();
        short.data.truncate(512);
        assert!(matches!(
            check_read(FORMAT, 16, 4, generation, &short),
            Err(Mismatch::Length { what: "data", .. })
        ));
    }

    #[test]
    fn latency_summarises_the_histogram_in_us() {
        let mut h = latency_histogram().unwrap();
        assert_eq!(Latency::from_histogram(&h).max, 0.0);
        for us in [10, 20, 30, 1000] {
            h.record(us * 1000).unwrap();
        }
        let l = Latency::from_histogram(&h);
        assert!(
            (l.p50 - 20.0).abs() < 0.1 && (l.max - 1000.0).abs() < 1.0,
            "{l:?}"
        );
        assert!((l.average - 265.0).abs() < 1.0, "{l:?}");
    }
}
