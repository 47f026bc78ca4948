//! Memory: the caller's [`Region`]s and the memory regions registered over
//! them, with their keys, access rights and bounds.
//!
//! Layer: verbs. Owns [`Region`] (bytes the caller allocates and keeps a
//! handle to, shared with the device without a copy), [`Access`] (the
//! `IBV_ACCESS_*` flags), [`MemoryRegion`] (what `ibv_reg_mr` returns) and
//! the device's table of registrations with the one check every use of a
//! key goes through (`MrTable::check`). Never lets an access touch a byte
//! outside the registered range: the check returns a span inside it or an
//! [`AccessError`].
//!
//! # Addresses and keys
//!
//! There are no process addresses here (the crate has no `unsafe`), so a
//! registration gets an I/O virtual address from the device, as
//! `ibv_reg_mr_iova` would: registrations never overlap, and a remote peer
//! names bytes by that address and the rkey, exactly as with a real HCA.
//! The lkey and rkey are one 32-bit value: the table slot (24 bits, from 1)
//! and a generation (8 bits) that changes when the slot is reused, so the
//! keys of a deregistered region fail and never name its successor.
//!
//! # Concurrency
//!
//! A region is an `Arc` of a lock over its bytes: the lcore reads it into
//! frames and places received data into it, the caller reads and writes it
//! between, from any thread. As with a real HCA, the caller must not change
//! bytes a posted send is reading, nor read bytes a posted receive or READ
//! is filling, before the work completion says so; the lock only keeps each
//! copy whole.

use core::fmt;
use core::ops::Range;
use std::sync::{Arc, PoisonError, RwLock};

use super::table::{Table, GENERATION_BITS};
use super::{flags, Pd};
use crate::wire::{LKey, RKey};

flags! {
    /// Memory-region access rights (`enum ibv_access_flags`). Local reads
    /// are always allowed.
    pub struct Access: u32 {
        /// The device may write it on behalf of local work (receives, READ
        /// and atomic results).
        const LOCAL_WRITE = 1;
        /// A peer may WRITE it.
        const REMOTE_WRITE = 2;
        /// A peer may READ it.
        const REMOTE_READ = 4;
        /// A peer may run atomics on it.
        const REMOTE_ATOMIC = 8;
    }
}

/// Bytes the caller allocates and shares with the device: the memory of a
/// memory region (see the module doc). Cloning shares, never copies.
#[derive(Clone)]
pub struct Region {
    inner: Arc<RegionInner>,
}

struct RegionInner {
    len: usize,
    bytes: RwLock<Box<[u8]>>,
}

/// A region access past its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfRange {
    pub offset: usize,
    pub len: usize,
    pub region_len: usize,
}

impl fmt::Display for OutOfRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} bytes at {} outside a region of {}",
            self.len, self.offset, self.region_len
        )
    }
}

impl std::error::Error for OutOfRange {}

impl Region {
    /// `len` zero bytes.
    pub fn new(len: usize) -> Region {
        Region::from_vec(vec![0; len])
    }

    /// The bytes of `bytes`, moved in.
    pub fn from_vec(bytes: Vec<u8>) -> Region {
        Region {
            inner: Arc::new(RegionInner {
                len: bytes.len(),
                bytes: RwLock::new(bytes.into_boxed_slice()),
            }),
        }
    }

    pub fn len(&self) -> usize {
        self.inner.len
    }

    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    fn range(&self, offset: usize, len: usize) -> Result<Range<usize>, OutOfRange> {
        let out = OutOfRange {
            offset,
            len,
            region_len: self.inner.len,
        };
        let end = offset.checked_add(len).ok_or(out)?;
        if end > self.inner.len {
            return Err(out);
        }
        Ok(offset..end)
    }

