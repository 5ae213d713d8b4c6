//! Budgets: a limit on every effect that matches a scope, per window of time — "this agent
//! refunds at most $500 a day", "at most 30 refunds an hour per merchant". An effect holds its
//! place in a budget exactly as it holds a lease's use ([`super::limits::holds_use`]): from its
//! first `DISPATCHED` for as long as it may have applied. A place spans the time the effect can
//! land in — from its first `DISPATCHED` to the latest deadline of any of its sends (no request
//! lands after its claim's deadline) — and counts in every window that overlaps that span: an
//! effect in flight counts in every window until its last send's deadline has passed, whenever
//! it was first dispatched, so the effects that can land in a window never pass the limit.
//! Windows are read on the journal's clock: a rolling window is the last so many milliseconds, a
//! calendar one the day, week (from Monday) or month, at a fixed offset from UTC that the budget
//! states.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

const DAY_MS: i64 = 86_400_000;

/// One budget, as an administrator sets it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Its id.
    pub id: String,
    /// What an effect must match to count: payload fields by name, `target` for the target's
    /// name, `label.NAME` for one of the effect's labels (the workflow type, the acting agent).
    /// Empty: every effect.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scope: BTreeMap<String, Value>,
    /// Count separately for each value of these (same names as `scope`): "per merchant".
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per: Vec<String>,
    /// The window the limit is over.
    pub window: Window,
    /// The limit.
    pub limit: Limit,
}

/// The largest limit a budget may set (2^53 − 1, exact in every JSON reader). Far above any
/// real limit, and far enough below the 64-bit range that a counter's places (each at most the
/// limit, a late-landing one counted as the whole limit) add up without overflowing it: where
/// they did, the stores' sums would fail and every dispatch under the budget would wait.
pub const MAX_LIMIT: i64 = (1 << 53) - 1;

/// The time a budget's limit is over.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Window {
    /// The last `ms` milliseconds before the dispatch.
    Rolling {
        /// Its length.
        ms: i64,
    },
    /// The calendar day, week (Monday to Sunday) or month holding the dispatch, at a fixed offset
    /// from UTC.
    Calendar {
        /// Day, week or month.
        unit: CalendarUnit,
        /// Minutes east of UTC (120 for UTC+02:00). A fixed offset: a zone's daylight-saving
        /// changes are not followed.
        #[serde(default)]
        utc_offset_minutes: i32,
    },
}

/// A calendar window's unit.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum CalendarUnit {
    /// From midnight to midnight.
    Day,
    /// From Monday midnight to the next.
    Week,
    /// From the first of the month at midnight to the next first.
    Month,
}

/// What a budget limits.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Limit {
    /// How many effects.
    Count {
        /// At most this many.
        max: i64,
    },
    /// The sum of an integer payload field.
    Sum {
        /// The field.
        field: String,
        /// At most this much.
        max: i64,
    },
}

/// What a budget is matched against: the effect as it was proposed.
#[derive(Clone, Copy, Debug)]
pub struct Subject<'a> {
    /// The payload.
    pub payload: &'a Value,
    /// The target's name.
    pub target: &'a str,
    /// The effect's labels.
    pub labels: &'a BTreeMap<String, String>,
}

impl Subject<'_> {
    /// The value a scope or `per` name reads.
    fn get(&self, name: &str) -> Value {
        if name == "target" {
            return Value::String(self.target.to_owned());
        }
        if let Some(label) = name.strip_prefix("label.") {
            return self
                .labels
                .get(label)
                .map_or(Value::Null, |v| Value::String(v.clone()));
        }
        self.payload.get(name).cloned().unwrap_or(Value::Null)
    }
}

/// A place an effect holds in a budget, as the store keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    /// The effect's key.
    pub key: String,
    /// What it counts: 1 for a count, the field's value for a sum.
    pub amount: i64,
    /// When it was first dispatched (ms since the epoch): the earliest it can have landed.
    pub at_ms: i64,
    /// The latest deadline of its sends: the latest it can land.
    pub until_ms: i64,
}

impl Hold {
    /// Whether it counts in the window that starts at `since_ms`.
    pub fn counts_from(&self, since_ms: i64) -> bool {
        self.until_ms >= since_ms
    }
}

/// Why an effect does not fit a budget.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OverBudget {
    /// The budget's id.
    pub budget: String,
    /// What the window already holds.
    pub used: i64,
    /// The limit.
    pub max: i64,
    /// What the effect asks.
    pub asked: i64,
    /// When the window has room for it, if it ever will (a rolling window as its oldest places
    /// age out, a calendar one at the next period).
    pub frees_at_ms: Option<i64>,
    /// The window, in words.
    pub window: String,
}

