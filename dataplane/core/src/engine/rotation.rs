//! PSP key rotation on a running engine: the connection manager's steps of
//! OCP Falcon 0.9 §9.2.2.3 ("Key rotation by the CM", spec/falcon.md §7.5)
//! over the master-key rotation of the PSP spec (spec/psp.md §4).
//!
//! Layer: engine, control path only (never per packet). The receive side
//! of a node rotates: its SA database loads a fresh master key into the
//! inactive slot and makes it active, and every connection gets a new
//! receive SPI from it; the new SA keys travel to the peers (the CM's job;
//! [`rekey_pair`](crate::engine::rekey_pair) does it for two engines in one
//! process), which then send with them. Meanwhile packets still sealed with
//! the previous SPI pass the SPI check through AllowPrevGen. In order:
//!
//! 1. [`Engine::begin_key_rotation`]: new master key; AllowPrevGen = 1,
//!    CurGen + 1.
//! 2. [`Engine::rekey_receive`] per connection: PrevSPI = CurSPI, CurSPI =
//!    a fresh SPI of the new key, the connection's CurGen + 1. Returns the
//!    SA the peer must send with.
//! 3. [`Engine::install_transmit_sa`] at the peer: it sends with the new SA
//!    from its next packet on (retransmissions included).
//! 4. [`Engine::retire_previous_spis`] (optional, a few RTTs later): PrevSPI
//!    = CurSPI, so the old SPI stops passing at once.
//! 5. [`Engine::end_key_rotation`]: AllowPrevGen = 0, before the next
//!    rotation. Refused while a connection still expects an SPI of the
//!    previous generation: its every packet would then fail the check.
//!
//! A second rotation evicts the master key of two rotations ago: packets
//! sealed under it no longer authenticate (`psp_unknown_sa` or
//! `psp_auth_failed`), the PSP way to revoke keys (spec/psp.md §4).
//!
//! Decision: the replay state is kept across a rekey rather than re-seeded
//! (spec/falcon.md §7.5 says the CM re-seeds Remote Time at rotation). Our
//! IVs are the sender's picosecond clock on every SA, and a new TX SA
//! continues its predecessor's IV clock (`TxSa::with_iv_clock`), so the IVs
//! a connection receives keep increasing across the switch; re-seeding
//! Remote Time to an older value would only reopen the replay window.

use core::fmt;

use psp::{MasterKey, SaKey, Spi, SpiGeneration, TxSa, TxSaConfig, Version};

use crate::engine::{ConnectionHandle, Engine};

/// A key-rotation step that cannot be done, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RotationError {
    /// The engine runs without PSP.
    PspOff,
    /// No such live connection.
    UnknownConnection,
    /// A rotation is still open (step 5 not done): the previous generation
    /// is still accepted, so a new one would strand its connections.
    RotationInProgress,
    /// `end_key_rotation` while this many connections still expect an SPI
    /// of the previous generation (step 2 not done for them).
    NotRekeyed(usize),
    /// The active master key has no SPI left.
    SpiExhausted,
    /// `rekey_receive` on a connection already at the current generation
    /// (rekeyed twice, or no rotation begun): its generation would run
    /// ahead of the node's and nothing would pass.
    AlreadyCurrent,
    /// The SA the peer handed over cannot be used (zero SPI).
    BadSa,
}

impl fmt::Display for RotationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RotationError::PspOff => write!(f, "PSP is off in this engine"),
            RotationError::UnknownConnection => write!(f, "no such connection"),
            RotationError::RotationInProgress => {
                write!(
                    f,
                    "the previous key rotation is not ended (AllowPrevGen is set)"
                )
            }
            RotationError::NotRekeyed(n) => write!(
                f,
                "{n} connection(s) still expect an SPI of the previous generation"
            ),
            RotationError::SpiExhausted => {
                write!(f, "SPI space of the active master key exhausted")
            }
            RotationError::AlreadyCurrent => write!(
                f,
                "the connection already expects an SPI of the current generation"
            ),
            RotationError::BadSa => write!(f, "the transmit SA cannot be built (zero SPI)"),
        }
    }
}

impl std::error::Error for RotationError {}

impl Engine {
    /// Step 1: `new_key` goes into the inactive master-key slot and becomes
    /// active (the key it replaces, active two rotations ago, is evicted and
    /// its cached contexts purged); AllowPrevGen = 1 and the global CurGen
    /// advances. Returns the new generation.
    ///
    /// # Errors
    ///
    /// [`RotationError::PspOff`], or [`RotationError::RotationInProgress`]
    /// if the previous rotation was not ended.
    pub fn begin_key_rotation(
        &mut self,
        new_key: MasterKey,
    ) -> Result<SpiGeneration, RotationError> {
        let psp = self.psp.as_mut().ok_or(RotationError::PspOff)?;
        if psp.globals.allow_prev_gen {
            return Err(RotationError::RotationInProgress);
        }
        psp.db.rotate(new_key);
        psp.globals.begin_rotation();
        self.stats.key_rotations += 1;
        Ok(psp.globals.cur_gen)
    }

