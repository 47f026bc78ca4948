//! Per-SQID storage workers (ulp.md §3.9: "Target SQID → worker queue"):
//! slow I/O runs on worker threads, never on the datapath lcore.
//!
//! Layer: NVMe target storage, between the tCMD reassembly (datapath) and
//! the namespaces. Owns the worker threads, their bounded request queues
//! and the completion queue. Each worker owns its namespaces outright (no
//! lock around a store); each Target SQID maps to one worker, several
//! SQIDs may share one (NVMe-0.9 §8.3 leaves the SQID → SSD mapping to the
//! implementation, ulp.md §3.4 word 15).
//!
//! Where a worker runs is its [`WorkerSpec`]'s [`Execution`]:
//!
//! * [`Execution::Thread`]: a thread of its own, for namespaces that may
//!   block (files, devices, injected delays). The lcore never waits on it.
//! * [`Execution::Inline`]: on the caller's thread, inside
//!   [`Workers::submit`], for namespaces that never block (RAM): the copy
//!   costs less than the two thread hand-offs a threaded worker adds to
//!   each request (a wake of the worker, a switch to it and back; on the
//!   NBD gateway pinned to one CPU, 40 % of a request's cost with a
//!   threaded RAM worker, `dataplane/app/PERFORMANCE.md`). [`Workers::spawn`]
//!   refuses it for a namespace that [`may_block`](Namespace::may_block).
//!   The contract is the same: the completion is polled later, in order,
//!   and counts against the worker's depth until then.
//!
//! The datapath side never blocks and never allocates in steady state:
//!
//! * [`Workers::submit`] either queues the request or hands it back at
//!   once ([`RejectReason::Busy`] when the worker already has
//!   `queue_depth` requests outstanding: the target answers RNR, ulp.md
//!   §3.9). Nothing is dropped.
//! * [`Workers::poll_completion`] returns a finished request, with the
//!   caller's tag, the NVMe status and the buffers it came with, or
//!   `None`.
//! * Requests and completions move [`IoBuffer`]s (no copy) through
//!   preallocated bounded channels. A request counts against its worker's
//!   depth from `submit` until its completion is polled, so the completion
//!   queue (capacity: the sum of the depths) is never full and a worker
//!   never waits on the datapath.
//!
//! Dropping [`Workers`] closes the queues, lets each worker finish what it
//! was given (completions no longer polled are dropped) and joins every
//! thread.

use core::fmt;
use std::collections::VecDeque;
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::thread::{self, JoinHandle};

use crate::status::Status;

use super::buffer::IoBuffer;
use super::config::ConfigError;
use super::pi::CommandPi;
use super::store::{BlockStore, Storage};
use super::Namespace;

/// The deepest request queue a worker may have (NVMe's largest I/O queue).
pub const MAX_QUEUE_DEPTH: usize = 65536;

/// The command a [`Request`] carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Opcode {
    Read,
    Write,
    Flush,
    WriteZeroes,
    Deallocate,
}

/// One tCMD for a worker.
#[derive(Debug)]
pub struct Request {
    /// The caller's name for the command (e.g. its Target Tag), returned
    /// in the completion.
    pub tag: u64,
    /// Target NSID.
    pub nsid: u16,
    pub opcode: Opcode,
    pub slba: u64,
    /// Number of blocks: the wire's 0-based NLB + 1.
    pub nlb: u32,
    /// Force Unit Access (writes only).
    pub fua: bool,
    pub pi: CommandPi,
    /// Read: receives `nlb × lba_size` bytes; Write: holds them.
    pub data: IoBuffer,
    /// Read: receives `nlb × metadata_size` bytes; Write: holds them.
    pub metadata: IoBuffer,
}

impl Request {
    pub fn read(
        tag: u64,
        nsid: u16,
        slba: u64,
        nlb: u32,
        data: IoBuffer,
        metadata: IoBuffer,
    ) -> Request {
        Request {
            tag,
            nsid,
            opcode: Opcode::Read,
            slba,
            nlb,
            fua: false,
            pi: CommandPi::NONE,
            data,
            metadata,
        }
    }

    pub fn write(
        tag: u64,
        nsid: u16,
        slba: u64,
        nlb: u32,
        data: IoBuffer,
        metadata: IoBuffer,
    ) -> Request {
        Request {
            opcode: Opcode::Write,
            ..Request::read(tag, nsid, slba, nlb, data, metadata)
        }
    }

    pub fn flush(tag: u64, nsid: u16) -> Request {
        Request {
            opcode: Opcode::Flush,
            ..Request::read(tag, nsid, 0, 0, IoBuffer::new(), IoBuffer::new())
        }
    }

    pub fn write_zeroes(tag: u64, nsid: u16, slba: u64, nlb: u32) -> Request {
        Request {
            opcode: Opcode::WriteZeroes,
            ..Request::read(tag, nsid, slba, nlb, IoBuffer::new(), IoBuffer::new())
        }
    }

    pub fn deallocate(tag: u64, nsid: u16, slba: u64, nlb: u32) -> Request {
        Request {
            opcode: Opcode::Deallocate,
            ..Request::read(tag, nsid, slba, nlb, IoBuffer::new(), IoBuffer::new())
        }
    }