impl std::fmt::Display for OverBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "budget {} allows {} {}; {} is used, {} left, and this effect asks {}",
            self.budget,
            self.max,
            self.window,
            self.used,
            self.max.saturating_sub(self.used).max(0),
            self.asked
        )?;
        match self.frees_at_ms {
            Some(at) => write!(f, "; room frees at {at} (ms since the epoch)"),
            None => write!(f, "; it never fits this budget"),
        }
    }
}

impl Budget {
    /// A budget that can be kept: an id, a window of positive length, a limit that is not
    /// negative, and names it can read.
    pub fn validate(&self) -> Result<(), String> {
        if self.id.is_empty() {
            return Err("a budget needs an id".into());
        }
        match self.window {
            Window::Rolling { ms } if ms <= 0 => {
                return Err(format!(
                    "budget {}: a rolling window needs a length",
                    self.id
                ));
            }
            Window::Calendar {
                utc_offset_minutes, ..
            } if i64::from(utc_offset_minutes).abs() > 14 * 60 => {
                return Err(format!(
                    "budget {}: a UTC offset is at most 14 hours",
                    self.id
                ));
            }
            _ => {}
        }
        match &self.limit {
            Limit::Count { max } | Limit::Sum { max, .. } if !(0..=MAX_LIMIT).contains(max) => {
                return Err(format!(
                    "budget {}: a limit is from 0 to {MAX_LIMIT}",
                    self.id
                ));
            }
            Limit::Sum { field, .. } if field.is_empty() => {
                return Err(format!("budget {}: a sum needs a payload field", self.id));
            }
            _ => {}
        }
        if self.scope.keys().chain(&self.per).any(String::is_empty) {
            return Err(format!("budget {}: a scope or per name is empty", self.id));
        }
        Ok(())
    }

    /// Whether an effect counts against it.
    pub fn matches(&self, s: &Subject<'_>) -> bool {
        self.scope.iter().all(|(name, want)| s.get(name) == *want)
    }

    /// Which of its counters the effect counts in: the values of its `per` names, as JSON text
    /// (`[]` for a budget that counts everything together).
    pub fn bucket(&self, s: &Subject<'_>) -> String {
        let values: Vec<Value> = self.per.iter().map(|name| s.get(name)).collect();
        Value::Array(values).to_string()
    }

    /// The counter `bucket` as a [`BudgetCheck`] names it: empty for a budget with one counter,
    /// which has nothing to name it by.
    pub fn counter_named(&self, bucket: String) -> String {
        if self.per.is_empty() {
            String::new()
        } else {
            bucket
        }
    }

    /// What the effect counts: 1 for a count, the field's integer value for a sum (`None` when
    /// the payload has no integer there, or a negative one: such an effect is refused).
    pub fn amount(&self, payload: &Value) -> Option<i64> {
        match &self.limit {
            Limit::Count { .. } => Some(1),
            Limit::Sum { field, .. } => payload
                .get(field)
                .and_then(Value::as_i64)
                .filter(|v| *v >= 0),
        }
    }

    /// The limit.
    pub fn max(&self) -> i64 {
        match &self.limit {
            Limit::Count { max } | Limit::Sum { max, .. } => *max,
        }
    }

    /// The limit and window in words: `amount ≤ 50000 per calendar day (UTC+02:00)`.
    pub fn describe(&self) -> String {
        let what = match &self.limit {
            Limit::Count { .. } => "effects".to_owned(),
            Limit::Sum { field, .. } => format!("{field} in total"),
        };
        let per = if self.per.is_empty() {
            String::new()
        } else {
            format!(" for each {}", self.per.join(", "))
        };
        format!("{what} {}{per}", self.window.describe())
    }
}

impl Window {
    /// The first time (inclusive) whose dispatches count in the window that holds `now_ms`.
    pub fn since(&self, now_ms: i64) -> i64 {
        match *self {
            Window::Rolling { ms } => now_ms.saturating_sub(ms).saturating_add(1),
            Window::Calendar {
                unit,
                utc_offset_minutes,
            } => period(unit, utc_offset_minutes, now_ms).0,
        }
    }

