//! Queue pairs: types, states, attributes and the verbs state machine.
//!
//! Layer: verbs. Owns [`QpInitAttr`] (what `ibv_create_qp` takes, with
//! RDMA over Falcon's ordering and error modes), [`QpAttr`] (what
//! `ibv_modify_qp` takes: each `Some` field is a bit of the attribute
//! mask), [`QpInfo`] (what `ibv_query_qp` returns), and [`transition`],
//! the one check of a modify against the state machine and its table of
//! required and allowed attributes. Pure: the device applies a modify only
//! after this check passed, so a refused modify changes nothing.
//!
//! # The state machine (IB verbs, SQD and SQE left out)
//!
//! ```text
//!  RESET ──► INIT ──► RTR ──► RTS      and from any state: ──► RESET
//!            ↺ INIT           ↺ RTS                         ──► ERR
//! ```
//!
//! | transition | RC requires | RC allows | UD requires | UD allows |
//! |---|---|---|---|---|
//! | RESET → INIT | access | | qkey | |
//! | INIT → INIT | | access | | qkey |
//! | INIT → RTR | path_mtu, dest_qpn, cid, max_dest_rd_atomic, min_rnr_timer | access | | path_mtu |
//! | RTR → RTS | rnr_retry, max_rd_atomic | access, min_rnr_timer | | |
//! | RTS → RTS | | access, min_rnr_timer | | qkey |
//! | any → RESET, any → ERR | | | | |
//!
//! InfiniBand's `rq_psn`, `sq_psn`, `timeout`, `retry_cnt`, P_Key and port
//! have no counterpart: RDMA over Falcon starts every connection's SN at 1
//! (RDMA-0.9 §8.2) and Falcon owns retransmission. The RC path is a
//! Falcon connection id, `cid` (RDMA-0.9 §6.6.1: "storing the associated
//! CID in the QP context").

use core::fmt;

use falcon_core::api::{ConnectionId, OrderingMode, RnrTimeout};

use super::{Access, Cq, Pd, Srq, VerbsError};
use crate::wire::{QKey, Qpn};

/// Reads and atomics a QP may have outstanding as requester, or accept as
/// responder, at most (the device's `max_qp_rd_atom`).
pub const MAX_RD_ATOMIC: u8 = 16;

/// Transport service (`enum ibv_qp_type`, libibverbs' values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum QpType {
    /// Reliable connection: one Falcon connection per QP (RDMA-0.9 §6.6.1).
    Rc = 2,
    /// Unreliable datagram: sends of one MTU over any connection an
    /// address handle names (RDMA-0.9 §6.6.3).
    Ud = 4,
}

/// QP state (`enum ibv_qp_state`, libibverbs' values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum QpState {
    Reset = 0,
    Init = 1,
    /// Ready to receive.
    Rtr = 2,
    /// Ready to send.
    Rts = 3,
    Error = 6,
}

impl QpState {
    pub const fn code(self) -> u32 {
        self as u32
    }

    pub const fn name(self) -> &'static str {
        match self {
            QpState::Reset => "RESET",
            QpState::Init => "INIT",
            QpState::Rtr => "RTR",
            QpState::Rts => "RTS",
            QpState::Error => "ERR",
        }
    }

    /// Receives may be posted (and requests answered from RTR on).
    pub const fn takes_receives(self) -> bool {
        !matches!(self, QpState::Reset)
    }
}

impl fmt::Display for QpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The RDMA payload MTU of a path (`enum ibv_mtu`, libibverbs' values):
/// payload bytes per packet, headers not counted (ulp.md §1.6, decision
/// D4). The Falcon frames must fit the payload and the longest header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum Mtu {
    B256 = 1,
    B512 = 2,
    B1024 = 3,
    B2048 = 4,
    B4096 = 5,
}

impl Mtu {
    pub const ALL: [Mtu; 5] = [Mtu::B256, Mtu::B512, Mtu::B1024, Mtu::B2048, Mtu::B4096];

    pub const fn bytes(self) -> u32 {
        128 << self as u32
    }

    /// libibverbs' value.
    pub const fn code(self) -> u32 {
        self as u32
    }

