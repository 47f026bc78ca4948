//! The backend's handling of a device whose connection comes and goes (a
//! remote target): requests wait while it reconnects, commands the lost
//! connection failed are sent again a bounded number of times, and a
//! flush covering writes completed before a reconnection fails once.
//! `Scripted` is an [`NvmeDevice`] over a byte array whose failures the
//! test scripts.

use std::collections::VecDeque;
use std::sync::mpsc::{channel, Receiver};
use std::sync::Mutex;
use std::time::Duration;

use nvme_ulp::initiator::{Icmd, IcmdBuffers, IcmdCompletion, InitiatorStats};
use nvme_ulp::layout::{Format, LbaSize, MetadataSize};
use nvme_ulp::Status;

use super::super::backend::{Completion, Op, Reply, Request};
use super::super::proto::errno;
use super::{Drive, Inbox, Job, Lcore, TRANSIENT_RETRIES};
use crate::nvme::{DeviceStats, NvmeDevice, SubmitError, SubmitRefusal};

const BLOCK: usize = 512;

/// A namespace in memory that completes each command on the next turn,
/// failing the next `transient` ones as a lost connection does, and
/// refusing commands while `down`.
struct Scripted {
    bytes: Vec<u8>,
    queued: VecDeque<Icmd>,
    flushes: VecDeque<u64>,
    done: VecDeque<IcmdCompletion>,
    transient: usize,
    down: bool,
    epoch: u64,
}

impl Scripted {
    fn new(blocks: usize) -> Scripted {
        Scripted {
            bytes: vec![0; blocks * BLOCK],
            queued: VecDeque::new(),
            flushes: VecDeque::new(),
            done: VecDeque::new(),
            transient: 0,
            down: false,
            epoch: 1,
        }
    }

    fn completion(tag: u64, status: Status, buffers: IcmdBuffers) -> IcmdCompletion {
        IcmdCompletion {
            tag,
            status,
            buffers,
            latency: Duration::ZERO,
            ncmds: 1,
        }
    }
}

impl NvmeDevice for Scripted {
    fn submit(&mut self, icmd: Icmd) -> Result<(), SubmitError> {
        if self.down {
            return Err(SubmitError {
                reason: SubmitRefusal::Reconnecting("scripted".into()),
                icmd,
            });
        }
        self.queued.push_back(icmd);
        Ok(())
    }

    fn flush(&mut self, tag: u64) -> Result<(), SubmitRefusal> {
        if self.down {
            return Err(SubmitRefusal::Reconnecting("scripted".into()));
        }
        self.flushes.push_back(tag);
        Ok(())
    }

    fn poll_completion(&mut self) -> Option<IcmdCompletion> {
        self.done.pop_front()
    }

    fn turn(&mut self) -> bool {
        let busy = !self.queued.is_empty() || !self.flushes.is_empty();
        while let Some(icmd) = self.queued.pop_front() {
            let start = icmd.slba as usize * BLOCK;
            let len = (usize::from(icmd.nlb) + 1) * BLOCK;
            if self.transient > 0 {
                self.transient -= 1;
                let done =
                    Scripted::completion(icmd.tag, Status::TRANSIENT_TRANSPORT_ERROR, icmd.buffers);
                self.done.push_back(done);
                continue;
            }
            let buffers = match icmd.buffers {
                IcmdBuffers::Read(mut buffers) => {
                    buffers.data.clear();
                    buffers
                        .data
                        .extend_from_slice(&self.bytes[start..start + len]);
                    IcmdBuffers::Read(buffers)
                }
                IcmdBuffers::Write(buffers) => {
                    self.bytes[start..start + len].copy_from_slice(&buffers.data);
                    IcmdBuffers::Write(buffers)
                }
            };
            self.done
                .push_back(Scripted::completion(icmd.tag, Status::SUCCESS, buffers));
        }
        while let Some(tag) = self.flushes.pop_front() {
            let buffers = IcmdBuffers::Write(Default::default());
            self.done
                .push_back(Scripted::completion(tag, Status::SUCCESS, buffers));
        }
        busy
    }

    fn outstanding(&self) -> usize {
        self.queued.len() + self.flushes.len() + self.done.len()
    }

    fn has_room(&self) -> bool {
        true
    }

    fn stats(&self) -> DeviceStats {
        DeviceStats {
            initiator: InitiatorStats::default(),
            target: None,
            retransmissions: 0,
            drops: Default::default(),
            rnr_nacks: 0,
            faults: Default::default(),
            connects: self.epoch,
            disconnects: self.epoch - 1,
        }
    }

    fn format(&self) -> Format {
        Format {
            lba_size: LbaSize::B512,
            metadata: MetadataSize::None,
        }
    }

    fn blocks(&self) -> u64 {
        (self.bytes.len() / BLOCK) as u64
    }

    fn nsid(&self) -> u32 {
        1
    }

