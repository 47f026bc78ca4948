//! The ULP API: the one module ULP crates (RDMA, NVMe), the DPDK runner and
//! the simulator use (DESIGN.md §5).
//!
//! Layer: the public face of `falcon-core`. Owns nothing: it re-exports,
//! by concern, what a user of the transport needs, so that such a user
//! never reaches into the sublayers (`delivery`, `transaction`,
//! `resources`, `scheduler`, `timer`), whose types are the engine's own.
//!
//! | concern | items |
//! |---|---|
//! | engine | [`Engine`] (generic over the port's [`PacketBuf`] and the ULP's [`DataSource`]), [`EngineConfig`], [`ConfigError`], [`RueMode`] |
//! | node | [`Node`], [`NodeConfig`], [`NodeShard`], [`Steering`]: one engine per lcore, SPIs, keys and rotation node-wide |
//! | connections | [`ConnectionConfig`], [`ConnectionPsp`], [`ConnectionHandle`], [`connect`] / [`PairSpec`], [`Engine::add_connection`], [`Engine::close`], [`Engine::connection_snapshot`] |
//! | frames | [`Engine::handle_packet`] → [`Received`] / [`Disposition`], [`Engine::poll_transmit`], [`Engine::release`], [`Engine::take_released`], the [`Port`] trait |
//! | transactions | [`Transaction`] / [`Op`] with a [`UlpHeader`] and a [`DataSource`], [`Engine::submit`]; target answers [`Engine::ulp_ack`], [`Engine::ulp_nack`] with [`UlpNack`] (RNR, CIE, NRE, invalid CID), [`Engine::submit_pull_data`] |
//! | events | [`Engine::poll_event`] → [`UlpEvent`]: [`Request`] (payload in its frame: [`Payload`]), [`Completion`] with [`CompletionStatus`], connection errors ([`ConnectionFault`]), Xoff/Xon naming the [`CreditClass`]; on request, the RNR NACKs our pushes meet ([`Engine::report_receiver_not_ready`], [`Engine::poll_receiver_not_ready`] → [`RnrNack`]) |
//! | credits | [`Engine::credits`] → [`CreditCounter`] per [`Credit`]; [`CreditLimits`] per connection, [`ResourceConfig`] per engine |
//! | time | [`Timestamp`] (injected, ns), [`Engine::handle_timeout`], [`Engine::poll_timeout`] |
//! | stats | [`EngineStats`], [`ConnectionSnapshot`], [`DropReason`] |
//!
//! A complete loop over the in-process loopback is in the
//! [`engine`](crate::engine) module doc.

pub use crate::delivery::{DeliveryConfig, OrderingMode, OwnPause, RackTlpConfig, XlrFilter};
pub use crate::drop::{DropCounters, DropReason};
pub use crate::engine::{
    connect, rekey_pair, CmEvent, ConfigError, ConnectionConfig, ConnectionHandle, ConnectionPsp,
    ConnectionSnapshot, Disposition, Engine, EngineConfig, EngineStats, InitialSequence,
    NewReceiveSa, PairSpec, PspConfig, Received, RotationError, RueMode, SpiCheckFailure,
};
pub use crate::ids::{ConnectionId, DestinationFunction};
pub use crate::lcore::{Clock, Lcore, SystemClock, Turn, Ulp};
pub use crate::node::{Node, NodeConfig, NodeShard, Steering};
pub use crate::port::{FrameBuf, PacketBuf, Port, PortCapabilities};
pub use crate::resources::{
    Alpha, Credit, CreditClass, CreditCounter, CreditLimits, ResourceConfig, Shortage,
};
pub use crate::seq::{Psn, Rsn};
pub use crate::time::Timestamp;
pub use crate::transaction::{
    Completion, CompletionStatus, ConnectionFault, DataSource, HeaderTooLong, Op, Payload,
    RejectReason, Rejected, Request, RnrNack, Transaction, TransactionConfig, TransactionKind,
    UlpCommandError, UlpEvent, UlpHeader, UlpNack, ULP_HEADER_CAPACITY,
};
pub use crate::wire::{EthernetAddress, RnrTimeout};

#[cfg(test)]
mod tests {
    /// The module is enough for a ULP: an engine pair, a push and a pull
    /// with a header and a source, the target's answers, completions and
    /// credits, all named through `api` alone.
    #[test]
    fn a_ulp_needs_nothing_but_the_api() {
        use crate::api::*;

        let now = Timestamp::from_micros(1);
        let config = |side: u8| EngineConfig {
            local_ip: core::net::IpAddr::V4([10, 0, 0, side].into()),
            local_mac: EthernetAddress([2, 0, 0, 0, 0, side]),
            ..EngineConfig::default()
        };
        let mut a: Engine = Engine::new(config(1), now).expect("config");
        let mut b: Engine = Engine::new(config(2), now).expect("config");
        let (ca, cb) = connect(now, &mut a, &mut b, &PairSpec::default()).expect("connect");
        let header = UlpHeader::new(&[0xAB; 12]).expect("an RBTH's worth");
        a.submit(
            now,
            ca,
            Transaction::push(1, vec![1; 100]).with_header(header),
        )
        .expect("push");
        a.submit(now, ca, Transaction::pull(2, 32).with_header(header))
            .expect("pull");
        assert!(a.credits(ca).is_some_and(|c| c.used(Credit::ReqPktTx) == 2));
        let mut buf = vec![0u8; a.max_frame_len()];
        let mut done = Vec::new();
        for _ in 0..32 {
            for a_to_b in [true, false] {
                let (from, to) = if a_to_b {
                    (&mut a, &mut b)
                } else {
                    (&mut b, &mut a)
                };
                while let Some(len) = from.poll_transmit_into(now, &mut buf) {
                    let received = to.handle_packet(now, FrameBuf::from_frame(&buf[..len], 0));
                    assert_eq!(received.disposition, Disposition::Consumed);
                }
            }
            while let Some(event) = b.poll_event() {
                if let UlpEvent::Request(r) = event {
                    match r.kind {
                        TransactionKind::Push => {
                            assert_eq!(&r.payload[..12], header.as_slice());
                            b.ulp_ack(now, cb, r.rsn).expect("ack");
                            b.release(r.payload);
                        }
                        TransactionKind::Pull => {
                            assert_eq!(r.header, header);
                            b.submit_pull_data(now, cb, r.rsn, header, vec![2; 20])
                                .expect("pull data");
                        }
                    }
                }
            }
            while let Some(event) = a.poll_event() {
                if let UlpEvent::Completion(c) = event {
                    assert_eq!(c.status, CompletionStatus::Ack);
                    done.push((c.tag, c.data.to_vec()));
                    a.release(c.data);
                }
            }
        }
        let mut pull_data = header.to_vec();
        pull_data.extend([2; 20]);
        assert_eq!(done, [(1, Vec::new()), (2, pull_data)]);
    }
}
