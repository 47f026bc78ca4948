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

/// Engines `a` and `b` on lcore loops over a loopback pair with
/// `one_way_delay`, each direction's frames faulted by `faults` from its
/// own seed (`seed` for `a`'s side, a fixed derivation of it for `b`'s),
/// both loops timed by `clock`.
#[allow(clippy::type_complexity)]
pub fn faulty_lcore_pair<S, C>(
    a: crate::engine::Engine<crate::port::FrameBuf, S>,
    b: crate::engine::Engine<crate::port::FrameBuf, S>,
    faults: super::Faults,
    seed: u64,
    one_way_delay: core::time::Duration,
    clock: C,
) -> (
    crate::lcore::Lcore<super::FaultInjector<super::LoopbackPort>, C, S>,
    crate::lcore::Lcore<super::FaultInjector<super::LoopbackPort>, C, S>,
)
where
    S: crate::transaction::DataSource,
    C: Clock + Clone,
{
    let (pa, pb) = super::Loopback::pair(super::LoopbackConfig {
        one_way_delay,
        ..super::LoopbackConfig::default()
    });
    let a = crate::lcore::Lcore::new(
        a,
        super::FaultInjector::new(pa, faults, seed),
        clock.clone(),
    );
    let b = crate::lcore::Lcore::new(
        b,
        super::FaultInjector::new(pb, faults, seed ^ 0x5EED),
        clock,
    );
    (a, b)
}
