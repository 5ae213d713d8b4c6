//! How long a call must give an attempt. Once an attempt reaches its send, its caller may go:
//! the send goes out and its answer is journaled. Before that, a caller that goes away stops the
//! attempt, and one that goes between the dispatch record and the send leaves a withdrawn
//! dispatch for the next attempt to finish. A caller whose every deadline falls inside that
//! stretch (premise read, lookup, journal commits) would have every attempt stopped there and
//! the effect never sent; so the server learns, per target, how long attempts take to reach their
//! send and answers a call whose deadline cannot cover that with the minimum it needs, before the
//! call touches the journal.
//!
//! What is learned: the time each attempt took to reach its send (the last few, the slowest
//! counts), and each deadline that proved too short (an attempt whose caller left before its
//! send, twice that deadline is a first guess of what would do). The minimum is the largest of
//! the configured floor, one and a half times the slowest recent way to a send, and twice the
//! longest deadline recently proved too short; it is bounded above, so one stall cannot make the
//! server refuse every caller.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// The metadata key carrying the minimum deadline, in milliseconds, on a refused call.
pub const MIN_DEADLINE_KEY: &str = "interlock-min-deadline-ms";

/// How many recent observations per target count.
const KEPT: usize = 16;

/// The minimum never asks for more than this: a target whose attempts took longer is slow,
/// and callers must still be able to reach it.
const CEILING: Duration = Duration::from_secs(60);

#[derive(Default)]
struct Seen {
    to_send: VecDeque<Duration>,
    too_short: VecDeque<Duration>,
}

fn keep(q: &mut VecDeque<Duration>, d: Duration) {
    if q.len() == KEPT {
        q.pop_front();
    }
    q.push_back(d);
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

    /// A call on `target` with `deadline` went away before its attempt reached its send.
    pub fn too_short(&self, target: &str, deadline: Duration) {
        self.with(target, |s| keep(&mut s.too_short, deadline));
    }

    /// The least deadline a call on `target` must carry.
    pub fn needed(&self, target: &str) -> Duration {
        self.with(target, |s| {
            let slowest = s.to_send.iter().max().copied().unwrap_or_default();
            let short = s.too_short.iter().max().copied().unwrap_or_default();
            self.floor
                .max(slowest.saturating_mul(3) / 2)
                .max(short.saturating_mul(2))
                .min(CEILING.max(self.floor))
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
    fn the_minimum_learns_from_slow_attempts_and_short_deadlines_and_stays_bounded() {
        let b = CallBudget::new(Duration::from_millis(100));
        assert_eq!(b.needed("t"), Duration::from_millis(100));
        b.reached_send("t", Duration::from_millis(400));
        assert_eq!(b.needed("t"), Duration::from_millis(600));
        b.too_short("t", Duration::from_millis(500));
        assert_eq!(b.needed("t"), Duration::from_millis(1000));
        assert_eq!(b.needed("other"), Duration::from_millis(100));
        b.reached_send("t", Duration::from_secs(3600));
        assert_eq!(b.needed("t"), CEILING);
        // Old observations age out.
        for _ in 0..KEPT {
            b.reached_send("t", Duration::from_millis(10));
            b.too_short("t", Duration::from_millis(10));
        }
        assert_eq!(b.needed("t"), Duration::from_millis(100));
    }
}
