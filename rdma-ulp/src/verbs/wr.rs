//! Work requests: what `ibv_post_send`, `ibv_post_recv` and
//! `ibv_post_srq_recv` take.
//!
//! Layer: verbs. Owns [`Sge`] and [`SgList`] (a scatter/gather list held
//! inline, so posting allocates nothing), [`SendWr`] with its operation
//! [`WrOp`] (the union of `struct ibv_send_wr` as an enum), [`SendFlags`],
//! [`UdDest`] and [`RecvWr`]. Plain values: the device checks them when
//! it takes or runs them.

use super::{flags, Ah, PostError, WcOpcode};
use crate::wire::{LKey, QKey, Qpn, RKey};

/// Scatter/gather entries a work request holds at most (the device's
/// `max_sge`).
pub const MAX_SGE: usize = 16;

/// One scatter/gather entry (`struct ibv_sge`): `length` bytes at `addr`
/// of the memory region `lkey` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: LKey,
}

/// A scatter/gather list of at most [`MAX_SGE`] entries, inline.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SgList {
    sges: [Sge; MAX_SGE],
    len: u8,
}

impl SgList {
    /// No entry (a zero-length message).
    pub const EMPTY: SgList = SgList {
        sges: [Sge {
            addr: 0,
            length: 0,
            lkey: LKey(0),
        }; MAX_SGE],
        len: 0,
    };

    /// The entries of `sges`.
    ///
    /// # Errors
    ///
    /// [`PostError::TooManySge`] beyond [`MAX_SGE`].
    pub fn new(sges: &[Sge]) -> Result<SgList, PostError> {
        let mut list = SgList::EMPTY;
        for &sge in sges {
            list.push(sge)?;
        }
        Ok(list)
    }

    /// One entry.
    pub const fn one(sge: Sge) -> SgList {
        let mut list = SgList::EMPTY;
        list.sges[0] = sge;
        list.len = 1;
        list
    }

    /// Appends an entry.
    ///
    /// # Errors
    ///
    /// [`PostError::TooManySge`] when full.
    pub fn push(&mut self, sge: Sge) -> Result<(), PostError> {
        let slot = self
            .sges
            .get_mut(usize::from(self.len))
            .ok_or(PostError::TooManySge { max: MAX_SGE })?;
        *slot = sge;
        self.len += 1;
        Ok(())
    }

    pub fn as_slice(&self) -> &[Sge] {
        &self.sges[..usize::from(self.len)]
    }

    /// Bytes of all entries.
    pub fn total_len(&self) -> u64 {
        self.as_slice().iter().map(|s| u64::from(s.length)).sum()
    }
}

impl Default for SgList {
    fn default() -> Self {
        SgList::EMPTY
    }
}

impl From<Sge> for SgList {
    fn from(sge: Sge) -> SgList {
        SgList::one(sge)
    }
}

impl core::ops::Deref for SgList {
    type Target = [Sge];

    fn deref(&self) -> &[Sge] {
        self.as_slice()
    }
}

impl core::fmt::Debug for SgList {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

/// The operation of a send work request, with its operands (the opcode
/// and the `wr` union of `struct ibv_send_wr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WrOp {
    /// SEND: the data into the peer's next receive.
    Send,
    /// SEND with 32 bits of immediate data for the peer's completion.
    SendWithImm(u32),
    /// SEND that invalidates the peer's memory region `rkey` names.
    SendWithInv(RKey),
    /// RDMA WRITE to `remote_addr` of the peer's region `rkey`.
    Write { remote_addr: u64, rkey: RKey },
    /// RDMA WRITE, then a receive consumed with the immediate data.
    WriteWithImm {
        remote_addr: u64,
        rkey: RKey,
        imm: u32,
    },
    /// RDMA READ from `remote_addr` into the scatter list.
    Read { remote_addr: u64, rkey: RKey },
    /// If the 8 bytes at `remote_addr` equal `compare`, store `swap`; the
    /// original value lands in the 8-byte scatter entry.
    CompareSwap {
        remote_addr: u64,
        rkey: RKey,
        compare: u64,
        swap: u64,
    },
    /// Add `add` to the 8 bytes at `remote_addr`; the original value lands
    /// in the 8-byte scatter entry.
    FetchAdd {
        remote_addr: u64,
        rkey: RKey,
        add: u64,
    },
}

impl WrOp {
    /// libibverbs' `enum ibv_wr_opcode` value.
    pub const fn opcode(&self) -> u32 {
        match self {
            WrOp::Write { .. } => 0,
            WrOp::WriteWithImm { .. } => 1,
            WrOp::Send => 2,
            WrOp::SendWithImm(_) => 3,
            WrOp::Read { .. } => 4,
            WrOp::CompareSwap { .. } => 5,
            WrOp::FetchAdd { .. } => 6,
            WrOp::SendWithInv(_) => 9,
        }
    }

    /// The opcode of its work completion.
    pub const fn wc_opcode(&self) -> WcOpcode {
        match self {
            WrOp::Send | WrOp::SendWithImm(_) | WrOp::SendWithInv(_) => WcOpcode::Send,
            WrOp::Write { .. } | WrOp::WriteWithImm { .. } => WcOpcode::RdmaWrite,
            WrOp::Read { .. } => WcOpcode::RdmaRead,
            WrOp::CompareSwap { .. } => WcOpcode::CompSwap,
            WrOp::FetchAdd { .. } => WcOpcode::FetchAdd,
        }
    }

