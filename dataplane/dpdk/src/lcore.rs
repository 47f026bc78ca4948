//! Work on EAL lcores: the threads `rte_eal_init` created and pinned, one
//! per core of `-l` / `--lcores` beyond the main one.
//!
//! [`launch`] runs a Rust closure on a worker lcore (`rte_eal_remote_launch`
//! with an `extern "C"` trampoline) and hands back a [`Launched`] whose
//! [`wait`](Launched::wait) returns the closure's value, or its panic: a
//! panic is caught on the lcore, never unwound across DPDK's C frames.

use std::ffi::{c_int, c_uint, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, PoisonError};

use crate::eal::Eal;
use crate::error::DpdkError;
use crate::ffi;

/// What a launched closure left: its value or its panic.
type Outcome<T> = Arc<Mutex<Option<std::thread::Result<T>>>>;

/// A closure running on a worker lcore.
#[derive(Debug)]
#[must_use = "wait for the lcore, or its result is lost"]
pub struct Launched<T> {
    lcore: u32,
    outcome: Outcome<T>,
}

impl<T> Launched<T> {
    /// The lcore it runs on.
    pub fn lcore(&self) -> u32 {
        self.lcore
    }

    /// The closure has returned (or panicked): [`wait`](Self::wait) will
    /// not block.
    pub fn is_finished(&self) -> bool {
        self.outcome
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    /// Waits for the closure to return: its value, or the panic it raised.
    pub fn wait(self) -> std::thread::Result<T> {
        // SAFETY: the lcore is a worker the launch succeeded on; waiting
        // returns once its function has returned (or at once if it had).
        unsafe { ffi::rte_eal_wait_lcore(c_uint::from(self.lcore)) };
        let taken = self
            .outcome
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        taken.unwrap_or_else(|| Err(Box::new("the lcore function left no result")))
    }
}

/// The worker lcores (every enabled lcore but the main one), in order.
pub fn workers(_eal: &Eal) -> Vec<u32> {
    let mut lcores = Vec::new();
    // SAFETY: the EAL is up; rte_get_next_lcore only reads its lcore table.
    let mut lcore = unsafe { ffi::rte_get_next_lcore(u32::MAX, 1, 0) };
    while lcore < ffi::RTE_MAX_LCORE {
        lcores.push(lcore);
        // SAFETY: as above.
        lcore = unsafe { ffi::rte_get_next_lcore(lcore, 1, 0) };
    }
    lcores
}

/// The lcore the calling thread is (`u32::MAX` on a thread EAL did not
/// create or register).
pub fn current() -> u32 {
    // SAFETY: reads the calling thread's per-lcore variable.
    unsafe { ffi::rte_lcore_id() }
}

/// Runs `work` on worker lcore `lcore`.
///
/// # Errors
///
/// DPDK's: `lcore` is not a worker, or it is busy (`EBUSY`).
pub fn launch<T, F>(_eal: &Eal, lcore: u32, work: F) -> Result<Launched<T>, DpdkError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let outcome: Outcome<T> = Arc::new(Mutex::new(None));
    let slot = Arc::clone(&outcome);
    let job: Box<dyn FnOnce() + Send> = Box::new(move || {
        let result = catch_unwind(AssertUnwindSafe(work));
        *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(result);
    });
    let arg = Box::into_raw(Box::new(job));
    // SAFETY: `trampoline` takes back exactly the box passed as `arg`, once;
    // the EAL is up. If the launch fails the function never runs, and the
    // box is reclaimed below.
    let rc = unsafe { ffi::rte_eal_remote_launch(Some(trampoline), arg.cast::<c_void>(), lcore) };
    if rc != 0 {
        // SAFETY: not launched: the box is still ours.
        drop(unsafe { Box::from_raw(arg) });
        return Err(DpdkError::new("rte_eal_remote_launch", rc));
    }
    Ok(Launched { lcore, outcome })
}

/// The lcore function: runs the boxed job. Never unwinds (the job catches
/// its own panic).
unsafe extern "C" fn trampoline(arg: *mut c_void) -> c_int {
    // SAFETY: `launch` passed a `Box<Box<dyn FnOnce() + Send>>` it leaked
    // for this one call.
    let job = unsafe { Box::from_raw(arg.cast::<Box<dyn FnOnce() + Send>>()) };
    job();
    0
}