    /// The first time after `now_ms` whose window no longer overlaps a place that can land
    /// until `until_ms`.
    pub fn leaves_after(&self, until_ms: i64, now_ms: i64) -> i64 {
        match *self {
            Window::Rolling { ms } => until_ms.saturating_add(ms),
            Window::Calendar {
                unit,
                utc_offset_minutes,
            } => period(unit, utc_offset_minutes, until_ms.max(now_ms)).1,
        }
    }

    /// The window in words.
    pub fn describe(&self) -> String {
        match *self {
            Window::Rolling { ms } => format!("in any {}", duration_words(ms)),
            Window::Calendar {
                unit,
                utc_offset_minutes,
            } => {
                let unit = match unit {
                    CalendarUnit::Day => "day",
                    CalendarUnit::Week => "week (from Monday)",
                    CalendarUnit::Month => "month",
                };
                format!("per calendar {unit} ({})", offset_words(utc_offset_minutes))
            }
        }
    }
}

/// `UTC`, `UTC+02:00`, `UTC-05:30`.
pub fn offset_words(minutes: i32) -> String {
    if minutes == 0 {
        return "UTC".into();
    }
    let sign = if minutes < 0 { '-' } else { '+' };
    let m = minutes.unsigned_abs();
    format!("UTC{sign}{:02}:{:02}", m / 60, m % 60)
}

fn duration_words(ms: i64) -> String {
    const UNITS: [(i64, &str); 4] = [
        (DAY_MS, "day"),
        (3_600_000, "hour"),
        (60_000, "minute"),
        (1_000, "second"),
    ];
    for (len, name) in UNITS {
        if ms % len == 0 {
            let n = ms / len;
            return if n == 1 {
                name.to_owned()
            } else {
                format!("{n} {name}s")
            };
        }
    }
    format!("{ms} ms")
}

/// The calendar period holding `now_ms`: its start (inclusive) and end (exclusive), in ms since
/// the epoch.
fn period(unit: CalendarUnit, offset_minutes: i32, now_ms: i64) -> (i64, i64) {
    let offset = i64::from(offset_minutes) * 60_000;
    let local = now_ms.saturating_add(offset);
    let day = local.div_euclid(DAY_MS);
    let (first, next) = match unit {
        CalendarUnit::Day => (day, day + 1),
        CalendarUnit::Week => {
            // 1970-01-01 was a Thursday: Monday is day 3 of the week counted from it.
            let monday = day - (day + 3).rem_euclid(7);
            (monday, monday + 7)
        }
        CalendarUnit::Month => {
            let (y, m, _) = civil_from_days(day);
            let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
            (days_from_civil(y, m, 1), days_from_civil(ny, nm, 1))
        }
    };
    (first * DAY_MS - offset, next * DAY_MS - offset)
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day counted from 1970-01-01.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// What a counter holds in one window, as far as whether one more effect fits: enough for the
/// common case (it fits), which a store can add up without handing every place over. Only a
/// refusal needs the places themselves, to say when room frees up ([`room`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// What the places that count in the window add up to, the key's own included.
    pub used: i64,
    /// Whether the key itself holds a place that counts in the window.
    pub own_in_window: bool,
}

impl Tally {
    /// The tally of `holds` for `key` in the window that starts at `since_ms`.
    pub fn of(holds: &[Hold], key: &str, since_ms: i64) -> Self {
        holds
            .iter()
            .filter(|h| h.counts_from(since_ms))
            .fold(Self::default(), |t, h| Self {
                used: t.used.saturating_add(h.amount),
                own_in_window: t.own_in_window || h.key == key,
            })
    }
}

/// Whether an effect asking `asked` fits `budget` given its counter's `tally`: exactly when
/// [`room`] answers `Ok` for the places the tally was made of.
pub fn fits(budget: &Budget, asked: Option<i64>, tally: &Tally) -> bool {
    fits_beside(tally.own_in_window, asked, tally.used, budget.max())
}

/// The rule [`fits`] and [`BudgetCheck::fits`] share: the effect's own place counts for it only
/// while that place is in the window (a key whose sends could no longer land here is checked
/// again, as any other, before it sends again); else what it asks must fit beside what is used.
fn fits_beside(own: bool, asked: Option<i64>, used: i64, max: i64) -> bool {
    own || asked.is_some_and(|a| used.saturating_add(a) <= max)
}