    /// Copies `dst.len()` bytes from `offset`.
    ///
    /// # Errors
    ///
    /// [`OutOfRange`] past the end; nothing is copied.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), OutOfRange> {
        let range = self.range(offset, dst.len())?;
        self.with(|bytes| dst.copy_from_slice(&bytes[range]));
        Ok(())
    }

    /// Copies `src` in at `offset`.
    ///
    /// # Errors
    ///
    /// [`OutOfRange`] past the end; nothing is written.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<(), OutOfRange> {
        let range = self.range(offset, src.len())?;
        self.with_mut(|bytes| bytes[range].copy_from_slice(src));
        Ok(())
    }

    /// A copy of every byte.
    pub fn to_vec(&self) -> Vec<u8> {
        self.with(<[u8]>::to_vec)
    }

    /// Runs `f` on the bytes, read-locked.
    pub fn with<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        // A panic elsewhere while the lock was held leaves whole bytes: a
        // poisoned lock is used as it is.
        let guard = self
            .inner
            .bytes
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        f(&guard)
    }

    /// Runs `f` on the bytes, write-locked.
    pub fn with_mut<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        let mut guard = self
            .inner
            .bytes
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        f(&mut guard)
    }

    /// Both handles share the same bytes.
    pub fn same(&self, other: &Region) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// `dst.len()` bytes from `offset`, zero-filling what lies past the
    /// end (the transmit path must fill its frame whatever happens).
    pub(crate) fn copy_out(&self, offset: usize, dst: &mut [u8]) {
        self.with(|bytes| {
            let available = bytes.get(offset..).unwrap_or_default();
            let n = available.len().min(dst.len());
            dst[..n].copy_from_slice(&available[..n]);
            dst[n..].fill(0);
        });
    }
}

impl fmt::Debug for Region {
    /// The length, not the bytes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Region({} bytes)", self.inner.len)
    }
}

/// A registered memory region, as `ibv_reg_mr` returns it: the keys, the
/// address range a work request or a peer names it by, and the region.
#[derive(Debug, Clone)]
pub struct MemoryRegion {
    pub(crate) key: u32,
    pub(crate) addr: u64,
    pub(crate) length: u64,
    pub(crate) pd: Pd,
    pub(crate) access: Access,
    pub(crate) region: Region,
    pub(crate) region_offset: usize,
}

impl MemoryRegion {
    /// The key local work requests name it by (`mr->lkey`).
    pub fn lkey(&self) -> LKey {
        LKey(self.key)
    }

    /// The key peers name it by (`mr->rkey`); the same value as the lkey.
    pub fn rkey(&self) -> RKey {
        RKey(self.key)
    }

    /// Its first byte's address (`mr->addr`).
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Bytes (`mr->length`).
    pub fn len(&self) -> u64 {
        self.length
    }

    pub fn is_empty(&self) -> bool {
        self.length == 0
    }

    pub fn pd(&self) -> Pd {
        self.pd
    }

    pub fn access(&self) -> Access {
        self.access
    }

    /// The region it covers (a part of, from [`region_offset`](Self::region_offset)).
    pub fn region(&self) -> &Region {
        &self.region
    }

    pub fn region_offset(&self) -> usize {
        self.region_offset
    }

    /// The address of byte `offset` of the registration.
    pub fn addr_at(&self, offset: u64) -> u64 {
        self.addr.wrapping_add(offset)
    }
}

/// Why an access through a key was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessError {
    /// No registration has this key (never, or deregistered: the key's
    /// generation is old).
    UnknownKey,
    /// The registration was invalidated (SEND with Invalidate).
    Invalidated,
    /// The registration belongs to another protection domain.
    WrongPd,
    /// The bytes are not all inside the registration.
    OutOfBounds,
    /// The registration does not grant this right.
    NotPermitted(Access),
}

impl AccessError {
    /// A stable snake_case name, for counters.
    pub const fn name(self) -> &'static str {
        match self {
            AccessError::UnknownKey => "unknown_key",
            AccessError::Invalidated => "invalidated_key",
            AccessError::WrongPd => "wrong_pd",
            AccessError::OutOfBounds => "out_of_bounds",
            AccessError::NotPermitted(_) => "access_not_permitted",
        }
    }
}

