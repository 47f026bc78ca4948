//! Rings of mbufs between lcores (`rte_ring`): the software dispatcher's
//! path from the lcore that received a frame to the lcore whose shard owns
//! it (DESIGN §4 "Packets between cores: `rte_ring` on DPDK").
//!
//! A ring has many producers ([`RingSender`], `Clone`: every lcore that
//! receives from the device may hand a frame to this shard) and one
//! consumer ([`RingReceiver`], not `Clone`: the shard's own lcore), so it
//! is created multi-producer, single-consumer. Frames go in and out as
//! mbuf pointers in place (`Mbuf` is a transparent pointer), a burst at a
//! time. A ring is freed when its last handle goes, with the frames still
//! in it returned to their pools.

use std::ffi::CString;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::eal::Eal;
use crate::error::DpdkError;
use crate::ffi;
use crate::mbuf::Mbuf;

/// The ring, shared by its handles.
#[derive(Debug)]
struct Shared {
    raw: NonNull<ffi::rte_ring>,
}

// SAFETY: an rte_ring created without RING_F_SP_ENQ takes enqueues from
// any number of threads at once; the one dequeuing handle is
// `RingReceiver`, which is not `Clone` and needs `&mut self`.
unsafe impl Send for Shared {}
// SAFETY: as above: the shared operations (`enqueue_burst`, `count`) are
// thread-safe on a multi-producer ring.
unsafe impl Sync for Shared {}

impl Drop for Shared {
    fn drop(&mut self) {
        // The last handle: no one enqueues or dequeues any more. Frames
        // still in the ring go back to their pools, then the ring is freed.
        let mut frames = Vec::with_capacity(32);
        while dequeue(self.raw, &mut frames, 32) > 0 {
            frames.clear();
        }
        // SAFETY: created by `rte_ring_create` in `mbuf_ring` and freed
        // once, here, when the last handle is gone.
        unsafe { ffi::rte_ring_free(self.raw.as_ptr()) };
    }
}

/// Dequeues up to `max` mbufs onto the end of `into`.
fn dequeue(raw: NonNull<ffi::rte_ring>, into: &mut Vec<Mbuf>, max: usize) -> usize {
    let want = max.min(u32::MAX as usize);
    into.reserve(want);
    let len = into.len();
    // SAFETY: the spare capacity reserved above is room for `want` mbuf
    // pointers (`Mbuf` is a transparent non-null pointer); the ring holds
    // only mbuf references that senders handed over, so each of the `got`
    // pointers written is one reference `set_len` then owns. The caller is
    // the ring's only consumer (see `Shared`).
    unsafe {
        let at = into.as_mut_ptr().add(len).cast::<*mut core::ffi::c_void>();
        let got = ffi::rte_ring_dequeue_burst(raw.as_ptr(), at, want as u32, core::ptr::null_mut())
            as usize;
        into.set_len(len + got);
        got
    }
}

/// A new ring of `slots` mbufs (a power of two; it holds `slots − 1`)
/// named `name` (unique in the process), on the EAL's socket.
///
/// # Errors
///
/// DPDK's (`rte_ring_create`: a bad size, a name in use, no memory).
pub fn mbuf_ring(
    eal: &Eal,
    name: &str,
    slots: u32,
) -> Result<(RingSender, RingReceiver), DpdkError> {
    let c_name = CString::new(name)
        .map_err(|_| DpdkError::usage("rte_ring_create", "name holds a NUL byte"))?;
    // SAFETY: the EAL is up; DPDK copies the name. Multi-producer (no
    // RING_F_SP_ENQ), single consumer.
    let raw = unsafe {
        ffi::rte_ring_create(c_name.as_ptr(), slots, eal.socket_id(), ffi::RING_F_SC_DEQ)
    };
    let raw = NonNull::new(raw).ok_or_else(|| DpdkError::last("rte_ring_create"))?;
    let shared = Arc::new(Shared { raw });
    Ok((
        RingSender {
            shared: Arc::clone(&shared),
        },
        RingReceiver { shared },
    ))
}

/// A handle that puts frames into a ring; any lcore may hold one.
#[derive(Debug, Clone)]
pub struct RingSender {
    shared: Arc<Shared>,
}

impl RingSender {
    /// Puts the frames of `frames` from the front into the ring; those it
    /// took are removed, those it had no room for stay, in order. Returns
    /// how many it took.
    #[inline]
    pub fn enqueue_burst(&self, frames: &mut Vec<Mbuf>) -> usize {
        if frames.is_empty() {
            return 0;
        }
        let n = frames.len().min(u32::MAX as usize);
        // SAFETY: the vector's first `n` elements are live mbuf references
        // (transparent pointers); the ring takes the first `sent` and does
        // not write the array. Those handles are then forgotten (the ring
        // owns their references) by moving the rest to the front bitwise
        // and shortening the vector: none is dropped or duplicated.
        unsafe {
            let base = frames.as_mut_ptr();
            let sent = ffi::rte_ring_enqueue_burst(
                self.shared.raw.as_ptr(),
                base.cast::<*mut core::ffi::c_void>(),
                n as u32,
                core::ptr::null_mut(),
            ) as usize;
            let rest = frames.len() - sent;
            core::ptr::copy(base.add(sent), base, rest);
            frames.set_len(rest);
            sent
        }
    }

    /// Frames in the ring now.
    pub fn len(&self) -> usize {
        // SAFETY: the ring is live while a handle is; a count is a read of
        // its head and tail.
        unsafe { ffi::rte_ring_count(self.shared.raw.as_ptr()) as usize }
    }

    /// The ring holds nothing now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The one handle that takes frames out of a ring: its shard's lcore.
#[derive(Debug)]
pub struct RingReceiver {
    shared: Arc<Shared>,
}

impl RingReceiver {
    /// Takes up to `max` frames onto the end of `into`; returns how many.
    #[inline]
    pub fn dequeue_burst(&mut self, into: &mut Vec<Mbuf>, max: usize) -> usize {
        dequeue(self.shared.raw, into, max)
    }
}
