//! Rates measured in slices, shared by the benchmarks that interleave a
//! measurement with its reference (`bench_loop`, `bench_scale`): each run
//! is cut into slices taken in turn, and a ratio is the median of the
//! slice-by-slice ratios, so that a host whose speed drifts between
//! seconds moves both sides of a ratio alike.

use std::time::Duration;

/// Operations per second of each slice.
#[derive(Debug, Default)]
pub(crate) struct Rates {
    pub(crate) per_slice: Vec<f64>,
    pub(crate) ops: u64,
    pub(crate) secs: f64,
    /// Engine loops only: loop turns and target ACKs in the slices.
    pub(crate) turns: u64,
    pub(crate) acks: u64,
}

impl Rates {
    /// A slice of `ops` operations in `elapsed`.
    pub(crate) fn record(&mut self, ops: u64, elapsed: Duration) {
        let secs = elapsed.as_secs_f64().max(1e-9);
        self.per_slice.push(ops as f64 / secs);
        self.ops += ops;
        self.secs += secs;
    }

    /// Forgets the slices (after a warm-up).
    pub(crate) fn clear(&mut self) {
        *self = Rates::default();
    }

    /// Over all slices: total operations / total time.
    pub(crate) fn mean(&self) -> f64 {
        self.ops as f64 / self.secs.max(1e-9)
    }
}

/// Slice-by-slice ratios `a / b`.
pub(crate) fn ratios(a: &Rates, b: &Rates) -> Vec<f64> {
    a.per_slice
        .iter()
        .zip(&b.per_slice)
        .map(|(a, b)| a / b.max(f64::MIN_POSITIVE))
        .collect()
}

/// The median (0 for none).
pub(crate) fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The lowest and the highest ([0, 0] for none).
pub(crate) fn range(values: &[f64]) -> [f64; 2] {
    if values.is_empty() {
        return [0.0, 0.0];
    }
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    [lo, hi]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_range_and_ratios() {
        assert_eq!(median(&[]), 0.0);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(range(&[]), [0.0, 0.0]);
        assert_eq!(range(&[2.0, -1.0, 5.0]), [-1.0, 5.0]);
        let mut a = Rates::default();
        let mut b = Rates::default();
        a.record(10, Duration::from_secs(1));
        b.record(20, Duration::from_secs(1));
        assert_eq!(ratios(&a, &b), [0.5]);
        assert_eq!(a.mean(), 10.0);
        a.clear();
        assert!(a.per_slice.is_empty());
    }
}
