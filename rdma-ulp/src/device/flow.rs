//! Flow control between the device and Falcon (RDMA-0.9 §6.5, Falcon-0.9
//! §8.2.3).
//!
//! Layer: RDMA ULP, under [`Device`]. Owns [`Flow`]: per connection and
//! per [`CreditClass`], whether Falcon said Xoff (or refused a submit for
//! credits) and has not said Xon since; and the target's answers to pulls
//! (READ responses, atomic responses, their zero-length error answers)
//! that Falcon refused for Pull Data credits, kept in order and sent again
//! after the Data-class Xon. Nothing is ever dropped for lack of credits:
//! a refused submit stays queued in its QP and goes again after the
//! Request-class Xon.
//!
//! The two classes stop apart: an Xoff of requests (pushes and Pull
//! Requests) never holds back a READ or atomic response (Pull Data), which
//! RDMA-0.9 §6.5 requires "for protocol deadlock avoidance".

use std::collections::VecDeque;

use falcon_core::api::{
    ConnectionHandle, CreditClass, Engine, PacketBuf, RejectReason, Rsn, Timestamp,
    UlpCommandError, UlpHeader, UlpNack,
};

use super::Device;
use crate::data::RdmaData;

/// A target's answer to a pull, waiting for Pull Data credits.
#[derive(Debug)]
pub(crate) enum Answer {
    /// A READ or atomic response.
    Data { header: UlpHeader, data: RdmaData },
    /// A refusal that Falcon answers with zero-length Pull Data.
    Nack(UlpNack),
}

#[derive(Debug)]
pub(crate) struct Waiting {
    pub(crate) connection: ConnectionHandle,
    pub(crate) rsn: Rsn,
    pub(crate) answer: Answer,
}

/// See the module doc.
#[derive(Debug, Default)]
pub(crate) struct Flow {
    /// By the connection's slot index: the handle and, per class, stopped.
    stopped: Vec<Option<(ConnectionHandle, [bool; 2])>>,
    pub(crate) answers: VecDeque<Waiting>,
}

impl Flow {
    /// Whether `class` is stopped on `connection`.
    pub(crate) fn blocked(&self, connection: ConnectionHandle, class: CreditClass) -> bool {
        self.stopped
            .get(connection.index() as usize)
            .and_then(Option::as_ref)
            .is_some_and(|(handle, classes)| *handle == connection && classes[class.index()])
    }

    /// Falcon said Xoff, or refused a submit for `class`.
    pub(crate) fn stop(&mut self, connection: ConnectionHandle, class: CreditClass) {
        let index = connection.index() as usize;
        if self.stopped.len() <= index {
            self.stopped.resize(index + 1, None);
        }
        let entry = &mut self.stopped[index];
        match entry {
            Some((handle, classes)) if *handle == connection => classes[class.index()] = true,
            _ => {
                let mut classes = [false; 2];
                classes[class.index()] = true;
                *entry = Some((connection, classes));
            }
        }
    }

    /// Falcon said Xon.
    pub(crate) fn start(&mut self, connection: ConnectionHandle, class: CreditClass) {
        if let Some(Some((handle, classes))) = self.stopped.get_mut(connection.index() as usize) {
            if *handle == connection {
                classes[class.index()] = false;
            }
        }
    }

    /// `connection` is gone: its flags and waiting answers with it.
    pub(crate) fn forget(&mut self, connection: ConnectionHandle) {
        if let Some(entry) = self.stopped.get_mut(connection.index() as usize) {
            if entry.is_some_and(|(handle, _)| handle == connection) {
                *entry = None;
            }
        }
        self.answers.retain(|w| w.connection != connection);
    }
}

impl Device {
    /// Answers pull `rsn` on `connection` now, or keeps the answer for
    /// after the Data-class Xon when Falcon has no Pull Data credit.
    pub(super) fn answer_pull<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, RdmaData>,
        waiting: Waiting,
    ) {
        if self.flow.blocked(waiting.connection, CreditClass::Data) {
            self.stats.answer_waits += 1;
            self.flow.answers.push_back(waiting);
            return;
        }
        let Waiting {
            connection,
            rsn,
            answer,
        } = waiting;
        let refused = match answer {
            Answer::Data { header, data } => {
                match engine.submit_pull_data(now, connection, rsn, header, data) {
                    Ok(()) => None,
                    Err(rejected) => match rejected.reason {
                        RejectReason::NoResources(_) => Some(Answer::Data {
                            header,
                            data: rejected.returned,
                        }),
                        // The connection or the request is gone: nobody
                        // waits for this answer.
                        _ => None,
                    },
                }
            }
            Answer::Nack(nack) => match engine.ulp_nack(now, connection, rsn, nack) {
                Err(UlpCommandError::NoCredits) => Some(Answer::Nack(nack)),
                _ => None,
            },
        };
        if let Some(answer) = refused {
            self.stats.answer_waits += 1;
            self.flow.stop(connection, CreditClass::Data);
            self.flow.answers.push_back(Waiting {
                connection,
                rsn,
                answer,
            });
        }
    }

    /// Sends the answers kept for credits whose connection has Pull Data
    /// credits again; in order, those still stopped wait on.
    pub(super) fn send_waiting_answers<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, RdmaData>,
    ) {
        for _ in 0..self.flow.answers.len() {
            let Some(waiting) = self.flow.answers.pop_front() else {
                break;
            };
            if self.flow.blocked(waiting.connection, CreditClass::Data) {
                self.flow.answers.push_back(waiting);
                continue;
            }
            self.answer_pull(now, engine, waiting);
        }
    }
}
