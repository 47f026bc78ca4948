//! The ULP commands of the engine (DESIGN.md §5 "ULP interface").
//!
//! Layer: engine, boundary to the ULPs. Implements [`Engine::submit`] (the
//! initiator's push and pull), the target's answers [`Engine::ulp_ack`],
//! [`Engine::ulp_nack`], [`Engine::submit_pull_data`], and
//! [`Engine::release`]. Each finds the connection, hands the command to the
//! transaction sublayer and runs the engine's bookkeeping (scheduler,
//! timers, RUE). Refusals hand the payload back: nothing the ULP hands over
//! is lost silently.

use crate::delivery::UlpNack;
use crate::engine::slab::Slab;
use crate::engine::{arm_connection, conn_in, Connection, ConnectionHandle, Engine};
use crate::port::PacketBuf;
use crate::resources::CreditCounter;
use crate::scheduler::Scheduler;
use crate::seq::Rsn;
use crate::time::Timestamp;
use crate::transaction::DataSource;
use crate::transaction::{
    Payload, RejectReason, Rejected, RnrNack, Transaction, UlpCommandError, UlpHeader,
};

impl<B: PacketBuf, S: DataSource> Engine<B, S> {
    /// §8.4.3.1 / §8.4.3.3: a push or pull from the initiator ULP. Returns
    /// its RSN; the completion comes back as [`UlpEvent::Completion`](crate::transaction::UlpEvent::Completion).
    ///
    /// # Errors
    ///
    /// [`Rejected`] with the transaction: unknown or dead connection, too
    /// long for one packet, out of credits (then also an
    /// [`UlpEvent::Xoff`](crate::transaction::UlpEvent::Xoff)).
    ///
    /// The time is taken as by every ULP command, but submitting reads no
    /// clock: the packet is stamped when it is sent.
    pub fn submit(
        &mut self,
        _now: Timestamp,
        connection: ConnectionHandle,
        transaction: Transaction<S>,
    ) -> Result<Rsn, Rejected<Transaction<S>>> {
        let reject = |reason, returned| Err(Rejected { reason, returned });
        let Some(slot) = self.slot(connection) else {
            return reject(RejectReason::UnknownConnection, transaction);
        };
        let Some(conn) = self.connections.value_mut(slot as usize) else {
            return reject(RejectReason::UnknownConnection, transaction);
        };
        if conn.dead {
            self.shared.stats.rejected += 1;
            return reject(RejectReason::ConnectionNotAlive, transaction);
        }
        let rsn = conn.initiator.submit_with(
            &mut self.shared,
            &mut conn.account,
            conn.handle,
            transaction,
        )?;
        self.data_ring.activate(slot, &mut conn.on_data_ring);
        Ok(rsn)
    }

    /// The target ULP accepted request `rsn` (a Push Data or a Pull
    /// Request delivered as [`UlpEvent::Request`](crate::transaction::UlpEvent::Request)).
    ///
    /// # Errors
    ///
    /// [`UlpCommandError`]: unknown or dead connection, or `rsn` not
    /// awaiting the ULP.
    pub fn ulp_ack(
        &mut self,
        now: Timestamp,
        connection: ConnectionHandle,
        rsn: Rsn,
    ) -> Result<(), UlpCommandError> {
        let slot = connection.index;
        let conn = live_connection(&mut self.connections, connection)?;
        let result = {
            let (target, mut ctx) = conn.target_ctx(now, &mut self.shared);
            target.ulp_ack(&mut ctx, rsn)
        };
        answered(
            &mut self.data_ring,
            &mut self.ack_ring,
            &mut self.unarmed,
            conn,
            slot,
        );
        self.finish(now);
        result
    }

    /// The target ULP refused request `rsn`: RNR (with its timeout), CIE,
    /// NRE or invalid CID, each with the ULP's code (OCP Falcon 0.9
    /// §8.5.3.4–8.5.3.5, §11).
    ///
    /// # Errors
    ///
    /// [`UlpCommandError`]: unknown or dead connection, `rsn` not awaiting
    /// the ULP, or no credit for the zero-length Pull Data of a pull's CIE.
    pub fn ulp_nack(
        &mut self,
        now: Timestamp,
        connection: ConnectionHandle,
        rsn: Rsn,
        nack: UlpNack,
    ) -> Result<(), UlpCommandError> {
        let slot = connection.index;
        let conn = live_connection(&mut self.connections, connection)?;
        let result = {
            let (target, mut ctx) = conn.target_ctx(now, &mut self.shared);
            target.ulp_nack(&mut ctx, rsn, nack)
        };
        answered(
            &mut self.data_ring,
            &mut self.ack_ring,
            &mut self.unarmed,
            conn,
            slot,
        );
        self.finish(now);
        result
    }

