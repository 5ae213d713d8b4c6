//! Known-bad variants of the core, switched on one at a time by the model checker to show that it
//! finds each bug it is meant to find. Compiled only with the `mutants` feature; without it every
//! switch is a constant `false` and the optimizer removes the bad branches.

/// Whether this build carries the known-bad variants (the `mutants` feature).
pub const COMPILED_IN: bool = cfg!(feature = "mutants");

/// A finding the core once had, reintroduced on demand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Mutant {
    /// Recovery acts on the binding's tier instead of the tier journaled at the proposal.
    BindingTier,
    /// A takeover's guard checks only the claim token, so a plan made on a stale snapshot is
    /// written with the stale claim's window.
    TokenOnlyTakeover,
    /// An unknown late answer closes its send's window at the time it arrived.
    UnknownLateCloses,
    /// A holder seen dead (its liveness lock free) is assumed to have no request left at the
    /// service a settle margin later, though the service may still be processing one.
    DeadHolderSettles,
    /// A replayed saved 500 is read as "unknown", so recovery resends into the same saved error
    /// until the service forgets the key.
    SavedErrorUnknown,
    /// A resend acts on the tier-1 window as judged before the takeover, though it may have
    /// closed since.
    WindowJudgedAtTakeover,
    /// Premises have no age: a dispatch or a resend is written on a read however old.
    PremisesHaveNoAge,
    /// Every conflicting submission appends a note, and a takeover requires the whole claim,
    /// `seen_ms` included, to be unchanged: a caller looping conflicts starves recovery.
    NotesBlockTakeover,
    /// The target's confirmation is evidence only: recovery resends past it or marks the effect
    /// ambiguous at tier 3, and nothing counts it as proof the effect landed.
    ConfirmationIgnored,
    /// A fenced attempt leaves its unsent dispatch's window open until the claim's deadline.
    FencedDispatchKeepsWindow,
    /// An `AMBIGUOUS` effect gives its lease's use back, though it may have landed.
    AmbiguousGivesUseBack,
    /// A person's statement settles an `AMBIGUOUS` effect while a send of it may still land, or
    /// though they looked at the target before its window closed.
    SettleWhileSendMayLand,
}

impl Mutant {
    /// Every mutant of the core.
    pub const ALL: [Mutant; 12] = [
        Mutant::BindingTier,
        Mutant::TokenOnlyTakeover,
        Mutant::UnknownLateCloses,
        Mutant::DeadHolderSettles,
        Mutant::SavedErrorUnknown,
        Mutant::WindowJudgedAtTakeover,
        Mutant::PremisesHaveNoAge,
        Mutant::NotesBlockTakeover,
        Mutant::ConfirmationIgnored,
        Mutant::FencedDispatchKeepsWindow,
        Mutant::AmbiguousGivesUseBack,
        Mutant::SettleWhileSendMayLand,
    ];

    /// Stable name, for reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::BindingTier => "recovery_uses_the_binding_s_tier",
            Self::TokenOnlyTakeover => "takeover_guarded_by_token_only",
            Self::UnknownLateCloses => "unknown_late_answer_closes_the_window",
            Self::DeadHolderSettles => "dead_holder_window_ends_a_settle_after_takeover",
            Self::SavedErrorUnknown => "saved_error_treated_as_unknown",
            Self::WindowJudgedAtTakeover => "resend_trusts_the_window_judged_at_takeover",
            Self::PremisesHaveNoAge => "premises_have_no_age",
            Self::NotesBlockTakeover => "conflict_notes_block_takeover",
            Self::ConfirmationIgnored => "confirmation_ignored_in_flight",
            Self::FencedDispatchKeepsWindow => "fenced_dispatch_keeps_its_window",
            Self::AmbiguousGivesUseBack => "ambiguous_effect_gives_its_use_back",
            Self::SettleWhileSendMayLand => "settled_while_a_send_may_land",
        }
    }
}

#[cfg(feature = "mutants")]
mod switch {
    use std::cell::Cell;

    use super::Mutant;

    thread_local! {
        // Per thread: the model checker hunts several mutants at once, one per thread, each
        // exploring on the thread that switched it in.
        static ACTIVE: Cell<u16> = const { Cell::new(0) };
    }

    fn bit(m: Mutant) -> u16 {
        match m {
            Mutant::BindingTier => 1,
            Mutant::TokenOnlyTakeover => 2,
            Mutant::UnknownLateCloses => 4,
            Mutant::DeadHolderSettles => 8,
            Mutant::SavedErrorUnknown => 16,
            Mutant::WindowJudgedAtTakeover => 32,
            Mutant::PremisesHaveNoAge => 64,
            Mutant::NotesBlockTakeover => 128,
            Mutant::ConfirmationIgnored => 256,
            Mutant::FencedDispatchKeepsWindow => 512,
            Mutant::AmbiguousGivesUseBack => 1024,
            Mutant::SettleWhileSendMayLand => 2048,
        }
    }

    /// Switch the core to `mutant` (or back to itself with `None`) on the calling thread.
    pub fn activate(mutant: Option<Mutant>) {
        ACTIVE.with(|a| a.set(mutant.map_or(0, bit)));
    }

    pub(crate) fn on(m: Mutant) -> bool {
        ACTIVE.with(Cell::get) & bit(m) != 0
    }
}

#[cfg(feature = "mutants")]
pub use switch::activate;
#[cfg(feature = "mutants")]
pub(crate) use switch::on;

#[cfg(not(feature = "mutants"))]
#[inline(always)]
pub(crate) fn on(_: Mutant) -> bool {
    false
}