impl fmt::Display for AccessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AccessError::UnknownKey => f.write_str("no memory region with this key"),
            AccessError::Invalidated => f.write_str("memory region invalidated"),
            AccessError::WrongPd => f.write_str("memory region of another protection domain"),
            AccessError::OutOfBounds => f.write_str("outside the memory region"),
            AccessError::NotPermitted(need) => write!(f, "memory region lacks {need:?}"),
        }
    }
}

impl std::error::Error for AccessError {}

/// Bytes an access may touch: a part of a region.
#[derive(Debug, Clone)]
pub(crate) struct Span {
    pub(crate) region: Region,
    pub(crate) offset: usize,
    pub(crate) len: usize,
}

impl Span {
    /// Writes `src` at the start of the span. The check that made the span
    /// bounded it inside the region, so a shorter `src` than the span is
    /// the only case: it writes what it has.
    pub(crate) fn place(&self, src: &[u8]) {
        let n = src.len().min(self.len);
        // Within the region by construction (MrTable::check).
        let _ = self.region.write(self.offset, &src[..n]);
    }
}

#[derive(Debug)]
struct Registration {
    pd: Pd,
    region: Region,
    region_offset: usize,
    addr: u64,
    length: u64,
    access: Access,
    valid: bool,
}

/// Where the device starts handing out addresses: away from 0, so that a
/// zeroed address in a request names nothing.
const FIRST_ADDRESS: u64 = 0x1_0000_0000;
/// Addresses between two registrations left unused, and their alignment.
const ADDRESS_GAP: u64 = 0x1000;

/// The registrations of a device (see the module doc).
#[derive(Debug)]
pub(crate) struct MrTable {
    table: Table<Registration>,
    next_addr: u64,
}

/// Keys are table handles + one slot, so that no key is 0.
const KEY_BIAS: u32 = 1 << GENERATION_BITS;

impl MrTable {
    pub(crate) fn new(limit: usize) -> MrTable {
        MrTable {
            table: Table::new(limit.min((1 << 24) - 1)),
            next_addr: FIRST_ADDRESS,
        }
    }

    /// Registers `range` of `region` for `pd` with `access`.
    pub(crate) fn register(
        &mut self,
        pd: Pd,
        region: &Region,
        range: Range<usize>,
        access: Access,
    ) -> Result<MemoryRegion, super::VerbsError> {
        if range.start > range.end || range.end > region.len() {
            return Err(super::VerbsError::InvalidAttribute {
                name: "range",
                why: "outside the region",
            });
        }
        // IB: remote write and atomic rights need local write.
        let remote_writes =
            access.contains(Access::REMOTE_WRITE) || access.contains(Access::REMOTE_ATOMIC);
        if remote_writes && !access.contains(Access::LOCAL_WRITE) {
            return Err(super::VerbsError::InvalidAttribute {
                name: "access",
                why: "REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE",
            });
        }
        let length = (range.end - range.start) as u64;
        let addr = self.next_addr;
        let handle = self
            .table
            .insert(Registration {
                pd,
                region: region.clone(),
                region_offset: range.start,
                addr,
                length,
                access,
                valid: true,
            })
            .ok_or(super::VerbsError::LimitReached {
                what: "memory regions",
            })?;
        let span = length.div_ceil(ADDRESS_GAP).saturating_add(1) * ADDRESS_GAP;
        self.next_addr = self.next_addr.saturating_add(span);
        Ok(MemoryRegion {
            key: handle + KEY_BIAS,
            addr,
            length,
            pd,
            access,
            region: region.clone(),
            region_offset: range.start,
        })
    }

    /// Deregisters the registration of `key`; its keys fail from now on.
    pub(crate) fn deregister(&mut self, key: u32) -> bool {
        self.table.remove(key.wrapping_sub(KEY_BIAS)).is_some()
    }

    /// Registrations of `pd`.
    #[cfg(test)]
    pub(crate) fn count_in(&self, pd: Pd) -> usize {
        self.table.iter().filter(|(_, r)| r.pd == pd).count()
    }

