//! What the operators' page shows, read from the journal on each load: every effect folded as
//! `interlock journal list` folds it (by its receipt), so the page and the command line agree,
//! and the send latencies the journal's own clock saw. Nothing is cached: a page load reads every
//! key's history, as `journal list` and the metrics' gauges do.
//!
//! The time series are pure functions of those rows, so the charts are tested without a journal.

use std::collections::BTreeMap;

use interlock::core::{Event, Status};
use interlock::journal::Record;
use interlock::{Journal, JournalError};

/// The charts cover at most this much time, ending now.
pub const SPAN_MS: i64 = 86_400_000;
/// A chart's span is cut into at most this many bucket widths (so it has at most one more
/// bucket, the one holding now, when its start does not fall on a bucket's edge).
pub const MAX_BUCKETS: i64 = 24;
/// Bucket widths, smallest first: the chart takes the first that fits its span in
/// [`MAX_BUCKETS`].
const WIDTHS_MS: [i64; 13] = [
    1_000, 2_000, 5_000, 10_000, 15_000, 30_000, 60_000, 120_000, 300_000, 600_000, 900_000,
    1_800_000, 3_600_000,
];

/// One effect as the page lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct EffectRow {
    /// Its key.
    pub key: String,
    /// Where it stands.
    pub status: Status,
    /// How it ended (the commit's via, the refusal or failure code), if it did.
    pub how: String,
    /// The target's name and the tier journaled at the proposal.
    pub target: String,
    /// The tier.
    pub tier: u8,
    /// The payload, compact.
    pub payload: String,
    /// When its first and last records were written.
    pub first_ms: i64,
    /// See `first_ms`.
    pub last_ms: i64,
    /// How many records it has.
    pub records: usize,
    /// Effects the target holds although this one ended refused or failed.
    pub landed_late: Vec<String>,
}

/// One send and how long its answer took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// When the `DISPATCHED` record was written.
    pub dispatched_ms: i64,
    /// From it to the record of the target's answer under the same claim.
    pub latency_ms: i64,
}

/// What the journal holds, for the page.
#[derive(Clone, Debug, Default)]
pub struct Board {
    /// Every effect.
    pub effects: Vec<EffectRow>,
    /// Every send answered under the claim that sent it.
    pub samples: Vec<Sample>,
}

impl Board {
    /// Read every effect of `journal`.
    pub fn read(journal: &dyn Journal) -> Result<Self, JournalError> {
        let mut board = Self::default();
        interlock::journal::for_each_key(journal, &mut |key| {
            let records = journal.history(&key)?;
            board.samples.extend(sample(&records));
            board.effects.extend(row(&records));
            Ok(())
        })?;
        Ok(board)
    }

    /// How many effects stand where, every status included.
    pub fn counts(&self) -> BTreeMap<Status, u64> {
        let mut out: BTreeMap<Status, u64> = Status::ALL.iter().map(|s| (*s, 0)).collect();
        for e in &self.effects {
            *out.entry(e.status).or_default() += 1;
        }
        out
    }

    /// The effects standing at `status`, the most recent first.
    pub fn at(&self, status: Status) -> Vec<&EffectRow> {
        let mut v: Vec<&EffectRow> = self.effects.iter().filter(|e| e.status == status).collect();
        v.sort_by(|a, b| b.last_ms.cmp(&a.last_ms).then_with(|| a.key.cmp(&b.key)));
        v
    }
}

/// The effect a key's history (a verified chain, oldest first) makes, folded by its receipt.
pub fn row(records: &[Record]) -> Option<EffectRow> {
    let r = interlock::receipt::build(records)?;
    Some(EffectRow {
        key: r.key,
        status: r.outcome,
        how: r.how.unwrap_or_default(),
        target: r.target,
        tier: u8::from(r.tier),
        payload: r.payload.to_string(),
        first_ms: records.first()?.at_ms,
        last_ms: records.last()?.at_ms,
        records: records.len(),
        landed_late: r.landed_late,
    })
}

/// The sends of a key's history whose answer was recorded under the claim that sent them: the
/// time from each `DISPATCHED` to the `COMMITTED` or `FAILED` record right after it with its
/// token. A send cut off by a crash has no sample (its effect is counted by its outcome instead).
pub fn sample(records: &[Record]) -> Vec<Sample> {
    records
        .windows(2)
        .filter_map(|w| {
            let Event::Dispatched(d) = &w[0].event else {
                return None;
            };
            let answered = match &w[1].event {
                Event::Committed(c) => c.token == d.token,
                Event::Failed(f) => f.token == d.token,
                _ => false,
            };
            answered.then(|| Sample {
                dispatched_ms: w[0].at_ms,
                latency_ms: w[1].at_ms.saturating_sub(w[0].at_ms).max(0),
            })
        })
        .collect()
}

/// The time axis of a chart: `n` buckets of `width_ms` from `start_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Buckets {
    /// The first bucket's start (a multiple of the width).
    pub start_ms: i64,
    /// Each bucket's width.
    pub width_ms: i64,
    /// How many.
    pub n: usize,
}

impl Buckets {
    /// Buckets ending with the one holding `now_ms` and beginning with the one holding `from_ms`,
    /// or [`SPAN_MS`] before now if that is later: of the narrowest width that cuts the span into
    /// fewer than [`MAX_BUCKETS`] (an hour at the most, then 25 buckets for a day).
    pub fn covering(from_ms: i64, now_ms: i64) -> Self {
        let from = from_ms.clamp(now_ms.saturating_sub(SPAN_MS), now_ms);
        let span = now_ms - from;
        let width_ms = WIDTHS_MS
            .iter()
            .copied()
            .find(|w| span / w < MAX_BUCKETS)
            .unwrap_or(WIDTHS_MS[WIDTHS_MS.len() - 1]);
        let start_ms = from.div_euclid(width_ms) * width_ms;
        let n = (now_ms.div_euclid(width_ms) * width_ms - start_ms) / width_ms + 1;
        Self {
            start_ms,
            width_ms,
            n: usize::try_from(n).unwrap_or(1).max(1),
        }
    }

