//! The approval day's script: which refund requests arrive, in what order, what happens to each
//! one's facts, and how a careful reviewer judges them. The judge is the day's ground truth as
//! well: a payout is wrong when the judge, looking at the facts as they stood when the money
//! went out, would not have paid it (or paid it once already).

use std::fmt;
use std::str::FromStr;

use interlock_testkit::sim::FactChange;
use serde::Serialize;
use serde_json::Value;

/// Refunds up to this many cents clear with no person (the story's policy).
pub const LIMIT: i64 = 5_000;

/// What kind of request a delivery is.
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Within the limit, eligible, nothing moves.
    Routine,
    /// Over the limit: a person must approve.
    OverLimit,
    /// The customer is flagged: a person judges (large refunds to flagged customers are
    /// declined).
    Flagged,
    /// The order is not eligible for a refund.
    Ineligible,
    /// A second delivery of an earlier request, under the same Temporal workflow id (the
    /// request's): every other one while the first is still running (Temporal refuses to start
    /// it), the others after the first closed (a sender retrying after a timeout: Temporal
    /// starts a new run).
    Duplicate,
    /// The worker is SIGKILLed after the payments API made the refund and before it answered.
    CrashMidSend,
    /// Support refunds by hand right after the request was decided: every other one the whole
    /// amount (it is paid already), the others a quarter of it (something else, such as
    /// shipping: the request still stands).
    HandRefundBeforeSend,
    /// Over the limit, and after the person approves the order turns ineligible or the
    /// customer is flagged.
    FactsMoveAfterApproval,
}

impl Kind {
    /// Every kind, in the mix's order.
    pub const ALL: [Kind; 8] = [
        Kind::Routine,
        Kind::OverLimit,
        Kind::Flagged,
        Kind::Ineligible,
        Kind::Duplicate,
        Kind::CrashMidSend,
        Kind::HandRefundBeforeSend,
        Kind::FactsMoveAfterApproval,
    ];

    /// The name used in `--mix`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Routine => "routine",
            Kind::OverLimit => "over_limit",
            Kind::Flagged => "flagged",
            Kind::Ineligible => "ineligible",
            Kind::Duplicate => "duplicate",
            Kind::CrashMidSend => "crash_mid_send",
            Kind::HandRefundBeforeSend => "hand_refund_before_send",
            Kind::FactsMoveAfterApproval => "facts_move_after_approval",
        }
    }
}

/// How many deliveries of each kind (their sum is the day's deliveries).
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
pub struct Mix(pub Vec<(Kind, u32)>);

impl Default for Mix {
    fn default() -> Self {
        Self(vec![
            (Kind::Routine, 50),
            (Kind::OverLimit, 10),
            (Kind::Flagged, 6),
            (Kind::Ineligible, 8),
            (Kind::Duplicate, 6),
            (Kind::CrashMidSend, 6),
            (Kind::HandRefundBeforeSend, 8),
            (Kind::FactsMoveAfterApproval, 6),
        ])
    }
}

impl fmt::Display for Mix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|(k, n)| format!("{}={n}", k.name()))
            .collect();
        f.write_str(&parts.join(","))
    }
}

impl FromStr for Mix {
    type Err = String;

    /// `routine=50,over_limit=10,…`: kinds left out count 0.
    fn from_str(s: &str) -> Result<Self, String> {
        let mut counts: Vec<(Kind, u32)> = Kind::ALL.iter().map(|k| (*k, 0)).collect();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, n) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?} is not kind=count"))?;
            let n: u32 = n
                .trim()
                .parse()
                .map_err(|_| format!("{part:?}: the count is not a whole number"))?;
            let slot = counts
                .iter_mut()
                .find(|(k, _)| k.name() == name.trim())
                .ok_or_else(|| {
                    let known: Vec<&str> = Kind::ALL.iter().map(|k| k.name()).collect();
                    format!("unknown kind {name:?}; the kinds are {}", known.join(", "))
                })?;
            slot.1 = n;
        }
        let mix = Self(counts);
        mix.check()?;
        Ok(mix)
    }
}

impl Mix {
    fn count(&self, kind: Kind) -> u32 {
        self.0
            .iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, n)| n)
            .sum()
    }

    /// Whether the mix can be played: some requests, at most 1000 deliveries, and an earlier
    /// request for every duplicate to repeat.
    pub fn check(&self) -> Result<(), String> {
        let total: u32 = self.0.iter().map(|(_, n)| n).sum();
        if total == 0 || total > 1000 {
            return Err(format!(
                "the mix has {total} deliveries; it needs 1 to 1000"
            ));
        }
        let repeatable = self.count(Kind::Routine) + self.count(Kind::OverLimit);
        if self.count(Kind::Duplicate) > repeatable {
            return Err(format!(
                "{} duplicates but only {repeatable} routine and over-limit requests to repeat",
                self.count(Kind::Duplicate)
            ));
        }
        Ok(())
    }
}

