//! How long a call must give an attempt. Once an attempt reaches its send, its caller may go:
//! the send goes out and its answer is journaled. Before that, a caller that goes away stops the
//! attempt, and one that goes between the dispatch record and the send leaves a withdrawn
//! dispatch for the next attempt to finish. A caller whose every deadline falls inside that
//! stretch (premise read, lookup, journal commits) would have every attempt stopped there and
//! the effect never sent; so the server learns, per target, how long attempts take to reach their
//! send and answers a call whose deadline cannot cover that with the minimum it needs, before the
//! call touches the journal.
//!
//! What is learned: the time each attempt took to reach its send (the slowest of the last few
//! counts), and each deadline that proved too short (the call's deadline passed before its
//! attempt reached its send; twice that deadline is a first guess of what would do). A caller
//! that goes away before its deadline (a worker killed mid-call, a client that hangs up) proves
//! nothing about the deadline and teaches nothing. The minimum is the largest of the configured
//! floor, one and a half times the slowest recent way to a send, and twice the longest deadline
//! recently proved too short. Observations expire after [`REMEMBERED`], and the learned part is
//! capped at [`CEILING`]: a deadline of ten seconds or more is never refused, so one slow attempt
//! cannot lock out callers whose deadlines are set for the slow case.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The metadata key carrying the minimum deadline, in milliseconds, on a refused call.
pub const MIN_DEADLINE_KEY: &str = "interlock-min-deadline-ms";

/// How many recent observations per target count.
const KEPT: usize = 16;

/// The learned minimum never asks for more than this (the configured floor may): a target whose
/// attempts took longer is slow, and callers whose deadlines allow for that must still reach it.
pub const CEILING: Duration = Duration::from_secs(10);

/// Observations older than this no longer count.
pub const REMEMBERED: Duration = Duration::from_secs(600);

/// A call whose caller left within this of its deadline is taken to have been cut by it.
pub const DEADLINE_SLACK: Duration = Duration::from_millis(20);

#[derive(Default)]
struct Seen {
    to_send: VecDeque<(Instant, Duration)>,
    too_short: VecDeque<(Instant, Duration)>,
}

fn keep(q: &mut VecDeque<(Instant, Duration)>, d: Duration) {
    if q.len() == KEPT {
        q.pop_front();
    }
    q.push_back((Instant::now(), d));
}

/// The largest observation still remembered.
fn largest(q: &VecDeque<(Instant, Duration)>) -> Duration {
    q.iter()
        .filter(|(at, _)| at.elapsed() < REMEMBERED)
        .map(|(_, d)| *d)
        .max()
        .unwrap_or_default()
}

/// What the server has learned about each target's attempts.
pub struct CallBudget {
    floor: Duration,
    seen: Mutex<HashMap<String, Seen>>,
}

impl CallBudget {
    /// A budget that never asks for less than `floor`.
    pub fn new(floor: Duration) -> Self {
        Self {
            floor,
            seen: Mutex::default(),
        }
    }

    fn with<T>(&self, target: &str, f: impl FnOnce(&mut Seen) -> T) -> T {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        f(seen.entry(target.to_owned()).or_default())
    }

    /// An attempt on `target` reached its send `elapsed` after its call began.
    pub fn reached_send(&self, target: &str, elapsed: Duration) {
        self.with(target, |s| keep(&mut s.to_send, elapsed));
    }

    /// A call on `target` with `deadline` went away `elapsed` after it began, before its attempt
    /// reached its send. Only a call its deadline cut (it left no earlier than the deadline, less
    /// a little slack) proves the deadline too short; a caller that hung up earlier proves nothing.
    pub fn went_away(&self, target: &str, deadline: Duration, elapsed: Duration) {
        if elapsed + DEADLINE_SLACK >= deadline {
            self.with(target, |s| keep(&mut s.too_short, deadline));
        }
    }

    /// The least deadline a call on `target` must carry.
    pub fn needed(&self, target: &str) -> Duration {
        self.with(target, |s| {
            let learned = (largest(&s.to_send).saturating_mul(3) / 2)
                .max(largest(&s.too_short).saturating_mul(2))
                .min(CEILING);
            self.floor.max(learned)
        })
    }
}

/// A call's deadline, from its `grpc-timeout` header (`<digits><unit>`, units `H M S m u n`, at
/// most eight digits); `None` when absent or malformed (such a call is served as one without a
/// deadline).
pub fn call_deadline(metadata: &tonic::metadata::MetadataMap) -> Option<Duration> {
    let v = metadata.get("grpc-timeout")?.to_str().ok()?;
    let unit = v.chars().last()?;
    let digits = v.get(..v.len() - unit.len_utf8())?;
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        'H' => Duration::from_secs(n.saturating_mul(3600)),
        'M' => Duration::from_secs(n.saturating_mul(60)),
        'S' => Duration::from_secs(n),
        'm' => Duration::from_millis(n),
        'u' => Duration::from_micros(n),
        'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(v: &str) -> tonic::metadata::MetadataMap {
        let mut m = tonic::metadata::MetadataMap::new();
        if let Ok(v) = v.parse() {
            m.insert("grpc-timeout", v);
        }
        m
    }

    #[test]
    fn a_deadline_is_read_in_every_unit_and_nonsense_is_no_deadline() {
        assert_eq!(
            call_deadline(&meta("150m")),
            Some(Duration::from_millis(150))
        );
        assert_eq!(call_deadline(&meta("2S")), Some(Duration::from_secs(2)));
        assert_eq!(call_deadline(&meta("1H")), Some(Duration::from_secs(3600)));
        assert_eq!(
            call_deadline(&meta("99999u")),
            Some(Duration::from_micros(99_999))
        );
        for bad in ["", "m", "123456789m", "12x", "1.5S", "-1m", "1é"] {
            assert_eq!(call_deadline(&meta(bad)), None, "{bad}");
        }
    }

    #[test]
    fn the_minimum_learns_from_slow_attempts_and_cut_deadlines_and_stays_bounded() {
        let ms = Duration::from_millis;
        let b = CallBudget::new(ms(100));
        assert_eq!(b.needed("t"), ms(100));
        b.reached_send("t", ms(400));
        assert_eq!(b.needed("t"), ms(600));
        b.went_away("t", ms(500), ms(500));
        assert_eq!(b.needed("t"), ms(1000));
        assert_eq!(b.needed("other"), ms(100));
        b.reached_send("t", Duration::from_secs(3600));
        assert_eq!(b.needed("t"), CEILING);
        // Newer observations push old ones out.
        for _ in 0..KEPT {
            b.reached_send("t", ms(10));
            b.went_away("t", ms(10), ms(10));
        }
        assert_eq!(b.needed("t"), ms(100));
    }

    #[test]
    fn a_caller_that_hangs_up_before_its_deadline_teaches_nothing() {
        let b = CallBudget::new(Duration::from_millis(100));
        // A worker killed a moment into a call with a one-hour deadline, or a client that sends
        // a long deadline and resets the stream at once.
        b.went_away("t", Duration::from_secs(3600), Duration::from_millis(3));
        b.went_away("t", Duration::from_secs(50), Duration::from_secs(2));
        assert_eq!(b.needed("t"), Duration::from_millis(100));
        // Whatever it learns, a deadline of the ceiling or more is never refused.
        b.went_away("t", Duration::from_secs(50), Duration::from_secs(50));
        assert_eq!(b.needed("t"), CEILING);
    }
}
