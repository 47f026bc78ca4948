//! The NVMe-over-Falcon backend: NBD requests become iCMDs of an NVMe
//! initiator ([`NvmeDevice`]): that of an in-process pair
//! ([`crate::nvme`]), whose target holds the export in a RAM namespace
//! ([`FalconBackend::new`]), or one connected to a target in another
//! process ([`FalconBackend::remote`], `falcon nbd-gateway --connect`).
//!
//! A remote target's connection may be lost and set up again (the target
//! restarted). Requests then wait for it (until the initiator's
//! reconnection deadline, then `EIO`); reads and writes the lost
//! connection failed with Transient Transport Error are sent again, up to
//! [`TRANSIENT_RETRIES`] times. A FLUSH covering writes that completed
//! before the reconnection fails with `EIO`, once: the restarted target
//! may not have kept them (only FUA writes and flushed ones are durable).
//! The remote device's UDP port keeps its buffers on the lcore thread, so
//! readers only queue requests and wake that thread; the paragraph below
//! is the in-process pair's.
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
use nvme_ulp::initiator::{Icmd, IcmdBuffers, IcmdCompletion, RefuseReason};
use nvme_ulp::layout::{Format, LbaSize, MetadataSize};
use nvme_ulp::status::StatusCounts;
use nvme_ulp::Status;
use serde::Serialize;

use super::backend::{
    Backend, BackendError, BlockSize, Capabilities, Completion, Geometry, Op, ReplyBatch, Request,
};
use crate::cmd::nvme_perf::{errors_by_status, FalconFigures};
use crate::nvme::remote::{RemoteConfig, RemoteInitiator};
use crate::nvme::{NvmeDevice, NvmePair, PairConfig, SubmitRefusal};

/// Largest NBD payload: the largest iCMD (NVMe-0.9 §6.5, the initiator's
/// MDTS of 256 nCMDs of 4 KiB).
pub const MAX_PAYLOAD: u32 = 1 << 20;

/// iCMDs outstanding at most; requests beyond wait on the lcore thread.
pub const QUEUE_DEPTH: usize = 256;

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
    /// Flushes answered `NBD_EIO`: refused or failed by the target, or
    /// covering writes a restarted remote target may have lost.
    pub flush_errors: u64,
    /// Reads and writes sent again after a remote target's connection
    /// was lost (Transient Transport Error).
    pub retried: u64,
    pub falcon: Option<FalconFigures>,
}

