//! An owning packet buffer: one reference to an `rte_mbuf` chain.

use std::ptr::NonNull;

use falcon_core::port::PacketBuf;

use crate::ffi;

/// One reference to an mbuf (the head of a segment chain), returned to its
/// pool when dropped (`rte_pktmbuf_free`, which frees the chain when this
/// was the last reference).
///
/// [`data`](Self::data) and [`data_mut`](Self::data_mut) are the first
/// segment's bytes, which is the whole frame for everything this project
/// builds (pools with a data room for the largest frame);
/// [`segments`](Self::segments) reads a chain a PMD handed in.
///
/// `repr(transparent)` over the mbuf pointer: a `Vec<Mbuf>` is an array of
/// `rte_mbuf` pointers, which the ethdev bursts fill and read in place.
#[derive(Debug)]
#[repr(transparent)]
pub struct Mbuf {
    raw: NonNull<ffi::rte_mbuf>,
}

/// A prefetch hint for the line at `at` (never dereferenced).
#[inline(always)]
fn prefetch(at: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 is part of SSE, which every x86_64 CPU has; a
    // prefetch never faults, whatever the address.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(at.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

/// A device's verdict on one checksum of a received frame (DPDK's
/// `RTE_MBUF_F_RX_*_CKSUM_*` flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxChecksum {
    /// Verified: right.
    Good,
    /// Verified: wrong.
    Bad,
    /// Not verified (no offload, or a frame the device did not parse).
    Unknown,
    /// Not verified, and the frame's checksum is not to be trusted either
    /// way (the device changed the frame).
    None,
}

impl RxChecksum {
    fn from_flags(flags: u64, mask: u64, good: u64, bad: u64) -> RxChecksum {
        match flags & mask {
            0 => RxChecksum::Unknown,
            f if f == good => RxChecksum::Good,
            f if f == bad => RxChecksum::Bad,
            _ => RxChecksum::None,
        }
    }
}

// SAFETY: an Mbuf is one reference to DPDK memory that any thread may read,
// write (we hold the only handle to this reference) and free (mempools are
// thread-safe).
unsafe impl Send for Mbuf {}

impl Mbuf {
    /// Takes ownership of one reference to `raw`; `None` for null.
    ///
    /// # Safety
    ///
    /// `raw` is null or an mbuf from a pktmbuf pool whose reference the
    /// caller hands over (a PMD's rx burst, `rte_pktmbuf_alloc`).
    #[inline]
    pub(crate) unsafe fn from_raw(raw: *mut ffi::rte_mbuf) -> Option<Mbuf> {
        NonNull::new(raw).map(|raw| Mbuf { raw })
    }

    #[inline]
    fn head(&self) -> &ffi::rte_mbuf {
        // SAFETY: we hold a reference, so the mbuf is live; shared access to
        // its header fields.
        unsafe { self.raw.as_ref() }
    }

    /// Bytes of the first segment.
    #[inline]
    pub fn data(&self) -> &[u8] {
        let m = self.head();
        // SAFETY: buf_addr + data_off is the segment's first data byte and
        // data_len bytes follow inside the buffer (an mbuf invariant DPDK's
        // helpers keep); the bytes live as long as our reference.
        unsafe {
            core::slice::from_raw_parts(
                (m.buf_addr as *const u8).add(usize::from(m.data_off)),
                usize::from(m.data_len),
            )
        }
    }

