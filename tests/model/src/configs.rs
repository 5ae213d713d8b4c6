//! The configurations the model checker runs. Each keeps a few kinds of fault, so that together
//! they cover every fault the model knows while each stays small enough to explore in full.

use interlock_core::Tier;

use super::spec::{Binding, Config};

fn worker(tier: Tier) -> Binding {
    Binding {
        tier,
        recover_only: false,
    }
}

/// `interlock recover` with a binding that claims `tier`.
fn cli(tier: Tier) -> Binding {
    Binding {
        tier,
        recover_only: true,
    }
}

/// Which faults a configuration lets happen, besides stalls and crashes.
#[derive(Clone, Copy, Default)]
struct Faults {
    revoke: bool,
    move_premise: bool,
    server_errors: bool,
    lossy: bool,
    conflicts: u8,
    confirmations: bool,
    settles: bool,
    store_outage: bool,
    lease_expires: Option<i64>,
    fences: u8,
}

/// The bounds: attempts per actor, crashes in all, the clock's horizon and jumps.
#[derive(Clone, Copy)]
struct Bounds {
    attempts: u8,
    crashes: u8,
    horizon: i64,
    jumps: u8,
}

fn model(name: &str, tier: Tier, bindings: Vec<Binding>, f: Faults, b: Bounds) -> Config {
    let bindings_len = bindings.len();
    Config {
        name: name.into(),
        service_tier: tier,
        bindings,
        attempts: b.attempts,
        crashes: b.crashes,
        revoke: f.revoke,
        move_premise: f.move_premise,
        server_errors: f.server_errors,
        lossy: f.lossy,
        jumps: b.jumps,
        horizon: b.horizon,
        stale_lease_read: false,
        conflicts: f.conflicts,
        confirmations: f.confirmations,
        settles: f.settles,
        store_outage: f.store_outage,
        lease_expires: f.lease_expires,
        fences: f.fences,
        symmetric: bindings_len > 2,
    }
}

/// The full set, or (`quick`) the same shapes with tighter bounds, for CI.
pub fn models(quick: bool) -> Vec<Config> {
    let b = |attempts, crashes, full_horizon: i64| Bounds {
        attempts,
        crashes,
        horizon: if quick {
            full_horizon - 2
        } else {
            full_horizon
        },
        jumps: u8::from(!quick),
    };
    let revoke = Faults {
        revoke: true,
        ..Faults::default()
    };
    let premises = Faults {
        move_premise: true,
        ..revoke
    };
    let saved_500s = Faults {
        server_errors: true,
        ..revoke
    };
    let lossy = Faults {
        lossy: true,
        ..revoke
    };
    let w = |t, n| vec![worker(t); n];
    let mut out = vec![
        model(
            "tier 1, 2 workers, saved 500s",
            Tier::One,
            w(Tier::One, 2),
            saved_500s,
            b(1, 1, 5),
        ),
        model(
            "tier 1, 2 workers, premise moves",
            Tier::One,
            w(Tier::One, 2),
            premises,
            b(1, 1, 5),
        ),
        model(
            "tier 1, 2 workers, the window closes",
            Tier::One,
            w(Tier::One, 2),
            Faults::default(),
            Bounds {
                attempts: 1,
                crashes: 1,
                horizon: 6,
                jumps: 0,
            },
        ),
        model(
            "tier 2, 2 workers, lossy network",
            Tier::Two,
            w(Tier::Two, 2),
            lossy,
            b(1, 1, 6),
        ),
        model(
            "tier 2, 2 workers, premise moves",
            Tier::Two,
            w(Tier::Two, 2),
            premises,
            b(1, 1, 6),
        ),
        model(
            "tier 2, 2 workers, retries",
            Tier::Two,
            w(Tier::Two, 2),
            Faults::default(),
            Bounds {
                attempts: 2,
                crashes: 1,
                horizon: 4,
                jumps: 0,
            },
        ),
        model(
            "tier 3, 2 workers, premise moves",
            Tier::Three,
            w(Tier::Three, 2),
            premises,
            b(1, 1, 6),
        ),
        model(
            "tier 2, worker + recover --tier 1",
            Tier::Two,
            vec![worker(Tier::Two), cli(Tier::One)],
            revoke,
            b(1, 1, 6),
        ),
        model(
            "tier 3, worker + recover --tier 1",
            Tier::Three,
            vec![worker(Tier::Three), cli(Tier::One)],
            revoke,
            b(1, 1, 6),
        ),
    ];
    out.extend([
        model(
            "tier 2, 2 workers, conflicting callers",
            Tier::Two,
            w(Tier::Two, 2),
            Faults {
                conflicts: 3,
                ..Faults::default()
            },
            b(1, 1, 5),
        ),
        model(
            "tier 3, 2 workers, confirmations",
            Tier::Three,
            w(Tier::Three, 2),
            Faults {
                confirmations: true,
                ..revoke
            },
            b(1, 1, 6),
        ),
        model(
            "tier 3, 2 workers, a person settles",
            Tier::Three,
            w(Tier::Three, 2),
            Faults {
                settles: true,
                ..revoke
            },
            b(1, 1, 6),
        ),
        model(
            "tier 1, 2 workers, confirmations",
            Tier::One,
            w(Tier::One, 2),
            Faults {
                confirmations: true,
                ..Faults::default()
            },
            b(1, 1, 5),
        ),
        model(
            "tier 2, 2 workers, fenced callers, store outage, expiry",
            Tier::Two,
            w(Tier::Two, 2),
            Faults {
                fences: 1,
                store_outage: true,
                lease_expires: Some(4),
                ..Faults::default()
            },
            b(1, 1, 6),
        ),
        model(
            "tier 3, 2 workers, fenced callers, revocations",
            Tier::Three,
            w(Tier::Three, 2),
            Faults {
                fences: 1,
                ..revoke
            },
            b(1, 1, 6),
        ),
    ]);
    if !quick {
        out.push(model(
            "tier 2, 3 workers",
            Tier::Two,
            w(Tier::Two, 3),
            revoke,
            Bounds {
                attempts: 1,
                crashes: 1,
                horizon: 4,
                jumps: 0,
            },
        ));
        out.push(model(
            "tier 1, 3 workers",
            Tier::One,
            w(Tier::One, 3),
            Faults::default(),
            Bounds {
                attempts: 1,
                crashes: 1,
                horizon: 3,
                jumps: 0,
            },
        ));
    }
    out
}