/// A unique refund request of the day.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Request {
    /// Its number, from 0.
    pub n: usize,
    /// Its kind (never `Duplicate`).
    pub kind: Kind,
    /// Cents asked for.
    pub amount: i64,
    /// The payment is this many cents (enough that a hand refund and the request both fit, so
    /// the payments API itself refuses nothing).
    pub paid: i64,
    /// The customer is flagged from the start.
    pub flagged: bool,
    /// The order is eligible from the start.
    pub eligible: bool,
    /// What moves right after the request is first decided on (read for the decision).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after_decision: Option<Change>,
    /// What moves right after a person signs an approval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after_approval: Option<Change>,
    /// The worker is killed once the payments API has made this refund.
    pub crash_mid_send: bool,
}

/// A fact that moves, as the day's record shows it.
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// Support refunds this many cents by hand.
    HandRefund(i64),
    /// The shop marks the order ineligible.
    Ineligible,
    /// The shop flags the customer.
    Flagged,
}

impl Change {
    /// The change as the payments API makes it.
    pub fn fact(self) -> FactChange {
        match self {
            Change::HandRefund(c) => FactChange::HandRefund(c),
            Change::Ineligible => FactChange::Eligible(false),
            Change::Flagged => FactChange::Flagged(true),
        }
    }
}

/// One delivery: a request arriving (the first time or again).
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// Its position in the day, from 0.
    pub d: usize,
    /// The request it delivers.
    pub request: usize,
    /// Whether it repeats an earlier delivery.
    pub duplicate: bool,
    /// A duplicate that arrives only once the first delivery's workflow has closed.
    pub late: bool,
}

/// The day: its requests and their deliveries in arrival order.
#[derive(Serialize, Clone, Debug)]
pub struct Plan {
    /// The unique requests.
    pub requests: Vec<Request>,
    /// The deliveries, in the order they arrive.
    pub deliveries: Vec<Delivery>,
}

/// A small deterministic generator: the same seed plays the same day.
struct Xorshift(u64);

impl Xorshift {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        usize::try_from(self.0 % n.max(1) as u64).unwrap_or(0)
    }
}

/// A cents amount from `lo` up to `hi`, in whole dollars.
fn amount(rng: &mut Xorshift, lo: i64, hi: i64) -> i64 {
    let dollars = usize::try_from((hi - lo) / 100 + 1).unwrap_or(1);
    lo + 100 * i64::try_from(rng.below(dollars)).unwrap_or(0)
}

/// Lay out the day for `mix`: requests in a shuffled order, each duplicate arriving three
/// deliveries after the request it repeats (half of them routine, half over the limit).
pub fn plan(mix: &Mix, seed: u64) -> Plan {
    let mut rng = Xorshift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut kinds: Vec<Kind> = mix
        .0
        .iter()
        .filter(|(k, _)| *k != Kind::Duplicate)
        .flat_map(|(k, n)| std::iter::repeat_n(*k, *n as usize))
        .collect();
    for i in (1..kinds.len()).rev() {
        kinds.swap(i, rng.below(i + 1));
    }
    let mut requests = Vec::with_capacity(kinds.len());
    for (n, kind) in kinds.into_iter().enumerate() {
        let mut r = Request {
            n,
            kind,
            amount: amount(&mut rng, 1_000, LIMIT),
            paid: 0,
            flagged: false,
            eligible: true,
            after_decision: None,
            after_approval: None,
            crash_mid_send: false,
        };
        match kind {
            Kind::OverLimit => r.amount = amount(&mut rng, LIMIT + 100, 20_000),
            Kind::Flagged => {
                r.flagged = true;
                r.amount = amount(&mut rng, 1_000, 2 * LIMIT);
            }
            Kind::Ineligible => r.eligible = false,
            Kind::CrashMidSend => {
                r.crash_mid_send = true;
                if n % 3 == 0 {
                    r.amount = amount(&mut rng, LIMIT + 100, 20_000);
                }
            }
            Kind::HandRefundBeforeSend => {
                let part = if n % 2 == 0 {
                    r.amount
                } else {
                    r.amount / 400 * 100
                };
                r.after_decision = Some(Change::HandRefund(part));
            }
            Kind::FactsMoveAfterApproval => {
                r.amount = amount(&mut rng, LIMIT + 100, 20_000);
                r.after_approval = Some(if n % 2 == 0 {
                    Change::Ineligible
                } else {
                    Change::Flagged
                });
            }
            Kind::Routine | Kind::Duplicate => {}
        }
        r.paid = 3 * r.amount;
        requests.push(r);
    }
    let mut deliveries: Vec<(usize, bool, bool)> =
        (0..requests.len()).map(|n| (n, false, false)).collect();
    let of = |k: Kind| -> Vec<usize> {
        requests
            .iter()
            .filter(|r| r.kind == k)
            .map(|r| r.n)
            .collect()
    };
    let (routine, over) = (of(Kind::Routine), of(Kind::OverLimit));
    let dups = mix.count(Kind::Duplicate) as usize;
    let n_over = (dups / 2)
        .min(over.len())
        .max(dups.saturating_sub(routine.len()));
    let spread = |from: &[usize], k: usize| -> Vec<usize> {
        (0..k).map(|i| from[i * from.len() / k]).collect()
    };
    let mut originals = spread(&routine, dups - n_over);
    originals.extend(spread(&over, n_over));
    for (k, original) in originals.into_iter().enumerate() {
        let at = deliveries
            .iter()
            .position(|(n, dup, _)| *n == original && !dup)
            .unwrap_or(0);
        let to = (at + 3).min(deliveries.len());
        deliveries.insert(to, (original, true, k % 2 == 1));
    }
    Plan {
        requests,
        deliveries: deliveries
            .into_iter()
            .enumerate()
            .map(|(d, (request, duplicate, late))| Delivery {
                d,
                request,
                duplicate,
                late,
            })
            .collect(),
    }
}