    /// The same request with the command's PI fields.
    pub fn with_pi(self, pi: CommandPi) -> Request {
        Request { pi, ..self }
    }

    /// The same request with FUA set.
    pub fn with_fua(self) -> Request {
        Request { fua: true, ..self }
    }
}

/// A finished request.
#[derive(Debug)]
pub struct Completion {
    pub tag: u64,
    /// The SQID it was submitted on.
    pub sqid: u8,
    pub opcode: Opcode,
    pub status: Status,
    /// The request's buffers, filled by a successful read.
    pub data: IoBuffer,
    pub metadata: IoBuffer,
}

/// Why [`Workers::submit`] handed a request back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RejectReason {
    /// The worker has `queue_depth` requests outstanding: retry after
    /// polling completions (the target answers RNR meanwhile).
    Busy,
    /// No worker serves this SQID.
    UnknownSqid,
    /// The worker thread has stopped (it panicked).
    Stopped,
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RejectReason::Busy => "worker queue full",
            RejectReason::UnknownSqid => "no worker for this SQID",
            RejectReason::Stopped => "worker stopped",
        })
    }
}

/// A request [`Workers::submit`] did not queue, returned whole.
#[derive(Debug)]
pub struct Rejected {
    pub reason: RejectReason,
    pub request: Request,
}

/// Where a worker runs its namespaces' I/O (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Execution {
    /// On a thread of its own, fed by a bounded queue.
    Thread,
    /// On the thread that calls [`Workers::submit`], within the call; only
    /// for namespaces that never block.
    Inline,
}

impl Execution {
    pub const ALL: [Execution; 2] = [Execution::Thread, Execution::Inline];
}

/// What one worker serves, and where it runs.
#[derive(Debug)]
pub struct WorkerSpec<S = Storage> {
    /// Target SQIDs routed to this worker (at least one).
    pub sqids: Vec<u8>,
    /// The namespaces it owns, distinct NSIDs.
    pub namespaces: Vec<Namespace<S>>,
    pub execution: Execution,
}

impl<S> WorkerSpec<S> {
    /// A worker on a thread of its own.
    pub fn new(sqids: Vec<u8>, namespaces: Vec<Namespace<S>>) -> WorkerSpec<S> {
        WorkerSpec {
            sqids,
            namespaces,
            execution: Execution::Thread,
        }
    }

    /// A worker that runs inline on the caller's thread: for namespaces
    /// that never block (RAM).
    pub fn inline(sqids: Vec<u8>, namespaces: Vec<Namespace<S>>) -> WorkerSpec<S> {
        WorkerSpec {
            execution: Execution::Inline,
            ..WorkerSpec::new(sqids, namespaces)
        }
    }

    /// The same spec, run as `execution` says.
    pub fn with_execution(self, execution: Execution) -> WorkerSpec<S> {
        WorkerSpec { execution, ..self }
    }
}

/// The storage workers and the datapath's side of their queues.
pub struct Workers<S: BlockStore + 'static = Storage> {
    /// Target SQID → index in `workers`.
    route: [Option<u16>; 256],
    workers: Vec<Worker<S>>,
    /// The threads' completions. `None` once shutting down, so no worker
    /// can wait on a full queue.
    completions: Option<Receiver<Completion>>,
    /// The inline workers' completions, in the order they ran; room for
    /// all their outstanding requests, allocated up front.
    done: VecDeque<Completion>,
    queue_depth: usize,
}

struct Worker<S> {
    run: Run<S>,
    /// Submitted and not yet polled back.
    in_flight: usize,
}

enum Run<S> {
    Thread {
        requests: Option<SyncSender<(u8, Request)>>,
        thread: Option<JoinHandle<Vec<Namespace<S>>>>,
    },
    Inline {
        namespaces: Vec<Namespace<S>>,
    },
}