    /// The bucket holding `at_ms`, if any does.
    pub fn index(&self, at_ms: i64) -> Option<usize> {
        if at_ms < self.start_ms {
            return None;
        }
        usize::try_from((at_ms - self.start_ms) / self.width_ms)
            .ok()
            .filter(|i| *i < self.n)
    }

    /// Where bucket `i` starts.
    pub fn start_of(&self, i: usize) -> i64 {
        self.start_ms + self.width_ms * i64::try_from(i).unwrap_or(0)
    }
}

/// Effects per bucket of the time their last record was written, by status (in
/// [`Status::ALL`]'s order).
pub fn outcomes(effects: &[EffectRow], b: &Buckets) -> Vec<[u64; 7]> {
    let mut out = vec![[0u64; 7]; b.n];
    for e in effects {
        let (Some(i), Some(s)) = (
            b.index(e.last_ms),
            Status::ALL.iter().position(|s| *s == e.status),
        ) else {
            continue;
        };
        out[i][s] += 1;
    }
    out
}

/// Nearest-rank percentiles of the latencies in one bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Percentiles {
    /// The median.
    pub p50: i64,
    /// The 90th percentile.
    pub p90: i64,
    /// The 99th percentile.
    pub p99: i64,
    /// How many sends.
    pub n: usize,
}

fn percentiles(mut v: Vec<i64>) -> Option<Percentiles> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    let at = |q: usize| v[(v.len() * q).div_ceil(100).max(1) - 1];
    Some(Percentiles {
        p50: at(50),
        p90: at(90),
        p99: at(99),
        n: v.len(),
    })
}

/// Send latency percentiles per bucket of the dispatch's time, and over the whole span.
pub fn latency(samples: &[Sample], b: &Buckets) -> (Vec<Option<Percentiles>>, Option<Percentiles>) {
    let mut per: Vec<Vec<i64>> = vec![Vec::new(); b.n];
    for s in samples {
        if let Some(i) = b.index(s.dispatched_ms) {
            per[i].push(s.latency_ms);
        }
    }
    let all = percentiles(per.iter().flatten().copied().collect());
    (per.into_iter().map(percentiles).collect(), all)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn effect(status: Status, last_ms: i64) -> EffectRow {
        EffectRow {
            key: format!("k{last_ms}"),
            status,
            how: String::new(),
            target: "t".into(),
            tier: 1,
            payload: "{}".into(),
            first_ms: last_ms,
            last_ms,
            records: 1,
            landed_late: Vec::new(),
        }
    }

    #[test]
    fn buckets_take_the_narrowest_width_that_fits_and_never_more_than_a_day() {
        let b = Buckets::covering(10_500, 30_200);
        assert_eq!((b.width_ms, b.start_ms, b.n), (1_000, 10_000, 21));
        assert_eq!(b.index(9_999), None);
        assert_eq!(b.index(10_000), Some(0));
        assert_eq!(b.index(30_200), Some(20));
        assert_eq!(b.index(31_000), None);
        let day = 86_400_000 * 100;
        let b = Buckets::covering(0, day);
        assert_eq!(b.width_ms, 3_600_000, "a day in hours");
        assert!(b.n as i64 <= MAX_BUCKETS + 1);
        assert_eq!(
            b.start_ms,
            day - SPAN_MS,
            "older effects fall off the chart"
        );
        let b = Buckets::covering(5_000, 5_000);
        assert_eq!(b.n, 1, "one instant is one bucket");
        let b = Buckets::covering(7_000, 5_000);
        assert_eq!((b.start_ms, b.n), (5_000, 1), "a time after now is now");
    }

    #[test]
    fn outcomes_count_each_effect_once_in_the_bucket_of_its_last_record() {
        let b = Buckets::covering(0, 3_000);
        let effects = [
            effect(Status::Committed, 100),
            effect(Status::Committed, 900),
            effect(Status::Ambiguous, 1_500),
            effect(Status::AppliedTwice, 2_999),
            effect(Status::Refused, 9_000), // after the chart's end: not drawn
        ];
        let c = outcomes(&effects, &b);
        let at = |s: Status| Status::ALL.iter().position(|x| *x == s).unwrap();
        assert_eq!(c.len(), 4);
        assert_eq!(c[0][at(Status::Committed)], 2);
        assert_eq!(c[1][at(Status::Ambiguous)], 1);
        assert_eq!(c[2][at(Status::AppliedTwice)], 1);
        assert_eq!(c.iter().flatten().sum::<u64>(), 4);
    }

    #[test]
    fn latency_percentiles_are_nearest_rank_per_bucket_and_overall() {
        let b = Buckets::covering(0, 1_999);
        let mut samples: Vec<Sample> = (1..=100)
            .map(|i| Sample {
                dispatched_ms: 10,
                latency_ms: i,
            })
            .collect();
        samples.push(Sample {
            dispatched_ms: 1_500,
            latency_ms: 7,
        });
        let (per, all) = latency(&samples, &b);
        assert_eq!(
            per[0],
            Some(Percentiles {
                p50: 50,
                p90: 90,
                p99: 99,
                n: 100
            })
        );
        assert_eq!(
            per[1],
            Some(Percentiles {
                p50: 7,
                p90: 7,
                p99: 7,
                n: 1
            })
        );
        assert_eq!(all.map(|p| (p.p50, p.n)), Some((50, 101)));
        assert_eq!(latency(&[], &b).1, None);
    }
}
