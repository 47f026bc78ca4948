//! A barrier whose parties spin: lcores meeting between the phases of a
//! benchmark (`falcon bench pipeline`'s scaling runs), where a futex
//! wake-up would skew their starts by tens of microseconds.
//!
//! Layer: application (benchmarks). Any party may abort the barrier, so a
//! failing lcore never leaves the others spinning.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// `parties` threads meeting, again and again.
pub(crate) struct SpinBarrier {
    parties: usize,
    arrived: AtomicUsize,
    generation: AtomicUsize,
    aborted: AtomicBool,
}

impl SpinBarrier {
    pub(crate) fn new(parties: usize) -> SpinBarrier {
        SpinBarrier {
            parties,
            arrived: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
            aborted: AtomicBool::new(false),
        }
    }

    /// Waits until every party arrives; `Err` once any has aborted.
    pub(crate) fn wait(&self) -> std::result::Result<(), ()> {
        let generation = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.parties {
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::Release);
            return if self.aborted() { Err(()) } else { Ok(()) };
        }
        while self.generation.load(Ordering::Acquire) == generation {
            if self.aborted() {
                return Err(());
            }
            std::hint::spin_loop();
        }
        if self.aborted() {
            Err(())
        } else {
            Ok(())
        }
    }

    pub(crate) fn abort(&self) {
        self.aborted.store(true, Ordering::Release);
    }

    pub(crate) fn aborted(&self) -> bool {
        self.aborted.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn the_barrier_releases_all_parties_each_generation_and_aborts() {
        let barrier = Arc::new(SpinBarrier::new(3));
        let counter = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..3)
            .map(|_| {
                let (b, c) = (Arc::clone(&barrier), Arc::clone(&counter));
                std::thread::spawn(move || {
                    for round in 0..100 {
                        c.fetch_add(1, Ordering::SeqCst);
                        b.wait().unwrap();
                        // Nobody passes before all three counted this round.
                        assert!(c.load(Ordering::SeqCst) >= 3 * (round + 1));
                        b.wait().unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let b = SpinBarrier::new(2);
        b.abort();
        assert!(b.wait().is_err());
    }
}
