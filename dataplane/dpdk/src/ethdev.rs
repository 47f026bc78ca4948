//! Ethernet ports: configured, started, bursts of mbufs in and out, device
//! counters.

use std::ffi::CString;

use crate::eal::Eal;
use crate::error::DpdkError;
use crate::ffi;
use crate::mbuf::Mbuf;
use crate::mempool::Mempool;
pub use crate::offload::{DeviceInfo, Offloads};

/// How to bring a port up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortConfig {
    /// Receive and transmit queues.
    pub rx_queues: u16,
    pub tx_queues: u16,
    /// Descriptors per receive and transmit queue.
    pub rx_descriptors: u16,
    pub tx_descriptors: u16,
    /// Offloads to take where the device has them.
    pub offloads: Offloads,
}

impl Default for PortConfig {
    fn default() -> Self {
        PortConfig {
            rx_queues: 1,
            tx_queues: 1,
            rx_descriptors: 1024,
            tx_descriptors: 1024,
            offloads: Offloads::WHERE_AVAILABLE,
        }
    }
}

/// The device's counters (`rte_eth_stats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortStats {
    pub rx_packets: u64,
    pub tx_packets: u64,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    /// Dropped by the device for want of receive descriptors or buffers.
    pub rx_missed: u64,
    pub rx_errors: u64,
    pub tx_errors: u64,
    /// Receive buffer allocation failures.
    pub rx_no_mbuf: u64,
}

/// A started ethdev port; stopped and closed when dropped.
#[derive(Debug)]
pub struct EthPort {
    id: u16,
    config: PortConfig,
    info: DeviceInfo,
    /// The offloads in effect.
    offloads: Offloads,
}

impl EthPort {
    /// The port id of the device named `name` (a vdev's name, e.g.
    /// `net_ring0`).
    ///
    /// # Errors
    ///
    /// No such device.
    pub fn id_by_name(_eal: &Eal, name: &str) -> Result<u16, DpdkError> {
        let c_name = CString::new(name).map_err(|_| {
            DpdkError::usage("rte_eth_dev_get_port_by_name", "name holds a NUL byte")
        })?;
        let mut id = 0u16;
        // SAFETY: the EAL is up; the name is a valid C string; `id` is a
        // valid out-pointer.
        let rc = unsafe { ffi::rte_eth_dev_get_port_by_name(c_name.as_ptr(), &mut id) };
        if rc != 0 {
            return Err(DpdkError::new("rte_eth_dev_get_port_by_name", rc));
        }
        Ok(id)
    }

    /// Two ring ports wired to each other (`rte_eth_from_rings`): what one
    /// transmits the other receives, one queue each way. In process, no
    /// copy, deterministic: two engines over real ethdev ports and mbufs
    /// with no device. Returns their port ids.
    ///
    /// # Errors
    ///
    /// DPDK's (ring or port creation), by call.
    pub fn ring_pair(
        eal: &Eal,
        name_a: &str,
        name_b: &str,
        slots: u32,
    ) -> Result<(u16, u16), DpdkError> {
        EthPort::ring_pair_with_queues(eal, name_a, name_b, slots, 1)
    }

    /// [`ring_pair`](Self::ring_pair) with `queues` queues each way: what
    /// one port transmits on queue `i` the other receives on queue `i`
    /// (a device that steers by queue, for several lcores a side).
    ///
    /// # Errors
    ///
    /// DPDK's (ring or port creation), by call.
    pub fn ring_pair_with_queues(
        eal: &Eal,
        name_a: &str,
        name_b: &str,
        slots: u32,
        queues: u16,
    ) -> Result<(u16, u16), DpdkError> {
        let ring = |name: String| -> Result<*mut ffi::rte_ring, DpdkError> {
            let c_name = CString::new(name)
                .map_err(|_| DpdkError::usage("rte_ring_create", "name holds a NUL byte"))?;
            // SAFETY: the EAL is up; the name is copied by DPDK; single
            // producer and single consumer: each ring is one queue of one
            // transmitting and one receiving port, each polled by one
            // thread.
            let raw = unsafe {
                ffi::rte_ring_create(
                    c_name.as_ptr(),
                    slots,
                    eal.socket_id(),
                    ffi::RING_F_SP_ENQ | ffi::RING_F_SC_DEQ,
                )
            };
            if raw.is_null() {
                Err(DpdkError::last("rte_ring_create"))
            } else {
                Ok(raw)
            }
        };
        let mut a_to_b = Vec::new();
        let mut b_to_a = Vec::new();
        for q in 0..queues {
            let suffix = if queues == 1 {
                String::new()
            } else {
                format!("_{q}")
            };
            a_to_b.push(ring(format!("{name_a}_to_{name_b}{suffix}"))?);
            b_to_a.push(ring(format!("{name_b}_to_{name_a}{suffix}"))?);
        }
        let port = |name: &str, rx: &[*mut ffi::rte_ring], tx: &[*mut ffi::rte_ring]| {
            let c_name = CString::new(name)
                .map_err(|_| DpdkError::usage("rte_eth_from_rings", "name holds a NUL byte"))?;
            // SAFETY: the rings were created above and live for the process
            // (never freed); the arrays hold `queues` rings each; the PMD
            // copies the pointers.
            let id = unsafe {
                ffi::rte_eth_from_rings(
                    c_name.as_ptr(),
                    rx.as_ptr(),
                    u32::from(queues),
                    tx.as_ptr(),
                    u32::from(queues),
                    u32::try_from(eal.socket_id()).unwrap_or(u32::MAX),
                )
            };
            u16::try_from(id).map_err(|_| DpdkError::last("rte_eth_from_rings"))
        };
        Ok((
            port(name_a, &b_to_a, &a_to_b)?,
            port(name_b, &a_to_b, &b_to_a)?,
        ))
    }

