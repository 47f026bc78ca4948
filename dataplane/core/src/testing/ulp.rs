//! The scripted ULP of a [`Cluster`] node, and the checkers that run on
//! every event it gets.
//!
//! Layer: test ULP above the engine. The target side answers each request
//! as its connection's [`Policy`] says, or as a plan of [`Answer`]s for
//! that RSN says ([`ClusterNode::plans`](super::ClusterNode::plans)); the
//! initiator side records completions. On every delivery and completion it
//! checks the bytes against [`pattern`] (push payloads at the target, Pull
//! Data at the initiator), exactly-once (an RSN delivered or completed
//! twice panics) and, on ordered connections, RSN order (Falcon 0.9
//! §8.5.2: the target delivers requests in RSN order; §8.4.2: the
//! initiator completes transactions in RSN order).

use std::collections::VecDeque;

use core::time::Duration;

use crate::delivery::{OrderingMode, UlpNack};
use crate::engine::ConnectionHandle;
use crate::port::Port;
use crate::resources::CreditClass;
use crate::transaction::{
    Completion, CompletionStatus, RejectReason, Request, TransactionKind, UlpEvent, UlpHeader,
};

use super::cluster::{pattern, Cluster};

/// What the target ULP does with one delivery of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// ACK (push) or serve the Pull Data (pull).
    Accept,
    /// NACK it.
    Nack(UlpNack),
    /// Never answer.
    Ignore,
}

/// The target ULP's default for a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Answer at once.
    Immediate,
    /// Answer after this long.
    Delay(Duration),
    /// Never answer (a stuck ULP).
    Never,
}

impl<P: Port> Cluster<P> {
    /// The ULP's turn at node `side`: delayed answers that are due, Pull
    /// Data retried, then every event of the engine.
    pub(super) fn run_ulp(&mut self, side: usize) {
        let now = self.now;
        // Delayed answers that are due.
        let mut due = Vec::new();
        let node = &mut self.nodes[side];
        let mut i = 0;
        while i < node.pending.len() {
            if node.pending[i].0 <= now {
                let (_, conn, request) = node.pending.swap_remove(i);
                due.push((conn, request));
            } else {
                i += 1;
            }
        }
        // In arrival order, as `retain` kept them.
        due.sort_by_key(|(_, request)| request.rsn.value());
        for (conn, request) in due {
            self.answer(side, conn, request, Answer::Accept);
        }
        let node = &mut self.nodes[side];
        for (conn, rsn, data) in core::mem::take(&mut node.deferred) {
            if let Err(rejected) =
                node.engine
                    .submit_pull_data(now, node.conns[conn], rsn, UlpHeader::EMPTY, data)
            {
                node.deferred.push((conn, rsn, rejected.returned));
            }
        }
        while let Some(event) = self.nodes[side].engine.poll_event() {
            match event {
                UlpEvent::Completion(c) => self.on_completion(side, c),
                UlpEvent::Request(r) => self.on_request(side, r),
                UlpEvent::Xoff { .. } => self.nodes[side].xoff_events += 1,
                // Only pushes and pulls wait on an Xoff here: the Pull Data
                // the ULP could not send is retried every turn.
                UlpEvent::Xon {
                    connection,
                    class: CreditClass::Request,
                } => {
                    let node = &mut self.nodes[side];
                    node.xon += 1;
                    if let Some(i) = node.conns.iter().position(|&c| c == connection) {
                        node.xoff[i] = false;
                    }
                }
                UlpEvent::Xon { .. } => self.nodes[side].xon += 1,
                UlpEvent::ConnectionError { fault, .. } => {
                    self.nodes[side].connection_errors.push(fault.code());
                }
            }
        }
        // Xon may have reopened submits: let the next turn submit.
    }

    fn conn_index(&self, side: usize, handle: ConnectionHandle) -> usize {
        self.nodes[side]
            .conns
            .iter()
            .position(|&c| c == handle)
            .expect("event of a known connection")
    }

