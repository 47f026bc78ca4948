//! The verbs objects: protection domains, memory regions, completion
//! queues, queue pairs, shared receive queues, address handles and the
//! work requests posted to them, with InfiniBand verbs semantics so that a
//! libibverbs-compatible C interface maps onto them one to one.
//!
//! Layer: RDMA ULP, the objects behind the [`Device`](crate::Device) API.
//! Owns the values (attributes, work requests, work completions, async
//! events, flags with the `ibv_*` numeric values) and the pure rules over
//! them: the QP state machine and its attribute table ([`qp`]), key
//! generations and access checks ([`mr`]), completion-queue depth and
//! overrun ([`cq`]). Never touches an engine, a connection or the wire:
//! the [`Device`](crate::Device) drives these objects from Falcon events.
//!
//! The numeric values of the enums and flags are libibverbs' (`verbs.h`):
//! `WcStatus::code`, `QpState::code`, `Access::bits` and the others are
//! what a C shim hands through unchanged.

use core::fmt;

pub mod ah;
pub mod cq;
pub mod event;
pub mod mr;
pub mod qp;
pub mod srq;
pub(crate) mod table;
pub mod wr;

pub use ah::{Ah, AhAttr};
pub use cq::{Cq, WcFlags, WcOpcode, WcStatus, WorkCompletion};
pub use event::{AsyncEvent, AsyncEventKind, EventElement};
pub use mr::{Access, AccessError, MemoryRegion, Region};
pub use qp::{
    ErrorMode, Mtu, QpAttr, QpCap, QpInfo, QpInitAttr, QpOrdering, QpState, QpType, MAX_RD_ATOMIC,
};
pub use srq::{Srq, SrqInitAttr};
pub use wr::{RecvWr, SendFlags, SendWr, SgList, Sge, UdDest, WrOp, MAX_SGE};

