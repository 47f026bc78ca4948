//! What every two-engine test harness builds first: a clock the test moves
//! by hand, and an engine configuration per side with PSP on.
//!
//! Layer: test support. Used by the ULP crates' harnesses (NVMe, RDMA) and
//! this crate's lcore tests, so that they build their engines alike.

use std::cell::Cell;
use std::rc::Rc;

use psp::{MasterKey, MasterKeys};

use crate::engine::{EngineConfig, PspConfig};
use crate::lcore::Clock;
use crate::time::Timestamp;
use crate::wire::EthernetAddress;

/// A clock the test moves by hand: the lcore loop reads the shared cell,
/// the harness sets it (clones share the time).
#[derive(Debug, Clone)]
pub struct HandClock(pub Rc<Cell<Timestamp>>);

impl Clock for HandClock {
    fn now(&mut self) -> Timestamp {
        self.0.get()
    }
}

/// Test engine `side`'s configuration: IPv4 10.0.0.`side`, MAC
/// 02:00:00:00:00:`side`, PSP on with master keys derived from `side`
/// (both ends of a connection derive what they need from them), the rest
/// the engine's defaults.
pub fn psp_engine_config(side: u8) -> EngineConfig {
    let keys = MasterKeys {
        k0: MasterKey::new([side; 32]),
        k1: MasterKey::new([side ^ 0xFF; 32]),
    };
    EngineConfig {
        local_ip: core::net::IpAddr::V4([10, 0, 0, side].into()),
        local_mac: EthernetAddress([2, 0, 0, 0, 0, side]),
        psp: Some(PspConfig::new(keys)),
        ..EngineConfig::default()
    }
}
