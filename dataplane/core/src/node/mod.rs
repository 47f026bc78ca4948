//! Node-wide state shared by the engines of one node (DESIGN.md §3, §5
//! "Node-wide state").
//!
//! Layer: above the engines, control path only. A node runs one
//! [`Engine`](crate::engine::Engine) per datapath lcore, each a *shard*
//! owning the connections whose receive SPI (PSP on) or local connection id
//! (PSP off) falls in its range. [`Node`] owns what the shards share: the
//! PSP master keys, the SPI generation and key rotation (OCP Falcon 0.9
//! §9.2.1–9.2.2.3; PSP spec "Master Key Lifetime"), the SPI space cut into
//! disjoint per-shard ranges ([`psp::SpiSpace`]), the per-shard connection
//! id ranges, and the [`Steering`] helper that tells a received frame's
//! shard from its bytes. It is shared as an `Arc<Node>`; what changes (keys,
//! generation, SPI counters) sits behind one lock taken by control-plane
//! calls only (setup, rotation). The per-packet path never reaches the
//! node: each engine keeps its own copy of the keys and globals and
//! [follows](crate::engine::Engine::follow_key_rotation) the node's at
//! rotation, and [`Steering`] is a `Copy` value with no lock and no atomic.
//!
//! An engine built without a node (`EngineConfig::node` `None`, the
//! single-engine use) makes a private node of one shard from its own
//! `EngineConfig::psp`: the same SPIs, connection ids and rotation steps as
//! before nodes existed.
//!
//! # Shards
//!
//! Shard `s` of `S` (at most [`MAX_SHARDS`], 256) owns, with `b` = ⌈log2 S⌉:
//!
//! * the receive SPIs with `s` in bits 30..31−b (below the key selector),
//!   `2^(31−b) − 1` of them under each master key ([`psp::space`]);
//! * the local connection ids with `s` in bits 23..24−b: `2^(24−b)` ids,
//!   from `s · 2^(24−b)` ([`Steering::cid`]). An engine refuses a connection
//!   whose local CID (or, with PSP, receive SPI) is another shard's, so CIDs
//!   are unique node-wide with or without PSP.
//!
//! # Key rotation, node-wide
//!
//! 1. [`Node::begin_key_rotation`] once: the new master key goes into the
//!    inactive slot and becomes active, the generation advances, previous-
//!    generation SPIs are accepted again. Refused while any shard has not
//!    ended the previous rotation.
//! 2. On every shard's lcore:
//!    [`follow_key_rotation`](crate::engine::Engine::follow_key_rotation)
//!    (the engine takes the node's keys and generation),
//!    [`rekey_connections`](crate::engine::Engine::rekey_connections) (new
//!    receive SPIs, for the peers' `install_transmit_sa`), a few RTTs
//!    later [`retire_previous_spis`](crate::engine::Engine::retire_previous_spis)
//!    and [`end_key_rotation`](crate::engine::Engine::end_key_rotation).
//!    The node's rotation ends with the last shard's.
//!
//! [`Engine::begin_key_rotation`](crate::engine::Engine::begin_key_rotation)
//! is steps 1 and the engine's follow in one call: all a node of one shard
//! needs.
//!
//! # Resource pools: per engine
//!
//! Decision: the transaction resources (OCP Falcon 0.9 §8.2: the four pools,
//! their regions, per-connection, per-function and per-host credits, the
//! buffer level ACKs report) stay per engine; a node's pools are the sum of
//! its shards' `EngineConfig::resources`. Every transaction reserves and
//! releases credits on the per-packet path, several times. Shared
//! node-wide, each would be an atomic read-modify-write (a locked
//! instruction instead of an add) on cache lines every lcore writes, so
//! each lcore's write would first take the line from the last writer's
//! cache: run-to-completion lcores must not share hot counters. (On the
//! 2-vCPU dev VM at load average 4, two threads' `fetch_add`s on one line
//! took 7.8–9.5 ns each against 8.7–9.1 ns on lines of their own: the
//! transfers did not show there; the locked instruction is paid either
//! way.) The price: a shard cannot
//! borrow another's idle capacity, so size each shard's pools for its
//! share of the connections (connection ids and SPIs spread connections
//! evenly when the connection manager hands them out round robin across
//! shards).

mod steering;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use psp::{
    Backend, MasterKey, MasterKeySlots, SecurityGlobals, Spi, SpiAllocator, SpiGeneration, SpiSpace,
};

