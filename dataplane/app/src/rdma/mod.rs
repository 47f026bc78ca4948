//! RDMA over Falcon in one process: what `falcon rdma-perf` runs by
//! default.
//!
//! Layer: application. Two engines built from the demo's embedded default
//! (`democfg`: PSP on, Swift in the inline RUE), one Falcon connection per
//! QP pair (RDMA-0.9 §6.6.1: an RC QP rides one connection; ordered for
//! strong ordering, unordered for weak and unordered, §6.2), over the
//! in-process loopback with optional seeded faults ([`FaultInjector`]);
//! each engine on an [`Lcore`] timed by the real clock ([`SystemClock`])
//! with one [`Device`] as its ULP. One thread turns both loops
//! ([`RdmaPair::turn`]); the caller posts work requests and polls the CQs
//! of [`RdmaPair::nodes`] between turns.

use std::time::Duration;

use falcon_core::api::{ConnectionId, RnrTimeout};
use falcon_core::engine::connect;
use falcon_core::lcore::{Lcore, SystemClock};
use falcon_core::testing::{
    faulty_lcore_pair, FaultInjector, FaultStats, Faults, LoopbackConfig, LoopbackPort,
};
use rdma_ulp::verbs::{
    Access, Ah, AhAttr, Cq, ErrorMode, Mtu, Pd, QpAttr, QpCap, QpInitAttr, QpOrdering, QpState,
    QpType,
};
use rdma_ulp::wire::{QKey, Qpn};
use rdma_ulp::{Device, DeviceStats, RdmaData};

use crate::democfg::build::setup;
use crate::democfg::schema::{DemoConfig, RuePlacement};
use crate::democfg::Origin;
use crate::error::{AppError, Result};

type Side = Lcore<FaultInjector<LoopbackPort>, SystemClock, RdmaData>;

/// The Q_Key both sides' UD QPs use.
pub const UD_QKEY: QKey = QKey(0x1111_1111);

/// What an [`RdmaPair`] is built with.
#[derive(Debug, Clone)]
pub struct PairConfig {
    /// QP pairs, each on its own Falcon connection.
    pub qps: usize,
    pub qp_type: QpType,
    pub ordering: QpOrdering,
    pub mtu: Mtu,
    /// Send and receive queue sizes of every QP.
    pub cap: QpCap,
    /// Entries of each side's CQ.
    pub cq_depth: u32,
    /// The loopback's seeded faults, in both directions.
    pub faults: Faults,
    pub seed: u64,
    /// The configuration the engines are built from (`None`: the demo's
    /// embedded default, PSP on, Swift inline); the connections' ordering
    /// follows [`ordering`](Self::ordering) whatever it says.
    pub engines: Option<Box<DemoConfig>>,
    /// The loopback's one-way delay.
    pub one_way_delay: Duration,
}

impl Default for PairConfig {
    fn default() -> PairConfig {
        PairConfig {
            qps: 1,
            qp_type: QpType::Rc,
            ordering: QpOrdering::Strong,
            mtu: Mtu::B4096,
            cap: QpCap {
                max_send_wr: 1024,
                max_recv_wr: 1024,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            cq_depth: 1 << 16,
            faults: Faults::default(),
            seed: 1,
            engines: None,
            one_way_delay: LoopbackConfig::default().one_way_delay,
        }
    }
}

/// One side's verbs objects.
pub struct Node {
    pub device: Device,
    pub pd: Pd,
    /// Send and receive completions of every QP.
    pub cq: Cq,
    /// The QPs, the i-th on the i-th connection.
    pub qps: Vec<Qpn>,
    /// The local connection ids, the i-th for the i-th QP.
    pub cids: Vec<ConnectionId>,
    /// UD: the address handle of the i-th connection.
    pub ahs: Vec<Ah>,
}

impl Node {
    /// A device with a PD and a CQ of `cq_depth` entries.
    ///
    /// # Errors
    ///
    /// The device's refusal.
    pub fn new(cq_depth: u32) -> Result<Node> {
        let mut device = Device::default();
        let pd = device.alloc_pd().map_err(|e| failed("PD", &e))?;
        let cq = device.create_cq(cq_depth).map_err(|e| failed("CQ", &e))?;
        Ok(Node {
            device,
            pd,
            cq,
            qps: Vec::new(),
            cids: Vec::new(),
            ahs: Vec::new(),
        })
    }

    /// A QP of `config`'s type on connection `cid`, in RESET.
    ///
    /// # Errors
    ///
    /// The device's refusal.
    pub fn create_qp(&mut self, config: &PairConfig, cid: ConnectionId) -> Result<Qpn> {
        let init = QpInitAttr {
            cap: config.cap,
            ordering: config.ordering,
            // RDMA-0.9 §6.4: unordered QPs complete in error only.
            error_mode: match config.ordering {
                QpOrdering::Unordered => ErrorMode::CompleteInError,
                QpOrdering::Strong | QpOrdering::Weak => ErrorMode::VerbsCompatible,
            },
            ..QpInitAttr::new(config.qp_type, self.cq)
        };
        let qp = self
            .device
            .create_qp(self.pd, init)
            .map_err(|e| failed("create QP", &e))?;
        self.qps.push(qp);
        self.cids.push(cid);
        if config.qp_type == QpType::Ud {
            // RDMA-0.9 §6.6.3: a UD send names its connection through the
            // address handle.
            let ah = self
                .device
                .create_ah(self.pd, AhAttr { cid })
                .map_err(|e| failed("address handle", &e))?;
            self.ahs.push(ah);
        }
        Ok(qp)
    }

