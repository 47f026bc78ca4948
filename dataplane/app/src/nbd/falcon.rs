//! The NVMe-over-Falcon backend: NBD requests become iCMDs of the
//! initiator of an in-process NVMe pair ([`crate::nvme`]), whose target
//! holds the export in a RAM namespace.
//!
//! Layer: backend. The pair and its bookkeeping (`Lcore`) sit behind a
//! lock, turned by whichever thread holds it, run to completion:
//! [`Backend::submit`] (on a connection's reader thread) only queues the
//! request; [`Backend::unplug`], when the reader has submitted its burst
//! and is about to wait, takes the lock if it is free and turns the pair
//! itself until its requests are done, sending the replies of each turn
//! together ([`ReplyBatch`]). The lcore thread of its own turns the pair
//! when a reader could not (the lock taken, a bounded number of turns
//! reached, a timer to wait for), while iCMDs are in flight (yielding the
//! CPU when a turn did nothing), and every `IDLE_WAIT` (1 ms) for the engines'
//! timers; otherwise it sleeps. On the gateway pinned to one CPU a request
//! then stays on its reader's thread from socket to reply: 0.04–0.08
//! context switches and 10–11 µs of CPU per request, against 0.4–0.6 and
//! 14–22 µs when the lcore thread turned every request
//! (`dataplane/app/PERFORMANCE.md`).
//!
//! The mapping (NVMe-0.9 §6, ulp.md §3.1: NVMe over Falcon maps only Read
//! and Write):
//!
//! * READ and WRITE: one iCMD each. The export advertises its LBA size as
//!   the minimum block size (so clients send aligned I/O) and 1 MiB, the
//!   largest iCMD, as the maximum payload (the transmission phase refuses
//!   larger requests, so none needs splitting). WRITE's FUA flag becomes
//!   the iCMD's FUA.
//! * FLUSH waits until every write received before it has completed, then
//!   goes to the target as an NVMe Flush (our vendor Command Request, both
//!   ends of the pair take it, ulp.md §3.9) and completes with it: the
//!   namespace's worker makes the completed writes durable (a no-op for
//!   RAM, `sync_data` for a file).
//! * TRIM and WRITE_ZEROES are not advertised: the protocol has no command
//!   for them, and emulating WRITE_ZEROES with data writes would tell
//!   clients that zeroing is cheap when it costs a full write (qemu-img
//!   then writes or skips the zero blocks itself).
//! * A command that fails (a status other than success, a command the
//!   initiator refuses) is answered `NBD_EIO` and counted; nothing is
//!   dropped silently (a request lost with the thread is answered `EIO` by
//!   its dropped [`Completion`]).

use std::collections::{BTreeSet, VecDeque};
use std::sync::{mpsc, Arc, Mutex, TryLockError};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use nvme_ulp::data::HostBuffers;
use nvme_ulp::initiator::{Icmd, IcmdBuffers, RefuseReason};
use nvme_ulp::layout::{Format, LbaSize, MetadataSize};
use nvme_ulp::status::StatusCounts;
use nvme_ulp::Status;
use serde::Serialize;

use super::backend::{
    Backend, BackendError, BlockSize, Capabilities, Completion, Geometry, Op, ReplyBatch, Request,
};
use crate::cmd::nvme_perf::{errors_by_status, FalconFigures};
use crate::nvme::{NvmeDevice, NvmePair, PairConfig, NSID};

/// Largest NBD payload: the largest iCMD (NVMe-0.9 §6.5, the initiator's
/// MDTS of 256 nCMDs of 4 KiB).
pub const MAX_PAYLOAD: u32 = 1 << 20;

/// iCMDs outstanding at most; requests beyond wait on the lcore thread.
const QUEUE_DEPTH: usize = 256;

/// How long an idle lcore thread sleeps before it turns the pair for the
/// engines' timers.
const IDLE_WAIT: Duration = Duration::from_millis(1);