    fn transport(&self) -> String {
        "scripted".into()
    }

    fn epoch(&self) -> u64 {
        self.epoch
    }
}

/// The backend's bookkeeping on a scripted device, and its inbox.
struct Rig {
    lcore: Lcore<Scripted>,
    inbox: Mutex<Inbox>,
}

impl Rig {
    fn new() -> Rig {
        Rig {
            lcore: Lcore::new(Scripted::new(64)),
            inbox: Mutex::new(Inbox::default()),
        }
    }

    fn submit(&mut self, op: Op, offset: u64, length: u32) -> Receiver<Reply> {
        let (tx, rx) = channel();
        let kind = op.kind();
        self.inbox.lock().unwrap().jobs.push_back(Job {
            request: Request { op, offset, length },
            completion: Completion::channel(offset, kind, length, tx),
            write: None,
            retries: 0,
        });
        rx
    }

    fn drive(&mut self) -> Drive {
        self.lcore.drive(&self.inbox, 16)
    }

    fn device(&mut self) -> &mut Scripted {
        &mut self.lcore.device
    }
}

fn write(byte: u8) -> Op {
    Op::Write {
        data: vec![byte; 4 * BLOCK],
        fua: false,
    }
}

#[test]
fn commands_failed_by_a_lost_connection_are_sent_again_a_bounded_number_of_times() {
    let mut rig = Rig::new();
    rig.device().transient = usize::from(TRANSIENT_RETRIES);
    let first = rig.submit(write(7), 0, 4 * BLOCK as u32);
    assert_eq!(rig.drive(), Drive::Idle);
    assert_eq!(first.try_recv().expect("answered").error, 0);
    assert_eq!(rig.lcore.figures.retried, u64::from(TRANSIENT_RETRIES));
    assert_eq!(&rig.device().bytes[..4 * BLOCK], &[7; 4 * BLOCK][..]);
    let read = rig.submit(Op::Read, 0, 4 * BLOCK as u32);
    rig.drive();
    assert_eq!(read.try_recv().expect("answered").data, vec![7; 4 * BLOCK]);

    // One failure more than the retries: EIO, counted.
    rig.device().transient = usize::from(TRANSIENT_RETRIES) + 1;
    let failed = rig.submit(Op::Read, 0, BLOCK as u32);
    rig.drive();
    assert_eq!(failed.try_recv().expect("answered").error, errno::EIO);
    assert_eq!(rig.lcore.figures.icmd_errors, 1);
}

#[test]
fn requests_wait_while_the_device_reconnects() {
    let mut rig = Rig::new();
    rig.device().down = true;
    let read = rig.submit(Op::Read, 0, BLOCK as u32);
    let flush = rig.submit(Op::Flush, 0, 0);
    assert_eq!(rig.drive(), Drive::Reconnecting);
    assert_eq!(rig.drive(), Drive::Reconnecting);
    assert!(read.try_recv().is_err() && flush.try_recv().is_err());
    rig.device().down = false;
    assert_eq!(rig.drive(), Drive::Idle);
    assert_eq!(read.try_recv().expect("answered").error, 0);
    assert_eq!(flush.try_recv().expect("answered").error, 0);
    assert_eq!(rig.lcore.figures.refused, 0);
}

#[test]
fn a_flush_covering_writes_from_before_a_reconnection_fails_once() {
    let mut rig = Rig::new();
    let w = rig.submit(write(1), 0, 4 * BLOCK as u32);
    rig.drive();
    assert_eq!(w.try_recv().expect("answered").error, 0);
    // The connection was set up again: the target may have restarted.
    rig.device().epoch += 1;
    let flush = rig.submit(Op::Flush, 0, 0);
    rig.drive();
    assert_eq!(flush.try_recv().expect("answered").error, errno::EIO);
    let again = rig.submit(Op::Flush, 0, 0);
    rig.drive();
    assert_eq!(again.try_recv().expect("answered").error, 0);
    assert_eq!(rig.lcore.figures.flush_errors, 1);

    // Writes completed on the current connection are flushed as usual,
    // and a FUA write leaves nothing for a flush to cover.
    let w = rig.submit(write(2), 0, 4 * BLOCK as u32);
    rig.drive();
    assert_eq!(w.try_recv().expect("answered").error, 0);
    let flush = rig.submit(Op::Flush, 0, 0);
    rig.drive();
    assert_eq!(flush.try_recv().expect("answered").error, 0);
    let fua = Op::Write {
        data: vec![3; BLOCK],
        fua: true,
    };
    let w = rig.submit(fua, 0, BLOCK as u32);
    rig.drive();
    assert_eq!(w.try_recv().expect("answered").error, 0);
    rig.device().epoch += 1;
    let flush = rig.submit(Op::Flush, 0, 0);
    rig.drive();
    assert_eq!(flush.try_recv().expect("answered").error, 0);
    assert_eq!(rig.lcore.figures.flush_errors, 1);
}
