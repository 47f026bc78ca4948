//! RDMA over Falcon (OCP RDMA over Falcon 0.9): InfiniBand verbs semantics
//! mapped onto Falcon push and pull transactions.
//!
//! Layer: upper-layer protocol over `falcon-core`'s public ULP API. Owns
//! the RDMA-over-Falcon wire format, the verbs objects and the [`Device`]
//! that runs them over one engine. Never touches a port, a clock or a
//! connection's Falcon sequence numbers: Falcon delivers each packet and
//! completes each transaction at most once (RDMA-0.9 §6.8), this crate
//! interprets; the engine's lcore loop drives the device through
//! [`falcon_core::api::Ulp`].
//!
//! What it offers:
//!
//! * [`Device`]: the verbs calls a perftest-like tool or a libibverbs
//!   shim makes, with libibverbs' names and numeric values:
//!   [`alloc_pd`](Device::alloc_pd), [`reg_mr`](Device::reg_mr) over a
//!   caller's [`Region`](verbs::Region) (no copy),
//!   [`create_cq`](Device::create_cq) / [`poll_cq`](Device::poll_cq),
//!   [`create_qp`](Device::create_qp) / [`modify_qp`](Device::modify_qp)
//!   (RESET → INIT → RTR → RTS, ERR; the RC QP's Falcon connection is its
//!   CID, RDMA-0.9 §6.6.1), [`post_send`](Device::post_send) /
//!   [`post_recv`](Device::post_recv), SRQs, address handles for UD
//!   (§6.6.3), [`poll_async_event`](Device::poll_async_event), and one
//!   `Ulp<B, RdmaData>` for all the QPs of an engine.
//! * Operations on RC QPs: SEND (with immediate, with invalidate), RDMA
//!   WRITE (with immediate), RDMA READ, fetch-and-add and compare-and-swap,
//!   segmented into payload-MTU transactions and reassembled into one work
//!   completion (§6.7, [`segment`]); UD SENDs of one MTU with DETH.
//! * The ordering modes (§6.2: strong on ordered Falcon connections, weak
//!   and unordered on unordered ones, with §6.4's limits) and the error
//!   modes (§6.3: verbs-compatible, complete-in-error); the §6.9 CID checks;
//!   flow control on Falcon's credits and Xoff/Xon (§6.5), RNR NACKs with
//!   `min_rnr_timer` and `rnr_retry`.
//! * [`RdmaData`]: the data source the engine reads frames from, straight
//!   out of the registered region (one copy each way: into the frame on
//!   transmit, out of the frame on receive).
//! * [`wire`]: the RBTH and nine extended headers, the opcode table of
//!   RDMA-0.9 §8.1.3, [`wire::RdmaPacket::parse`]; [`seq`]: SN and RMSN.
//!
//! # Example: an RDMA WRITE and its completion
//!
//! Two engines, their frames handed across by hand (an lcore loop over a
//! port does this in a real node: `Lcore::turn(&mut device)`):
//!
//! ```
//! use falcon_core::api::*;
//! use rdma_ulp::verbs::*;
//! use rdma_ulp::{Device, RdmaData};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let now = Timestamp::from_micros(1);
//! let config = |side: u8| EngineConfig {
//!     local_ip: core::net::IpAddr::V4([10, 0, 0, side].into()),
//!     local_mac: EthernetAddress([2, 0, 0, 0, 0, side]),
//!     ..EngineConfig::default()
//! };
//! let mut engines: [Engine<FrameBuf, RdmaData>; 2] =
//!     [Engine::new(config(1), now)?, Engine::new(config(2), now)?];
//! let [a, b] = &mut engines;
//! let spec = PairSpec::default(); // CIDs 0x10 (A) and 0x20 (B), ordered
//! connect(now, a, b, &spec)?;
//!
//! // Each side: a device, a PD, a CQ and an RC QP on the connection.
//! let mut devices = [Device::default(), Device::default()];
//! let mut qps = Vec::new();
//! let mut cqs = Vec::new();
//! for device in &mut devices {
//!     let pd = device.alloc_pd()?;
//!     let cq = device.create_cq(64)?;
//!     qps.push(device.create_qp(pd, QpInitAttr::new(QpType::Rc, cq))?);
//!     cqs.push((pd, cq));
//! }
//! for (side, cid) in [(0, spec.a_cid), (1, spec.b_cid)] {
//!     let (qp, peer) = (qps[side], qps[1 - side]);
//!     let device = &mut devices[side];
//!     device.modify_qp(qp, &QpAttr {
//!         state: Some(QpState::Init),
//!         access: Some(Access::REMOTE_WRITE),
//!         ..QpAttr::default()
//!     })?;
//!     device.modify_qp(qp, &QpAttr {
//!         state: Some(QpState::Rtr),
//!         path_mtu: Some(Mtu::B4096),
//!         dest_qpn: Some(peer),
//!         cid: Some(cid),
//!         max_dest_rd_atomic: Some(1),
//!         min_rnr_timer: Some(RnrTimeout::SHORTEST),
//!         ..QpAttr::default()
//!     })?;
//!     device.modify_qp(qp, &QpAttr {
//!         state: Some(QpState::Rts),
//!         rnr_retry: Some(7),
//!         max_rd_atomic: Some(1),
//!         ..QpAttr::default()
//!     })?;
//! }
//!
//! // A writes 10,000 bytes of its region into B's.
//! let source = Region::from_vec((0..10_000).map(|i| i as u8).collect());
//! let target = Region::new(10_000);
//! let (pd_a, cq_a) = cqs[0];
//! let local = devices[0].reg_mr(pd_a, &source, Access::EMPTY)?;
//! let remote = devices[1].reg_mr(cqs[1].0, &target, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
//! let sge = Sge { addr: local.addr(), length: 10_000, lkey: local.lkey() };
//! let write = WrOp::Write { remote_addr: remote.addr(), rkey: remote.rkey() };
//! devices[0].post_send(qps[0], SendWr::new(42, write, sge))?;
//!
//! // Turn both until the completion comes.
//! let mut buf = vec![0u8; engines[0].max_frame_len()];
//! let wc = loop {
//!     for side in 0..2 {
//!         let (device, engine) = (&mut devices[side], &mut engines[side]);
//!         Ulp::submit(device, now, engine);
//!         while let Some(event) = engine.poll_event() {
//!             device.on_event(now, engine, event);
//!         }
//!     }
//!     for from in 0..2 {
//!         let [a, b] = &mut engines;
//!         let (tx, rx) = if from == 0 { (a, b) } else { (b, a) };
//!         while let Some(len) = tx.poll_transmit_into(now, &mut buf) {
//!             rx.handle_packet(now, FrameBuf::from_frame(&buf[..len], 0));
//!         }
//!     }
//!     if let Some(wc) = devices[0].poll_cq_one(cq_a) {
//!         break wc;
//!     }
//! };
//! assert_eq!((wc.wr_id, wc.status, wc.opcode), (42, WcStatus::Success, WcOpcode::RdmaWrite));
//! assert_eq!(target.to_vec(), source.to_vec());
//! # Ok(())
//! # }
//! ```
//!
//! # Decisions
//!
//! Where the OCP text, ulp.md's notes and InfiniBand leave room, the
//! choice is written where it is implemented: the wire decisions in
//! [`wire`] (AckReq bit, atomic ETHs, DETH layout, pad); the payload MTU
//! and self-describing packets in [`segment`]; ULP NACK codes in
//! [`RemoteCode`]; ordering, RNR and fences in the device's requester and
//! responder. Our translation of RDMA over Falcon v1.0 (seeds/002) has no
//! figures or tables; its prose differs from 0.9 in three places, and we
//! follow 0.9 in each: its §6.2 gives unordered mode in-order completions
//! (0.9's §6.2 and §6.4 table: out of order, as here); its §6.6.2 leaves
//! out 0.9's 1:1 XRC INI QP mapping (XRC is not built); and its §6.7, like
//! 0.9's, says "SETH and OETH" place READ responses, where the §8.1.3
//! table gives READ responses an STETH, which we follow.
//!
//! Not built: XRC (no opcodes, ulp.md D5), memory windows, SQD/SQE,
//! `max_dest_rd_atomic` as a responder limit (every pull is answered at
//! once; only Falcon's Pull Data credits hold answers back).
#![forbid(unsafe_code)]

pub mod data;
mod device;
pub mod segment;
pub mod seq;
pub mod verbs;
pub mod wire;

#[cfg(test)]
mod tests;

pub use data::RdmaData;
pub use device::{
    Device, DeviceCaps, DeviceStats, Refusal, RemoteCode, MAX_MESSAGE_LEN, UD_GRH_LEN,
};