    /// The MTU of `bytes` (256, 512, ..., 4096).
    pub const fn from_bytes(bytes: u32) -> Option<Mtu> {
        match bytes {
            256 => Some(Mtu::B256),
            512 => Some(Mtu::B512),
            1024 => Some(Mtu::B1024),
            2048 => Some(Mtu::B2048),
            4096 => Some(Mtu::B4096),
            _ => None,
        }
    }
}

/// RDMA-0.9 §6.2 ordering modes, each on its Falcon connection type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum QpOrdering {
    /// IB verbs: data placed and completions reported in order; ordered
    /// Falcon connection.
    #[default]
    Strong,
    /// iWARP: data placed out of order, completions in order; unordered
    /// Falcon connection.
    Weak,
    /// Data placed and completions reported out of order; unordered Falcon
    /// connection; complete-in-error only, SENDs of one MTU, no WRITE with
    /// immediate (RDMA-0.9 §6.4).
    Unordered,
}

impl QpOrdering {
    /// The Falcon connection type the QP must ride on (RDMA-0.9 §6.2).
    pub const fn falcon(self) -> OrderingMode {
        match self {
            QpOrdering::Strong => OrderingMode::Ordered,
            QpOrdering::Weak | QpOrdering::Unordered => OrderingMode::Unordered,
        }
    }

    /// Completions are reported in posting order.
    pub const fn completes_in_order(self) -> bool {
        !matches!(self, QpOrdering::Unordered)
    }
}

/// RDMA-0.9 §6.3 error handling modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ErrorMode {
    /// As InfiniBand: an error moves the QP to ERR (its other work
    /// requests flush) and raises an asynchronous event.
    #[default]
    VerbsCompatible,
    /// The failed operation completes in error and the QP keeps running.
    CompleteInError,
}

/// Queue sizes (`struct ibv_qp_cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    /// Bytes a send may carry inline (copied at post time).
    pub max_inline_data: u32,
}

impl Default for QpCap {
    fn default() -> Self {
        QpCap {
            max_send_wr: 128,
            max_recv_wr: 512,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        }
    }
}

/// What a QP is created with (`struct ibv_qp_init_attr`, and RDMA over
/// Falcon's modes, which cannot change while it lives).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInitAttr {
    pub qp_type: QpType,
    pub send_cq: Cq,
    pub recv_cq: Cq,
    /// Receives come from this SRQ instead of the QP's own queue.
    pub srq: Option<Srq>,
    pub cap: QpCap,
    /// Every send work request completes with a work completion.
    pub sq_sig_all: bool,
    pub ordering: QpOrdering,
    pub error_mode: ErrorMode,
}

impl QpInitAttr {
    /// A QP of `qp_type` completing into `cq`, default sizes, strong
    /// ordering, verbs-compatible errors.
    pub fn new(qp_type: QpType, cq: Cq) -> QpInitAttr {
        QpInitAttr {
            qp_type,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCap::default(),
            sq_sig_all: false,
            ordering: QpOrdering::Strong,
            error_mode: ErrorMode::VerbsCompatible,
        }
    }
}

/// A modify (`struct ibv_qp_attr` with its mask: a `Some` field is in the
/// mask). `state: None` keeps the current state (an INIT → INIT or
/// RTS → RTS modify).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpAttr {
    pub state: Option<QpState>,
    /// Rights peers have through this QP (RC).
    pub access: Option<Access>,
    pub path_mtu: Option<Mtu>,
    /// The peer QP (RC).
    pub dest_qpn: Option<Qpn>,
    /// The Falcon connection (RC), by its local connection id.
    pub cid: Option<ConnectionId>,
    /// The RNR NACK timeout this QP asks senders to wait when it has no
    /// receive posted (IB's 5-bit code, the same table as Falcon's RNR
    /// NACK Timeout).
    pub min_rnr_timer: Option<RnrTimeout>,
    /// RNR NACKs a message may meet before it fails (0..=6), or 7:
    /// retry for ever.
    pub rnr_retry: Option<u8>,
    /// READs and atomics outstanding as requester, at most.
    pub max_rd_atomic: Option<u8>,
    /// READs and atomics accepted as responder, at most.
    pub max_dest_rd_atomic: Option<u8>,
    /// UD: the Q_Key datagrams must carry.
    pub qkey: Option<QKey>,
}