impl<S: BlockStore + 'static> Workers<S> {
    /// Starts one worker per spec, each with a queue of `queue_depth`
    /// requests: a thread for [`Execution::Thread`], none for
    /// [`Execution::Inline`].
    ///
    /// # Errors
    ///
    /// [`ConfigError::Invalid`] naming `queue_depth`, `workers`, `sqids`
    /// (none, or one served twice), `nsid` (twice in one worker) or
    /// `execution` (inline, for a namespace that may block);
    /// [`ConfigError::Io`] when a thread cannot start (those already
    /// started are joined).
    pub fn spawn(specs: Vec<WorkerSpec<S>>, queue_depth: usize) -> Result<Workers<S>, ConfigError> {
        // Each queue's slots are allocated up front.
        if queue_depth == 0 || queue_depth > MAX_QUEUE_DEPTH {
            return Err(ConfigError::invalid(
                "queue_depth",
                queue_depth,
                "must be 1 to 65536",
            ));
        }
        if specs.is_empty() || specs.len() > 256 {
            return Err(ConfigError::invalid(
                "workers",
                specs.len(),
                "must be 1 to 256",
            ));
        }
        let mut route = [None; 256];
        for (index, spec) in specs.iter().enumerate() {
            if spec.sqids.is_empty() {
                return Err(ConfigError::invalid(
                    "sqids",
                    format!("worker {index}: []"),
                    "a worker serves at least one SQID",
                ));
            }
            for &sqid in &spec.sqids {
                let slot = &mut route[usize::from(sqid)];
                if slot.is_some() {
                    return Err(ConfigError::invalid(
                        "sqids",
                        sqid,
                        "SQID served by two workers",
                    ));
                }
                *slot = Some(index as u16);
            }
            for (position, namespace) in spec.namespaces.iter().enumerate() {
                let nsid = namespace.nsid();
                if spec.namespaces[..position]
                    .iter()
                    .any(|other| other.nsid() == nsid)
                {
                    return Err(ConfigError::invalid(
                        "nsid",
                        nsid,
                        "namespace twice on one worker",
                    ));
                }
                if spec.execution == Execution::Inline && namespace.may_block() {
                    return Err(ConfigError::invalid(
                        "execution",
                        format!("inline, namespace {nsid}"),
                        "a namespace that may block runs on a thread of its own",
                    ));
                }
            }
        }
        let inline = specs
            .iter()
            .filter(|spec| spec.execution == Execution::Inline)
            .count();
        let threads = specs.len() - inline;
        let (completion_sender, completions) = mpsc::sync_channel(threads * queue_depth);
        let mut workers = Workers {
            route,
            workers: Vec::with_capacity(specs.len()),
            completions: Some(completions),
            done: VecDeque::with_capacity(inline * queue_depth),
            queue_depth,
        };
        for spec in specs {
            if spec.execution == Execution::Inline {
                workers.workers.push(Worker {
                    run: Run::Inline {
                        namespaces: spec.namespaces,
                    },
                    in_flight: 0,
                });
                continue;
            }
            let (requests, receiver) = mpsc::sync_channel(queue_depth);
            let completions = completion_sender.clone();
            let name = format!("nvme-sq{}", spec.sqids[0]);
            let namespaces = spec.namespaces;
            let thread = thread::Builder::new()
                .name(name.clone())
                .spawn(move || serve(namespaces, &receiver, &completions))
                .map_err(|error| ConfigError::io(name, error))?;
            workers.workers.push(Worker {
                run: Run::Thread {
                    requests: Some(requests),
                    thread: Some(thread),
                },
                in_flight: 0,
            });
        }
        Ok(workers)
    }

    /// Queues `request` for the worker of `sqid`, or runs it now on an
    /// inline worker; never blocks.
    ///
    /// # Errors
    ///
    /// [`Rejected`] holding the request, with
    /// [`Busy`](RejectReason::Busy) when the worker has `queue_depth`
    /// requests outstanding.
    // The request (128 bytes with the reason) comes back by value: boxing
    // it would allocate on every Busy, on the datapath.
    #[allow(clippy::result_large_err)]
    pub fn submit(&mut self, sqid: u8, request: Request) -> Result<(), Rejected> {
        let reject = |reason, request| Err(Rejected { reason, request });
        let Some(index) = self.route[usize::from(sqid)] else {
            return reject(RejectReason::UnknownSqid, request);
        };
        // `route` only names workers that were started.
        let Some(worker) = self.workers.get_mut(usize::from(index)) else {
            return reject(RejectReason::Stopped, request);
        };
        if worker.in_flight >= self.queue_depth {
            return reject(RejectReason::Busy, request);
        }
        match &mut worker.run {
            Run::Inline { namespaces } => {
                // Within `done`'s capacity: `in_flight` is below the depth.
                self.done.push_back(complete(sqid, namespaces, request));
                worker.in_flight += 1;
                Ok(())
            }
            Run::Thread { requests: None, .. } => reject(RejectReason::Stopped, request),
            Run::Thread {
                requests: Some(requests),
                ..
            } => match requests.try_send((sqid, request)) {
                Ok(()) => {
                    worker.in_flight += 1;
                    Ok(())
                }
                Err(TrySendError::Full((_, request))) => reject(RejectReason::Busy, request),
                Err(TrySendError::Disconnected((_, request))) => {
                    reject(RejectReason::Stopped, request)
                }
            },
        }
    }

    /// A finished request, if one is ready; never blocks.
    pub fn poll_completion(&mut self) -> Option<Completion> {
        let completion = match self.done.pop_front() {
            Some(completion) => completion,
            None => self.completions.as_ref()?.try_recv().ok()?,
        };
        if let Some(index) = self.route[usize::from(completion.sqid)] {
            if let Some(worker) = self.workers.get_mut(usize::from(index)) {
                worker.in_flight = worker.in_flight.saturating_sub(1);
            }
        }
        Some(completion)
    }

    /// Requests submitted and not yet polled back, over all workers.
    pub fn in_flight(&self) -> usize {
        self.workers.iter().map(|worker| worker.in_flight).sum()
    }

    /// Requests outstanding on the worker of `sqid` (0 for an unknown one).
    pub fn in_flight_on(&self, sqid: u8) -> usize {
        self.route[usize::from(sqid)]
            .and_then(|index| self.workers.get(usize::from(index)))
            .map_or(0, |worker| worker.in_flight)
    }

    pub fn queue_depth(&self) -> usize {
        self.queue_depth
    }

    /// Whether a worker serves `sqid`.
    pub fn serves(&self, sqid: u8) -> bool {
        self.route[usize::from(sqid)].is_some()
    }

    /// Lets every worker finish its queue, joins them and returns their
    /// namespaces (those of a worker that panicked are lost).
    pub fn shutdown(mut self) -> Vec<Namespace<S>> {
        self.join()
    }

    fn join(&mut self) -> Vec<Namespace<S>> {
        self.completions = None;
        self.done.clear();
        for worker in &mut self.workers {
            if let Run::Thread { requests, .. } = &mut worker.run {
                *requests = None;
            }
        }
        let mut namespaces = Vec::new();
        for worker in &mut self.workers {
            match &mut worker.run {
                Run::Thread { thread, .. } => {
                    if let Some(Ok(owned)) = thread.take().map(JoinHandle::join) {
                        namespaces.extend(owned);
                    }
                }
                Run::Inline { namespaces: owned } => namespaces.append(owned),
            }
        }
        namespaces
    }
}