use crate::engine::{ConfigError, PspConfig, RotationError};
use crate::wire::PSP_UDP_PORT;

pub use steering::Steering;

/// The most engines (shards) one node runs.
pub const MAX_SHARDS: u16 = SpiSpace::MAX_SHARDS;

/// What a node is built from.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// Datapath engines of the node, each a shard. In 1..=256; default 1.
    pub shards: u16,
    /// PSP: the master keys and globals the shards share, the AEAD backend
    /// and each engine's receive-context cache. `None` sends Falcon in clear
    /// (benchmarks and tests only, see `EngineConfig::psp`).
    pub psp: Option<PspConfig>,
    /// UDP destination port of Falcon frames, which every shard's
    /// `EngineConfig::udp_port` must be. Default 1000.
    pub udp_port: u16,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            shards: 1,
            psp: None,
            udp_port: PSP_UDP_PORT,
        }
    }
}

/// The node-wide state of one node. See the module doc.
pub struct Node {
    steering: Steering,
    psp: Option<NodePsp>,
}

/// An engine's place in a node: `EngineConfig::node`.
#[derive(Debug, Clone)]
pub struct NodeShard {
    /// The node.
    pub node: Arc<Node>,
    /// Which of its shards the engine is, below `node.shards()`.
    pub shard: u16,
}

/// The node's PSP receive side.
struct NodePsp {
    backend: Backend,
    sa_cache: usize,
    state: Mutex<KeyState>,
}

/// What rotation and setup change, behind the node's lock.
struct KeyState {
    keys: MasterKeySlots,
    /// CurGen, PCID matching and the replay margin; AllowPrevGen is set
    /// while any shard has not ended the current rotation.
    globals: SecurityGlobals,
    /// Per shard: step 5 done for the current generation.
    ended: Vec<bool>,
    spis: SpiAllocator,
}

/// What an engine of shard `s` starts from: a copy of the node's PSP state.
pub(crate) struct ShardPsp {
    pub(crate) backend: Backend,
    pub(crate) sa_cache: usize,
    pub(crate) keys: MasterKeySlots,
    /// The node's globals, AllowPrevGen as the shard's: set until it ends
    /// the current rotation.
    pub(crate) globals: SecurityGlobals,
}

/// Why the node handed out no SPI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SpiRefusal {
    /// The node runs without PSP.
    PspOff,
    /// The node rotated its master key since the engine last followed.
    Behind,
    /// The shard's SPIs under the active key are all handed out.
    Exhausted,
}

impl Node {
    /// A node with nothing set up: generation and keys as `config.psp`
    /// has them, every shard's rotation ended unless its globals allow the
    /// previous generation.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming `shards` outside 1..=256.
    pub fn new(config: NodeConfig) -> Result<Arc<Node>, ConfigError> {
        let space =
            SpiSpace::new(config.shards).ok_or(ConfigError::new("shards", "must be in 1..=256"))?;
        let psp = config.psp.map(|p| NodePsp {
            backend: p.backend,
            sa_cache: p.sa_cache,
            state: Mutex::new(KeyState {
                keys: MasterKeySlots::new(p.master_keys),
                globals: p.globals,
                ended: vec![!p.globals.allow_prev_gen; usize::from(config.shards)],
                spis: SpiAllocator::new(space),
            }),
        });
        Ok(Arc::new(Node {
            steering: Steering::new(space, psp.is_some(), config.udp_port),
            psp,
        }))
    }

    /// The number of shards.
    pub fn shards(&self) -> u16 {
        self.steering.shards()
    }

    /// Whether the node runs PSP.
    pub fn runs_psp(&self) -> bool {
        self.psp.is_some()
    }

    /// UDP destination port of Falcon frames.
    pub fn udp_port(&self) -> u16 {
        self.steering.udp_port()
    }

    /// The steering helper, a copy for the core that distributes received
    /// frames to the shards.
    pub fn steering(&self) -> Steering {
        self.steering
    }

    /// The shard a received frame belongs to ([`Steering::shard_of`]).
    pub fn steer(&self, frame: &[u8]) -> Option<u16> {
        self.steering.shard_of(frame)
    }

