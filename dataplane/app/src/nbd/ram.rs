//! A RAM-backed export, sparse: memory is taken a chunk at a time on the
//! first write to it and given back when a trim or a zeroing covers a
//! whole chunk.
//!
//! Layer: backend. Completes every request inline, on the caller's thread
//! (the connection's reader). Holds the data in chunks of [`CHUNK`] bytes,
//! each behind its own lock, so that connections working on different
//! chunks do not wait for each other. Never panics on a request: the
//! transmission phase hands it only ranges inside the export.

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::backend::{
    Backend, BackendError, BlockSize, Capabilities, Completion, Geometry, Op, Request,
};

/// Bytes per chunk: 1 MiB keeps the chunk table small (16 bytes per MiB of
/// export) while a 4 KiB random write still touches one lock.
pub const CHUNK: usize = 1 << 20;

/// Largest RAM export: 1 TiB (a 16 MiB chunk table; the memory itself is
/// taken only where written).
pub const MAX_SIZE: u64 = 1 << 40;

type Chunk = Option<Box<[u8]>>;

/// The RAM backend.
#[derive(Debug)]
pub struct RamBackend {
    size: u64,
    chunks: Vec<RwLock<Chunk>>,
}

impl RamBackend {
    /// An export of `size` bytes, all zeroes.
    ///
    /// # Errors
    ///
    /// A sentence when `size` is 0 or above [`MAX_SIZE`].
    pub fn new(size: u64) -> Result<Self, String> {
        if size == 0 || size > MAX_SIZE {
            return Err(format!(
                "RAM export of {size} bytes: must be between 1 byte and 1 TiB"
            ));
        }
        let count = size.div_ceil(CHUNK as u64) as usize;
        Ok(RamBackend {
            size,
            chunks: (0..count).map(|_| RwLock::new(None)).collect(),
        })
    }

    /// Bytes of memory held for data (written chunks).
    pub fn resident_bytes(&self) -> u64 {
        self.chunks
            .iter()
            .map(|c| read(c).as_ref().map_or(0, |b| b.len() as u64))
            .sum()
    }

    fn chunk_len(&self, index: usize) -> usize {
        let start = index as u64 * CHUNK as u64;
        (self.size - start).min(CHUNK as u64) as usize
    }

    /// The chunks `offset..offset + length` crosses: (chunk index, range
    /// inside the chunk, range inside the request).
    fn spans(
        &self,
        offset: u64,
        length: usize,
    ) -> impl Iterator<Item = (usize, std::ops::Range<usize>, std::ops::Range<usize>)> {
        let mut done = 0usize;
        std::iter::from_fn(move || {
            if done >= length {
                return None;
            }
            let at = offset + done as u64;
            let index = (at / CHUNK as u64) as usize;
            let inner = (at % CHUNK as u64) as usize;
            let n = (CHUNK - inner).min(length - done);
            let span = (index, inner..inner + n, done..done + n);
            done += n;
            Some(span)
        })
    }

    fn read_into(&self, offset: u64, buf: &mut [u8]) {
        for (index, inner, outer) in self.spans(offset, buf.len()) {
            let out = &mut buf[outer];
            match read(&self.chunks[index]).as_ref() {
                Some(chunk) => out.copy_from_slice(&chunk[inner]),
                None => out.fill(0),
            }
        }
    }

    fn write_from(&self, offset: u64, data: &[u8]) {
        for (index, inner, outer) in self.spans(offset, data.len()) {
            let mut chunk = write(&self.chunks[index]);
            let len = self.chunk_len(index);
            chunk.get_or_insert_with(|| vec![0u8; len].into_boxed_slice())[inner]
                .copy_from_slice(&data[outer]);
        }
    }

    /// Zeroes the range; whole chunks are freed unless `keep` (NO_HOLE).
    fn zero(&self, offset: u64, length: usize, keep: bool) {
        for (index, inner, _) in self.spans(offset, length) {
            let mut chunk = write(&self.chunks[index]);
            let len = self.chunk_len(index);
            if inner.len() == len && !keep {
                *chunk = None;
            } else if let Some(bytes) = chunk.as_mut() {
                bytes[inner].fill(0);
            } else if keep {
                *chunk = Some(vec![0u8; len].into_boxed_slice());
            }
        }
    }
}

// A poisoned lock means a thread panicked while holding it; the bytes are
// still there (every operation on them is a plain copy or fill), so the
// data is served as it is.
fn read(lock: &RwLock<Chunk>) -> RwLockReadGuard<'_, Chunk> {
    lock.read().unwrap_or_else(|e| e.into_inner())
}

fn write(lock: &RwLock<Chunk>) -> RwLockWriteGuard<'_, Chunk> {
    lock.write().unwrap_or_else(|e| e.into_inner())
}

impl Backend for RamBackend {
    fn geometry(&self) -> Geometry {
        Geometry {
            size: self.size,
            block: BlockSize::DEFAULT,
            // RAM is the storage itself: a flush and FUA have nothing left
            // to make durable, and every connection sees the same bytes.
            caps: Capabilities {
                read_only: false,
                flush: true,
                fua: true,
                trim: true,
                write_zeroes: true,
                multi_conn: true,
            },
        }
    }