    /// The target ULP's Pull Data for pull `rsn`: its ULP `header`, then
    /// the bytes of `data`, read when the packet is built (and again if it
    /// is retransmitted); the engine drops `data` once the Pull Data is
    /// acknowledged. Implies the ULP's ACK of the Pull Request. At most the
    /// request length, and at most one packet's payload ([`max_payload`](Self::max_payload)): the peer's Request
    /// Length is 16 bits and may ask for more than one packet carries (OCP
    /// Falcon 0.9 §5: "each pull request is limited to one MTU").
    ///
    /// # Errors
    ///
    /// [`Rejected`] with `data`: unknown connection or request, longer
    /// than requested or than a packet carries, out of credits (then also
    /// an Xoff).
    pub fn submit_pull_data(
        &mut self,
        now: Timestamp,
        connection: ConnectionHandle,
        rsn: Rsn,
        header: UlpHeader,
        data: S,
    ) -> Result<(), Rejected<S>> {
        let payload = data;
        let slot = match self.live_slot(connection) {
            Ok(slot) => slot,
            Err(UlpCommandError::ConnectionNotAlive) => {
                return Err(Rejected {
                    reason: RejectReason::ConnectionNotAlive,
                    returned: payload,
                })
            }
            Err(_) => {
                return Err(Rejected {
                    reason: RejectReason::UnknownConnection,
                    returned: payload,
                })
            }
        };
        // Checked here, as `submit` checks in the initiator: a longer
        // Pull Data would be queued and never fit a frame.
        let max = self.shared.config.max_payload;
        if header.len() + payload.len() > max {
            self.shared.stats.rejected += 1;
            return Err(Rejected {
                reason: RejectReason::PayloadTooLong { max },
                returned: payload,
            });
        }
        let conn = conn_in(&mut self.connections, slot);
        let result = {
            let (target, mut ctx) = conn.target_ctx(now, &mut self.shared);
            target.submit_pull_data(&mut ctx, rsn, header, payload, Some)
        };
        answered(
            &mut self.data_ring,
            &mut self.ack_ring,
            &mut self.unarmed,
            conn,
            slot,
        );
        self.finish(now);
        result
    }

    /// The credit counters of `connection` (OCP Falcon 0.9 §8.2.3): what
    /// it holds of each credit ([`CreditCounter::used`]) and has left
    /// ([`CreditCounter::available`]), for a ULP that paces itself before
    /// an Xoff. `None` for an unknown connection.
    pub fn credits(&self, connection: ConnectionHandle) -> Option<CreditCounter> {
        let slot = self.slot(connection)?;
        let conn = self.connections.value(slot as usize)?;
        Some(conn.account.credits)
    }

    /// Whether [`poll_receiver_not_ready`](Self::poll_receiver_not_ready)
    /// reports the RNR NACKs our pushes meet from now on (off by default:
    /// Falcon retries them by itself, §8.5.3.4). Turning it off drops the
    /// reports not yet polled.
    pub fn report_receiver_not_ready(&mut self, on: bool) {
        match (on, self.shared.rnr_reports.is_some()) {
            (true, false) => self.shared.rnr_reports = Some(Default::default()),
            (false, true) => self.shared.rnr_reports = None,
            _ => {}
        }
    }

    /// The next RNR NACK one of our pushes met, while
    /// [`report_receiver_not_ready`](Self::report_receiver_not_ready) is
    /// on; the push is still outstanding.
    pub fn poll_receiver_not_ready(&mut self) -> Option<RnrNack> {
        self.shared.rnr_reports.as_mut()?.pop_front()
    }

    /// The ULP is done with a received payload (a
    /// [`Request`](crate::transaction::Request)'s or a
    /// [`Completion`](crate::transaction::Completion)'s): its frame goes
    /// back to the port with the next burst (`io.rs`, or
    /// [`take_released`](Self::take_released)).
    pub fn release(&mut self, payload: Payload<B>) {
        self.shared.release(payload);
    }
}

/// After a target ULP answer on `conn` (in `slot`), found once by the
/// command: an ACK or NACK may now be due, Pull Data may be queued, a
/// timer may have started. No delivery or RUE events come from an answer,
/// so this is less than [`Engine::after_input`].
#[inline(always)]
fn answered<B: PacketBuf, S: DataSource>(
    data_ring: &mut Scheduler,
    ack_ring: &mut Scheduler,
    unarmed: &mut Vec<u32>,
    conn: &mut Connection<B, S>,
    slot: u32,
) {
    if conn.target.has_queued() {
        data_ring.activate(slot, &mut conn.on_data_ring);
    }
    ack_ring.activate(slot, &mut conn.on_ack_ring);
    arm_connection(unarmed, conn, slot);
}