    fn on_request(&mut self, side: usize, request: Request<P::Buf>) {
        let conn = self.conn_index(side, request.connection);
        let (peer, peer_conn) =
            self.nodes[side].peers[conn].expect("a request on a connection with a peer");
        let expect = self.expected[peer]
            .get(&(peer_conn, request.rsn.value()))
            .unwrap_or_else(|| panic!("request {} nobody submitted", request.rsn))
            .clone();
        assert_eq!(request.kind, expect.kind);
        match expect.kind {
            TransactionKind::Push => {
                assert_eq!(
                    request.payload,
                    pattern(expect.tag, expect.len),
                    "push payload of tag {}",
                    expect.tag
                );
            }
            TransactionKind::Pull => {
                assert_eq!(usize::from(request.request_length), expect.len);
                assert_eq!(request.header.as_slice(), expect.tag.to_le_bytes());
                assert!(request.payload.is_empty());
            }
        }
        let node = &mut self.nodes[side];
        node.log[conn].push((request.rsn, request.redelivery, self.now));
        if request.redelivery {
            node.redeliveries += 1;
        } else {
            if self.ordering == OrderingMode::Ordered {
                if let Some(last) = node.deliveries[conn].last() {
                    assert_eq!(
                        request.rsn,
                        last.next(),
                        "target delivered out of RSN order"
                    );
                }
            } else {
                assert!(
                    !node.deliveries[conn].contains(&request.rsn),
                    "delivered twice"
                );
            }
            node.deliveries[conn].push(request.rsn);
        }
        let planned = node
            .plans
            .get_mut(&(conn, request.rsn.value()))
            .and_then(VecDeque::pop_front);
        // §8.5.3.4: after RNR-NACKing N, an ordered ULP keeps NACKing later
        // requests until it accepts N.
        let held_back = match node.rnr_hold[conn] {
            Some((held, nack))
                if self.ordering == OrderingMode::Ordered && request.rsn.after(held) =>
            {
                Some(nack)
            }
            _ => None,
        };
        let planned = match held_back {
            Some(nack) => {
                if let Some(answers) = planned {
                    // The plan's answer is for a later delivery.
                    node.plans
                        .entry((conn, request.rsn.value()))
                        .or_default()
                        .push_front(answers);
                }
                Some(Answer::Nack(nack))
            }
            None => planned,
        };
        if let Some(Answer::Nack(nack @ UlpNack::ReceiverNotReady { .. })) = planned {
            if node.rnr_hold[conn].is_none() {
                node.rnr_hold[conn] = Some((request.rsn, nack));
            }
        }
        if matches!(planned, None | Some(Answer::Accept))
            && node.rnr_hold[conn].is_some_and(|(held, _)| held == request.rsn)
        {
            node.rnr_hold[conn] = None;
        }
        let answer = match (planned, node.policy[conn]) {
            (Some(answer), _) => answer,
            (None, Policy::Immediate) => Answer::Accept,
            (None, Policy::Delay(d)) => {
                node.pending.push((self.now + d, conn, request));
                return;
            }
            (None, Policy::Never) => Answer::Ignore,
        };
        self.answer(side, conn, request, answer);
    }

    fn answer(&mut self, side: usize, conn: usize, mut request: Request<P::Buf>, answer: Answer) {
        let now = self.now;
        let node = &mut self.nodes[side];
        let handle = node.conns[conn];
        // The ULP is done with the payload whatever its answer (an ignored
        // request's too: the peer's retransmission or timeout ends it).
        node.engine.release(core::mem::take(&mut request.payload));
        match answer {
            Answer::Ignore => {}
            Answer::Nack(nack) => {
                node.nacked[conn].push(request.rsn);
                node.engine
                    .ulp_nack(now, handle, request.rsn, nack)
                    .expect("ulp_nack");
            }
            Answer::Accept => match request.kind {
                TransactionKind::Push => {
                    node.engine
                        .ulp_ack(now, handle, request.rsn)
                        .expect("ulp_ack");
                }
                TransactionKind::Pull => {
                    // Take the request first (PullReqUlpAckd releases its
                    // network resources), then answer when credits allow:
                    // holding an unanswered pull while waiting for Pull Data
                    // credits would tie the network region to the data one.
                    node.engine
                        .ulp_ack(now, handle, request.rsn)
                        .expect("ulp_ack");
                    let tag =
                        u64::from_le_bytes(request.header[..8].try_into().expect("8-byte tag"));
                    let data = pattern(tag, usize::from(request.request_length));
                    if let Err(rejected) = node.engine.submit_pull_data(
                        now,
                        handle,
                        request.rsn,
                        UlpHeader::EMPTY,
                        data,
                    ) {
                        // Out of Pull Data credits: a real ULP retries after
                        // the Xon; this one retries every turn.
                        assert!(
                            matches!(rejected.reason, RejectReason::NoResources(_)),
                            "{rejected}"
                        );
                        node.deferred.push((conn, request.rsn, rejected.returned));
                    }
                }
            },
        }
    }

    fn on_completion(&mut self, side: usize, mut completion: Completion<P::Buf>) {
        let conn = self.conn_index(side, completion.connection);
        let expect = self.expected[side]
            .get(&(conn, completion.rsn.value()))
            .unwrap_or_else(|| panic!("completion of unknown {}", completion.rsn))
            .clone();
        assert_eq!(completion.tag, expect.tag);
        assert_eq!(completion.kind, expect.kind);
        let node = &mut self.nodes[side];
        let done = &mut node.completions[conn];
        assert!(
            !done.iter().any(|c| c.rsn == completion.rsn),
            "completed twice: {}",
            completion.rsn
        );
        if self.ordering == OrderingMode::Ordered {
            if let Some(last) = done.last() {
                assert_eq!(
                    completion.rsn,
                    last.rsn.next(),
                    "completion out of RSN order"
                );
            }
        }
        if completion.status == CompletionStatus::Ack {
            match expect.kind {
                TransactionKind::Push => {
                    assert!(completion.data.is_empty());
                    if let Some(source) = &completion.source {
                        assert_eq!(*source, pattern(expect.tag, expect.len));
                    }
                }
                TransactionKind::Pull => {
                    assert_eq!(
                        completion.data,
                        pattern(expect.tag, expect.len),
                        "pull data of tag {}",
                        expect.tag
                    );
                }
            }
        }
        node.engine.release(core::mem::take(&mut completion.data));
        done.push(completion);
    }
}