    fn submit(&self, request: Request, completion: Completion) {
        let Request { op, offset, length } = request;
        let end = offset.checked_add(u64::from(length));
        if end.map_or(true, |end| end > self.size) {
            completion.complete(Err(BackendError::InvalidArgument));
            return;
        }
        let length = length as usize;
        match op {
            Op::Read => {
                let mut buf = vec![0u8; length];
                self.read_into(offset, &mut buf);
                completion.complete(Ok(buf));
            }
            Op::Write { data, .. } => {
                if data.len() != length {
                    completion.complete(Err(BackendError::InvalidArgument));
                    return;
                }
                self.write_from(offset, &data);
                completion.complete(Ok(Vec::new()));
            }
            Op::Flush => completion.complete(Ok(Vec::new())),
            // Trim discards (reads give zeroes after it, which the
            // protocol allows: the contents are unspecified).
            Op::Trim { .. } => {
                self.zero(offset, length, false);
                completion.complete(Ok(Vec::new()));
            }
            // proto.md NBD_CMD_WRITE_ZEROES: without NO_HOLE the server may
            // punch a hole; with it the range stays provisioned.
            Op::WriteZeroes { no_hole, .. } => {
                self.zero(offset, length, no_hole);
                completion.complete(Ok(Vec::new()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::channel;

    use proptest::prelude::*;

    use super::*;

    fn run(ram: &RamBackend, op: Op, offset: u64, length: u32) -> (u32, Vec<u8>) {
        let (tx, rx) = channel();
        let kind = op.kind();
        ram.submit(
            Request { op, offset, length },
            Completion::channel(0, kind, length, tx),
        );
        let reply = rx.recv().unwrap();
        (reply.error, reply.data)
    }

    #[test]
    fn sparse_until_written_and_freed_by_whole_chunk_trim() {
        let ram = RamBackend::new(3 * CHUNK as u64 + 100).unwrap();
        assert_eq!(ram.resident_bytes(), 0);
        let (e, data) = run(&ram, Op::Read, 0, 4096);
        assert_eq!((e, data), (0, vec![0; 4096]));
        run(
            &ram,
            Op::Write {
                data: vec![7; 10],
                fua: false,
            },
            3 * CHUNK as u64 + 90,
            10,
        );
        assert_eq!(ram.resident_bytes(), 100, "the short last chunk");
        run(&ram, Op::Trim { fua: false }, 3 * CHUNK as u64, 100);
        assert_eq!(ram.resident_bytes(), 0);
        run(
            &ram,
            Op::WriteZeroes {
                fua: false,
                no_hole: true,
            },
            0,
            CHUNK as u32,
        );
        assert_eq!(ram.resident_bytes(), CHUNK as u64, "NO_HOLE provisions");
    }

    #[test]
    fn out_of_range_is_refused() {
        let ram = RamBackend::new(4096).unwrap();
        assert_eq!(
            run(&ram, Op::Read, 4000, 100).0,
            crate::nbd::proto::errno::EINVAL
        );
        assert_eq!(
            run(&ram, Op::Read, u64::MAX, 2).0,
            crate::nbd::proto::errno::EINVAL
        );
        assert!(RamBackend::new(0).is_err());
        assert!(RamBackend::new(MAX_SIZE + 1).is_err());
    }

    #[derive(Debug, Clone)]
    enum ModelOp {
        Write(u64, Vec<u8>),
        Zero(u64, u32, bool),
        Trim(u64, u32),
        Read(u64, u32),
    }

    const SIZE: u64 = 2 * CHUNK as u64 + 5000;

    fn model_op() -> impl Strategy<Value = ModelOp> {
        // Ranges cluster around chunk boundaries, where the splitting is.
        let at = prop_oneof![
            0..SIZE,
            (CHUNK as u64 - 3000)..(CHUNK as u64 + 3000),
            (2 * CHUNK as u64 - 3000)..SIZE,
        ];
        (at, 0u32..9000, any::<u8>(), 0u8..4, any::<bool>()).prop_map(
            |(offset, len, byte, which, keep)| {
                let len = len.min((SIZE - offset) as u32);
                match which {
                    0 => ModelOp::Write(offset, vec![byte | 1; len as usize]),
                    1 => ModelOp::Zero(offset, len, keep),
                    2 => ModelOp::Trim(offset, len),
                    _ => ModelOp::Read(offset, len),
                }
            },
        )
    }

    proptest! {
        /// Against a flat `Vec<u8>` model: every read returns what the
        /// model holds (trim reads back as zeroes here).
        #[test]
        fn matches_a_flat_model(ops in proptest::collection::vec(model_op(), 1..40)) {
            let ram = RamBackend::new(SIZE).unwrap();
            let mut model = vec![0u8; SIZE as usize];
            for op in ops {
                match op {
                    ModelOp::Write(offset, data) => {
                        let len = data.len() as u32;
                        model[offset as usize..offset as usize + data.len()].copy_from_slice(&data);
                        prop_assert_eq!(run(&ram, Op::Write { data, fua: false }, offset, len).0, 0);
                    }
                    ModelOp::Zero(offset, len, no_hole) => {
                        model[offset as usize..(offset + u64::from(len)) as usize].fill(0);
                        prop_assert_eq!(run(&ram, Op::WriteZeroes { fua: false, no_hole }, offset, len).0, 0);
                    }
                    ModelOp::Trim(offset, len) => {
                        model[offset as usize..(offset + u64::from(len)) as usize].fill(0);
                        prop_assert_eq!(run(&ram, Op::Trim { fua: false }, offset, len).0, 0);
                    }
                    ModelOp::Read(offset, len) => {
                        let (e, data) = run(&ram, Op::Read, offset, len);
                        prop_assert_eq!(e, 0);
                        prop_assert!(data == model[offset as usize..(offset + u64::from(len)) as usize]);
                    }
                }
            }
            let (_, all) = run(&ram, Op::Read, 0, SIZE as u32);
            prop_assert!(all == model);
        }
    }
}