    /// Moves QP `index` RESET → INIT → RTR → RTS towards `peer` (RC: over
    /// its connection; UD: with [`UD_QKEY`]).
    ///
    /// # Errors
    ///
    /// The device's refusal.
    pub fn connect_qp(&mut self, config: &PairConfig, index: usize, peer: Qpn) -> Result<()> {
        let qp = self.qps[index];
        let steps = match config.qp_type {
            QpType::Rc => [
                QpAttr {
                    state: Some(QpState::Init),
                    access: Some(
                        Access::LOCAL_WRITE
                            | Access::REMOTE_WRITE
                            | Access::REMOTE_READ
                            | Access::REMOTE_ATOMIC,
                    ),
                    ..QpAttr::default()
                },
                QpAttr {
                    state: Some(QpState::Rtr),
                    path_mtu: Some(config.mtu),
                    dest_qpn: Some(peer),
                    cid: Some(self.cids[index]),
                    max_dest_rd_atomic: Some(rdma_ulp::verbs::MAX_RD_ATOMIC),
                    min_rnr_timer: Some(RnrTimeout::SHORTEST),
                    ..QpAttr::default()
                },
                QpAttr {
                    state: Some(QpState::Rts),
                    // Retry for ever: a receiver short of receives slows
                    // the run, it does not fail it.
                    rnr_retry: Some(7),
                    max_rd_atomic: Some(rdma_ulp::verbs::MAX_RD_ATOMIC),
                    ..QpAttr::default()
                },
            ],
            QpType::Ud => [
                QpAttr {
                    state: Some(QpState::Init),
                    qkey: Some(UD_QKEY),
                    ..QpAttr::default()
                },
                QpAttr {
                    state: Some(QpState::Rtr),
                    path_mtu: Some(config.mtu),
                    ..QpAttr::default()
                },
                QpAttr {
                    state: Some(QpState::Rts),
                    ..QpAttr::default()
                },
            ],
        };
        for attr in steps {
            self.device
                .modify_qp(qp, &attr)
                .map_err(|e| failed("modify QP", &e))?;
        }
        Ok(())
    }
}

fn failed(what: &str, e: &dyn std::fmt::Display) -> AppError {
    AppError::Failed(format!("{what}: {e}"))
}

/// The pair (see the module doc): side 0 is the client (the demo's
/// initiator engine), side 1 the server.
pub struct RdmaPair {
    a: Side,
    b: Side,
    /// The client's and the server's verbs objects.
    pub nodes: [Node; 2],
}

impl RdmaPair {
    /// Builds the engines, one connection and one QP pair per
    /// `config.qps`, every QP in RTS.
    ///
    /// # Errors
    ///
    /// [`AppError::Failed`] if an engine, a connection or a verbs object
    /// is refused.
    pub fn new(config: &PairConfig) -> Result<RdmaPair> {
        let mut demo = config.engines.as_deref().cloned().unwrap_or_default();
        // The pair's loops have no RUE core beside them.
        demo.rue.placement = RuePlacement::Inline;
        let demo = setup(&demo, &Origin::default())?;
        let clock = SystemClock::new();
        let mut now_clock = clock;
        let now = falcon_core::lcore::Clock::now(&mut now_clock);
        let mut a = falcon_core::engine::Engine::<_, RdmaData>::new(demo.initiator.clone(), now)
            .map_err(|e| failed("client engine", &e))?;
        let mut b = falcon_core::engine::Engine::<_, RdmaData>::new(demo.target.clone(), now)
            .map_err(|e| failed("server engine", &e))?;
        let mut nodes = [Node::new(config.cq_depth)?, Node::new(config.cq_depth)?];
        for i in 0..config.qps {
            let mut spec = demo.pair.clone();
            // RDMA-0.9 §6.2: strong ordering on an ordered connection, weak
            // and unordered on unordered ones.
            spec.ordering = config.ordering.falcon();
            spec.a_cid = ConnectionId::truncating(demo.pair.a_cid.value() + i as u32);
            spec.b_cid = ConnectionId::truncating(demo.pair.b_cid.value() + i as u32);
            connect(now, &mut a, &mut b, &spec).map_err(|e| failed("connect", &e))?;
            nodes[0].create_qp(config, spec.a_cid)?;
            nodes[1].create_qp(config, spec.b_cid)?;
        }
        for i in 0..config.qps {
            let (qa, qb) = (nodes[0].qps[i], nodes[1].qps[i]);
            nodes[0].connect_qp(config, i, qb)?;
            nodes[1].connect_qp(config, i, qa)?;
        }
        let (a, b) = faulty_lcore_pair(
            a,
            b,
            config.faults,
            config.seed,
            config.one_way_delay,
            clock,
        );
        Ok(RdmaPair { a, b, nodes })
    }

    /// One turn of each loop; `false` when neither did anything.
    pub fn turn(&mut self) -> bool {
        let [na, nb] = &mut self.nodes;
        let a = self.a.turn(&mut na.device);
        let b = self.b.turn(&mut nb.device);
        !a.is_idle() || !b.is_idle()
    }

    /// Both devices' counters, client first.
    pub fn device_stats(&self) -> [DeviceStats; 2] {
        [
            self.nodes[0].device.stats().clone(),
            self.nodes[1].device.stats().clone(),
        ]
    }

    /// Falcon retransmissions of both engines.
    pub fn retransmissions(&self) -> u64 {
        self.a.engine.stats().retransmissions + self.b.engine.stats().retransmissions
    }

    /// What the loopback's fault injectors did, both directions.
    pub fn faults(&self) -> FaultStats {
        let (fa, fb) = (self.a.port.stats(), self.b.port.stats());
        FaultStats {
            lost: fa.lost + fb.lost,
            duplicated: fa.duplicated + fb.duplicated,
            reordered: fa.reordered + fb.reordered,
            corrupted: fa.corrupted + fb.corrupted,
        }
    }
}