/// The attribute fields, as mask bits.
mod mask {
    pub(super) const ACCESS: u16 = 1 << 0;
    pub(super) const PATH_MTU: u16 = 1 << 1;
    pub(super) const DEST_QPN: u16 = 1 << 2;
    pub(super) const CID: u16 = 1 << 3;
    pub(super) const MIN_RNR_TIMER: u16 = 1 << 4;
    pub(super) const RNR_RETRY: u16 = 1 << 5;
    pub(super) const MAX_RD_ATOMIC: u16 = 1 << 6;
    pub(super) const MAX_DEST_RD_ATOMIC: u16 = 1 << 7;
    pub(super) const QKEY: u16 = 1 << 8;

    pub(super) const NAMES: [(u16, &str); 9] = [
        (ACCESS, "access"),
        (PATH_MTU, "path_mtu"),
        (DEST_QPN, "dest_qpn"),
        (CID, "cid"),
        (MIN_RNR_TIMER, "min_rnr_timer"),
        (RNR_RETRY, "rnr_retry"),
        (MAX_RD_ATOMIC, "max_rd_atomic"),
        (MAX_DEST_RD_ATOMIC, "max_dest_rd_atomic"),
        (QKEY, "qkey"),
    ];
}

impl QpAttr {
    /// The attribute mask (state not included).
    fn mask(&self) -> u16 {
        let bits = [
            (self.access.is_some(), mask::ACCESS),
            (self.path_mtu.is_some(), mask::PATH_MTU),
            (self.dest_qpn.is_some(), mask::DEST_QPN),
            (self.cid.is_some(), mask::CID),
            (self.min_rnr_timer.is_some(), mask::MIN_RNR_TIMER),
            (self.rnr_retry.is_some(), mask::RNR_RETRY),
            (self.max_rd_atomic.is_some(), mask::MAX_RD_ATOMIC),
            (self.max_dest_rd_atomic.is_some(), mask::MAX_DEST_RD_ATOMIC),
            (self.qkey.is_some(), mask::QKEY),
        ];
        bits.iter()
            .filter(|(set, _)| *set)
            .fold(0, |acc, (_, bit)| acc | bit)
    }
}

/// A QP's current attributes (`ibv_query_qp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInfo {
    pub qpn: Qpn,
    pub pd: Pd,
    pub init: QpInitAttr,
    pub state: QpState,
    pub access: Access,
    pub path_mtu: Mtu,
    pub dest_qpn: Qpn,
    pub cid: Option<ConnectionId>,
    pub min_rnr_timer: RnrTimeout,
    pub rnr_retry: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub qkey: QKey,
}

impl QpInfo {
    /// A new QP's attributes, in RESET.
    pub(crate) fn new(qpn: Qpn, pd: Pd, init: QpInitAttr) -> QpInfo {
        QpInfo {
            qpn,
            pd,
            init,
            state: QpState::Reset,
            access: Access::EMPTY,
            path_mtu: Mtu::B4096,
            dest_qpn: Qpn::ZERO,
            cid: None,
            min_rnr_timer: RnrTimeout::SHORTEST,
            rnr_retry: 7,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            qkey: QKey(0),
        }
    }

    /// Applies the attributes of a modify [`transition`] accepted.
    pub(crate) fn apply(&mut self, attr: &QpAttr, to: QpState) {
        self.state = to;
        if let Some(access) = attr.access {
            self.access = access;
        }
        if let Some(mtu) = attr.path_mtu {
            self.path_mtu = mtu;
        }
        if let Some(qpn) = attr.dest_qpn {
            self.dest_qpn = qpn;
        }
        if let Some(cid) = attr.cid {
            self.cid = Some(cid);
        }
        if let Some(timer) = attr.min_rnr_timer {
            self.min_rnr_timer = timer;
        }
        if let Some(retry) = attr.rnr_retry {
            self.rnr_retry = retry;
        }
        if let Some(n) = attr.max_rd_atomic {
            self.max_rd_atomic = n;
        }
        if let Some(n) = attr.max_dest_rd_atomic {
            self.max_dest_rd_atomic = n;
        }
        if let Some(qkey) = attr.qkey {
            self.qkey = qkey;
        }
    }
}