    /// Configures port `id` with `config`, its receive queues filled from
    /// `pool`, and starts it.
    ///
    /// # Errors
    ///
    /// The first DPDK call that failed, by name.
    pub fn start(
        eal: &Eal,
        id: u16,
        config: PortConfig,
        pool: &'static Mempool,
    ) -> Result<EthPort, DpdkError> {
        let info = DeviceInfo::get(id)?;
        for (what, asked, max) in [
            ("receive", config.rx_queues, info.max_rx_queues),
            ("transmit", config.tx_queues, info.max_tx_queues),
        ] {
            if asked == 0 || asked > max {
                return Err(DpdkError::usage(
                    "rte_eth_dev_configure",
                    format!("{asked} {what} queues: {} has 1..={max}", info.driver),
                ));
            }
        }
        // SAFETY: a zeroed rte_eth_conf is DPDK's documented default
        // configuration: no offloads (receive scatter off, so every frame
        // arrives in one segment, which `DpdkPort` relies on), no RSS.
        let mut conf: ffi::rte_eth_conf = unsafe { core::mem::zeroed() };
        let offloads = config.offloads.apply(&info, config.rx_queues, &mut conf);
        // SAFETY: the EAL is up; `conf` outlives the call.
        let rc =
            unsafe { ffi::rte_eth_dev_configure(id, config.rx_queues, config.tx_queues, &conf) };
        if rc != 0 {
            return Err(DpdkError::new("rte_eth_dev_configure", rc));
        }
        let socket = eal.socket_id();
        let socket = u32::try_from(socket).unwrap_or(u32::MAX);
        for queue in 0..config.rx_queues {
            // SAFETY: the port is configured with this many queues; a null
            // rx_conf selects the device's defaults; the pool lives for the
            // process (`Mempool`).
            let rc = unsafe {
                ffi::rte_eth_rx_queue_setup(
                    id,
                    queue,
                    config.rx_descriptors,
                    socket,
                    core::ptr::null(),
                    pool.as_ptr(),
                )
            };
            if rc != 0 {
                return Err(DpdkError::new("rte_eth_rx_queue_setup", rc));
            }
        }
        for queue in 0..config.tx_queues {
            // SAFETY: as above, transmit side, default tx_conf.
            let rc = unsafe {
                ffi::rte_eth_tx_queue_setup(
                    id,
                    queue,
                    config.tx_descriptors,
                    socket,
                    core::ptr::null(),
                )
            };
            if rc != 0 {
                return Err(DpdkError::new("rte_eth_tx_queue_setup", rc));
            }
        }
        // SAFETY: configured and set up above.
        let rc = unsafe { ffi::rte_eth_dev_start(id) };
        if rc != 0 {
            return Err(DpdkError::new("rte_eth_dev_start", rc));
        }
        Ok(EthPort {
            id,
            config,
            info,
            offloads,
        })
    }

    /// The port id.
    pub fn id(&self) -> u16 {
        self.id
    }

    /// The device's capabilities.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// The offloads in effect (what was asked and the device has).
    pub fn offloads(&self) -> Offloads {
        self.offloads
    }

    /// Queues, descriptors and offloads as configured.
    pub fn config(&self) -> &PortConfig {
        &self.config
    }

    /// Every counter the PMD keeps, by name (`rte_eth_xstats`).
    ///
    /// # Errors
    ///
    /// DPDK's.
    pub fn xstats(&self) -> Result<Vec<(String, u64)>, DpdkError> {
        crate::xstats::xstats(self.id)
    }

    /// Receives up to `max` frames from `queue` onto the end of `into`.
    /// Returns how many came.
    #[inline]
    pub fn rx_burst(&mut self, queue: u16, into: &mut Vec<Mbuf>, max: usize) -> usize {
        // SAFETY: `&mut self` makes this the port's only poller.
        unsafe { self.rx_burst_shared(queue, into, max) }
    }