    /// Key rotation step 1, node-wide (OCP Falcon 0.9 §9.2.2.3 step 1; PSP
    /// spec "Master Key Lifetime"): `new_key` goes into the inactive
    /// master-key slot and becomes active (the key active two rotations
    /// ago is evicted), every shard's SPI numbering under it starts over,
    /// AllowPrevGen = 1 and CurGen + 1. Each shard then follows
    /// ([`Engine::follow_key_rotation`](crate::engine::Engine::follow_key_rotation)).
    /// Returns the new generation.
    ///
    /// # Errors
    ///
    /// [`RotationError::PspOff`], or [`RotationError::RotationInProgress`]
    /// while a shard has not ended the previous rotation (step 5).
    pub fn begin_key_rotation(&self, new_key: MasterKey) -> Result<SpiGeneration, RotationError> {
        let psp = self.psp.as_ref().ok_or(RotationError::PspOff)?;
        let mut state = psp.lock();
        if state.ended.iter().any(|ended| !ended) {
            return Err(RotationError::RotationInProgress);
        }
        let slot = state.keys.rotate(new_key);
        state.spis.restart(slot);
        state.globals.begin_rotation();
        state.ended.iter_mut().for_each(|ended| *ended = false);
        Ok(state.globals.cur_gen)
    }

    /// The node's generation and whether a rotation is open (some shard
    /// has not ended it); `None` without PSP.
    pub fn key_generation(&self) -> Option<(SpiGeneration, bool)> {
        let state = self.psp.as_ref()?.lock();
        Some((state.globals.cur_gen, state.globals.allow_prev_gen))
    }

    /// Master-key rotations so far (0 without PSP).
    pub fn rotations(&self) -> u64 {
        self.psp
            .as_ref()
            .map_or(0, |psp| psp.lock().keys.rotations())
    }

    /// The shards that have not ended the current rotation.
    pub fn shards_rotating(&self) -> Vec<u16> {
        let Some(psp) = &self.psp else {
            return Vec::new();
        };
        let state = psp.lock();
        (0..self.shards())
            .filter(|&s| !state.ended.get(usize::from(s)).copied().unwrap_or(true))
            .collect()
    }

    /// SPIs `shard` has handed out under the active master key.
    pub fn spis_allocated(&self, shard: u16) -> u32 {
        self.psp.as_ref().map_or(0, |psp| {
            let state = psp.lock();
            state.spis.allocated(shard, state.keys.active())
        })
    }

    /// A copy of the PSP state an engine of `shard` starts from.
    pub(crate) fn shard_psp(&self, shard: u16) -> Option<ShardPsp> {
        let psp = self.psp.as_ref()?;
        let state = psp.lock();
        let ended = state.ended.get(usize::from(shard)).copied().unwrap_or(true);
        Some(ShardPsp {
            backend: psp.backend,
            sa_cache: psp.sa_cache,
            keys: state.keys.clone(),
            globals: SecurityGlobals {
                allow_prev_gen: !ended,
                ..state.globals
            },
        })
    }

    /// A fresh receive SPI of `shard` under the active master key, for an
    /// engine whose keys are those of the node's `rotations`-th rotation.
    pub(crate) fn allocate_spi(&self, shard: u16, rotations: u64) -> Result<Spi, SpiRefusal> {
        let psp = self.psp.as_ref().ok_or(SpiRefusal::PspOff)?;
        let mut state = psp.lock();
        // Checked under the lock that allocates: the SPI's key is then the
        // one the engine holds in that slot.
        if state.keys.rotations() != rotations {
            return Err(SpiRefusal::Behind);
        }
        let slot = state.keys.active();
        state
            .spis
            .allocate(shard, slot)
            .map_err(|_| SpiRefusal::Exhausted)
    }

    /// Step 5 done on `shard`, whose engine follows the node's
    /// `rotations`-th rotation: the node's rotation ends (AllowPrevGen = 0)
    /// once every shard's has.
    pub(crate) fn end_rotation(&self, shard: u16, rotations: u64) -> Result<(), RotationError> {
        let psp = self.psp.as_ref().ok_or(RotationError::PspOff)?;
        let mut state = psp.lock();
        if state.keys.rotations() != rotations {
            return Err(RotationError::Behind);
        }
        if let Some(ended) = state.ended.get_mut(usize::from(shard)) {
            *ended = true;
        }
        if state.ended.iter().all(|&ended| ended) {
            state.globals.end_rotation();
        }
        Ok(())
    }
}

impl NodePsp {
    /// The node's state. A panic while it was held (none of its updates can
    /// panic) would leave it as consistent as between any two statements:
    /// the lock is taken over rather than every later call failing.
    fn lock(&self) -> MutexGuard<'_, KeyState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl core::fmt::Debug for Node {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Node")
            .field("shards", &self.shards())
            .field("psp", &self.runs_psp())
            .field("udp_port", &self.udp_port())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;