    /// Step 2 for one connection: a fresh receive SPI from the active master
    /// key becomes its Current SPI (the old one its Previous SPI) and its
    /// generation advances. Returns the SPI and key the peer must send with
    /// (step 3: [`install_transmit_sa`](Self::install_transmit_sa) there).
    ///
    /// # Errors
    ///
    /// [`RotationError::PspOff`], [`RotationError::UnknownConnection`],
    /// [`RotationError::AlreadyCurrent`] (begin the rotation first) or
    /// [`RotationError::SpiExhausted`].
    pub fn rekey_receive(
        &mut self,
        connection: ConnectionHandle,
        version: Version,
    ) -> Result<(Spi, SaKey), RotationError> {
        let slot = self
            .slot(connection)
            .ok_or(RotationError::UnknownConnection)?;
        let psp = self.psp.as_mut().ok_or(RotationError::PspOff)?;
        let conn = self.connections[slot as usize]
            .as_mut()
            .ok_or(RotationError::UnknownConnection)?;
        let security = conn.rx_security.as_mut().ok_or(RotationError::PspOff)?;
        if security.spi.cur_gen == psp.globals.cur_gen {
            return Err(RotationError::AlreadyCurrent);
        }
        let (spi, key) = psp
            .db
            .allocate_spi(version)
            .map_err(|_| RotationError::SpiExhausted)?;
        security.spi.rotate(spi);
        Ok((spi, key))
    }

    /// Step 3 at the peer: sends on `connection` with (`spi`, `key`) from
    /// the next packet on. The new SA keeps the old one's virtualization
    /// cookie and continues its IV clock, so IVs stay strictly increasing
    /// on the connection.
    ///
    /// # Errors
    ///
    /// [`RotationError::PspOff`], [`RotationError::UnknownConnection`] or
    /// [`RotationError::BadSa`].
    pub fn install_transmit_sa(
        &mut self,
        connection: ConnectionHandle,
        spi: Spi,
        key: &SaKey,
    ) -> Result<(), RotationError> {
        let slot = self
            .slot(connection)
            .ok_or(RotationError::UnknownConnection)?;
        let psp = self.psp.as_ref().ok_or(RotationError::PspOff)?;
        let backend = psp.db.backend();
        let conn = self.connections[slot as usize]
            .as_mut()
            .ok_or(RotationError::UnknownConnection)?;
        let old = conn.tx_sa.as_ref().ok_or(RotationError::PspOff)?;
        let config = TxSaConfig {
            spi,
            ..old.config()
        };
        let clock = *old.iv_clock();
        let new = TxSa::new(backend, key, config)
            .map_err(|_| RotationError::BadSa)?
            .with_iv_clock(clock);
        conn.tx_sa = Some(new);
        Ok(())
    }

    /// Step 4 (optional, once the peers send with the new SPIs): every
    /// connection forgets its Previous SPI.
    pub fn retire_previous_spis(&mut self) {
        for conn in self.connections.iter_mut().flatten() {
            if let Some(security) = conn.rx_security.as_mut() {
                security.spi.retire_previous();
            }
        }
    }

    /// Step 5: AllowPrevGen = 0; from now on only the current generation's
    /// SPIs pass.
    ///
    /// # Errors
    ///
    /// [`RotationError::PspOff`], or [`RotationError::NotRekeyed`] while
    /// connections have not had step 2 (nothing changes then).
    pub fn end_key_rotation(&mut self) -> Result<(), RotationError> {
        let stale = self.connections_to_rekey().len();
        let psp = self.psp.as_mut().ok_or(RotationError::PspOff)?;
        if stale > 0 {
            return Err(RotationError::NotRekeyed(stale));
        }
        psp.globals.end_rotation();
        Ok(())
    }

    /// Live connections whose receive SPI is not of the current generation:
    /// what step 2 has yet to cover.
    pub fn connections_to_rekey(&self) -> Vec<ConnectionHandle> {
        let Some(psp) = &self.psp else {
            return Vec::new();
        };
        self.connections
            .iter()
            .flatten()
            .filter(|conn| !conn.dead)
            .filter(|conn| {
                conn.rx_security
                    .as_ref()
                    .is_some_and(|s| s.spi.cur_gen != psp.globals.cur_gen)
            })
            .map(|conn| conn.handle)
            .collect()
    }

    /// The receiver-wide generation and whether the previous one is still
    /// accepted (`None` without PSP).
    pub fn key_generation(&self) -> Option<(SpiGeneration, bool)> {
        self.psp
            .as_ref()
            .map(|p| (p.globals.cur_gen, p.globals.allow_prev_gen))
    }
}

/// Steps 2 and 3 for two mirrored connections of engines in one process,
/// both directions: each side's new receive SA is installed at the other.
/// Each engine must have begun its rotation (step 1) first, or its new SPIs
/// come from the key already active.
///
/// # Errors
///
/// The first [`RotationError`] of either side.
pub fn rekey_pair(
    a: &mut Engine,
    b: &mut Engine,
    (ha, hb): (ConnectionHandle, ConnectionHandle),
    version: Version,
) -> Result<(), RotationError> {
    let (spi_a, key_to_a) = a.rekey_receive(ha, version)?;
    b.install_transmit_sa(hb, spi_a, &key_to_a)?;
    let (spi_b, key_to_b) = b.rekey_receive(hb, version)?;
    a.install_transmit_sa(ha, spi_b, &key_to_b)?;
    Ok(())
}