    /// Bytes of the first segment, for writing (sealing in place).
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        // SAFETY: as `data`; `&mut self` makes this the only access through
        // this handle. A clone of the reference (refcnt > 1) would see the
        // writes; this type hands out none.
        unsafe {
            let m = self.raw.as_mut();
            core::slice::from_raw_parts_mut(
                (m.buf_addr as *mut u8).add(usize::from(m.data_off)),
                usize::from(m.data_len),
            )
        }
    }

    /// Frame length, all segments (`pkt_len`).
    #[inline]
    pub fn len(&self) -> usize {
        self.head().pkt_len as usize
    }

    /// No bytes.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Free bytes before the data.
    #[inline]
    pub fn headroom(&self) -> usize {
        usize::from(self.head().data_off)
    }

    /// Free bytes after the first segment's data.
    #[inline]
    pub fn tailroom(&self) -> usize {
        let m = self.head();
        usize::from(m.buf_len) - usize::from(m.data_off) - usize::from(m.data_len)
    }

    /// What the device said of the received frame's IP header checksum
    /// (a port with receive checksum offload sets it).
    pub fn rx_ip_checksum(&self) -> RxChecksum {
        RxChecksum::from_flags(
            self.head().ol_flags,
            u64::from(ffi::RTE_MBUF_F_RX_IP_CKSUM_MASK),
            u64::from(ffi::RTE_MBUF_F_RX_IP_CKSUM_GOOD),
            u64::from(ffi::RTE_MBUF_F_RX_IP_CKSUM_BAD),
        )
    }

    /// The same for the layer-4 (UDP) checksum.
    pub fn rx_l4_checksum(&self) -> RxChecksum {
        RxChecksum::from_flags(
            self.head().ol_flags,
            u64::from(ffi::RTE_MBUF_F_RX_L4_CKSUM_MASK),
            u64::from(ffi::RTE_MBUF_F_RX_L4_CKSUM_GOOD),
            u64::from(ffi::RTE_MBUF_F_RX_L4_CKSUM_BAD),
        )
    }

    /// Asks the CPU to bring the mbuf's header line into the cache (a
    /// hint: nothing is read or written).
    #[inline]
    pub fn prefetch_header(&self) {
        prefetch(self.raw.as_ptr().cast());
    }

    /// Asks the CPU to bring the first line of the frame's bytes into the
    /// cache (reads the header for the address).
    #[inline]
    pub fn prefetch_data(&self) {
        let m = self.head();
        prefetch(
            m.buf_addr
                .cast::<u8>()
                .wrapping_add(usize::from(m.data_off)),
        );
    }

    /// Segments in the chain.
    pub fn segment_count(&self) -> usize {
        usize::from(self.head().nb_segs)
    }

    /// References to this mbuf.
    pub fn refcnt(&self) -> u16 {
        // SAFETY: the mbuf is live (our reference).
        unsafe { ffi::rte_mbuf_refcnt_read(self.raw.as_ptr()) }
    }

    /// Grows the data by `len` bytes at the end of the first segment and
    /// returns them, or `None` without room.
    pub fn append(&mut self, len: usize) -> Option<&mut [u8]> {
        let len16 = u16::try_from(len).ok()?;
        // SAFETY: the mbuf is live and ours; DPDK checks the tailroom and
        // returns null without changing anything when it is short.
        let at = unsafe { ffi::rte_pktmbuf_append(self.raw.as_ptr(), len16) };
        // SAFETY: a non-null result points at `len` bytes now inside the
        // segment's data.
        (!at.is_null()).then(|| unsafe { core::slice::from_raw_parts_mut(at as *mut u8, len) })
    }

    /// Grows the data by `len` bytes in front and returns them, or `None`
    /// without headroom.
    pub fn prepend(&mut self, len: usize) -> Option<&mut [u8]> {
        let len16 = u16::try_from(len).ok()?;
        // SAFETY: as `append`, in front.
        let at = unsafe { ffi::rte_pktmbuf_prepend(self.raw.as_ptr(), len16) };
        // SAFETY: as `append`.
        (!at.is_null()).then(|| unsafe { core::slice::from_raw_parts_mut(at as *mut u8, len) })
    }

    /// Drops `len` bytes from the front; false (nothing changed) if the
    /// first segment has fewer.
    pub fn adj(&mut self, len: usize) -> bool {
        let Ok(len16) = u16::try_from(len) else {
            return false;
        };
        // SAFETY: the mbuf is live and ours; DPDK checks the length.
        !unsafe { ffi::rte_pktmbuf_adj(self.raw.as_ptr(), len16) }.is_null()
    }

    /// Drops `len` bytes from the end; false (nothing changed) if the last
    /// segment has fewer.
    pub fn trim(&mut self, len: usize) -> bool {
        let Ok(len16) = u16::try_from(len) else {
            return false;
        };
        // SAFETY: the mbuf is live and ours; DPDK checks the length.
        unsafe { ffi::rte_pktmbuf_trim(self.raw.as_ptr(), len16) == 0 }
    }

    /// The bytes of each segment, in order.
    pub fn segments(&self) -> impl Iterator<Item = &[u8]> {
        let mut next: *const ffi::rte_mbuf = self.raw.as_ptr();
        core::iter::from_fn(move || {
            if next.is_null() {
                return None;
            }
            // SAFETY: `next` is this chain's head or a `next` link of a
            // segment in it: live while we hold the head's reference.
            let m = unsafe { &*next };
            next = m.next;
            // SAFETY: as `data`, for this segment.
            Some(unsafe {
                core::slice::from_raw_parts(
                    (m.buf_addr as *const u8).add(usize::from(m.data_off)),
                    usize::from(m.data_len),
                )
            })
        })
    }
}

