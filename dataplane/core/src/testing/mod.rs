//! Test infrastructure: engines on virtual time over in-process links.
//!
//! Layer: test support, above the engine and beside the ports; compiled
//! for this crate's tests and, with the `testing` feature, for the crates
//! built on it (`falcon-sim`, the ULPs) and the `falcon` binary's demo and
//! benches. Owns the in-process [`Loopback`] and the seeded
//! [`FaultInjector`] (DESIGN.md §2 puts fault injection with the
//! simulator), the mbuf-shaped [`TestMbuf`] and its [`MbufPort`] (to run
//! the engine over a buffer that is not a `Vec`), and the [`Cluster`]: N
//! engines in virtual time, a full mesh of faulty links, a scripted ULP at
//! each node ([`Answer`], [`Policy`]) and the checkers of exactly-once
//! completion, RSN order and payload bytes. It never reads a clock or the
//! OS RNG (a run replays bit for bit from its seed) and is never on a
//! production path: nothing outside tests, the demo and the benches may
//! depend on it.
//!
//! # Example: three engines, a connection between each two
//!
//! ```
//! use std::time::Duration;
//!
//! use falcon_core::delivery::OrderingMode;
//! use falcon_core::testing::{Cluster, Faults, Setup};
//! use falcon_core::transaction::TransactionKind;
//!
//! let mut cluster = Cluster::new(Setup {
//!     nodes: 3,
//!     ordering: OrderingMode::Unordered,
//!     faults: Faults { loss_ppm: Faults::percent(1), ..Faults::default() },
//!     seed: 7,
//!     ..Setup::default()
//! });
//! // Node 0's connections: to node 1, then to node 2.
//! assert_eq!(cluster.nodes[0].peers, [Some((1, 0)), Some((2, 0))]);
//! cluster.queue(0, 1, TransactionKind::Push, 3000); // 0 → 2
//! cluster.queue(2, 1, TransactionKind::Pull, 500); // 2 → 1
//! cluster.queue_random(1, 10, 2000); // 1 → 0 and 1 → 2
//! // Every transaction completes exactly once, bytes checked as they
//! // arrive; panics otherwise.
//! cluster.run_to_completion(Duration::from_secs(1));
//! for node in 0..3 {
//!     cluster.assert_all_ok(node);
//! }
//! assert_eq!(cluster.nodes[2].completions[1].len(), 1);
//! ```

mod cluster;
mod engines;
mod loopback;
mod mbuf;
mod mesh;
mod ulp;

pub use cluster::{pattern, Cluster, ClusterNode, Expect, Setup, TestPort};
pub use engines::{faulty_lcore_pair, psp_engine_config, HandClock};
pub use loopback::{
    BitFlip, FaultInjector, FaultStats, Faults, Loopback, LoopbackConfig, LoopbackPort,
    LoopbackStats,
};
pub use mbuf::{MbufPool, MbufPort, TestMbuf, HEADROOM, LARGE_ROOM, SMALL_ROOM};
pub use mesh::{MeshLink, MeshPort};
pub use ulp::{Answer, Policy};