/// What the gate counted for one budget at a dispatch, as `DISPATCHED` records it: which budget
/// and counter, the window, what the places in it added up to, and what the effect asked. An
/// audit reads from it that the effect fitted when it fired ([`BudgetCheck::fits`]), and against
/// which limit.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct BudgetCheck {
    /// The budget's id.
    pub budget: String,
    /// The counter (`per` values as JSON; empty for a budget with one counter).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub bucket: String,
    /// The start of the window checked (ms since the epoch).
    pub since_ms: i64,
    /// The budget's limit then.
    pub max: i64,
    /// What the effect counts (`None`: its payload had nothing this budget can count).
    pub asked: Option<i64>,
    /// What the places counting in the window added up to, the effect's own included.
    pub used: i64,
    /// The effect already held a place counting in the window (a resend).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub own: bool,
}

impl BudgetCheck {
    /// The check of an effect asking `asked` against `budget`'s counter `bucket`, whose places
    /// in the window starting at `since_ms` add up to `tally`.
    pub fn of(
        budget: &Budget,
        bucket: String,
        since_ms: i64,
        asked: Option<i64>,
        tally: &Tally,
    ) -> Self {
        Self {
            budget: budget.id.clone(),
            bucket: budget.counter_named(bucket),
            since_ms,
            max: budget.max(),
            asked,
            used: tally.used,
            own: tally.own_in_window,
        }
    }

    /// Whether the effect fitted, by the rule the gate checks ([`fits`]).
    pub fn fits(&self) -> bool {
        fits_beside(self.own, self.asked, self.used, self.max)
    }
}