    /// Checks an access of `len` bytes at `addr` through `key` for `pd`
    /// needing `need`; the bytes it may touch.
    ///
    /// A zero-length access checks nothing and touches nothing (InfiniBand
    /// does not check the key of a zero-length RDMA operation).
    pub(crate) fn check(
        &self,
        key: u32,
        pd: Pd,
        addr: u64,
        len: u64,
        need: Access,
    ) -> Result<Span, AccessError> {
        let registration = self
            .table
            .get(key.wrapping_sub(KEY_BIAS))
            .ok_or(AccessError::UnknownKey)?;
        if len == 0 {
            return Ok(Span {
                region: registration.region.clone(),
                offset: registration.region_offset,
                len: 0,
            });
        }
        if !registration.valid {
            return Err(AccessError::Invalidated);
        }
        if registration.pd != pd {
            return Err(AccessError::WrongPd);
        }
        let start = addr
            .checked_sub(registration.addr)
            .ok_or(AccessError::OutOfBounds)?;
        let end = start.checked_add(len).ok_or(AccessError::OutOfBounds)?;
        if end > registration.length {
            return Err(AccessError::OutOfBounds);
        }
        if !registration.access.contains(need) {
            return Err(AccessError::NotPermitted(
                need.difference(registration.access),
            ));
        }
        // In range: within `length`, itself a usize range of the region.
        Ok(Span {
            region: registration.region.clone(),
            offset: registration.region_offset + start as usize,
            len: len as usize,
        })
    }

    /// Invalidates the registration `key` names, if it is `pd`'s (SEND
    /// with Invalidate).
    pub(crate) fn invalidate(&mut self, key: u32, pd: Pd) -> Result<(), AccessError> {
        let registration = self
            .table
            .get_mut(key.wrapping_sub(KEY_BIAS))
            .ok_or(AccessError::UnknownKey)?;
        if registration.pd != pd {
            return Err(AccessError::WrongPd);
        }
        if !registration.valid {
            return Err(AccessError::Invalidated);
        }
        registration.valid = false;
        Ok(())
    }

