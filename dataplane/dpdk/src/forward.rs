//! Plain forwarding between two ports, the baseline `falcon bench
//! pipeline` sets the wrappers' cost against: received frames sent out of
//! the other port as they are, both directions, in bursts of 32 (what
//! `dpdk-testpmd --forward-mode=io` does).
//!
//! Two loops over the same devices: [`forward_raw`] straight on the
//! bindings (arrays of raw mbuf pointers, what the device did not take
//! freed at once), and [`forward_port`] through [`DpdkPort`] and the
//! [`Port`] trait (owned `Mbuf`s in vectors, the same bursts).

use falcon_core::port::Port;
use falcon_core::time::Timestamp;

use crate::eal::Eal;
use crate::ethdev::EthPort;
use crate::ffi;
use crate::mbuf::Mbuf;
use crate::port::DpdkPort;

/// Frames per burst.
pub const BURST: usize = 32;
/// Loop turns between two reads of the TSC.
const TURNS_PER_CLOCK_READ: u32 = 64;

/// What a forwarding run moved.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Forwarded {
    /// Frames sent on (both directions).
    pub frames: u64,
    /// Frames received that the other port had no room for (freed).
    pub dropped: u64,
    /// Seconds the run took.
    pub seconds: f64,
}

impl Forwarded {
    /// Frames forwarded per second, millions.
    pub fn mpps(&self) -> f64 {
        if self.seconds > 0.0 {
            self.frames as f64 / self.seconds / 1e6
        } else {
            0.0
        }
    }
}

/// Ticks of `seconds` on the EAL's TSC.
fn ticks(eal: &Eal, seconds: f64) -> u64 {
    (eal.tsc_hz() as f64 * seconds) as u64
}

/// io-mode forwarding straight on the bindings between ports `a` and `b`
/// (queue 0 each way) for `seconds`.
pub fn forward_raw(eal: &Eal, a: &mut EthPort, b: &mut EthPort, seconds: f64) -> Forwarded {
    let (start, length) = (eal.tsc(), ticks(eal, seconds));
    let mut run = Forwarded::default();
    let mut raw = [core::ptr::null_mut::<ffi::rte_mbuf>(); BURST];
    let mut turn = 0u32;
    let mut now = start;
    while now.wrapping_sub(start) < length {
        for (from, to) in [(a.id(), b.id()), (b.id(), a.id())] {
            // SAFETY: both ports are started with queue 0 (`EthPort`, which
            // `&mut` makes this the only poller of); `raw` has room for
            // BURST pointers. The PMD hands over one reference to each of
            // the first `got`.
            let got = unsafe { ffi::rte_eth_rx_burst(from, 0, raw.as_mut_ptr(), BURST as u16) };
            if got == 0 {
                continue;
            }
            // SAFETY: the first `got` pointers are mbufs we hold; the other
            // port takes the references of the first `sent`.
            let sent = unsafe { ffi::rte_eth_tx_burst(to, 0, raw.as_mut_ptr(), got) };
            for &m in &raw[usize::from(sent)..usize::from(got)] {
                // SAFETY: a reference the device did not take: ours to free.
                unsafe { ffi::rte_pktmbuf_free(m) };
            }
            run.frames += u64::from(sent);
            run.dropped += u64::from(got - sent);
        }
        turn += 1;
        if turn % TURNS_PER_CLOCK_READ == 0 {
            now = eal.tsc();
        }
    }
    run.seconds = eal.tsc().wrapping_sub(start) as f64 / eal.tsc_hz() as f64;
    run
}

/// The same forwarding through [`DpdkPort`] and the [`Port`] trait: owned
/// mbufs received into a vector and sent from it, what a port did not take
/// returned with [`Port::free_burst`].
pub fn forward_port(eal: &Eal, a: &mut DpdkPort, b: &mut DpdkPort, seconds: f64) -> Forwarded {
    let (start, length) = (eal.tsc(), ticks(eal, seconds));
    let mut run = Forwarded::default();
    let mut burst: Vec<Mbuf> = Vec::with_capacity(BURST);
    let mut turn = 0u32;
    let mut now = start;
    let stamp = Timestamp::from_nanos(1);
    while now.wrapping_sub(start) < length {
        for a_to_b in [true, false] {
            let (from, to) = if a_to_b {
                (&mut *a, &mut *b)
            } else {
                (&mut *b, &mut *a)
            };
            if from.rx_burst(stamp, &mut burst, BURST) == 0 {
                continue;
            }
            let sent = to.tx_burst(stamp, &mut burst);
            run.frames += sent as u64;
            run.dropped += burst.len() as u64;
            to.free_burst(&mut burst);
        }
        turn += 1;
        if turn % TURNS_PER_CLOCK_READ == 0 {
            now = eal.tsc();
        }
    }
    run.seconds = eal.tsc().wrapping_sub(start) as f64 / eal.tsc_hz() as f64;
    run
}
