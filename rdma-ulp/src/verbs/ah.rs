//! Address handles: where a UD send goes.
//!
//! Layer: verbs. Owns [`AhAttr`] and the [`Ah`] handle. RDMA-0.9 §6.6.3:
//! UD QPs map many-to-many onto Falcon connections, "the CID is stored in
//! the Address Handle (AH) object associated with the send operation", so
//! an address handle is a connection id and nothing else (Falcon owns the
//! path: addresses, PSP, congestion state).

use falcon_core::api::ConnectionId;

/// Handle of an address handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ah(pub(crate) u32);

impl Ah {
    /// The raw handle (for a C shim's `ibv_ah *` table).
    pub const fn raw(self) -> u32 {
        self.0
    }
}

/// What an address handle is created with (`struct ibv_ah_attr`, as
/// Falcon needs it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AhAttr {
    /// The local id of the Falcon connection the sends go out on.
    pub cid: ConnectionId,
}

/// An address handle as the device keeps it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AddressHandle {
    pub(crate) pd: super::Pd,
    pub(crate) attr: AhAttr,
}