/// Turns a reader gives the pair at most before it leaves the rest to the
/// lcore thread and goes back to its socket (other connections keep the
/// pair busy for ever).
const READER_TURNS: usize = 64;

/// How long stopping waits for the iCMDs in flight.
const STOP_DRAIN: Duration = Duration::from_secs(35);

/// What the backend did (the gateway's summary).
#[derive(Debug, Clone, Default, Serialize)]
pub struct GatewayFigures {
    pub icmds: u64,
    /// iCMDs that completed with a status other than success, or that the
    /// initiator refused: answered `NBD_EIO`.
    pub icmd_errors: u64,
    pub errors_by_status: std::collections::BTreeMap<&'static str, u64>,
    pub refused: u64,
    /// Requests of a kind this backend does not advertise: `NBD_EINVAL`.
    pub unsupported: u64,
    pub flushes: u64,
    pub falcon: Option<FalconFigures>,
}

/// A request on its way to the lcore thread.
struct Job {
    request: Request,
    completion: Completion,
    /// A write's number in arrival order (set by the lcore thread).
    write: Option<u64>,
}

/// The requests on their way to the lcore thread.
#[derive(Default)]
struct Inbox {
    jobs: VecDeque<Job>,
    /// Stopping: no more requests are taken.
    closed: bool,
}

/// What the readers and the lcore thread share.
struct Shared {
    inbox: Mutex<Inbox>,
    /// `None` once the lcore thread has stopped. Lock order: `lcore`, then
    /// `inbox`.
    lcore: Mutex<Option<Lcore>>,
}

/// The backend (see the module doc).
pub struct FalconBackend {
    geometry: Geometry,
    shared: Arc<Shared>,
    /// The lcore thread, to wake.
    lcore_thread: Thread,
    thread: Mutex<Option<JoinHandle<GatewayFigures>>>,
}

impl std::fmt::Debug for FalconBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FalconBackend")
            .field("geometry", &self.geometry)
            .finish()
    }
}

