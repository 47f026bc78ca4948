//! The NVMe-over-Falcon backend: NBD requests become iCMDs of the
//! initiator of an in-process NVMe pair ([`crate::nvme`]), whose target
//! holds the export in a RAM namespace.
//!
//! Layer: backend. The pair lives on its own thread, the lcore thread,
//! which turns both loops and owns the initiator: [`Backend::submit`]
//! (called on the connections' reader threads) only queues the request,
//! [`Backend::unplug`] wakes the lcore thread if it sleeps, and the lcore
//! thread completes each request when its iCMD does, sending the replies
//! of one pass of its loop together ([`ReplyBatch`]).
//!
//! How the lcore thread waits: while iCMDs are in flight it turns the pair
//! without sleeping, and yields the CPU when a turn did nothing (the
//! gateway pinned to one CPU shares it with the connections' readers); with
//! nothing in flight it sleeps until a reader unplugs, or for
//! [`IDLE_WAIT`] (the engines' timers). A reader wakes it at most once per
//! burst of requests, not once per request: a wake-up is a system call and
//! a switch away from the reader that still has requests to parse.
//!
//! The mapping (NVMe-0.9 §6, ulp.md §3.1: NVMe over Falcon maps only Read
//! and Write):
//!
//! * READ and WRITE: one iCMD each. The export advertises its LBA size as
//!   the minimum block size (so clients send aligned I/O) and 1 MiB, the
//!   largest iCMD, as the maximum payload (the transmission phase refuses
//!   larger requests, so none needs splitting). WRITE's FUA flag becomes
//!   the iCMD's FUA.
//! * FLUSH completes once every write received before it has completed:
//!   the RAM namespace has nothing more to make durable, and a write
//!   completes only when the target has stored it.
//! * TRIM and WRITE_ZEROES are not advertised: the protocol has no command
//!   for them, and emulating WRITE_ZEROES with data writes would tell
//!   clients that zeroing is cheap when it costs a full write (qemu-img
//!   then writes or skips the zero blocks itself).
//! * A command that fails (a status other than success, a command the
//!   initiator refuses) is answered `NBD_EIO` and counted; nothing is
//!   dropped silently (a request lost with the thread is answered `EIO` by
//!   its dropped [`Completion`]).

use std::collections::{BTreeSet, VecDeque};
use std::sync::{mpsc, Arc, Mutex};
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
use crate::nvme::{NvmePair, PairConfig, NSID};

/// Largest NBD payload: the largest iCMD (NVMe-0.9 §6.5, the initiator's
/// MDTS of 256 nCMDs of 4 KiB).
pub const MAX_PAYLOAD: u32 = 1 << 20;

/// iCMDs outstanding at most; requests beyond wait on the lcore thread.
const QUEUE_DEPTH: usize = 256;

/// How long an idle lcore thread sleeps waiting for a request.
const IDLE_WAIT: Duration = Duration::from_millis(1);

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

/// The backend (see the module doc).
pub struct FalconBackend {
    geometry: Geometry,
    inbox: Arc<Mutex<Inbox>>,
    /// The lcore thread, to wake.
    lcore: Thread,
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
        let inbox = Arc::new(Mutex::new(Inbox::default()));
        let (ready_tx, ready_rx) = mpsc::channel();
        let lcore_inbox = Arc::clone(&inbox);
        let thread = std::thread::Builder::new()
            .name("nvme-lcore".into())
            .spawn(move || {
                let pair = match NvmePair::new(&config) {
                    Ok(pair) => {
                        let _ = ready_tx.send(Ok(()));
                        pair
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                        return GatewayFigures::default();
                    }
                };
                Lcore::new(pair, lba_size).run(&lcore_inbox)
            })
            .map_err(|e| format!("lcore thread: {e}"))?;
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err("the lcore thread ended while starting".into()),
        }
        Ok(FalconBackend {
            geometry,
            inbox,
            lcore: thread.thread().clone(),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Stops the lcore thread once the requests queued and the iCMDs in
    /// flight have completed (at most the iCMD timeout) and returns what it
    /// did; `None` if it was stopped before or ended by a panic.
    pub fn shutdown(&self) -> Option<GatewayFigures> {
        lock(&self.inbox).closed = true;
        self.lcore.unpark();
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
        let mut inbox = lock(&self.inbox);
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
        // Free when the thread is awake: it only notes the wake-up.
        self.lcore.unpark();
    }
}

/// A request whose iCMD is in flight.
struct InFlight {
    completion: Completion,
    /// A write's number in arrival order.
    write: Option<u64>,
}

/// The lcore thread's state.
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
        }
    }

    /// Turns the pair until stopped and drained (see the module doc for
    /// how it waits).
    fn run(mut self, inbox: &Mutex<Inbox>) -> GatewayFigures {
        let mut jobs = VecDeque::new();
        let mut stopping_since: Option<Instant> = None;
        loop {
            let closed = {
                let mut inbox = lock(inbox);
                std::mem::swap(&mut inbox.jobs, &mut jobs);
                inbox.closed
            };
            for job in jobs.drain(..) {
                self.accept(job);
            }
            self.start_backlog();
            let busy = self.pair.turn();
            self.complete();
            self.replies.flush();
            let idle = self.pair.outstanding() == 0 && self.backlog.is_empty();
            if closed {
                if idle && lock(inbox).jobs.is_empty() {
                    break;
                }
                let since = *stopping_since.get_or_insert_with(Instant::now);
                if since.elapsed() > STOP_DRAIN {
                    break;
                }
            }
            if busy {
                continue;
            }
            if idle {
                // A request queued since the swap (and its unplug) is
                // not lost: the unplug's token ends this park at once.
                std::thread::park_timeout(IDLE_WAIT);
            } else {
                // In flight but nothing moved (a timer to wait for): let
                // the readers sharing this CPU have it.
                std::thread::yield_now();
            }
        }
        // Requests still here are answered EIO by their dropped Completion.
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

    /// Flushes whose earlier writes have all completed.
    fn complete_flushes(&mut self) {
        let oldest = self.writes.first().copied().unwrap_or(u64::MAX);
        while self
            .flushes
            .front()
            .is_some_and(|&(next, _)| next <= oldest)
        {
            if let Some((_, completion)) = self.flushes.pop_front() {
                completion.complete_into(&mut self.replies, Ok(Vec::new()));
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
}
