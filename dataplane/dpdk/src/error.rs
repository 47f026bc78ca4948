//! A failed DPDK call, by name, with DPDK's error number and text.

use core::fmt;
use std::ffi::CStr;

use crate::ffi;

/// A DPDK call that failed: which, and `rte_errno` (or the negative return
/// value DPDK gave instead) with `rte_strerror`'s text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DpdkError {
    /// The DPDK function or the step that failed.
    pub call: &'static str,
    /// The error number (positive).
    pub errno: i32,
    /// What DPDK says it means.
    pub message: String,
}

impl DpdkError {
    /// The error `errno` (a positive errno value) of `call`.
    pub fn new(call: &'static str, errno: i32) -> DpdkError {
        let errno = errno.abs();
        // SAFETY: rte_strerror returns a pointer to a static or per-lcore
        // buffer holding a NUL-terminated string, valid until the next call
        // on this thread; it is copied out at once.
        let message = unsafe {
            let text = ffi::rte_strerror(errno);
            if text.is_null() {
                String::from("unknown error")
            } else {
                CStr::from_ptr(text).to_string_lossy().into_owned()
            }
        };
        DpdkError {
            call,
            errno,
            message,
        }
    }

    /// The error of `call`, from `rte_errno` on this thread (read right
    /// after the failed call).
    pub fn last(call: &'static str) -> DpdkError {
        // SAFETY: reads the calling thread's rte_errno through the shim.
        let errno = unsafe { ffi::shim_rte_errno() };
        DpdkError::new(call, errno)
    }

    /// A precondition of ours, not a DPDK errno.
    pub fn usage(call: &'static str, message: impl Into<String>) -> DpdkError {
        DpdkError {
            call,
            errno: 22, // EINVAL
            message: message.into(),
        }
    }
}

impl fmt::Display for DpdkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} failed: {} (errno {})",
            self.call, self.message, self.errno
        )
    }
}

impl std::error::Error for DpdkError {}
