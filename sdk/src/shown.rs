//! What logs and spans may show of an effect's values. Traces and logs leave the host (an OTLP
//! collector, a log pipeline) and are read by more people than the journal: they carry the key,
//! the target, the outcome and codes, and an effect's payload fields, premises' values and the
//! target's answer only where the operator allow-lists them in [`ALLOW_ENV`]. The journal keeps
//! everything, for whoever may read it.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::sync::OnceLock;

/// The variable listing what logs may show, comma-separated: `payload.FIELD`, `premises.NAME`,
/// `payload` (every field), `premises` (every one), `answer` (the target's answers). Unset:
/// nothing.
pub const ALLOW_ENV: &str = "INTERLOCK_LOG_VALUES";

/// What a withheld value is shown as.
pub const WITHHELD: &str = "<withheld: not in INTERLOCK_LOG_VALUES>";

/// An allow-list, as [`ALLOW_ENV`] writes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Allowed(BTreeSet<String>);

impl Allowed {
    /// The list `text` writes (comma-separated entries; spaces ignored).
    pub fn parse(text: &str) -> Self {
        Self(
            text.split(',')
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .map(str::to_owned)
                .collect(),
        )
    }

    fn has(&self, kind: &str, name: &str) -> bool {
        self.0.contains(kind) || self.0.contains(&format!("{kind}.{name}"))
    }

    /// `value` of payload field `field`, or [`WITHHELD`].
    pub fn payload(&self, field: &str, value: &dyn Debug) -> String {
        self.show(self.has("payload", field), value)
    }

    /// `value` of premise `name`, or [`WITHHELD`].
    pub fn premise(&self, name: &str, value: &dyn Debug) -> String {
        self.show(self.has("premises", name), value)
    }

    /// A target's answer, or [`WITHHELD`].
    pub fn answer(&self, value: &dyn Debug) -> String {
        self.show(self.0.contains("answer"), value)
    }

    fn show(&self, allowed: bool, value: &dyn Debug) -> String {
        if allowed {
            format!("{value:?}")
        } else {
            WITHHELD.to_owned()
        }
    }
}

/// This process's allow-list, read from [`ALLOW_ENV`] once.
pub fn allowed() -> &'static Allowed {
    static ALLOWED: OnceLock<Allowed> = OnceLock::new();
    ALLOWED.get_or_init(|| Allowed::parse(&std::env::var(ALLOW_ENV).unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_withheld_unless_their_field_or_kind_is_allow_listed() {
        let none = Allowed::default();
        assert_eq!(none.premise("amount_paid", &500), WITHHELD);
        assert_eq!(none.answer(&"re_1"), WITHHELD);
        let some = Allowed::parse(" premises.amount_paid , payload.amount,answer");
        assert_eq!(some.premise("amount_paid", &500), "500");
        assert_eq!(some.premise("customer_email", &"a@b"), WITHHELD);
        assert_eq!(some.payload("amount", &7), "7");
        assert_eq!(some.payload("metadata", &"x"), WITHHELD);
        assert_eq!(some.answer(&"re_1"), "\"re_1\"");
        let all = Allowed::parse("premises");
        assert_eq!(all.premise("anything", &1), "1");
    }
}