impl FalconBackend {
    /// An export of `size` bytes (a multiple of `lba_size`) in the target's
    /// RAM namespace, its pair on a new lcore thread.
    ///
    /// # Errors
    ///
    /// A sentence when the size is not whole blocks or the pair cannot be
    /// built.
    pub fn new(size: u64, lba_size: LbaSize) -> Result<FalconBackend, String> {
        let lba = lba_size.bytes() as u32;
        let geometry = Geometry {
            size,
            block: BlockSize {
                minimum: lba,
                preferred: 4096,
                maximum: MAX_PAYLOAD,
            },
            caps: Capabilities {
                read_only: false,
                flush: true,
                fua: true,
                trim: false,
                write_zeroes: false,
                // One target namespace behind every connection, no cache.
                multi_conn: true,
            },
        };
        geometry.validate()?;
        let config = PairConfig {
            format: Format {
                lba_size,
                metadata: MetadataSize::None,
            },
            size,
            queue_depth: QUEUE_DEPTH,
            // Both engines are in this process and share the lcore thread:
            // a delay would only make the loop turn idle (and, pinned with
            // the connections to one CPU, spin) while frames wait.
            one_way_delay: Duration::ZERO,
            ..PairConfig::default()
        };
        let shared = Arc::new(Shared {
            inbox: Mutex::new(Inbox::default()),
            lcore: Mutex::new(None),
        });
        let (ready_tx, ready_rx) = mpsc::channel();
        let lcore_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("nvme-lcore".into())
            .spawn(move || {
                match NvmePair::new(&config) {
                    Ok(pair) => {
                        *lock(&lcore_shared.lcore) = Some(Lcore::new(pair, lba_size));
                        let _ = ready_tx.send(Ok(()));
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                        return GatewayFigures::default();
                    }
                };
                run(&lcore_shared)
            })
            .map_err(|e| format!("lcore thread: {e}"))?;
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err("the lcore thread ended while starting".into()),
        }
        Ok(FalconBackend {
            geometry,
            shared,
            lcore_thread: thread.thread().clone(),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Stops the lcore thread once the requests queued and the iCMDs in
    /// flight have completed (at most the iCMD timeout) and returns what it
    /// did; `None` if it was stopped before or ended by a panic.
    pub fn shutdown(&self) -> Option<GatewayFigures> {
        lock(&self.shared.inbox).closed = true;
        self.lcore_thread.unpark();
        let thread = lock(&self.thread).take()?;
        thread.join().ok()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl Drop for FalconBackend {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl Backend for FalconBackend {
    fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn submit(&self, request: Request, completion: Completion) {
        let mut inbox = lock(&self.shared.inbox);
        if inbox.closed {
            drop(inbox);
            completion.complete(Err(BackendError::Shutdown));
            return;
        }
        inbox.jobs.push_back(Job {
            request,
            completion,
            write: None,
        });
    }

    fn unplug(&self) {
        let lcore = match self.shared.lcore.try_lock() {
            Ok(lcore) => Some(lcore),
            Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
            // Its holder may have looked at the queue already: the lcore
            // thread takes the lock once it is free.
            Err(TryLockError::WouldBlock) => None,
        };
        if let Some(mut lcore) = lcore {
            if let Some(lcore) = lcore.as_mut() {
                if lcore.drive(&self.shared.inbox, READER_TURNS) == Drive::Idle {
                    return;
                }
            }
        }
        // Free when the thread is awake: it only notes the wake-up.
        self.lcore_thread.unpark();
    }
}

/// Where [`Lcore::drive`] left the pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Drive {
    /// Nothing queued, nothing in flight.
    Idle,
    /// iCMDs in flight: the last turn did nothing (a timer to wait for),
    /// or the turns ran out.
    InFlight,
}

/// The lcore thread: turns the pair when no reader does, until stopped and
/// drained (see the module doc).
fn run(shared: &Shared) -> GatewayFigures {
    let mut stopping_since: Option<Instant> = None;
    loop {
        let closed = lock(&shared.inbox).closed;
        let drive = match lock(&shared.lcore).as_mut() {
            Some(lcore) => lcore.drive(&shared.inbox, usize::MAX),
            None => return GatewayFigures::default(),
        };
        if closed {
            if drive == Drive::Idle {
                break;
            }
            let since = *stopping_since.get_or_insert_with(Instant::now);
            if since.elapsed() > STOP_DRAIN {
                break;
            }
        }
        match drive {
            // A request queued since (and its unplug) is not lost: the
            // unplug's token ends this park at once.
            Drive::Idle => std::thread::park_timeout(IDLE_WAIT),
            // Nothing moved: let the readers sharing this CPU have it.
            Drive::InFlight => std::thread::yield_now(),
        }
    }
    match lock(&shared.lcore).take() {
        Some(lcore) => lcore.finish(),
        None => GatewayFigures::default(),
    }
}

/// A request whose iCMD is in flight.
struct InFlight {
    completion: Completion,
    /// A write's number in arrival order.
    write: Option<u64>,
}

/// The pair and what the backend keeps of each request.
struct Lcore {
    pair: NvmePair,
    lba_shift: u32,
    /// Requests that wait for room in the queue, in arrival order.
    backlog: VecDeque<Job>,
    /// Indexed by iCMD tag.
    in_flight: Vec<Option<InFlight>>,
    free_tags: Vec<u64>,
    /// Writes received and not yet completed, by arrival number.
    writes: BTreeSet<u64>,
    next_write: u64,
    /// Flushes waiting for the writes received before them: (the next
    /// write number when the flush came, completion).
    flushes: VecDeque<(u64, Completion)>,
    statuses: StatusCounts,
    figures: GatewayFigures,
    read_buffers: Vec<HostBuffers>,
    /// Replies completed in this pass of the loop, sent at its end: one
    /// send per connection per pass.
    replies: ReplyBatch,
    /// The queue last taken from the inbox, empty, kept for its capacity.
    taken: VecDeque<Job>,
}

impl Lcore {
    fn new(pair: NvmePair, lba_size: LbaSize) -> Lcore {
        Lcore {
            pair,
            lba_shift: lba_size.shift(),
            backlog: VecDeque::new(),
            in_flight: (0..QUEUE_DEPTH).map(|_| None).collect(),
            free_tags: (0..QUEUE_DEPTH as u64).rev().collect(),
            writes: BTreeSet::new(),
            next_write: 0,
            flushes: VecDeque::new(),
            statuses: StatusCounts::default(),
            figures: GatewayFigures::default(),
            read_buffers: Vec::new(),
            replies: ReplyBatch::default(),
            taken: VecDeque::new(),
        }
    }

    /// Turns the pair, taking what is queued, until it is idle, a turn
    /// did nothing, or `turns` turns have run; each turn's replies are
    /// sent at its end.
    fn drive(&mut self, inbox: &Mutex<Inbox>, turns: usize) -> Drive {
        for _ in 0..turns {
            // The two queues trade places, each keeping its capacity.
            let mut jobs = std::mem::take(&mut self.taken);
            std::mem::swap(&mut lock(inbox).jobs, &mut jobs);
            for job in jobs.drain(..) {
                self.accept(job);
            }
            self.taken = jobs;
            self.start_backlog();
            let busy = self.pair.turn();
            self.complete();
            self.replies.flush();
            let idle =
                self.pair.outstanding() == 0 && self.backlog.is_empty() && self.flushes.is_empty();
            if idle && lock(inbox).jobs.is_empty() {
                return Drive::Idle;
            }
            if !busy && !idle {
                return Drive::InFlight;
            }
        }
        Drive::InFlight
    }

    /// What the backend did, once stopped. Requests still here are answered
    /// EIO by their dropped [`Completion`]s.
    fn finish(mut self) -> GatewayFigures {
        let stats = self.pair.stats();
        self.figures.errors_by_status = errors_by_status(&self.statuses);
        self.figures.falcon = Some(FalconFigures::from_stats(&stats));
        self.figures
    }

    /// A request from a reader thread: a flush waits for the writes before
    /// it, the others queue for an iCMD.
    fn accept(&mut self, mut job: Job) {
        match job.request.op {
            Op::Flush => {
                self.figures.flushes += 1;
                self.flushes.push_back((self.next_write, job.completion));
                self.complete_flushes();
            }
            Op::Trim { .. } | Op::WriteZeroes { .. } => {
                self.figures.unsupported += 1;
                job.completion
                    .complete_into(&mut self.replies, Err(BackendError::InvalidArgument));
            }
            Op::Write { .. } => {
                self.writes.insert(self.next_write);
                job.write = Some(self.next_write);
                self.next_write += 1;
                self.backlog.push_back(job);
            }
            Op::Read => self.backlog.push_back(job),
        }
    }

    /// Submits queued requests while there is room.
    fn start_backlog(&mut self) {
        while self.pair.has_room() {
            let Some(&tag) = self.free_tags.last() else {
                break;
            };
            let Some(job) = self.backlog.pop_front() else {
                break;
            };
            let Job {
                request,
                completion,
                write,
            } = job;
            let slba = request.offset >> self.lba_shift;
            let blocks = u64::from(request.length) >> self.lba_shift;
            let icmd = match request.op {
                Op::Read => {
                    let buffers = self.read_buffers.pop().unwrap_or_default();
                    Icmd::read(tag, NSID, slba, 0, buffers)
                }
                Op::Write { data, fua } => {
                    let icmd = Icmd::write(tag, NSID, slba, 0, Arc::new(HostBuffers::new(data)));
                    if fua {
                        icmd.with_fua()
                    } else {
                        icmd
                    }
                }
                // Accepted requests are reads and writes only.
                Op::Flush | Op::Trim { .. } | Op::WriteZeroes { .. } => {
                    completion.complete_into(&mut self.replies, Err(BackendError::InvalidArgument));
                    continue;
                }
            };
            let Some(nlb) = blocks.checked_sub(1).and_then(|n| u16::try_from(n).ok()) else {
                self.fail(write, completion);
                continue;
            };
            let icmd = Icmd { nlb, ..icmd };
            match self.pair.submit(icmd) {
                Ok(()) => {
                    self.free_tags.pop();
                    self.figures.icmds += 1;
                    self.in_flight[tag as usize] = Some(InFlight { completion, write });
                }
                Err(refused) if refused.reason == RefuseReason::QueueFull => {
                    let op = match refused.icmd.buffers {
                        IcmdBuffers::Write(buffers) => Op::Write {
                            data: Arc::try_unwrap(buffers).map(|b| b.data).unwrap_or_default(),
                            fua: refused.icmd.fua,
                        },
                        IcmdBuffers::Read(_) => Op::Read,
                    };
                    self.backlog.push_front(Job {
                        request: Request { op, ..request },
                        completion,
                        write,
                    });
                    break;
                }
                Err(refused) => {
                    tracing::warn!(offset = request.offset, "iCMD refused: {refused}");
                    self.figures.refused += 1;
                    self.fail(write, completion);
                }
            }
        }
    }

    /// Answers a request whose iCMD could not be sent: `NBD_EIO`.
    fn fail(&mut self, write: Option<u64>, completion: Completion) {
        self.figures.icmd_errors += 1;
        completion.complete_into(&mut self.replies, Err(BackendError::Io));
        if let Some(number) = write {
            self.writes.remove(&number);
            self.complete_flushes();
        }
    }

    /// Answers the requests whose iCMDs completed.
    fn complete(&mut self) {
        while let Some(done) = self.pair.poll_completion() {
            let tag = done.tag;
            let Some(in_flight) = self.in_flight.get_mut(tag as usize).and_then(Option::take)
            else {
                tracing::error!(tag, "a completion names no request in flight");
                continue;
            };
            self.free_tags.push(tag);
            self.statuses.record(done.status);
            let ok = done.status == Status::SUCCESS;
            if !ok {
                self.figures.icmd_errors += 1;
            }
            match done.buffers {
                IcmdBuffers::Read(buffers) if ok => {
                    in_flight
                        .completion
                        .complete_into(&mut self.replies, Ok(buffers.data));
                }
                IcmdBuffers::Read(buffers) => {
                    self.read_buffers.push(buffers);
                    in_flight
                        .completion
                        .complete_into(&mut self.replies, Err(BackendError::Io));
                }
                IcmdBuffers::Write(_) => {
                    let result = if ok {
                        Ok(Vec::new())
                    } else {
                        Err(BackendError::Io)
                    };
                    in_flight
                        .completion
                        .complete_into(&mut self.replies, result);
                }
            }
            if let Some(number) = in_flight.write {
                self.writes.remove(&number);
            }
        }
        self.complete_flushes();
    }

    /// Flushes whose earlier writes have all completed go to the target
    /// as an NVMe Flush (the vendor Command Request, which the pair's ends
    /// both take): its success makes those writes durable.
    fn complete_flushes(&mut self) {
        let oldest = self.writes.first().copied().unwrap_or(u64::MAX);
        while self
            .flushes
            .front()
            .is_some_and(|&(next, _)| next <= oldest)
        {
            let Some(&tag) = self.free_tags.last() else {
                // Tried again as iCMDs complete.
                break;
            };
            let Some((_, completion)) = self.flushes.pop_front() else {
                break;
            };
            match NvmeDevice::flush(&mut self.pair, tag) {
                Ok(()) => {
                    // Not an iCMD: `icmds` counts reads and writes.
                    self.free_tags.pop();
                    self.in_flight[tag as usize] = Some(InFlight {
                        completion,
                        write: None,
                    });
                }
                Err(refused) => {
                    tracing::warn!("flush refused: {refused}");
                    self.figures.refused += 1;
                    self.fail(None, completion);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::{channel, Receiver};

    use super::super::backend::Kind;
    use super::*;

    fn submit(
        backend: &FalconBackend,
        op: Op,
        offset: u64,
        length: u32,
    ) -> Receiver<super::super::backend::Reply> {
        let (tx, rx) = channel();
        let kind = op.kind();
        backend.submit(
            Request { op, offset, length },
            Completion::channel(offset, kind, length, tx),
        );
        backend.unplug();
        rx
    }

    /// Writes read back; a flush completes after the writes before it; a
    /// request past the end fails EIO; trim is refused.
    #[test]
    fn reads_writes_and_flushes_over_the_pair() {
        let backend = FalconBackend::new(8 << 20, LbaSize::B512).expect("backend");
        let g = backend.geometry();
        assert_eq!((g.block.minimum, g.block.maximum), (512, 1 << 20));
        assert!(g.caps.flush && !g.caps.trim && !g.caps.write_zeroes);
        let data: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 251) as u8).collect();
        let writes: Vec<_> = (0..4u64)
            .map(|i| {
                let op = Op::Write {
                    data: data.clone(),
                    fua: i == 3,
                };
                submit(&backend, op, i << 20, 1 << 20)
            })
            .collect();
        let flush = submit(&backend, Op::Flush, 0, 0);
        let flush = flush.recv_timeout(Duration::from_secs(20)).expect("flush");
        assert_eq!(flush.error, 0);
        // The flush came after the writes were received: all done by now.
        for write in writes {
            let reply = write.try_recv().expect("write completed before the flush");
            assert_eq!(reply.error, 0);
        }
        let read = submit(&backend, Op::Read, 2 << 20, 1 << 20);
        let read = read.recv_timeout(Duration::from_secs(20)).expect("read");
        assert_eq!(read.error, 0);
        assert!(read.data == data);
        let small = submit(&backend, Op::Read, (1 << 20) + 512, 512);
        let small = small.recv_timeout(Duration::from_secs(20)).expect("read");
        assert_eq!(small.data, data[512..1024]);
        let trim = submit(&backend, Op::Trim { fua: false }, 0, 4096);
        let trim = trim.recv_timeout(Duration::from_secs(20)).expect("trim");
        assert_eq!(trim.error, super::super::proto::errno::EINVAL);
        assert_eq!(trim.kind, Kind::Trim);
        let figures = backend.shutdown().expect("figures");
        assert_eq!(figures.icmds, 6);
        assert_eq!(figures.icmd_errors, 0);
        assert_eq!(figures.unsupported, 1);
        assert_eq!(figures.flushes, 1);
        // After shutdown: refused, never lost.
        let late = submit(&backend, Op::Read, 0, 512);
        let late = late.recv_timeout(Duration::from_secs(1)).expect("answered");
        assert_eq!(late.error, super::super::proto::errno::ESHUTDOWN);
    }

    /// A failed iCMD (here: beyond the target namespace, which the
    /// transmission phase would have refused) is answered EIO and counted.
    #[test]
    fn a_failed_icmd_is_eio_and_counted() {
        let backend = FalconBackend::new(1 << 20, LbaSize::B512).expect("backend");
        let read = submit(&backend, Op::Read, 2 << 20, 4096);
        let read = read.recv_timeout(Duration::from_secs(20)).expect("read");
        assert_eq!(read.error, super::super::proto::errno::EIO);
        let figures = backend.shutdown().expect("figures");
        assert_eq!(figures.icmd_errors, 1);
        assert_eq!(figures.errors_by_status.values().sum::<u64>(), 1);
    }

    /// A request submitted without an unplug is not lost (the idle lcore
    /// looks at its queue every `IDLE_WAIT`), and shutdown answers the
    /// requests still queued before the thread stops.
    #[test]
    fn requests_start_without_an_unplug_and_shutdown_drains_the_queue() {
        let backend = FalconBackend::new(1 << 20, LbaSize::B512).expect("backend");
        let (tx, rx) = channel();
        let write = Op::Write {
            data: vec![7; 4096],
            fua: false,
        };
        backend.submit(
            Request {
                op: write,
                offset: 0,
                length: 4096,
            },
            Completion::channel(1, Kind::Write, 4096, tx.clone()),
        );
        let reply = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("started without an unplug");
        assert_eq!((reply.cookie, reply.error), (1, 0));
        for i in 0..8u64 {
            let request = Request {
                op: Op::Read,
                offset: 0,
                length: 4096,
            };
            backend.submit(
                request,
                Completion::channel(10 + i, Kind::Read, 4096, tx.clone()),
            );
        }
        let figures = backend.shutdown().expect("figures");
        assert_eq!(figures.icmds, 9);
        for _ in 0..8 {
            let reply = rx.recv_timeout(Duration::from_secs(20)).expect("answered");
            assert_eq!(reply.error, 0);
            assert!(reply.data == [7; 4096]);
        }
    }

    /// Several readers submitting and unplugging at once, each driving the
    /// pair when it takes the lock and leaving it to the lcore thread when
    /// it cannot: every request is answered once, and each reads back what
    /// it wrote.
    #[test]
    fn readers_driving_the_pair_at_once_lose_nothing() {
        const READERS: u64 = 4;
        const ROUNDS: u64 = 50;
        let backend = Arc::new(FalconBackend::new(4 << 20, LbaSize::B512).expect("backend"));
        let readers: Vec<_> = (0..READERS)
            .map(|reader| {
                let backend = Arc::clone(&backend);
                std::thread::spawn(move || {
                    let (tx, rx) = channel();
                    for round in 0..ROUNDS {
                        // Four blocks of its own, written then read back in
                        // the next burst.
                        let offset = (reader * ROUNDS + round) * 4 * 4096;
                        for block in 0..4u64 {
                            let data = vec![(reader * 64 + round + block) as u8; 4096];
                            let request = Request {
                                op: Op::Write { data, fua: false },
                                offset: offset + block * 4096,
                                length: 4096,
                            };
                            let completion =
                                Completion::channel(block, Kind::Write, 4096, tx.clone());
                            backend.submit(request, completion);
                        }
                        backend.unplug();
                        for _ in 0..4 {
                            let reply = rx.recv_timeout(Duration::from_secs(20)).expect("write");
                            assert_eq!(reply.error, 0);
                        }
                        for block in 0..4u64 {
                            let request = Request {
                                op: Op::Read,
                                offset: offset + block * 4096,
                                length: 4096,
                            };
                            let completion =
                                Completion::channel(block, Kind::Read, 4096, tx.clone());
                            backend.submit(request, completion);
                        }
                        backend.unplug();
                        let mut seen = [false; 4];
                        for _ in 0..4 {
                            let reply = rx.recv_timeout(Duration::from_secs(20)).expect("read");
                            assert_eq!(reply.error, 0);
                            let block = reply.cookie;
                            assert!(!seen[block as usize], "block {block} answered twice");
                            seen[block as usize] = true;
                            let expected = (reader * 64 + round + block) as u8;
                            assert!(reply.data.iter().all(|&b| b == expected));
                        }
                    }
                })
            })
            .collect();
        for reader in readers {
            reader.join().expect("reader");
        }
        let backend = Arc::try_unwrap(backend).expect("the readers are done");
        let figures = backend.shutdown().expect("figures");
        assert_eq!(figures.icmds, READERS * ROUNDS * 8);
        assert_eq!(figures.icmd_errors, 0);
    }
}
