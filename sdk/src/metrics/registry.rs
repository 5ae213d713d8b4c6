//! The process-wide store of counters and histograms. One mutex per kind: recording costs a map
//! lookup under a lock held for nanoseconds, next to journal commits that take tens of
//! microseconds at least, and a scrape copies the maps out before formatting anything.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

/// Upper bounds of the histogram buckets, in seconds: from a local journal's commit (well under
/// a millisecond) to a send that runs into its timeout.
pub const BUCKETS: [f64; 14] = [
    0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

/// A metric's name and its labels, in the order given.
pub type Series = (&'static str, Vec<(&'static str, String)>);

/// One histogram's state.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Histogram {
    /// Observations at or below each of [`BUCKETS`] (not cumulative).
    pub buckets: [u64; BUCKETS.len()],
    /// Observations above the last bucket.
    pub over: u64,
    /// Sum of every observation, seconds.
    pub sum: f64,
    /// Number of observations.
    pub count: u64,
}

/// Counters and histograms by series.
#[derive(Debug, Default)]
pub struct Registry {
    counters: Mutex<BTreeMap<Series, u64>>,
    histograms: Mutex<BTreeMap<Series, Histogram>>,
}

/// The process's registry.
pub fn registry() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(Registry::default)
}

fn series(name: &'static str, labels: &[(&'static str, &str)]) -> Series {
    (
        name,
        labels.iter().map(|(k, v)| (*k, (*v).to_owned())).collect(),
    )
}

impl Registry {
    /// Add one to a counter.
    pub fn inc(&self, name: &'static str, labels: &[(&'static str, &str)]) {
        *self
            .counters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(series(name, labels))
            .or_default() += 1;
    }

    /// Record one observation in a histogram.
    pub fn observe(&self, name: &'static str, labels: &[(&'static str, &str)], took: Duration) {
        let secs = took.as_secs_f64();
        let mut all = self
            .histograms
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let h = all.entry(series(name, labels)).or_default();
        match BUCKETS.iter().position(|b| secs <= *b) {
            Some(i) => h.buckets[i] += 1,
            None => h.over += 1,
        }
        h.sum += secs;
        h.count += 1;
    }

    /// Every counter, by series.
    pub fn counters(&self) -> BTreeMap<Series, u64> {
        self.counters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Every histogram, by series.
    pub fn histograms(&self) -> BTreeMap<Series, Histogram> {
        self.histograms
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_observation_lands_in_the_first_bucket_that_holds_it() {
        let r = Registry::default();
        for ms in [0, 1, 3, 20_000] {
            r.observe("h", &[("target", "t")], Duration::from_millis(ms));
        }
        let h = r
            .histograms()
            .remove(&series("h", &[("target", "t")]))
            .unwrap();
        assert_eq!(
            (h.buckets[0], h.buckets[2], h.buckets[4], h.over),
            (1, 1, 1, 1)
        );
        assert_eq!(h.count, 4);
        assert!((h.sum - 20.004).abs() < 1e-9);
    }
}
