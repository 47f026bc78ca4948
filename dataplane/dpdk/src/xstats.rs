//! A device's extended statistics (`rte_eth_xstats`): every counter the
//! PMD keeps, by its name (per-queue packets and bytes, errors by cause),
//! beyond the fixed `rte_eth_stats`.

use crate::error::DpdkError;
use crate::ffi;

/// Port `id`'s extended counters, `(name, value)`, in the PMD's order.
///
/// # Errors
///
/// DPDK's (no such port), by the call that failed.
pub fn xstats(id: u16) -> Result<Vec<(String, u64)>, DpdkError> {
    // SAFETY: a null array of size 0 asks for the count only.
    let count = unsafe { ffi::rte_eth_xstats_get_names(id, core::ptr::null_mut(), 0) };
    let Ok(count) = u32::try_from(count) else {
        return Err(DpdkError::new("rte_eth_xstats_get_names", count));
    };
    // SAFETY: zeroed is a valid rte_eth_xstat_name (a char array).
    let empty_name: ffi::rte_eth_xstat_name = unsafe { core::mem::zeroed() };
    let mut names = vec![empty_name; count as usize];
    // SAFETY: `names` has room for `count` entries.
    let got = unsafe { ffi::rte_eth_xstats_get_names(id, names.as_mut_ptr(), count) };
    if got < 0 || got as u32 > count {
        return Err(DpdkError::new("rte_eth_xstats_get_names", got));
    }
    names.truncate(got as usize);
    let mut values = vec![ffi::rte_eth_xstat { id: 0, value: 0 }; names.len()];
    // SAFETY: `values` has room for `names.len()` entries.
    let got = unsafe { ffi::rte_eth_xstats_get(id, values.as_mut_ptr(), names.len() as u32) };
    if got < 0 || got as usize > names.len() {
        return Err(DpdkError::new("rte_eth_xstats_get", got));
    }
    values.truncate(got as usize);
    Ok(values
        .iter()
        .filter_map(|v| {
            let name = names.get(usize::try_from(v.id).ok()?)?;
            // DPDK writes NUL-terminated names into the 64-byte array.
            let bytes: Vec<u8> = name
                .name
                .iter()
                .take_while(|&&c| c != 0)
                .map(|&c| c as u8)
                .collect();
            Some((String::from_utf8_lossy(&bytes).into_owned(), v.value))
        })
        .collect())
}