    /// [`rx_burst`](Self::rx_burst) through a shared port.
    ///
    /// # Safety
    ///
    /// No other thread polls receive queue `queue` at the same time (a
    /// PMD's queue is single-threaded; [`DpdkPort::on_queues`] hands each
    /// queue to one port).
    ///
    /// [`DpdkPort::on_queues`]: crate::port::DpdkPort::on_queues
    #[inline]
    pub(crate) unsafe fn rx_burst_shared(
        &self,
        queue: u16,
        into: &mut Vec<Mbuf>,
        max: usize,
    ) -> usize {
        if queue >= self.config.rx_queues {
            return 0;
        }
        let want = max.min(usize::from(u16::MAX));
        into.reserve(want);
        let len = into.len();
        // SAFETY: `Mbuf` is a transparent non-null mbuf pointer, so the
        // vector's spare capacity (room for `want` more, reserved above) is
        // an array of `rte_mbuf` pointers the PMD may write. The port is
        // started with this queue and the caller is its only poller. The
        // PMD writes `got` ≤ `want` non-null pointers, each a reference it
        // hands over: exactly what `set_len` then owns.
        unsafe {
            let at = into.as_mut_ptr().add(len).cast::<*mut ffi::rte_mbuf>();
            let got = usize::from(ffi::rte_eth_rx_burst(self.id, queue, at, want as u16));
            into.set_len(len + got);
            got
        }
    }

    /// Sends the frames of `frames` from the front on `queue`; those the
    /// device took are removed, those it had no room for stay, in order.
    /// Returns how many it took.
    #[inline]
    pub fn tx_burst(&mut self, queue: u16, frames: &mut Vec<Mbuf>) -> usize {
        // SAFETY: `&mut self` makes this the port's only sender.
        unsafe { self.tx_burst_shared(queue, frames) }
    }

    /// [`tx_burst`](Self::tx_burst) through a shared port.
    ///
    /// # Safety
    ///
    /// No other thread sends on transmit queue `queue` at the same time.
    #[inline]
    pub(crate) unsafe fn tx_burst_shared(&self, queue: u16, frames: &mut Vec<Mbuf>) -> usize {
        if queue >= self.config.tx_queues || frames.is_empty() {
            return 0;
        }
        let n = frames.len().min(usize::from(u16::MAX));
        // SAFETY: `Mbuf` is a transparent mbuf pointer, so the vector's
        // first `n` elements are an array of live mbufs we hold references
        // to; the PMD takes the references of the first `sent` and does not
        // write the array. Those `sent` handles are then forgotten (their
        // references are the device's) by moving the rest to the front with
        // a bitwise copy and shortening the vector: no handle is dropped or
        // duplicated. The caller is the queue's only sender.
        unsafe {
            let base = frames.as_mut_ptr();
            let sent = usize::from(ffi::rte_eth_tx_burst(
                self.id,
                queue,
                base.cast::<*mut ffi::rte_mbuf>(),
                n as u16,
            ));
            let rest = frames.len() - sent;
            core::ptr::copy(base.add(sent), base, rest);
            frames.set_len(rest);
            sent
        }
    }

    /// The device's counters.
    ///
    /// # Errors
    ///
    /// DPDK's.
    pub fn stats(&self) -> Result<PortStats, DpdkError> {
        // SAFETY: zeroed is a valid rte_eth_stats (plain counters).
        let mut s: ffi::rte_eth_stats = unsafe { core::mem::zeroed() };
        // SAFETY: the port exists; `s` is a valid out-pointer.
        let rc = unsafe { ffi::rte_eth_stats_get(self.id, &mut s) };
        if rc != 0 {
            return Err(DpdkError::new("rte_eth_stats_get", rc));
        }
        Ok(PortStats {
            rx_packets: s.ipackets,
            tx_packets: s.opackets,
            rx_bytes: s.ibytes,
            tx_bytes: s.obytes,
            rx_missed: s.imissed,
            rx_errors: s.ierrors,
            tx_errors: s.oerrors,
            rx_no_mbuf: s.rx_nombuf,
        })
    }

    /// The port's MAC address.
    ///
    /// # Errors
    ///
    /// DPDK's.
    pub fn mac_address(&self) -> Result<[u8; 6], DpdkError> {
        // SAFETY: zeroed is a valid rte_ether_addr.
        let mut addr: ffi::rte_ether_addr = unsafe { core::mem::zeroed() };
        // SAFETY: the port exists; `addr` is a valid out-pointer.
        let rc = unsafe { ffi::rte_eth_macaddr_get(self.id, &mut addr) };
        if rc != 0 {
            return Err(DpdkError::new("rte_eth_macaddr_get", rc));
        }
        Ok(addr.addr_bytes)
    }
}

impl Drop for EthPort {
    fn drop(&mut self) {
        // SAFETY: the port was started by `start` and is stopped and closed
        // once; mbufs still in its rings return to their pools.
        unsafe {
            ffi::rte_eth_dev_stop(self.id);
            ffi::rte_eth_dev_close(self.id);
        }
    }
}
