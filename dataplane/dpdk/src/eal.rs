//! The DPDK Environment Abstraction Layer: initialised once per process.
//!
//! `rte_eal_init` runs at most once in a process (a second call fails with
//! `EALREADY`, and after `rte_eal_cleanup` no DPDK call may be made), so
//! [`Eal::init`] keeps the one EAL in a process-wide cell: the first call
//! initialises it with its arguments, later calls with the same arguments
//! get the same EAL, with other arguments an error. Everything that needs
//! DPDK takes an `&Eal`, so nothing reaches DPDK before it is up.
//!
//! Arguments are EAL's command line without the program name, e.g. for a
//! machine with no hugepages and no NIC (`spec/dpdk.md` §3.1):
//! `--no-huge -m 256 --no-pci --no-shconf --no-telemetry
//! --file-prefix=<unique> -l 0 --vdev=net_ring0`. (`--in-memory` cannot be
//! combined with `--no-huge` on 22.11.)

use std::ffi::{c_char, c_int, CString};
use std::sync::{Mutex, OnceLock};

use crate::error::DpdkError;
use crate::ffi;

/// The process's EAL, initialised.
#[derive(Debug)]
pub struct Eal {
    args: Vec<String>,
}

static EAL: OnceLock<Eal> = OnceLock::new();
/// Serialises initialisation: `rte_eal_init` must not run twice at once.
static INIT: Mutex<()> = Mutex::new(());

impl Eal {
    /// Initialises the EAL with `args` (EAL's options, no program name), or
    /// returns the EAL already initialised with the same `args`.
    ///
    /// # Errors
    ///
    /// DPDK's error (the EAL's own message is on stderr), or a usage error
    /// when the process's EAL was initialised with other arguments or an
    /// argument holds a NUL byte.
    pub fn init(args: &[&str]) -> Result<&'static Eal, DpdkError> {
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let _guard = INIT
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(eal) = EAL.get() {
            return if eal.args == args {
                Ok(eal)
            } else {
                Err(DpdkError::usage(
                    "rte_eal_init",
                    format!(
                        "the EAL of this process is already up with {:?}; it is initialised once per process",
                        eal.args
                    ),
                ))
            };
        }
        let mut argv: Vec<*mut c_char> = Vec::with_capacity(args.len() + 2);
        for arg in std::iter::once("falcon").chain(args.iter().map(String::as_str)) {
            let arg = CString::new(arg).map_err(|_| {
                DpdkError::usage("rte_eal_init", format!("argument {arg:?} holds a NUL byte"))
            })?;
            // Leaked on purpose: the EAL may keep pointers into its argv
            // (getopt permutes the array, and some options keep their
            // strings) for the life of the process, which is the EAL's.
            argv.push(arg.into_raw());
        }
        let argc = argv.len() as c_int;
        argv.push(core::ptr::null_mut());
        // SAFETY: argv holds argc valid NUL-terminated strings followed by a
        // null pointer, all alive for the rest of the process; INIT makes
        // this the only call in progress, and EAL (checked above) says no
        // earlier call succeeded.
        let parsed = unsafe { ffi::rte_eal_init(argc, argv.as_mut_ptr()) };
        if parsed < 0 {
            return Err(DpdkError::last("rte_eal_init"));
        }
        Ok(EAL.get_or_init(|| Eal { args }))
    }

    /// The EAL of this process, if it is up.
    pub fn get() -> Option<&'static Eal> {
        EAL.get()
    }

    /// The arguments it was initialised with.
    pub fn args(&self) -> &[String] {
        &self.args
    }

    /// The EAL's runtime directory (`/var/run/dpdk/<file-prefix>` as root):
    /// with `--no-shconf` it stays empty, and is left behind when the
    /// process ends; whoever chose the prefix removes it.
    pub fn runtime_dir(&self) -> std::path::PathBuf {
        // SAFETY: returns a pointer to the EAL's static, NUL-terminated
        // path, set during rte_eal_init; copied out at once.
        let dir = unsafe { std::ffi::CStr::from_ptr(ffi::rte_eal_get_runtime_dir()) };
        std::path::PathBuf::from(dir.to_string_lossy().into_owned())
    }

    /// The NUMA socket of the calling lcore (0 on a thread EAL did not
    /// create).
    pub fn socket_id(&self) -> i32 {
        // SAFETY: reads a per-lcore variable; valid on any thread once the
        // EAL is up (which `self` proves).
        let socket = unsafe { ffi::rte_socket_id() };
        // SOCKET_ID_ANY (-1) reads as u32::MAX.
        i32::try_from(socket).unwrap_or(-1)
    }

    /// TSC ticks per second, as DPDK measured them at initialisation.
    pub fn tsc_hz(&self) -> u64 {
        // SAFETY: a read of a value set during rte_eal_init.
        unsafe { ffi::rte_get_tsc_hz() }
    }

    /// The TSC now.
    #[inline]
    pub fn tsc(&self) -> u64 {
        // SAFETY: rdtsc through DPDK's inline wrapper; no memory touched.
        unsafe { ffi::rte_get_tsc_cycles() }
    }
}