    /// Whether `key` names a registration that is not invalidated.
    pub(crate) fn is_valid(&self, key: u32) -> bool {
        self.table
            .get(key.wrapping_sub(KEY_BIAS))
            .is_some_and(|r| r.valid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table_with(access: Access) -> (MrTable, MemoryRegion, Region) {
        let mut table = MrTable::new(8);
        let region = Region::from_vec((0..=255).collect());
        let mr = table
            .register(Pd(0), &region, 16..80, access)
            .expect("registered");
        (table, mr, region)
    }

    #[test]
    fn region_reads_and_writes_within_bounds() {
        let region = Region::new(8);
        region.write(2, &[1, 2, 3]).expect("inside");
        let mut out = [0u8; 4];
        region.read(1, &mut out).expect("inside");
        assert_eq!(out, [0, 1, 2, 3]);
        assert_eq!(
            region.write(6, &[9, 9, 9]),
            Err(OutOfRange {
                offset: 6,
                len: 3,
                region_len: 8
            })
        );
        assert!(region.read(usize::MAX, &mut out).is_err());
        assert_eq!(region.to_vec(), [0, 0, 1, 2, 3, 0, 0, 0]);
        let shared = region.clone();
        shared.write(0, &[7]).expect("inside");
        assert_eq!(region.to_vec()[0], 7, "a clone shares the bytes");
        assert!(shared.same(&region));
        let mut past = [0xFFu8; 4];
        region.copy_out(6, &mut past);
        assert_eq!(past, [0, 0, 0, 0]);
    }

    #[test]
    fn keys_check_pd_bounds_and_rights() {
        let (table, mr, _) = table_with(Access::LOCAL_WRITE | Access::REMOTE_READ);
        assert_eq!(mr.len(), 64);
        assert_eq!(mr.lkey().0, mr.rkey().0);
        assert_ne!(mr.rkey().0, 0);
        let key = mr.rkey().0;
        let span = table
            .check(key, Pd(0), mr.addr() + 4, 8, Access::REMOTE_READ)
            .expect("allowed");
        assert_eq!((span.offset, span.len), (20, 8));
        assert_eq!(
            table
                .check(key, Pd(1), mr.addr(), 8, Access::REMOTE_READ)
                .err(),
            Some(AccessError::WrongPd)
        );
        assert_eq!(
            table
                .check(key, Pd(0), mr.addr() + 60, 8, Access::REMOTE_READ)
                .err(),
            Some(AccessError::OutOfBounds)
        );
        assert_eq!(
            table
                .check(key, Pd(0), mr.addr() - 1, 1, Access::REMOTE_READ)
                .err(),
            Some(AccessError::OutOfBounds)
        );
        assert_eq!(
            table
                .check(key, Pd(0), u64::MAX, 2, Access::REMOTE_READ)
                .err(),
            Some(AccessError::OutOfBounds)
        );
        assert_eq!(
            table
                .check(key, Pd(0), mr.addr(), 8, Access::REMOTE_WRITE)
                .err(),
            Some(AccessError::NotPermitted(Access::REMOTE_WRITE))
        );
        assert_eq!(
            table
                .check(key ^ 0x100, Pd(0), mr.addr(), 8, Access::REMOTE_READ)
                .err(),
            Some(AccessError::UnknownKey)
        );
        // A zero-length access checks no right and touches nothing.
        assert!(table
            .check(key, Pd(1), 0, 0, Access::REMOTE_ATOMIC)
            .is_ok_and(|span| span.len == 0));
    }

    #[test]
    fn a_reregistered_region_gets_new_keys_and_the_old_fail() {
        let (mut table, old, region) = table_with(Access::LOCAL_WRITE);
        assert!(table.deregister(old.lkey().0));
        assert!(!table.deregister(old.lkey().0), "once");
        let new = table
            .register(Pd(0), &region, 0..256, Access::LOCAL_WRITE)
            .expect("registered");
        assert_ne!(new.lkey(), old.lkey());
        assert_eq!(
            table
                .check(old.lkey().0, Pd(0), old.addr(), 1, Access::LOCAL_WRITE)
                .err(),
            Some(AccessError::UnknownKey)
        );
        assert!(table
            .check(new.lkey().0, Pd(0), new.addr(), 256, Access::LOCAL_WRITE)
            .is_ok());
        assert!(
            new.addr() > old.addr() + old.len(),
            "addresses never overlap"
        );
    }

    #[test]
    fn invalidation_fails_the_keys() {
        let (mut table, mr, _) = table_with(Access::LOCAL_WRITE | Access::REMOTE_WRITE);
        let key = mr.rkey().0;
        assert_eq!(table.invalidate(key, Pd(3)), Err(AccessError::WrongPd));
        assert!(table.is_valid(key));
        table.invalidate(key, Pd(0)).expect("invalidated");
        assert!(!table.is_valid(key));
        assert_eq!(table.invalidate(key, Pd(0)), Err(AccessError::Invalidated));
        assert_eq!(
            table
                .check(key, Pd(0), mr.addr(), 1, Access::REMOTE_WRITE)
                .err(),
            Some(AccessError::Invalidated)
        );
    }

    #[test]
    fn remote_write_needs_local_write() {
        let mut table = MrTable::new(1);
        let region = Region::new(8);
        for access in [Access::REMOTE_WRITE, Access::REMOTE_ATOMIC] {
            assert!(table.register(Pd(0), &region, 0..8, access).is_err());
        }
        assert!(table
            .register(Pd(0), &region, 4..9, Access::LOCAL_WRITE)
            .is_err());
        table
            .register(Pd(0), &region, 0..8, Access::REMOTE_READ)
            .expect("read only");
        assert!(
            table
                .register(Pd(0), &region, 0..8, Access::REMOTE_READ)
                .is_err(),
            "limit of one"
        );
        assert_eq!(table.count_in(Pd(0)), 1);
        assert_eq!(
            format!("{:?}", Access::ALL),
            "{LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC}"
        );
        assert_eq!(Access::from_bits(16), None);
    }
}