/// What a careful reviewer decides on `amount` cents given the facts `premises` (as the
/// refund's premises name them): `Ok` to pay, or why not. The day's ground truth too.
pub fn judge(amount: i64, premises: &Value) -> Result<(), String> {
    let eligible = premises["order_eligible"].as_bool().unwrap_or(true);
    let flagged = premises["customer_flagged"].as_bool().unwrap_or(false);
    let others = premises["refunded_by_others"].as_i64().unwrap_or(0);
    if !eligible {
        return Err("the order is not eligible for a refund".into());
    }
    if others >= amount {
        return Err(format!(
            "{others} was already refunded by others, as much as is asked"
        ));
    }
    if flagged && amount > LIMIT {
        return Err(format!("a {amount} refund to a flagged customer"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_default_mix_is_a_hundred_deliveries_of_ninety_four_requests() {
        let p = plan(&Mix::default(), 1);
        assert_eq!(p.deliveries.len(), 100);
        assert_eq!(p.requests.len(), 94);
        assert_eq!(p.deliveries.iter().filter(|d| d.duplicate).count(), 6);
        assert_eq!(p.deliveries.iter().filter(|d| d.late).count(), 3);
    }

    #[test]
    fn every_duplicate_arrives_after_the_request_it_repeats() {
        let p = plan(&Mix::default(), 7);
        for d in p.deliveries.iter().filter(|d| d.duplicate) {
            let first = p
                .deliveries
                .iter()
                .position(|e| e.request == d.request && !e.duplicate);
            assert!(first.is_some_and(|f| f < d.d), "{d:?}");
            assert!(matches!(
                p.requests[d.request].kind,
                Kind::Routine | Kind::OverLimit
            ));
        }
    }

    #[test]
    fn the_same_seed_plays_the_same_day() {
        let (a, b) = (plan(&Mix::default(), 3), plan(&Mix::default(), 3));
        assert_eq!(a.requests, b.requests);
        assert_eq!(a.deliveries, b.deliveries);
    }

    #[test]
    fn a_mix_names_its_kinds_and_counts() {
        let m: Mix = "routine=3,duplicate=1".parse().unwrap_or_default();
        assert_eq!(m.count(Kind::Routine), 3);
        assert!("routine=x".parse::<Mix>().is_err());
        assert!("refundz=3".parse::<Mix>().is_err());
        assert!("duplicate=2,routine=1".parse::<Mix>().is_err());
        assert!("".parse::<Mix>().is_err());
    }

    #[test]
    fn the_judge_pays_only_on_facts_that_hold() {
        let ok =
            json!({"order_eligible": true, "customer_flagged": false, "refunded_by_others": 0});
        assert!(judge(9_000, &ok).is_ok());
        assert!(judge(2_000, &json!({"order_eligible": false})).is_err());
        assert!(judge(2_000, &json!({"refunded_by_others": 2_000})).is_err());
        assert!(judge(1_000, &json!({"refunded_by_others": 500})).is_ok());
        assert!(judge(9_000, &json!({"customer_flagged": true})).is_err());
        assert!(judge(4_000, &json!({"customer_flagged": true})).is_ok());
    }
}