/// The live connection `handle` names, found once: what
/// [`Engine::live_slot`] then [`conn_in`] find, with the same errors, on
/// the target ULP's per-request path.
fn live_connection<B: PacketBuf, S>(
    connections: &mut Slab<Connection<B, S>>,
    handle: ConnectionHandle,
) -> Result<&mut Connection<B, S>, UlpCommandError> {
    match connections.value_mut(handle.index as usize) {
        Some(conn) if conn.handle == handle && !conn.dead => Ok(conn),
        Some(conn) if conn.handle == handle => Err(UlpCommandError::ConnectionNotAlive),
        _ => Err(UlpCommandError::UnknownConnection),
    }
}

#[cfg(test)]
mod tests {
    use crate::engine::{ConnectionConfig, Engine, EngineConfig};
    use crate::ids::ConnectionId;
    use crate::port::FrameBuf;
    use crate::seq::{Psn, Rsn};
    use crate::time::Timestamp;
    use crate::transaction::UlpHeader;
    use crate::transaction::{RejectReason, TransactionKind, UlpEvent};
    use crate::wire::{
        BaseHeader, EthernetAddress, FalconRepr, FrameRepr, FrameTemplate, IpFields, ProtocolType,
        PullRequestRepr, UdpChecksum, PSP_UDP_PORT,
    };

    /// Found by the `engine_rx_sealed` fuzz target: a peer's Pull Request
    /// whose Request Length exceeds one packet's payload, answered in full
    /// by the ULP, queued Pull Data that no frame could carry, and the
    /// transmit path tripped its "frame longer than max_frame_len" check.
    #[test]
    fn pull_data_longer_than_a_packet_is_refused() {
        let now = Timestamp::from_micros(1);
        let mut engine: Engine = Engine::new(EngineConfig::default(), now).expect("config");
        let peer_mac = EthernetAddress([2, 0, 0, 0, 0, 2]);
        let peer_ip = "10.0.0.2".parse().expect("literal address");
        let cid = ConnectionId::truncating(0x10);
        let config = ConnectionConfig::new(cid, ConnectionId::truncating(0x20), peer_ip, peer_mac);
        let conn = engine
            .add_connection(now, config.clone())
            .expect("connection");
        let max = engine.max_payload();
        let request_length = u16::try_from(max + 1000).expect("fits 16 bits");

        let pull = FalconRepr::PullRequest(PullRequestRepr {
            header: BaseHeader {
                connection_id: cid,
                destination_function: config.local_function,
                protocol: ProtocolType::Rdma,
                ack_request: false,
                data_bpsn: Psn::new(0),
                request_bpsn: Psn::new(0),
                psn: Psn::new(0),
                rsn: Rsn::new(0),
            },
            request_length,
            payload_len: 0,
        });
        let template = FrameTemplate::new(FrameRepr {
            destination: EngineConfig::default().local_mac,
            source: peer_mac,
            vlan: None,
            ip: IpFields::V4 {
                src: "10.0.0.2".parse().expect("literal address"),
                dst: "10.0.0.1".parse().expect("literal address"),
                ttl: 64,
                dscp: crate::wire::Dscp::ZERO,
                ecn: crate::wire::Ecn::Ect0,
                ident: 0,
                dont_fragment: true,
            },
            src_port: 0xC020,
            dst_port: PSP_UDP_PORT,
            udp_checksum: UdpChecksum::Zero,
        });
        let mut frame = vec![0u8; 256];
        let start = template.header_len();
        pull.emit(&mut frame[start..]);
        let len = template.emit(&mut frame, pull.buffer_len()).expect("fits");
        let _ = engine.handle_packet(now, FrameBuf::from_frame(&frame[..len], 0));

        let Some(UlpEvent::Request(request)) = engine.poll_event() else {
            panic!("the Pull Request is delivered");
        };
        assert_eq!(request.kind, TransactionKind::Pull);
        assert_eq!(request.request_length, request_length);
        let whole = vec![9; usize::from(request_length)];
        let refused = engine
            .submit_pull_data(now, conn, request.rsn, UlpHeader::EMPTY, whole)
            .expect_err("more than one packet carries");
        assert_eq!(refused.reason, RejectReason::PayloadTooLong { max });
        assert_eq!(refused.returned.len(), usize::from(request_length));

        // One packet's worth is taken and goes out whole.
        engine
            .submit_pull_data(now, conn, request.rsn, UlpHeader::EMPTY, vec![9; max])
            .expect("one packet's payload");
        let mut buf = vec![0u8; engine.max_frame_len()];
        let mut sent = Vec::new();
        while let Some(len) = engine.poll_transmit_into(now, &mut buf) {
            sent.push(len);
        }
        assert!(
            sent.iter().any(|&len| len > max),
            "the Pull Data frame: {sent:?}"
        );
        assert_eq!(engine.stats().drops.total(), 0);
    }
}
