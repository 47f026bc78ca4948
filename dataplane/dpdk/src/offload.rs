//! What a device can do and what a port asks of it: receive checksum
//! verification and RSS, taken when the PMD has them (issue #25, item 2).
//!
//! Transmit checksums stay in software: the engine's frame template
//! patches the IPv4 header checksum with a few additions per frame, and a
//! PSP frame's UDP checksum is 0 (spec/psp.md §1.1), so an offload would
//! save next to nothing and need per-mbuf offload metadata.

use crate::error::DpdkError;
use crate::ffi;

/// The device's capabilities (`rte_eth_dev_info`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The PMD's name (`net_memif`, `net_ring`, `net_tap`, …).
    pub driver: String,
    pub max_rx_queues: u16,
    pub max_tx_queues: u16,
    /// `RTE_ETH_RX_OFFLOAD_*` bits the device offers.
    pub rx_offload_capa: u64,
    /// `RTE_ETH_TX_OFFLOAD_*` bits the device offers.
    pub tx_offload_capa: u64,
    /// `RTE_ETH_RSS_*` flow types the device can hash.
    pub rss_flow_types: u64,
}

/// Receive checksum offloads this project uses: the IPv4 header and UDP.
const RX_CHECKSUMS: u64 =
    (ffi::RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | ffi::RTE_ETH_RX_OFFLOAD_UDP_CKSUM) as u64;
/// What RSS hashes on: the IP addresses and the UDP ports (the outer UDP
/// source port is the flow's entropy, which PLB rewrites).
const RSS_TYPES: u64 = (ffi::RTE_ETH_RSS_IP | ffi::RTE_ETH_RSS_UDP) as u64;

impl DeviceInfo {
    /// Port `id`'s capabilities.
    ///
    /// # Errors
    ///
    /// `rte_eth_dev_info_get`'s (no such port).
    pub fn get(id: u16) -> Result<DeviceInfo, DpdkError> {
        // SAFETY: zeroed is a valid rte_eth_dev_info (integers, null
        // pointers, plain structs); DPDK fills it.
        let mut info: ffi::rte_eth_dev_info = unsafe { core::mem::zeroed() };
        // SAFETY: the EAL is up (the caller holds a port id from it);
        // `info` is a valid out-pointer.
        let rc = unsafe { ffi::rte_eth_dev_info_get(id, &mut info) };
        if rc != 0 {
            return Err(DpdkError::new("rte_eth_dev_info_get", rc));
        }
        let driver = if info.driver_name.is_null() {
            String::new()
        } else {
            // SAFETY: DPDK sets driver_name to the PMD's static,
            // NUL-terminated name.
            unsafe { core::ffi::CStr::from_ptr(info.driver_name) }
                .to_string_lossy()
                .into_owned()
        };
        Ok(DeviceInfo {
            driver,
            max_rx_queues: info.max_rx_queues,
            max_tx_queues: info.max_tx_queues,
            rx_offload_capa: info.rx_offload_capa,
            tx_offload_capa: info.tx_offload_capa,
            rss_flow_types: info.flow_type_rss_offloads,
        })
    }

    /// The device verifies IPv4 header and UDP checksums on receive.
    pub fn has_rx_checksums(&self) -> bool {
        self.rx_offload_capa & RX_CHECKSUMS == RX_CHECKSUMS
    }

    /// The flow types of [`RSS_TYPES`] the device hashes (0: no RSS).
    pub fn rss_types(&self) -> u64 {
        self.rss_flow_types & RSS_TYPES
    }
}

/// Offloads of a port: asked for in `PortConfig` (each taken only when the
/// device has it), in effect on a started `EthPort`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offloads {
    /// The device verifies IPv4 header and UDP checksums on receive and
    /// flags each mbuf (`DpdkPort` drops the bad ones, by name).
    pub rx_checksums: bool,
    /// Receive side scaling over the receive queues (more than one), on
    /// IP addresses and UDP ports.
    pub rss: bool,
}

impl Offloads {
    /// Everything, where the device has it.
    pub const WHERE_AVAILABLE: Offloads = Offloads {
        rx_checksums: true,
        rss: true,
    };
    /// Nothing.
    pub const NONE: Offloads = Offloads {
        rx_checksums: false,
        rss: false,
    };

    /// What of `self` (asked) `info` offers for `rx_queues` queues, and the
    /// configuration that turns it on.
    pub(crate) fn apply(
        self,
        info: &DeviceInfo,
        rx_queues: u16,
        conf: &mut ffi::rte_eth_conf,
    ) -> Offloads {
        let rx_checksums = self.rx_checksums && info.has_rx_checksums();
        if rx_checksums {
            conf.rxmode.offloads |= RX_CHECKSUMS;
        }
        let rss = self.rss && rx_queues > 1 && info.rss_types() != 0;
        if rss {
            conf.rxmode.mq_mode = ffi::rte_eth_rx_mq_mode_RTE_ETH_MQ_RX_RSS;
            // A null key: the device's default.
            conf.rx_adv_conf.rss_conf.rss_key = core::ptr::null_mut();
            conf.rx_adv_conf.rss_conf.rss_hf = info.rss_types();
        }
        Offloads { rx_checksums, rss }
    }
}

impl Default for Offloads {
    fn default() -> Self {
        Offloads::WHERE_AVAILABLE
    }
}