    pub const fn is_send(&self) -> bool {
        matches!(
            self,
            WrOp::Send | WrOp::SendWithImm(_) | WrOp::SendWithInv(_)
        )
    }

    pub const fn is_atomic(&self) -> bool {
        matches!(self, WrOp::CompareSwap { .. } | WrOp::FetchAdd { .. })
    }

    /// Whether it writes local memory from the response (READ, atomics):
    /// its scatter list needs LOCAL_WRITE.
    pub const fn writes_locally(&self) -> bool {
        matches!(
            self,
            WrOp::Read { .. } | WrOp::CompareSwap { .. } | WrOp::FetchAdd { .. }
        )
    }
}

flags! {
    /// Send work request flags (`enum ibv_send_flags`).
    pub struct SendFlags: u32 {
        /// Wait for earlier READs and atomics to complete first.
        const FENCE = 1;
        /// Generate a work completion (always, with `sq_sig_all`).
        const SIGNALED = 2;
        /// Set the solicited event bit (RBTH SE) on the last packet.
        const SOLICITED = 4;
        /// Copy the data at post time; the scatter list's keys are not
        /// checked and its memory may be reused as soon as the post
        /// returns.
        const INLINE = 8;
    }
}

/// Where a UD send goes (`wr.ud` of `struct ibv_send_wr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdDest {
    /// The address handle: the Falcon connection (RDMA-0.9 §6.6.3).
    pub ah: Ah,
    pub remote_qpn: Qpn,
    /// With the high bit set, the sending QP's own Q_Key is sent instead
    /// (as InfiniBand does).
    pub remote_qkey: QKey,
}

/// A send work request (`struct ibv_send_wr`, one of a list).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SendWr {
    pub wr_id: u64,
    pub sg_list: SgList,
    pub op: WrOp,
    pub send_flags: SendFlags,
    /// UD QPs only.
    pub ud: Option<UdDest>,
}

impl SendWr {
    /// A signalled `op` of the bytes `sg_list` names.
    pub fn new(wr_id: u64, op: WrOp, sg_list: impl Into<SgList>) -> SendWr {
        SendWr {
            wr_id,
            sg_list: sg_list.into(),
            op,
            send_flags: SendFlags::SIGNALED,
            ud: None,
        }
    }

    /// The same request with `flags` instead of its flags.
    pub fn with_flags(self, send_flags: SendFlags) -> SendWr {
        SendWr { send_flags, ..self }
    }

    /// The same request to a UD destination.
    pub fn to(self, ud: UdDest) -> SendWr {
        SendWr {
            ud: Some(ud),
            ..self
        }
    }
}

/// A receive work request (`struct ibv_recv_wr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RecvWr {
    pub wr_id: u64,
    pub sg_list: SgList,
}

impl RecvWr {
    pub fn new(wr_id: u64, sg_list: impl Into<SgList>) -> RecvWr {
        RecvWr {
            wr_id,
            sg_list: sg_list.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scatter_lists_hold_up_to_max_sge_inline() {
        let sge = |i: u32| Sge {
            addr: u64::from(i) * 100,
            length: i,
            lkey: LKey(7),
        };
        let sges: Vec<Sge> = (1..=MAX_SGE as u32).map(sge).collect();
        let list = SgList::new(&sges).expect("fits");
        assert_eq!(list.len(), MAX_SGE);
        assert_eq!(list.total_len(), (1..=MAX_SGE as u64).sum::<u64>());
        let mut full = list;
        assert_eq!(
            full.push(sge(0)),
            Err(PostError::TooManySge { max: MAX_SGE })
        );
        assert!(SgList::EMPTY.is_empty());
        assert_eq!(SgList::one(sge(3)).as_slice(), &[sge(3)]);
    }

    #[test]
    fn opcodes_are_libibverbs() {
        let rkey = RKey(1);
        let ops = [
            (
                WrOp::Write {
                    remote_addr: 0,
                    rkey,
                },
                0,
                WcOpcode::RdmaWrite,
            ),
            (
                WrOp::WriteWithImm {
                    remote_addr: 0,
                    rkey,
                    imm: 0,
                },
                1,
                WcOpcode::RdmaWrite,
            ),
            (WrOp::Send, 2, WcOpcode::Send),
            (WrOp::SendWithImm(0), 3, WcOpcode::Send),
            (
                WrOp::Read {
                    remote_addr: 0,
                    rkey,
                },
                4,
                WcOpcode::RdmaRead,
            ),
            (
                WrOp::CompareSwap {
                    remote_addr: 0,
                    rkey,
                    compare: 0,
                    swap: 0,
                },
                5,
                WcOpcode::CompSwap,
            ),
            (
                WrOp::FetchAdd {
                    remote_addr: 0,
                    rkey,
                    add: 0,
                },
                6,
                WcOpcode::FetchAdd,
            ),
            (WrOp::SendWithInv(rkey), 9, WcOpcode::Send),
        ];
        for (op, code, wc) in ops {
            assert_eq!((op.opcode(), op.wc_opcode()), (code, wc), "{op:?}");
            assert_eq!(
                op.writes_locally(),
                matches!(code, 4..=6),
                "{op:?} writes its scatter list"
            );
        }
        assert_eq!(SendFlags::INLINE.bits(), 8);
    }
}