/// Checks a modify of a QP of `qp_type` in state `from` (see the module
/// doc); the state it goes to.
///
/// # Errors
///
/// [`VerbsError::InvalidTransition`], [`VerbsError::MissingAttribute`],
/// [`VerbsError::AttributeNotAllowed`] or
/// [`VerbsError::InvalidAttribute`] (`rnr_retry` above 7, a read/atomic
/// depth above [`MAX_RD_ATOMIC`]).
pub fn transition(qp_type: QpType, from: QpState, attr: &QpAttr) -> Result<QpState, VerbsError> {
    use mask::*;
    use QpState::*;

    let to = attr.state.unwrap_or(from);
    let rc = qp_type == QpType::Rc;
    let (required, allowed) = match (from, to) {
        (_, Reset) | (_, Error) => (0, 0),
        (Reset, Init) if rc => (ACCESS, 0),
        (Reset, Init) => (QKEY, 0),
        (Init, Init) if rc => (0, ACCESS),
        (Init, Init) => (0, QKEY),
        (Init, Rtr) if rc => (
            PATH_MTU | DEST_QPN | CID | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER,
            ACCESS,
        ),
        (Init, Rtr) => (0, PATH_MTU),
        (Rtr, Rts) if rc => (RNR_RETRY | MAX_RD_ATOMIC, ACCESS | MIN_RNR_TIMER),
        (Rtr, Rts) => (0, 0),
        (Rts, Rts) if rc => (0, ACCESS | MIN_RNR_TIMER),
        (Rts, Rts) => (0, QKEY),
        _ => return Err(VerbsError::InvalidTransition { from, to }),
    };
    let given = attr.mask();
    for (bit, name) in mask::NAMES {
        if required & bit != 0 && given & bit == 0 {
            return Err(VerbsError::MissingAttribute { name, from, to });
        }
        if (required | allowed) & bit == 0 && given & bit != 0 {
            return Err(VerbsError::AttributeNotAllowed { name, from, to });
        }
    }
    if attr.rnr_retry.is_some_and(|r| r > 7) {
        return Err(VerbsError::InvalidAttribute {
            name: "rnr_retry",
            why: "0..=7",
        });
    }
    for (value, name) in [
        (attr.max_rd_atomic, "max_rd_atomic"),
        (attr.max_dest_rd_atomic, "max_dest_rd_atomic"),
    ] {
        if value.is_some_and(|n| n > self::MAX_RD_ATOMIC) {
            return Err(VerbsError::InvalidAttribute {
                name,
                why: "above the device's max_qp_rd_atom (16)",
            });
        }
    }
    Ok(to)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rtr_attr() -> QpAttr {
        QpAttr {
            state: Some(QpState::Rtr),
            path_mtu: Some(Mtu::B1024),
            dest_qpn: Some(Qpn::truncating(9)),
            cid: Some(ConnectionId::truncating(0x10)),
            max_dest_rd_atomic: Some(4),
            min_rnr_timer: Some(RnrTimeout::SHORTEST),
            ..QpAttr::default()
        }
    }

    /// Every (from, to) pair of the five states, RC and UD, with the
    /// attributes each transition requires: the arrows of the module doc
    /// and no other.
    #[test]
    fn the_state_machine_has_the_verbs_arrows_and_no_other() {
        use QpState::*;
        let states = [Reset, Init, Rtr, Rts, Error];
        let allowed = [
            (Reset, Init),
            (Init, Init),
            (Init, Rtr),
            (Rtr, Rts),
            (Rts, Rts),
        ];
        for qp_type in [QpType::Rc, QpType::Ud] {
            for from in states {
                for to in states {
                    let mut attr = QpAttr {
                        state: Some(to),
                        ..QpAttr::default()
                    };
                    match (qp_type, from, to) {
                        (QpType::Rc, Reset, Init) => attr.access = Some(Access::REMOTE_READ),
                        (QpType::Ud, Reset, Init) => attr.qkey = Some(QKey(1)),
                        (QpType::Rc, Init, Rtr) => attr = rtr_attr(),
                        (QpType::Rc, Rtr, Rts) => {
                            attr.rnr_retry = Some(7);
                            attr.max_rd_atomic = Some(1);
                        }
                        _ => {}
                    }
                    let expected = allowed.contains(&(from, to)) || matches!(to, Reset | Error);
                    let result = transition(qp_type, from, &attr);
                    assert_eq!(
                        result.is_ok(),
                        expected,
                        "{qp_type:?} {from} -> {to}: {result:?}"
                    );
                    if expected {
                        assert_eq!(result, Ok(to));
                    } else {
                        assert_eq!(result, Err(VerbsError::InvalidTransition { from, to }));
                    }
                }
            }
        }
    }

    #[test]
    fn attributes_are_required_and_limited_per_transition() {
        use QpState::*;
        let rc = QpType::Rc;
        let mut attr = rtr_attr();
        attr.cid = None;
        assert_eq!(
            transition(rc, Init, &attr),
            Err(VerbsError::MissingAttribute {
                name: "cid",
                from: Init,
                to: Rtr
            })
        );
        let attr = QpAttr {
            qkey: Some(QKey(1)),
            ..rtr_attr()
        };
        assert_eq!(
            transition(rc, Init, &attr),
            Err(VerbsError::AttributeNotAllowed {
                name: "qkey",
                from: Init,
                to: Rtr
            })
        );
        let rts = |retry, rd| QpAttr {
            state: Some(Rts),
            rnr_retry: Some(retry),
            max_rd_atomic: Some(rd),
            ..QpAttr::default()
        };
        assert!(transition(rc, Rtr, &rts(7, 16)).is_ok());
        assert!(matches!(
            transition(rc, Rtr, &rts(8, 1)),
            Err(VerbsError::InvalidAttribute {
                name: "rnr_retry",
                ..
            })
        ));
        assert!(matches!(
            transition(rc, Rtr, &rts(0, 17)),
            Err(VerbsError::InvalidAttribute {
                name: "max_rd_atomic",
                ..
            })
        ));
        // Same-state modifies take only their optional attributes.
        let access = QpAttr {
            access: Some(Access::REMOTE_WRITE),
            ..QpAttr::default()
        };
        assert_eq!(transition(rc, Rts, &access), Ok(Rts));
        assert!(transition(QpType::Ud, Rts, &access).is_err());
        assert_eq!(
            transition(rc, Rtr, &access),
            Err(VerbsError::InvalidTransition { from: Rtr, to: Rtr })
        );
        // To ERR or RESET takes nothing else.
        let err = QpAttr {
            state: Some(Error),
            access: Some(Access::EMPTY),
            ..QpAttr::default()
        };
        assert!(matches!(
            transition(rc, Rts, &err),
            Err(VerbsError::AttributeNotAllowed { name: "access", .. })
        ));
    }

    #[test]
    fn applying_keeps_what_is_not_given() {
        let mut info = QpInfo::new(
            Qpn::truncating(5),
            Pd(0),
            QpInitAttr::new(QpType::Rc, Cq(0)),
        );
        info.apply(&rtr_attr(), QpState::Rtr);
        info.apply(
            &QpAttr {
                rnr_retry: Some(3),
                ..QpAttr::default()
            },
            QpState::Rts,
        );
        assert_eq!(info.state, QpState::Rts);
        assert_eq!(info.path_mtu, Mtu::B1024);
        assert_eq!(info.rnr_retry, 3);
        assert_eq!(info.max_dest_rd_atomic, 4);
        assert_eq!(Mtu::B4096.bytes(), 4096);
        assert_eq!(Mtu::B256.bytes(), 256);
        assert_eq!(Mtu::from_bytes(2048), Some(Mtu::B2048));
        assert_eq!(QpOrdering::Weak.falcon(), OrderingMode::Unordered);
    }
}