/// Declares a set of flags over an unsigned integer: named constants with
/// libibverbs' values, `contains`, union with `|`, and a `Debug` that
/// lists the names.
macro_rules! flags {
    (
        $(#[$attr:meta])*
        pub struct $name:ident: $ty:ty {
            $(
                $(#[$fattr:meta])*
                const $flag:ident = $value:expr;
            )*
        }
    ) => {
        $(#[$attr])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name($ty);

        impl $name {
            $(
                $(#[$fattr])*
                pub const $flag: Self = Self($value);
            )*
            /// No flag.
            pub const EMPTY: Self = Self(0);
            /// Every flag this type names.
            pub const ALL: Self = Self(0 $(| $value)*);

            /// The raw bits.
            pub const fn bits(self) -> $ty {
                self.0
            }

            /// The flags of `bits`, or `None` if it has bits no flag names.
            pub const fn from_bits(bits: $ty) -> Option<Self> {
                if bits & !Self::ALL.0 != 0 {
                    return None;
                }
                Some(Self(bits))
            }

            /// Every flag of `other` is set.
            pub const fn contains(self, other: Self) -> bool {
                self.0 & other.0 == other.0
            }

            /// No flag is set.
            pub const fn is_empty(self) -> bool {
                self.0 == 0
            }

            /// The flags of both.
            #[must_use]
            pub const fn union(self, other: Self) -> Self {
                Self(self.0 | other.0)
            }

            /// The flags of `self` without those of `other`.
            #[must_use]
            pub const fn difference(self, other: Self) -> Self {
                Self(self.0 & !other.0)
            }
        }

        impl ::core::ops::BitOr for $name {
            type Output = Self;

            fn bitor(self, other: Self) -> Self {
                self.union(other)
            }
        }

        impl ::core::ops::BitOrAssign for $name {
            fn bitor_assign(&mut self, other: Self) {
                *self = self.union(other);
            }
        }

        impl ::core::fmt::Debug for $name {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                let mut set = f.debug_set();
                $(
                    if $value != 0 && self.contains(Self::$flag) {
                        set.entry(&format_args!(stringify!($flag)));
                    }
                )*
                set.finish()
            }
        }
    };
}
pub(crate) use flags;

/// Why a verbs call on an object (create, modify, destroy, register)
/// refused. Nothing changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerbsError {
    /// The handle names no live object of this device (never created,
    /// destroyed, or an old incarnation of a reused slot).
    UnknownHandle {
        /// "PD", "CQ", "QP", "SRQ", "AH", "MR".
        what: &'static str,
    },
    /// The object is still used by others (a PD with MRs or QPs, a CQ or
    /// an SRQ with QPs): `EBUSY`.
    Busy { what: &'static str },
    /// An attribute out of range or inconsistent (`EINVAL`).
    InvalidAttribute {
        /// Which attribute.
        name: &'static str,
        /// Why.
        why: &'static str,
    },
    /// A QP state change the verbs state machine has no arrow for.
    InvalidTransition { from: QpState, to: QpState },
    /// A transition that needs an attribute not given.
    MissingAttribute {
        name: &'static str,
        from: QpState,
        to: QpState,
    },
    /// An attribute this transition does not take.
    AttributeNotAllowed {
        name: &'static str,
        from: QpState,
        to: QpState,
    },
    /// A device limit reached ([`DeviceCaps`](crate::DeviceCaps)).
    LimitReached { what: &'static str },
    /// The objects named belong to different protection domains.
    WrongPd { what: &'static str },
}

impl fmt::Display for VerbsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            VerbsError::UnknownHandle { what } => write!(f, "no such {what}"),
            VerbsError::Busy { what } => write!(f, "{what} still in use"),
            VerbsError::InvalidAttribute { name, why } => write!(f, "invalid {name}: {why}"),
            VerbsError::InvalidTransition { from, to } => {
                write!(f, "no QP transition from {from} to {to}")
            }
            VerbsError::MissingAttribute { name, from, to } => {
                write!(f, "QP transition {from} -> {to} needs {name}")
            }
            VerbsError::AttributeNotAllowed { name, from, to } => {
                write!(f, "QP transition {from} -> {to} does not take {name}")
            }
            VerbsError::LimitReached { what } => write!(f, "device limit on {what} reached"),
            VerbsError::WrongPd { what } => write!(f, "{what} of another protection domain"),
        }
    }
}

impl std::error::Error for VerbsError {}

/// Why a post of a work request refused it. The request is not queued and
/// no completion will come for it (`ibv_post_send` returning an errno).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostError {
    /// No such QP or SRQ.
    UnknownQueue,
    /// The QP's state takes no work of this kind: sends in RESET, INIT or
    /// RTR, receives in RESET.
    WrongState(QpState),
    /// The queue holds its `max_*_wr` requests already (`ENOMEM`).
    QueueFull,
    /// More scatter/gather entries than the queue takes.
    TooManySge { max: usize },
    /// An operation the QP's type or mode does not support (a READ on a
    /// UD QP, WRITE with immediate on an unordered QP, RDMA-0.9 §6.4).
    Unsupported { why: &'static str },
    /// A message longer than the QP allows at once: one MTU for UD and for
    /// an unordered QP's SENDs (RDMA-0.9 §6.4), 2^31 bytes for any.
    TooLong { len: u64, max: u64 },
    /// A UD send without a destination, or with an address handle of
    /// another PD or none.
    BadDestination,
    /// A receive posted to a QP that takes its receives from an SRQ.
    UsesSrq,
    /// Inline data longer than the QP's `max_inline_data`.
    InlineTooLong { len: usize, max: usize },
}

impl fmt::Display for PostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PostError::UnknownQueue => f.write_str("no such queue"),
            PostError::WrongState(state) => write!(f, "QP in state {state} takes no such work"),
            PostError::QueueFull => f.write_str("queue full"),
            PostError::TooManySge { max } => write!(f, "more than {max} scatter/gather entries"),
            PostError::Unsupported { why } => write!(f, "unsupported: {why}"),
            PostError::TooLong { len, max } => write!(f, "message of {len} bytes, at most {max}"),
            PostError::BadDestination => f.write_str("no valid UD destination"),
            PostError::UsesSrq => f.write_str("the QP receives from an SRQ"),
            PostError::InlineTooLong { len, max } => {
                write!(f, "{len} bytes inline, at most {max}")
            }
        }
    }
}

impl std::error::Error for PostError {}

/// Handle of a protection domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Pd(pub(crate) u32);

impl Pd {
    /// The raw handle (for a C shim's `ibv_pd *` table).
    pub const fn raw(self) -> u32 {
        self.0
    }
}