/// The engine's frame buffer on DPDK: the frame is the first segment's
/// data, written in place from the headroom's end (frames this project
/// builds fit one segment; multi-segment frames a PMD hands in are refused
/// by the port, see [`DpdkPort`](crate::port::DpdkPort)).
impl PacketBuf for Mbuf {
    #[inline]
    fn data(&self) -> &[u8] {
        Mbuf::data(self)
    }

    #[inline]
    fn data_mut(&mut self) -> &mut [u8] {
        Mbuf::data_mut(self)
    }

    #[inline]
    fn buffer_mut(&mut self) -> &mut [u8] {
        // SAFETY: from the first data byte (after the headroom) to the end
        // of the segment's buffer, all inside the buffer DPDK allocated for
        // it; `&mut self` makes this the only access through this handle.
        unsafe {
            let m = self.raw.as_mut();
            core::slice::from_raw_parts_mut(
                (m.buf_addr as *mut u8).add(usize::from(m.data_off)),
                usize::from(m.buf_len) - usize::from(m.data_off),
            )
        }
    }

    #[inline]
    fn set_len(&mut self, len: usize) {
        let len = len.min(PacketBuf::capacity(self));
        // SAFETY: the mbuf is ours and single-segment (`capacity` bounds the
        // length to its buffer); data_len and pkt_len describe the same
        // bytes then. len ≤ buf_len fits u16.
        unsafe {
            let m = self.raw.as_mut();
            m.data_len = len as u16;
            m.pkt_len = len as u32;
        }
    }

    #[inline]
    fn len(&self) -> usize {
        usize::from(self.head().data_len)
    }

    #[inline]
    fn capacity(&self) -> usize {
        let m = self.head();
        usize::from(m.buf_len) - usize::from(m.data_off)
    }
}

impl Drop for Mbuf {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: we own one reference to a live chain; freeing it returns
        // the segments whose last reference it was to their pools.
        unsafe { ffi::rte_pktmbuf_free(self.raw.as_ptr()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_flags_read_as_dpdk_defines_them() {
        let ip = |flags: u32| {
            RxChecksum::from_flags(
                u64::from(flags),
                u64::from(ffi::RTE_MBUF_F_RX_IP_CKSUM_MASK),
                u64::from(ffi::RTE_MBUF_F_RX_IP_CKSUM_GOOD),
                u64::from(ffi::RTE_MBUF_F_RX_IP_CKSUM_BAD),
            )
        };
        assert_eq!(ip(0), RxChecksum::Unknown);
        assert_eq!(ip(ffi::RTE_MBUF_F_RX_IP_CKSUM_GOOD), RxChecksum::Good);
        assert_eq!(ip(ffi::RTE_MBUF_F_RX_IP_CKSUM_BAD), RxChecksum::Bad);
        assert_eq!(ip(ffi::RTE_MBUF_F_RX_IP_CKSUM_NONE), RxChecksum::None);
        // Other flags do not change the verdict.
        assert_eq!(
            ip(ffi::RTE_MBUF_F_RX_IP_CKSUM_BAD | ffi::RTE_MBUF_F_RX_L4_CKSUM_GOOD),
            RxChecksum::Bad
        );
    }
}
