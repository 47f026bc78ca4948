//! Receive queues: a QP's own and the shared receive queue (SRQ).
//!
//! Layer: verbs. Owns `ReceiveQueue` (posted receives in order, bounded)
//! and the SRQ's limit event (`IBV_EVENT_SRQ_LIMIT_REACHED`, armed by
//! `srq_limit`, one shot as in verbs). A SEND, or a WRITE with immediate,
//! consumes the oldest receive of its QP's queue, or of its SRQ when the
//! QP has one (many QPs draw from one SRQ in the order their messages
//! come).

use std::collections::VecDeque;

use super::{PostError, RecvWr};

/// Handle of a shared receive queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Srq(pub(crate) u32);

impl Srq {
    /// The raw handle (for a C shim's `ibv_srq *` table).
    pub const fn raw(self) -> u32 {
        self.0
    }
}

/// What an SRQ is created with (`struct ibv_srq_init_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SrqInitAttr {
    /// Receives it holds at most.
    pub max_wr: u32,
    /// Scatter entries per receive at most.
    pub max_sge: u32,
    /// Raise `IBV_EVENT_SRQ_LIMIT_REACHED` once when fewer receives than
    /// this remain (0: never).
    pub srq_limit: u32,
}

/// Posted receives, oldest first.
#[derive(Debug)]
pub(crate) struct ReceiveQueue {
    entries: VecDeque<RecvWr>,
    max_wr: usize,
    max_sge: usize,
}

impl ReceiveQueue {
    pub(crate) fn new(max_wr: usize, max_sge: usize) -> ReceiveQueue {
        ReceiveQueue {
            entries: VecDeque::with_capacity(max_wr.min(4096)),
            max_wr,
            max_sge,
        }
    }

    /// Queues `wr`.
    ///
    /// # Errors
    ///
    /// [`PostError::QueueFull`] or [`PostError::TooManySge`].
    pub(crate) fn post(&mut self, wr: RecvWr) -> Result<(), PostError> {
        if wr.sg_list.len() > self.max_sge {
            return Err(PostError::TooManySge { max: self.max_sge });
        }
        if self.entries.len() >= self.max_wr {
            return Err(PostError::QueueFull);
        }
        self.entries.push_back(wr);
        Ok(())
    }

    /// The oldest receive, taken.
    pub(crate) fn take(&mut self) -> Option<RecvWr> {
        self.entries.pop_front()
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Every receive, taken (a flush).
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = RecvWr> + '_ {
        self.entries.drain(..)
    }
}

/// A shared receive queue as the device keeps it.
#[derive(Debug)]
pub(crate) struct SharedReceiveQueue {
    pub(crate) pd: super::Pd,
    pub(crate) queue: ReceiveQueue,
    /// The armed limit (0: disarmed).
    pub(crate) limit: u32,
    /// QPs that receive from it.
    pub(crate) users: u32,
}

impl SharedReceiveQueue {
    /// Takes the oldest receive; `true` in the second place when that
    /// crossed the armed limit (which disarms it).
    pub(crate) fn take(&mut self) -> Option<(RecvWr, bool)> {
        let wr = self.queue.take()?;
        let crossed = self.limit > 0 && self.queue.len() < self.limit as usize;
        if crossed {
            self.limit = 0;
        }
        Some((wr, crossed))
    }
}

#[cfg(test)]
mod tests {
    use super::super::{SgList, Sge};
    use super::*;

    #[test]
    fn bounded_in_order_and_the_limit_fires_once() {
        let wr = |id| RecvWr::new(id, Sge::default());
        let mut srq = SharedReceiveQueue {
            pd: super::super::Pd(0),
            queue: ReceiveQueue::new(3, 1),
            limit: 2,
            users: 0,
        };
        for id in 0..3 {
            srq.queue.post(wr(id)).expect("room");
        }
        assert_eq!(srq.queue.post(wr(9)), Err(PostError::QueueFull));
        let two = SgList::new(&[Sge::default(); 2]).expect("fits");
        assert_eq!(
            ReceiveQueue::new(4, 1).post(RecvWr {
                wr_id: 0,
                sg_list: two
            }),
            Err(PostError::TooManySge { max: 1 })
        );
        assert_eq!(srq.take().map(|(w, c)| (w.wr_id, c)), Some((0, false)));
        assert_eq!(srq.take().map(|(w, c)| (w.wr_id, c)), Some((1, true)));
        assert_eq!(srq.take().map(|(w, c)| (w.wr_id, c)), Some((2, false)));
        assert_eq!(srq.take(), None);
    }
}
