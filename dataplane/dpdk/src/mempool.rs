//! Packet-buffer mempools (`rte_pktmbuf_pool_create`).

use std::ffi::CString;
use std::ptr::NonNull;

use crate::eal::Eal;
use crate::error::DpdkError;
use crate::ffi;
use crate::mbuf::Mbuf;

/// A pool of mbufs of one data-room size.
///
/// A pool lives as long as the process: dropping the handle does not free
/// it. An [`Mbuf`] holds no reference to its pool (it would cost a
/// reference count per packet), so a pool freed while one of its mbufs was
/// still out, in a port's ring or a ULP's hands, would be freed under it.
/// Pools come out of the EAL's fixed memory (`-m`), which is never given
/// back before the process ends either.
#[derive(Debug)]
pub struct Mempool {
    raw: NonNull<ffi::rte_mempool>,
}

// SAFETY: DPDK mempools are multi-producer, multi-consumer by default
// (the flags passed below); any thread may get and put.
unsafe impl Send for Mempool {}
// SAFETY: as above: every operation through `&Mempool` is thread-safe.
unsafe impl Sync for Mempool {}

impl Mempool {
    /// A pool of `count` mbufs with `data_room` bytes each (headroom
    /// included, `RTE_PKTMBUF_HEADROOM` = 128), a per-lcore cache of `cache`
    /// (≤ 512), on the calling lcore's socket. `name` must be unique in the
    /// process.
    ///
    /// # Errors
    ///
    /// DPDK's (`ENOMEM` when the EAL's memory, `-m`, is too small for it).
    pub fn new(
        eal: &Eal,
        name: &str,
        count: u32,
        cache: u32,
        data_room: u16,
    ) -> Result<Mempool, DpdkError> {
        let c_name = CString::new(name)
            .map_err(|_| DpdkError::usage("rte_pktmbuf_pool_create", "name holds a NUL byte"))?;
        // SAFETY: the EAL is up (`eal`); the name is a valid C string that
        // DPDK copies; the sizes are checked by DPDK, which returns null and
        // sets rte_errno when it refuses them.
        let raw = unsafe {
            ffi::rte_pktmbuf_pool_create(
                c_name.as_ptr(),
                count,
                cache,
                0,
                data_room,
                eal.socket_id(),
            )
        };
        NonNull::new(raw)
            .map(|raw| Mempool { raw })
            .ok_or_else(|| DpdkError::last("rte_pktmbuf_pool_create"))
    }

    /// One mbuf, reset (no data, default headroom), or `None` if the pool
    /// is empty.
    #[inline]
    pub fn alloc(&self) -> Option<Mbuf> {
        // SAFETY: the pool is a live pktmbuf pool; a non-null result is an
        // mbuf with refcnt 1 that we now own.
        unsafe { Mbuf::from_raw(ffi::rte_pktmbuf_alloc(self.raw.as_ptr())) }
    }

    /// Mbufs in the pool (caches included).
    pub fn available(&self) -> u32 {
        // SAFETY: a read of the live pool's counters.
        unsafe { ffi::rte_mempool_avail_count(self.raw.as_ptr()) }
    }

    /// Mbufs taken out and not yet returned.
    pub fn in_use(&self) -> u32 {
        // SAFETY: as `available`.
        unsafe { ffi::rte_mempool_in_use_count(self.raw.as_ptr()) }
    }

    /// The raw pool, for ethdev queue setup.
    pub(crate) fn as_ptr(&self) -> *mut ffi::rte_mempool {
        self.raw.as_ptr()
    }
}
