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
//! was given and joins every thread.

use core::fmt;
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::thread::{self, JoinHandle};

use crate::status::Status;

use super::buffer::IoBuffer;
use super::config::ConfigError;
use super::pi::CommandPi;
use super::store::{BlockStore, Storage};
use super::Namespace;

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

/// What one worker thread serves.
#[derive(Debug)]
pub struct WorkerSpec<S = Storage> {
    /// Target SQIDs routed to this worker (at least one).
    pub sqids: Vec<u8>,
    /// The namespaces it owns, distinct NSIDs.
    pub namespaces: Vec<Namespace<S>>,
}

impl<S> WorkerSpec<S> {
    pub fn new(sqids: Vec<u8>, namespaces: Vec<Namespace<S>>) -> WorkerSpec<S> {
        WorkerSpec { sqids, namespaces }
    }
}

/// The storage worker threads and the datapath's side of their queues.
pub struct Workers<S: BlockStore + 'static = Storage> {
    /// Target SQID → index in `workers`.
    route: [Option<u16>; 256],
    workers: Vec<Worker<S>>,
    completions: Receiver<Completion>,
    queue_depth: usize,
}

struct Worker<S> {
    requests: Option<SyncSender<(u8, Request)>>,
    thread: Option<JoinHandle<Vec<Namespace<S>>>>,
    /// Submitted and not yet polled back.
    in_flight: usize,
}

impl<S: BlockStore + 'static> Workers<S> {
    /// Starts one thread per spec, each with a queue of `queue_depth`
    /// requests.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Invalid`] naming `queue_depth`, `workers`, `sqids`
    /// (none, or one served twice) or `nsid` (twice in one worker);
    /// [`ConfigError::Io`] when a thread cannot start (those already
    /// started are joined).
    pub fn spawn(specs: Vec<WorkerSpec<S>>, queue_depth: usize) -> Result<Workers<S>, ConfigError> {
        if queue_depth == 0 {
            return Err(ConfigError::invalid("queue_depth", 0, "must be > 0"));
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
            }
        }
        let (completion_sender, completions) = mpsc::sync_channel(specs.len() * queue_depth);
        let mut workers = Workers {
            route,
            workers: Vec::with_capacity(specs.len()),
            completions,
            queue_depth,
        };
        for spec in specs {
            let (requests, receiver) = mpsc::sync_channel(queue_depth);
            let completions = completion_sender.clone();
            let name = format!("nvme-sq{}", spec.sqids[0]);
            let namespaces = spec.namespaces;
            let thread = thread::Builder::new()
                .name(name.clone())
                .spawn(move || serve(namespaces, &receiver, &completions))
                .map_err(|error| ConfigError::io(name, error))?;
            workers.workers.push(Worker {
                requests: Some(requests),
                thread: Some(thread),
                in_flight: 0,
            });
        }
        Ok(workers)
    }

    /// Queues `request` for the worker of `sqid`; never blocks.
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
        let Some(requests) = &worker.requests else {
            return reject(RejectReason::Stopped, request);
        };
        match requests.try_send((sqid, request)) {
            Ok(()) => {
                worker.in_flight += 1;
                Ok(())
            }
            Err(TrySendError::Full((_, request))) => reject(RejectReason::Busy, request),
            Err(TrySendError::Disconnected((_, request))) => reject(RejectReason::Stopped, request),
        }
    }

    /// A finished request, if one is ready; never blocks.
    pub fn poll_completion(&mut self) -> Option<Completion> {
        let completion = self.completions.try_recv().ok()?;
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

    /// Lets every worker finish its queue, joins them and returns their
    /// namespaces (those of a worker that panicked are lost).
    pub fn shutdown(mut self) -> Vec<Namespace<S>> {
        self.join()
    }

    fn join(&mut self) -> Vec<Namespace<S>> {
        for worker in &mut self.workers {
            worker.requests = None;
        }
        let mut namespaces = Vec::new();
        for worker in &mut self.workers {
            if let Some(thread) = worker.thread.take() {
                if let Ok(owned) = thread.join() {
                    namespaces.extend(owned);
                }
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
    while let Ok((sqid, mut request)) = requests.recv() {
        let status = execute(&mut namespaces, &mut request);
        let completion = Completion {
            tag: request.tag,
            sqid,
            opcode: request.opcode,
            status,
            data: request.data,
            metadata: request.metadata,
        };
        // The queue has room for every outstanding request; it is only
        // gone when `Workers` is being dropped.
        if completions.send(completion).is_err() {
            break;
        }
    }
    namespaces
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