/// A request on its way to the lcore thread.
struct Job {
    request: Request,
    completion: Completion,
    /// A write's number in arrival order (set by the lcore thread).
    write: Option<u64>,
    /// Times it was sent again after a transient transport error.
    retries: u8,
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
    /// The in-process pair, which reader threads turn too; `None` once the
    /// lcore thread has stopped, and always for a remote target (whose
    /// port stays on the lcore thread). Lock order: `lcore`, then `inbox`.
    lcore: Mutex<Option<Lcore<NvmePair>>>,
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
        // Before the pair is built: a size of part blocks is a usage error.
        geometry(size, lba_size, true).validate()?;
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
        FalconBackend::start(move |shared, ready| {
            let pair = match NvmePair::new(&config) {
                Ok(pair) => pair,
                Err(e) => {
                    let _ = ready.send(Err(e.to_string()));
                    return GatewayFigures::default();
                }
            };
            let _ = ready.send(Ok(geometry(size, lba_size, true)));
            // Shared: a reader thread may turn the pair (run to completion).
            *lock(&shared.lcore) = Some(Lcore::new(pair));
            run(shared, || {
                lock(&shared.lcore)
                    .as_mut()
                    .map(|lcore| lcore.drive(&shared.inbox, usize::MAX))
            });
            lock(&shared.lcore)
                .take()
                .map(Lcore::finish)
                .unwrap_or_default()
        })
    }

    /// An export of the namespace `config.nsid` of a target in another
    /// process (`falcon nvme-target`), reached over the kernel UDP port
    /// with PSP as `config` says: its size and LBA size are the
    /// namespace's; FLUSH is offered when the target takes NVMe Flush.
    /// Commands refused while the connection is being set up again wait
    /// for it; commands the lost connection failed (Transient Transport
    /// Error) are sent again, up to [`TRANSIENT_RETRIES`] times.
    ///
    /// # Errors
    ///
    /// A sentence when the target cannot be reached, does not export the
    /// namespace, or its namespace has metadata (NBD carries data only).
    pub fn remote(config: RemoteConfig) -> Result<FalconBackend, String> {
        FalconBackend::start(move |shared, ready| {
            let nsid = config.nsid;
            let control = config.control;
            let device = match RemoteInitiator::connect(config) {
                Ok(device) => device,
                Err(e) => {
                    let _ = ready.send(Err(e.to_string()));
                    return GatewayFigures::default();
                }
            };
            let format = NvmeDevice::format(&device);
            if format.metadata != MetadataSize::None {
                let _ = ready.send(Err(format!(
                    "namespace {nsid} of the target at {control} has {} bytes of metadata per block; an NBD export carries data only",
                    format.metadata.bytes()
                )));
                return GatewayFigures::default();
            }
            let takes_flush = device.takes_flush();
            if !takes_flush {
                tracing::warn!(
                    %control,
                    "the target does not take NVMe Flush ([target] vendor_commands): the export offers no FLUSH, and only FUA writes are durable when they complete"
                );
            }
            let size = device.blocks() * format.lba_size.bytes() as u64;
            let _ = ready.send(Ok(geometry(size, format.lba_size, takes_flush)));
            // The UDP port's buffers stay on this thread: readers only queue
            // requests and wake it (`shared.lcore` stays empty).
            let mut lcore = Lcore::new(device);
            run(shared, || Some(lcore.drive(&shared.inbox, usize::MAX)));
            lcore.finish()
        })
    }

    /// The lcore thread running `body`, which says on `ready` the export's
    /// geometry once its device is up, or why it is not.
    fn start(
        body: impl FnOnce(&Shared, &mpsc::Sender<Result<Geometry, String>>) -> GatewayFigures
            + Send
            + 'static,
    ) -> Result<FalconBackend, String> {
        let shared = Arc::new(Shared {
            inbox: Mutex::new(Inbox::default()),
            lcore: Mutex::new(None),
        });
        let (ready_tx, ready_rx) = mpsc::channel();
        let lcore_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("nvme-lcore".into())
            .spawn(move || body(&lcore_shared, &ready_tx))
            .map_err(|e| format!("lcore thread: {e}"))?;
        let geometry = match ready_rx.recv() {
            Ok(Ok(geometry)) => geometry,
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err("the lcore thread ended while starting".into()),
        };
        let backend = FalconBackend {
            geometry,
            shared,
            lcore_thread: thread.thread().clone(),
            thread: Mutex::new(Some(thread)),
        };
        geometry.validate()?;
        Ok(backend)
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

/// The export of `size` bytes of `lba_size` blocks.
fn geometry(size: u64, lba_size: LbaSize, flush: bool) -> Geometry {
    Geometry {
        size,
        block: BlockSize {
            minimum: lba_size.bytes() as u32,
            preferred: 4096,
            maximum: MAX_PAYLOAD,
        },
        caps: Capabilities {
            read_only: false,
            flush,
            fua: true,
            trim: false,
            write_zeroes: false,
            // One target namespace behind every connection, no cache.
            multi_conn: true,
        },
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
            retries: 0,
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
    /// Requests wait for the connection to a remote target to be set up
    /// again: nothing to do before the next attempt.
    Reconnecting,
}

/// The lcore thread: `drive` turns the device (`None`: it is gone) when
/// no reader does, until stopped and drained (see the module doc).
fn run(shared: &Shared, mut drive: impl FnMut() -> Option<Drive>) {
    let mut stopping_since: Option<Instant> = None;
    loop {
        let closed = lock(&shared.inbox).closed;
        let Some(drive) = drive() else {
            return;
        };
        if closed {
            if drive == Drive::Idle {
                return;
            }
            let since = *stopping_since.get_or_insert_with(Instant::now);
            if since.elapsed() > STOP_DRAIN {
                return;
            }
        }
        match drive {
            // A request queued since (and its unplug) is not lost: the
            // unplug's token ends this park at once.
            Drive::Idle | Drive::Reconnecting => std::thread::park_timeout(IDLE_WAIT),
            // Nothing moved: let the readers sharing this CPU have it.
            Drive::InFlight => std::thread::yield_now(),
        }
    }
}

/// Times a command the lost connection to a remote target failed
/// (Transient Transport Error, whose Do Not Retry bit is clear: NVMe base
/// specification §4.6.1.2) is sent again before the client gets `EIO`.
pub const TRANSIENT_RETRIES: u8 = 3;

/// A request whose iCMD (or Flush) is in flight.
struct InFlight {
    completion: Completion,
    /// A write's number in arrival order.
    write: Option<u64>,
    /// A read or write, to send it again; `None` for a flush.
    resend: Option<Resend>,
    /// A flush: the connection epoch ([`NvmeDevice::epoch`]) of the
    /// oldest write it covers, if any.
    covers: Option<u64>,
}

/// What sending a read or write again needs.
struct Resend {
    offset: u64,
    length: u32,
    fua: bool,
    /// Times it was sent again.
    retries: u8,
}

/// The initiator and what the backend keeps of each request.
struct Lcore<D> {
    device: D,
    nsid: u32,
    /// The device refused a command while its connection is down.
    reconnecting: bool,
    lba_shift: u32,
    /// The connection epoch ([`NvmeDevice::epoch`]) of the oldest write
    /// completed without FUA since the last flush was sent.
    dirty_epoch: Option<u64>,
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

impl<D: NvmeDevice> Lcore<D> {
    fn new(device: D) -> Lcore<D> {
        Lcore {
            lba_shift: device.format().lba_size.shift(),
            nsid: device.nsid(),
            device,
            reconnecting: false,
            dirty_epoch: None,
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
            let busy = self.device.turn();
            self.complete();
            self.replies.flush();
            let idle = self.device.outstanding() == 0
                && self.backlog.is_empty()
                && self.flushes.is_empty();
            if idle && lock(inbox).jobs.is_empty() {
                return Drive::Idle;
            }
            if !busy && self.reconnecting && self.device.outstanding() == 0 {
                return Drive::Reconnecting;
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
        let stats = self.device.stats();
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
        self.reconnecting = false;
        while self.device.has_room() {
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
                retries,
            } = job;
            let slba = request.offset >> self.lba_shift;
            let blocks = u64::from(request.length) >> self.lba_shift;
            let (icmd, fua) = match request.op {
                Op::Read => {
                    let buffers = self.read_buffers.pop().unwrap_or_default();
                    (Icmd::read(tag, self.nsid, slba, 0, buffers), false)
                }
                Op::Write { data, fua } => {
                    let data = Arc::new(HostBuffers::new(data));
                    let icmd = Icmd::write(tag, self.nsid, slba, 0, data);
                    (if fua { icmd.with_fua() } else { icmd }, fua)
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
            match self.device.submit(icmd) {
                Ok(()) => {
                    self.free_tags.pop();
                    self.figures.icmds += 1;
                    self.in_flight[tag as usize] = Some(InFlight {
                        completion,
                        write,
                        resend: Some(Resend {
                            offset: request.offset,
                            length: request.length,
                            fua,
                            retries,
                        }),
                        covers: None,
                    });
                }
                Err(refused)
                    if matches!(
                        refused.reason,
                        SubmitRefusal::Initiator(RefuseReason::QueueFull)
                            | SubmitRefusal::Reconnecting(_)
                    ) =>
                {
                    // Waits for room, or for the connection to be back.
                    self.reconnecting = matches!(refused.reason, SubmitRefusal::Reconnecting(_));
                    let op = requeued_op(refused.icmd.buffers, refused.icmd.fua);
                    self.backlog.push_front(Job {
                        request: Request { op, ..request },
                        completion,
                        write,
                        retries,
                    });
                    break;
                }
                Err(refused) => {
                    tracing::warn!(offset = request.offset, "iCMD refused: {}", refused.reason);
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

    /// Answers the requests whose iCMDs completed; sends again those the
    /// lost connection to a remote target failed.
    fn complete(&mut self) {
        while let Some(done) = self.device.poll_completion() {
            let tag = done.tag;
            let Some(in_flight) = self.in_flight.get_mut(tag as usize).and_then(Option::take)
            else {
                tracing::error!(tag, "a completion names no request in flight");
                continue;
            };
            self.free_tags.push(tag);
            let InFlight {
                completion,
                write,
                resend,
                covers,
            } = in_flight;
            let resend = match resend {
                Some(r)
                    if done.status == Status::TRANSIENT_TRANSPORT_ERROR
                        && r.retries < TRANSIENT_RETRIES =>
                {
                    r
                }
                None => {
                    self.flushed(done.status, covers, completion);
                    continue;
                }
                Some(r) => {
                    if write.is_some() && !r.fua && done.status == Status::SUCCESS {
                        // Completed, not yet durable.
                        self.dirty_epoch.get_or_insert(self.device.epoch());
                    }
                    self.answer(done, completion, write);
                    continue;
                }
            };
            // Sent again in its place: ahead of the requests that came
            // after it, and still among the writes a flush waits for.
            self.figures.retried += 1;
            self.backlog.push_front(Job {
                request: Request {
                    op: requeued_op(done.buffers, resend.fua),
                    offset: resend.offset,
                    length: resend.length,
                },
                completion,
                write,
                retries: resend.retries + 1,
            });
        }
        self.complete_flushes();
    }

    /// Answers a read or write.
    fn answer(&mut self, done: IcmdCompletion, completion: Completion, write: Option<u64>) {
        self.statuses.record(done.status);
        let ok = done.status == Status::SUCCESS;
        if !ok {
            self.figures.icmd_errors += 1;
        }
        match done.buffers {
            IcmdBuffers::Read(buffers) if ok => {
                completion.complete_into(&mut self.replies, Ok(buffers.data));
            }
            IcmdBuffers::Read(buffers) => {
                self.read_buffers.push(buffers);
                completion.complete_into(&mut self.replies, Err(BackendError::Io));
            }
            IcmdBuffers::Write(_) => {
                let result = if ok {
                    Ok(Vec::new())
                } else {
                    Err(BackendError::Io)
                };
                completion.complete_into(&mut self.replies, result);
            }
        }
        if let Some(number) = write {
            self.writes.remove(&number);
        }
    }

    /// Answers a flush. It succeeds only if the writes it covers were
    /// completed by the target it reached: after a reconnection the target
    /// may have restarted and lost them (its volatile cache), so the flush
    /// fails with `EIO`, once (the loss is reported to the client that
    /// asks, as a file system reports a writeback error once).
    fn flushed(&mut self, status: Status, covers: Option<u64>, completion: Completion) {
        self.statuses.record(status);
        let ok = status == Status::SUCCESS;
        let lost = covers.is_some_and(|epoch| epoch != self.device.epoch());
        if ok && !lost {
            completion.complete_into(&mut self.replies, Ok(Vec::new()));
            return;
        }
        self.figures.flush_errors += 1;
        if ok {
            tracing::warn!(
                "flush: the connection to the target was set up again since writes it covers completed; they may be lost: EIO"
            );
        } else if let Some(epoch) = covers {
            // Still not durable: the next flush covers them.
            let dirty = self.dirty_epoch.get_or_insert(epoch);
            *dirty = (*dirty).min(epoch);
        }
        completion.complete_into(&mut self.replies, Err(BackendError::Io));
    }

    /// Flushes whose earlier writes have all completed go to the target
    /// as an NVMe Flush (the vendor Command Request, which both ends take):
    /// its success makes those writes durable.
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
            match self.device.flush(tag) {
                Ok(()) => {
                    // Not an iCMD: `icmds` counts reads and writes.
                    self.free_tags.pop();
                    self.in_flight[tag as usize] = Some(InFlight {
                        completion,
                        write: None,
                        resend: None,
                        covers: self.dirty_epoch.take(),
                    });
                }
                Err(SubmitRefusal::Reconnecting(_)) => {
                    // Sent once the connection is back (and then fails if
                    // the writes it covers may be lost).
                    self.reconnecting = true;
                    self.flushes.push_front((0, completion));
                    break;
                }
                Err(refused) => {
                    tracing::warn!("flush refused: {refused}");
                    self.figures.refused += 1;
                    self.figures.flush_errors += 1;
                    completion.complete_into(&mut self.replies, Err(BackendError::Io));
                }
            }
        }
    }
}

/// A refused or failed command's operation, its buffer back.
fn requeued_op(buffers: IcmdBuffers, fua: bool) -> Op {
    match buffers {
        IcmdBuffers::Write(buffers) => Op::Write {
            data: Arc::try_unwrap(buffers)
                .map(|b| b.data)
                .unwrap_or_else(|shared| shared.data.clone()),
            fua,
        },
        IcmdBuffers::Read(_) => Op::Read,
    }
}

#[cfg(test)]
mod remote_tests;

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