impl<S: BlockStore + 'static> Drop for Workers<S> {
    fn drop(&mut self) {
        self.join();
    }
}

impl<S: BlockStore + 'static> fmt::Debug for Workers<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Workers")
            .field("workers", &self.workers.len())
            .field("queue_depth", &self.queue_depth)
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

/// A worker thread's loop: until the datapath closes the queue, run each
/// request and send its completion.
fn serve<S: BlockStore>(
    mut namespaces: Vec<Namespace<S>>,
    requests: &Receiver<(u8, Request)>,
    completions: &SyncSender<Completion>,
) -> Vec<Namespace<S>> {
    while let Ok((sqid, request)) = requests.recv() {
        // The queue has room for every outstanding request, so this does
        // not wait. It fails only while `Workers` shuts down; the rest of
        // the queue still runs.
        let _ = completions.send(complete(sqid, &mut namespaces, request));
    }
    namespaces
}

/// Runs `request` on its namespace; its buffers move into the completion.
fn complete<S: BlockStore>(
    sqid: u8,
    namespaces: &mut [Namespace<S>],
    mut request: Request,
) -> Completion {
    let status = execute(namespaces, &mut request);
    Completion {
        tag: request.tag,
        sqid,
        opcode: request.opcode,
        status,
        data: request.data,
        metadata: request.metadata,
    }
}