/// Whether `key`, asking `asked` (`None`: its payload has no amount this budget can count), fits
/// `budget` at `now_ms`, when `holds` are the places the budget's counter for the effect's bucket
/// holds (any; those that can no longer land in the window are ignored). The key's own place, if
/// it holds one already (a resend), is not counted against it.
pub fn room(
    budget: &Budget,
    key: &str,
    asked: Option<i64>,
    holds: &[Hold],
    now_ms: i64,
) -> Result<(), OverBudget> {
    let since = budget.window.since(now_ms);
    let tally = Tally::of(holds, key, since);
    if fits(budget, asked, &tally) {
        return Ok(());
    }
    let counted: Vec<&Hold> = holds.iter().filter(|h| h.counts_from(since)).collect();
    let used = tally.used;
    let max = budget.max();
    let over = |asked: i64, frees_at_ms| OverBudget {
        budget: budget.id.clone(),
        used,
        max,
        asked,
        frees_at_ms,
        window: budget.describe(),
    };
    let Some(asked) = asked else {
        return Err(over(0, None));
    };
    if asked > max {
        return Err(over(asked, None));
    }
    // Each place stops counting once no window holding a later time can overlap its span;
    // room comes when enough have.
    let mut leaving: Vec<(i64, i64)> = counted
        .iter()
        .map(|h| (budget.window.leaves_after(h.until_ms, now_ms), h.amount))
        .collect();
    leaving.sort_unstable();
    let mut left = used;
    let frees_at = leaving.iter().find_map(|(at, amount)| {
        left = left.saturating_sub(*amount);
        (left.saturating_add(asked) <= max).then_some(*at)
    });
    Err(over(asked, frees_at))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn budget(window: Window, limit: Limit) -> Budget {
        Budget {
            id: "b".into(),
            scope: BTreeMap::new(),
            per: Vec::new(),
            window,
            limit,
        }
    }

    /// A place dispatched at `at_ms` whose sends' deadlines ended a second later.
    fn hold(key: &str, amount: i64, at_ms: i64) -> Hold {
        Hold {
            key: key.into(),
            amount,
            at_ms,
            until_ms: at_ms + 1000,
        }
    }

    // 2026-12-01T10:00:00Z, a Tuesday.
    const NOW: i64 = 1_796_119_200_000;

    #[test]
    fn calendar_periods_start_at_local_midnight_monday_and_the_first_of_the_month() {
        let day = period(CalendarUnit::Day, 0, NOW);
        assert_eq!(day, (1_796_083_200_000, 1_796_083_200_000 + DAY_MS));
        // At UTC+14:00 it is already 00:00 on Wednesday the 2nd.
        let ahead = period(CalendarUnit::Day, 14 * 60, NOW);
        assert_eq!(ahead.0, 1_796_083_200_000 + DAY_MS - 14 * 3_600_000);
        let week = period(CalendarUnit::Week, 0, NOW);
        assert_eq!(week.0, 1_796_083_200_000 - DAY_MS, "Monday 2026-11-30");
        let month = period(CalendarUnit::Month, 0, NOW);
        assert_eq!(month.0, 1_796_083_200_000, "2026-12-01");
        assert_eq!(month.1, 1_796_083_200_000 + 31 * DAY_MS, "2027-01-01");
        assert_eq!(civil_from_days(days_from_civil(2024, 2, 29)), (2024, 2, 29));
        assert_eq!(days_from_civil(1970, 1, 1), 0);
    }

    #[test]
    fn a_sum_admits_until_the_window_is_full_and_says_when_room_frees() {
        let b = budget(
            Window::Rolling { ms: 3_600_000 },
            Limit::Sum {
                field: "amount".into(),
                max: 5000,
            },
        );
        let holds = [
            hold("old", 5000, NOW - 3_602_000), // could land no later than an hour ago
            hold("a", 2000, NOW - 1_800_000),
            hold("b", 2000, NOW - 600_000),
        ];
        assert_eq!(room(&b, "c", Some(1000), &holds, NOW), Ok(()));
        let over = room(&b, "c", Some(1500), &holds, NOW).unwrap_err();
        assert_eq!((over.used, over.asked), (4000, 1500));
        assert_eq!(over.frees_at_ms, Some(NOW - 1_800_000 + 1000 + 3_600_000));
        // A place still in flight counts whenever it was dispatched.
        let stuck = Hold {
            until_ms: NOW + 5000,
            ..hold("stuck", 5000, NOW - 86_400_000)
        };
        assert!(room(&b, "c", Some(1), &[stuck], NOW).is_err());
        assert!(over.to_string().contains("1000 left"), "{over}");
        // The key that holds a place in the window may resend; one whose place has left the
        // window is checked as any other; one asking more than the limit never fits.
        assert_eq!(room(&b, "a", Some(2000), &holds, NOW), Ok(()));
        assert!(room(&b, "old", Some(5000), &holds, NOW).is_err());
        assert_eq!(
            room(&b, "z", Some(6000), &[], NOW).unwrap_err().frees_at_ms,
            None
        );
        assert!(room(&b, "z", None, &[], NOW).is_err());
        assert_eq!(b.amount(&json!({"amount": -3})), None);
    }

    #[test]
    fn a_count_per_calendar_day_frees_at_the_next_midnight() {
        let b = budget(
            Window::Calendar {
                unit: CalendarUnit::Day,
                utc_offset_minutes: 0,
            },
            Limit::Count { max: 2 },
        );
        let yesterday = hold("y", 1, NOW - DAY_MS);
        let today = [
            yesterday.clone(),
            hold("a", 1, NOW - 60_000),
            hold("b", 1, NOW - 1),
        ];
        let over = room(&b, "c", Some(1), &today, NOW).unwrap_err();
        assert_eq!(over.frees_at_ms, Some(1_796_083_200_000 + DAY_MS));
        assert_eq!(room(&b, "c", Some(1), &[yesterday], NOW), Ok(()));
    }

    #[test]
    fn a_scope_reads_payload_fields_the_target_and_labels_and_per_splits_the_count() {
        let mut b = budget(Window::Rolling { ms: 1000 }, Limit::Count { max: 1 });
        b.scope.insert("target".into(), json!("refunds"));
        b.scope.insert("label.agent".into(), json!("bot-7"));
        b.per = vec!["customer".into()];
        let labels: BTreeMap<String, String> = [("agent".to_owned(), "bot-7".to_owned())].into();
        let payload = json!({"customer": "cus_1", "amount": 5});
        let s = Subject {
            payload: &payload,
            target: "refunds",
            labels: &labels,
        };
        assert!(b.matches(&s));
        assert_eq!(b.bucket(&s), r#"["cus_1"]"#);
        let other = Subject {
            target: "payouts",
            ..s
        };
        assert!(!b.matches(&other));
        let none = BTreeMap::new();
        assert!(!b.matches(&Subject { labels: &none, ..s }));
        assert!(b.validate().is_ok());
        b.window = Window::Rolling { ms: 0 };
        assert!(b.validate().is_err());
    }

    #[test]
    fn windows_and_offsets_are_told_in_words() {
        let b = budget(
            Window::Calendar {
                unit: CalendarUnit::Day,
                utc_offset_minutes: -330,
            },
            Limit::Sum {
                field: "amount".into(),
                max: 50_000,
            },
        );
        assert_eq!(b.describe(), "amount in total per calendar day (UTC-05:30)");
        assert_eq!(
            Window::Rolling { ms: 7_200_000 }.describe(),
            "in any 2 hours"
        );
    }
}