fn execute<S: BlockStore>(namespaces: &mut [Namespace<S>], request: &mut Request) -> Status {
    let Some(namespace) = namespaces
        .iter_mut()
        .find(|namespace| namespace.nsid() == request.nsid)
    else {
        return Status::INVALID_NAMESPACE;
    };
    let (slba, nlb) = (request.slba, request.nlb);
    let result = match request.opcode {
        Opcode::Read => namespace.read(
            slba,
            nlb,
            &request.pi,
            &mut request.data,
            &mut request.metadata,
        ),
        Opcode::Write => namespace.write(
            slba,
            nlb,
            &request.pi,
            &request.data,
            &request.metadata,
            request.fua,
        ),
        Opcode::Flush => namespace.flush(),
        Opcode::WriteZeroes => namespace.write_zeroes(slba, nlb),
        Opcode::Deallocate => namespace.deallocate(slba, nlb),
    };
    match result {
        Ok(()) => Status::SUCCESS,
        Err(status) => status,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Arc, Condvar, Mutex};
    use std::time::{Duration, Instant};

    use super::*;
    use crate::namespace::buffer::BufferPool;
    use crate::namespace::config::{NamespaceConfig, NamespaceFormat, Protection};
    use crate::namespace::faults::FaultRule;
    use crate::namespace::file::FileOptions;
    use crate::namespace::pi::protect;
    use crate::namespace::ram::RamStore;
    use crate::namespace::testing::TempDir;

    /// Deadline for anything a test waits on; only a broken build gets near.
    const PATIENCE: Duration = Duration::from_secs(20);

    /// Holds every store I/O until opened.
    #[derive(Default)]
    struct Gate {
        open: Mutex<bool>,
        changed: Condvar,
        /// I/Os that reached the gate.
        arrived: AtomicUsize,
    }

    impl Gate {
        fn opened() -> Arc<Gate> {
            let gate = Arc::new(Gate::default());
            gate.open();
            gate
        }

        fn open(&self) {
            *self.open.lock().unwrap() = true;
            self.changed.notify_all();
        }

        fn is_open(&self) -> bool {
            *self.open.lock().unwrap()
        }

        fn pass(&self) {
            self.arrived.fetch_add(1, Ordering::SeqCst);
            let mut open = self.open.lock().unwrap();
            while !*open {
                open = self.changed.wait(open).unwrap();
            }
        }

        fn wait_arrived(&self, count: usize) {
            let start = Instant::now();
            while self.arrived.load(Ordering::SeqCst) < count {
                assert!(
                    start.elapsed() < PATIENCE,
                    "the worker never reached the store"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    /// Opens the gate when dropped: declared after the [`Workers`], it lets
    /// a failing test unwind (dropping the workers joins the gated thread)
    /// instead of hanging.
    struct OpenOnDrop(Arc<Gate>);

    impl Drop for OpenOnDrop {
        fn drop(&mut self) {
            self.0.open();
        }
    }

    /// A RAM store whose I/O waits at a gate: a deliberately slow device.
    struct GatedStore {
        inner: RamStore,
        gate: Arc<Gate>,
        executed: Arc<AtomicUsize>,
        dropped: Arc<AtomicBool>,
    }

    impl BlockStore for GatedStore {
        fn read(&mut self, lba: u64, data: &mut [u8], metadata: &mut [u8]) -> Result<(), Status> {
            self.gate.pass();
            self.executed.fetch_add(1, Ordering::SeqCst);
            self.inner.read(lba, data, metadata)
        }

        fn write(&mut self, lba: u64, data: &[u8], metadata: &[u8]) -> Result<(), Status> {
            self.gate.pass();
            self.executed.fetch_add(1, Ordering::SeqCst);
            self.inner.write(lba, data, metadata)
        }

        fn write_zeroes(&mut self, lba: u64, nlb: u64) -> Result<(), Status> {
            self.inner.write_zeroes(lba, nlb)
        }

        fn flush(&mut self) -> Result<(), Status> {
            Ok(())
        }
    }

    impl Drop for GatedStore {
        fn drop(&mut self) {
            self.dropped.store(true, Ordering::SeqCst);
        }
    }

    struct Probe {
        gate: Arc<Gate>,
        executed: Arc<AtomicUsize>,
        dropped: Arc<AtomicBool>,
    }

    fn format() -> NamespaceFormat {
        NamespaceConfig::new(1, 1024, 512).validate().unwrap()
    }

    fn gated(gate: Arc<Gate>) -> (Namespace<GatedStore>, Probe) {
        let probe = Probe {
            gate: gate.clone(),
            executed: Arc::default(),
            dropped: Arc::default(),
        };
        let store = GatedStore {
            inner: RamStore::new(format()),
            gate,
            executed: probe.executed.clone(),
            dropped: probe.dropped.clone(),
        };
        (Namespace::with_store(format(), store), probe)
    }

    fn write(tag: u64, slba: u64) -> Request {
        Request::write(
            tag,
            1,
            slba,
            1,
            IoBuffer::from_slice(&[tag as u8; 512]),
            IoBuffer::new(),
        )
    }

    /// Polls until `count` completions have arrived.
    fn collect<S: BlockStore>(workers: &mut Workers<S>, count: usize) -> Vec<Completion> {
        let start = Instant::now();
        let mut completions = Vec::new();
        while completions.len() < count {
            assert!(
                start.elapsed() < PATIENCE,
                "{} of {count} completions",
                completions.len()
            );
            match workers.poll_completion() {
                Some(completion) => completions.push(completion),
                None => std::thread::sleep(Duration::from_millis(1)),
            }
        }
        completions
    }

    #[test]
    fn a_slow_worker_blocks_neither_submit_nor_other_sqids() {
        let (slow, slow_probe) = gated(Arc::new(Gate::default()));
        let (fast, _) = gated(Gate::opened());
        let specs = vec![
            WorkerSpec::new(vec![1], vec![slow]),
            WorkerSpec::new(vec![2], vec![fast]),
        ];
        let mut workers = Workers::spawn(specs, 4).unwrap();
        let _release = OpenOnDrop(slow_probe.gate.clone());

        workers.submit(1, write(100, 0)).unwrap();
        slow_probe.gate.wait_arrived(1);
        // The slow worker is inside its store: its queue fills, then
        // submit says Busy at once.
        for tag in 101..104 {
            workers.submit(1, write(tag, tag)).unwrap();
        }
        let rejected = workers.submit(1, write(104, 4)).unwrap_err();
        assert_eq!(rejected.reason, RejectReason::Busy);
        assert_eq!(rejected.request.tag, 104);

        // Another SQID's worker completes everything meanwhile.
        let mut fast_tags = Vec::new();
        for tag in 200..240 {
            loop {
                match workers.submit(2, write(tag, tag)) {
                    Ok(()) => break,
                    Err(rejected) => assert_eq!(rejected.reason, RejectReason::Busy),
                }
                fast_tags.extend(collect(&mut workers, 1).into_iter().map(|c| {
                    assert_eq!(c.sqid, 2, "nothing from the gated worker");
                    c.tag
                }));
            }
        }
        let rest = 40 - fast_tags.len();
        fast_tags.extend(collect(&mut workers, rest).into_iter().map(|c| c.tag));
        fast_tags.sort_unstable();
        assert_eq!(fast_tags, (200..240).collect::<Vec<_>>());
        assert!(!slow_probe.gate.is_open());
        assert_eq!(slow_probe.executed.load(Ordering::SeqCst), 0);
        assert!(workers.poll_completion().is_none());

        slow_probe.gate.open();
        let mut slow_tags: Vec<u64> = collect(&mut workers, 4).iter().map(|c| c.tag).collect();
        slow_tags.sort_unstable();
        assert_eq!(slow_tags, [100, 101, 102, 103]);
        assert_eq!(workers.in_flight(), 0);
    }

    #[test]
    fn busy_until_a_completion_is_polled() {
        let (namespace, probe) = gated(Arc::new(Gate::default()));
        let mut workers =
            Workers::spawn(vec![WorkerSpec::new(vec![7], vec![namespace])], 2).unwrap();
        workers.submit(7, write(1, 1)).unwrap();
        workers.submit(7, write(2, 2)).unwrap();
        let request = write(3, 3);
        let address = request.data.as_ptr();
        let rejected = workers.submit(7, request).unwrap_err();
        assert_eq!(rejected.reason, RejectReason::Busy);
        assert_eq!(
            rejected.request.data.as_ptr(),
            address,
            "the same buffer back"
        );
        assert_eq!(workers.in_flight_on(7), 2);
        let unknown = workers.submit(8, write(4, 4)).unwrap_err();
        assert_eq!(unknown.reason, RejectReason::UnknownSqid);

        // Executed but not polled still counts: the completion queue keeps
        // room for it.
        probe.gate.open();
        let start = Instant::now();
        while probe.executed.load(Ordering::SeqCst) < 2 {
            assert!(start.elapsed() < PATIENCE);
            std::thread::sleep(Duration::from_millis(1));
        }
        let again = workers.submit(7, rejected.request).unwrap_err();
        assert_eq!(again.reason, RejectReason::Busy);

        let first = collect(&mut workers, 1);
        assert_eq!(first[0].status, Status::SUCCESS);
        workers.submit(7, again.request).unwrap();
        let rest = collect(&mut workers, 2);
        let mut tags: Vec<u64> = first.iter().chain(&rest).map(|c| c.tag).collect();
        tags.sort_unstable();
        assert_eq!(tags, [1, 2, 3]);
    }

    #[test]
    fn drop_joins_every_worker() {
        let (namespace, probe) = gated(Arc::new(Gate::default()));
        let (other, other_probe) = gated(Gate::opened());
        let specs = vec![
            WorkerSpec::new(vec![0, 1], vec![namespace]),
            WorkerSpec::new(vec![2], vec![other]),
        ];
        let mut workers = Workers::spawn(specs, 8).unwrap();
        let _release = OpenOnDrop(probe.gate.clone());
        for tag in 0..3 {
            workers.submit(tag as u8, write(tag, tag)).unwrap();
        }
        probe.gate.wait_arrived(1);
        let gate = probe.gate.clone();
        let opener = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            gate.open();
        });
        drop(workers);
        // Drop returned only after the gated worker ran its queue and
        // its thread ended (its namespace, owned by the thread, is gone).
        assert!(probe.dropped.load(Ordering::SeqCst));
        assert!(other_probe.dropped.load(Ordering::SeqCst));
        assert_eq!(probe.executed.load(Ordering::SeqCst), 2);
        assert_eq!(other_probe.executed.load(Ordering::SeqCst), 1);
        opener.join().unwrap();
    }

    #[test]
    fn shutdown_returns_the_namespaces() {
        let (namespace, _) = gated(Gate::opened());
        let mut workers =
            Workers::spawn(vec![WorkerSpec::new(vec![0], vec![namespace])], 4).unwrap();
        workers.submit(0, write(1, 9)).unwrap();
        let namespaces = workers.shutdown();
        assert_eq!(namespaces.len(), 1);
        assert_eq!(namespaces[0].stats().writes, 1);
    }

    #[test]
    fn spawn_refuses_bad_specs() {
        let field = |specs: Vec<WorkerSpec<GatedStore>>, depth| {
            Workers::spawn(specs, depth).unwrap_err().field()
        };
        let one = || gated(Gate::opened()).0;
        assert_eq!(
            field(vec![WorkerSpec::new(vec![0], vec![one()])], 0),
            Some("queue_depth")
        );
        assert_eq!(field(vec![], 4), Some("workers"));
        assert_eq!(
            field(vec![WorkerSpec::new(vec![], vec![one()])], 4),
            Some("sqids")
        );
        let twice = vec![
            WorkerSpec::new(vec![0, 5], vec![one()]),
            WorkerSpec::new(vec![5], vec![one()]),
        ];
        assert_eq!(field(twice, 4), Some("sqids"));
        assert_eq!(
            field(vec![WorkerSpec::new(vec![0], vec![one(), one()])], 4),
            Some("nsid")
        );
    }

    /// Many commands over several workers and backends, with buffers from
    /// pools: every completion comes back once with its buffers, and the
    /// data read is the data written; the RAM workers on threads, then
    /// inline beside the file's thread.
    #[test]
    fn every_completion_comes_back_exactly_once() {
        for ram in Execution::ALL {
            exactly_once(ram);
        }
    }

    fn exactly_once(ram_execution: Execution) {
        let dir = TempDir::new("workers");
        let ram =
            |nsid, lba_size| Namespace::ram(&NamespaceConfig::new(nsid, 512, lba_size)).unwrap();
        let verified = NamespaceConfig::new(1, 512, 4096).with_metadata(16, Protection::Verified);
        let file_config = NamespaceConfig::new(1, 512, 4096).with_metadata(8, Protection::Opaque);
        let file =
            Namespace::file(&file_config, dir.path().join("ns"), FileOptions::default()).unwrap();
        let specs = vec![
            WorkerSpec::new(vec![0, 1], vec![ram(1, 512), ram(2, 4096)])
                .with_execution(ram_execution),
            WorkerSpec::new(vec![2], vec![file]),
            WorkerSpec::new(vec![3], vec![Namespace::ram(&verified).unwrap()])
                .with_execution(ram_execution),
        ];
        // (sqid, nsid, lba size, metadata size) of each target.
        let targets = [
            (0, 1, 512, 0),
            (1, 2, 4096, 0),
            (2, 1, 4096, 8),
            (3, 1, 4096, 16),
        ];
        let formats: Vec<NamespaceFormat> = specs
            .iter()
            .flat_map(|spec| spec.namespaces.iter().map(|ns| *ns.format()))
            .collect();
        let mut workers = Workers::spawn(specs, 3).unwrap();
        let mut data_pool = BufferPool::new(6, 4 * 4096);
        let mut metadata_pool = BufferPool::new(6, 4 * 16);

        // Command `tag` targets `targets[tag % 4]`, 1–4 blocks at a slba of
        // its own; it writes in the first pass and reads in the second.
        let command = |tag: u64| {
            let (sqid, nsid, lba_size, metadata_size) = targets[tag as usize % 4];
            let nlb = 1 + (tag / 4 % 4) as u32;
            let slba = tag / 4 * 4;
            (sqid, nsid, lba_size, metadata_size, slba, nlb)
        };
        let content = |tag: u64, len: usize| -> Vec<u8> {
            (0..len)
                .map(|i| (i as u64 * 7).wrapping_add(tag) as u8)
                .collect()
        };
        const COMMANDS: u64 = 200;
        for pass in [Opcode::Write, Opcode::Read] {
            let mut seen = BTreeMap::new();
            let mut next = 0;
            let start = Instant::now();
            while seen.len() < COMMANDS as usize {
                assert!(start.elapsed() < PATIENCE);
                if let Some(completion) = workers.poll_completion() {
                    assert_eq!(completion.status, Status::SUCCESS, "tag {}", completion.tag);
                    assert_eq!(completion.opcode, pass);
                    let tag = completion.tag;
                    let (sqid, .., slba, nlb) = command(tag);
                    assert_eq!(completion.sqid, sqid);
                    if pass == Opcode::Read {
                        let (_, _, lba_size, metadata_size, ..) = command(tag);
                        assert_eq!(
                            &completion.data[..],
                            &content(tag, nlb as usize * lba_size)[..]
                        );
                        let mut metadata = content(!tag, nlb as usize * metadata_size);
                        let format = formats[tag as usize % 4];
                        protect(
                            format.format(),
                            &completion.data,
                            &mut metadata,
                            slba as u32,
                            0x77,
                        );
                        assert_eq!(&completion.metadata[..], &metadata[..]);
                    }
                    assert!(seen.insert(tag, ()).is_none(), "tag {tag} completed twice");
                    data_pool.put(completion.data);
                    metadata_pool.put(completion.metadata);
                    continue;
                }
                if next == COMMANDS || data_pool.available() == 0 || metadata_pool.available() == 0
                {
                    std::thread::yield_now();
                    continue;
                }
                let (sqid, nsid, lba_size, metadata_size, slba, nlb) = command(next);
                let (Some(mut data), Some(mut metadata)) = (data_pool.take(), metadata_pool.take())
                else {
                    unreachable!("both pools had a buffer");
                };
                data.set_len(nlb as usize * lba_size).unwrap();
                metadata.set_len(nlb as usize * metadata_size).unwrap();
                let pi = CommandPi {
                    app_tag: 0x77,
                    ..CommandPi::type1(slba)
                };
                let request = if pass == Opcode::Write {
                    let (data_len, metadata_len) = (data.len(), metadata.len());
                    data.copy_from_slice(&content(next, data_len));
                    metadata.copy_from_slice(&content(!next, metadata_len));
                    let format = formats[next as usize % 4];
                    protect(
                        format.format(),
                        &data,
                        &mut metadata,
                        pi.ref_tag,
                        pi.app_tag,
                    );
                    Request::write(next, nsid, slba, nlb, data, metadata)
                } else {
                    Request::read(next, nsid, slba, nlb, data, metadata)
                };
                match workers.submit(sqid, request.with_pi(pi)) {
                    Ok(()) => next += 1,
                    Err(Rejected {
                        reason: RejectReason::Busy,
                        request,
                    }) => {
                        data_pool.put(request.data);
                        metadata_pool.put(request.metadata);
                    }
                    Err(rejected) => panic!("{}", rejected.reason),
                }
            }
            assert_eq!(workers.in_flight(), 0);
            assert!(workers.poll_completion().is_none(), "no extra completion");
            assert_eq!(data_pool.available(), 6, "every buffer came back");
            assert_eq!(metadata_pool.available(), 6);
        }
    }

    #[test]
    fn other_commands_and_unknown_namespaces() {
        for execution in Execution::ALL {
            other_commands(execution);
        }
    }

    fn other_commands(execution: Execution) {
        let namespace = Namespace::ram(&NamespaceConfig::new(3, 64, 512)).unwrap();
        let spec = WorkerSpec::new(vec![0], vec![namespace]).with_execution(execution);
        let mut workers = Workers::spawn(vec![spec], 8).unwrap();
        workers
            .submit(
                0,
                Request::write(1, 3, 0, 1, IoBuffer::from_slice(&[5; 512]), IoBuffer::new())
                    .with_fua(),
            )
            .unwrap();
        workers.submit(0, Request::flush(2, 3)).unwrap();
        workers
            .submit(0, Request::write_zeroes(3, 3, 0, 1))
            .unwrap();
        workers.submit(0, Request::deallocate(4, 3, 60, 8)).unwrap();
        workers
            .submit(
                0,
                Request::read(5, 3, 0, 1, IoBuffer::zeroed(512), IoBuffer::new()),
            )
            .unwrap();
        workers.submit(0, Request::flush(6, 4)).unwrap();
        let mut completions = collect(&mut workers, 6);
        completions.sort_by_key(|completion| completion.tag);
        let statuses: Vec<Status> = completions.iter().map(|c| c.status).collect();
        assert_eq!(
            statuses,
            [
                Status::SUCCESS,
                Status::SUCCESS,
                Status::SUCCESS,
                Status::LBA_OUT_OF_RANGE,
                Status::SUCCESS,
                Status::INVALID_NAMESPACE,
            ]
        );
        // The read ran after the zeroing: one queue per worker, in order.
        assert_eq!(&completions[4].data[..], &[0; 512][..]);
    }

    /// A RAM store that records the threads it ran on, and says it never
    /// blocks.
    struct ThreadProbe {
        inner: RamStore,
        threads: Arc<Mutex<Vec<std::thread::ThreadId>>>,
    }

    impl BlockStore for ThreadProbe {
        fn read(&mut self, lba: u64, data: &mut [u8], metadata: &mut [u8]) -> Result<(), Status> {
            self.threads
                .lock()
                .unwrap()
                .push(std::thread::current().id());
            self.inner.read(lba, data, metadata)
        }

        fn write(&mut self, lba: u64, data: &[u8], metadata: &[u8]) -> Result<(), Status> {
            self.threads
                .lock()
                .unwrap()
                .push(std::thread::current().id());
            self.inner.write(lba, data, metadata)
        }

        fn write_zeroes(&mut self, lba: u64, nlb: u64) -> Result<(), Status> {
            self.inner.write_zeroes(lba, nlb)
        }

        fn flush(&mut self) -> Result<(), Status> {
            Ok(())
        }

        fn may_block(&self) -> bool {
            false
        }
    }

    /// An inline worker runs each request on the caller's thread, within
    /// `submit`: the completion is there at once, in submission order;
    /// the depth still bounds what is submitted and not yet polled.
    #[test]
    fn an_inline_worker_runs_within_submit() {
        let threads = Arc::new(Mutex::new(Vec::new()));
        let store = ThreadProbe {
            inner: RamStore::new(format()),
            threads: Arc::clone(&threads),
        };
        let namespace = Namespace::with_store(format(), store);
        let mut workers =
            Workers::spawn(vec![WorkerSpec::inline(vec![4], vec![namespace])], 2).unwrap();
        workers.submit(4, write(7, 1)).unwrap();
        let read = Request::read(8, 1, 1, 1, IoBuffer::zeroed(512), IoBuffer::new());
        workers.submit(4, read).unwrap();
        assert_eq!(
            *threads.lock().unwrap(),
            [std::thread::current().id(); 2],
            "both ran on this thread, before submit returned"
        );
        let rejected = workers.submit(4, write(9, 2)).unwrap_err();
        assert_eq!(rejected.reason, RejectReason::Busy);
        assert_eq!(workers.in_flight_on(4), 2);

        let first = workers.poll_completion().expect("the write");
        assert_eq!((first.tag, first.sqid), (7, 4));
        assert_eq!(first.status, Status::SUCCESS);
        let second = workers.poll_completion().expect("the read");
        assert_eq!(second.tag, 8);
        assert_eq!(&second.data[..], &[7; 512][..], "it ran after the write");
        assert!(workers.poll_completion().is_none());
        assert_eq!(workers.in_flight(), 0);

        workers.submit(4, rejected.request).unwrap();
        assert_eq!(workers.poll_completion().map(|c| c.tag), Some(9));
        let namespaces = workers.shutdown();
        assert_eq!(namespaces.len(), 1, "the namespace comes back");
        assert_eq!(namespaces[0].stats().writes, 2);
    }

    /// Inline is refused for a namespace that may block: a store that
    /// does not say it never blocks, a file, RAM with a delay fault.
    #[test]
    fn inline_refuses_a_namespace_that_may_block() {
        let (gated, _) = gated(Gate::opened());
        let refused = Workers::spawn(vec![WorkerSpec::inline(vec![0], vec![gated])], 4);
        assert_eq!(refused.unwrap_err().field(), Some("execution"));

        let dir = TempDir::new("inline");
        let config = NamespaceConfig::new(1, 64, 512);
        let file = Namespace::file(&config, dir.path().join("ns"), FileOptions::default()).unwrap();
        let mut slow = Namespace::ram(&config).unwrap();
        slow.faults_mut()
            .add(FaultRule::slow(0..1, Duration::from_millis(1)));
        for namespace in [file, slow] {
            let refused = Workers::spawn(vec![WorkerSpec::inline(vec![0], vec![namespace])], 4);
            assert_eq!(refused.unwrap_err().field(), Some("execution"));
        }

        let mut failing = Namespace::ram(&config).unwrap();
        failing.faults_mut().add(FaultRule::unreadable(0..1));
        assert!(Workers::spawn(vec![WorkerSpec::inline(vec![0], vec![failing])], 4).is_ok());
    }
}
