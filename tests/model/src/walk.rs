//! The breadth-first walk the database and shared-lease models share: every reachable state
//! once, by fingerprint, each with its parent and the step that reached it, so a counterexample
//! is told by replaying its steps from the start. The single-key model keeps an explorer of its
//! own, which also folds symmetric states and checks liveness.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap, VecDeque};

/// A model the walk can explore.
pub(crate) trait Walk {
    /// A state of the world.
    type State: Clone;
    /// A move of the world (the start's own entry holds the default one, never replayed).
    type Action: Copy + Default;
    /// The state everything starts from.
    fn start(&self) -> Self::State;
    /// The 64-bit fingerprint a state is kept as.
    fn fingerprint(&self, s: &Self::State) -> u64;
    /// The moves possible from `s`.
    fn moves(&self, s: &Self::State) -> Vec<Self::Action>;
    /// The state `a` leads to from `s`, and the property the move itself breaks, if any.
    fn step(&self, s: &Self::State, a: Self::Action) -> (Self::State, Option<&'static str>);
    /// The properties broken in `s`.
    fn broken(&self, s: &Self::State) -> Vec<&'static str>;
    /// The moves of `path`, replayed from the start and told in words.
    fn tell(&self, path: &[Self::Action]) -> Vec<String>;
}

/// What a walk found.
pub(crate) struct Walked {
    /// Distinct states reached.
    pub(crate) states: u64,
    /// Longest shortest path from the start.
    pub(crate) max_depth: u32,
    /// Every reachable state was explored.
    pub(crate) complete: bool,
    /// Property name → the trace that breaks it.
    pub(crate) traces: BTreeMap<String, Vec<String>>,
}

impl Walked {
    /// Each of `properties` → `holds` or `counterexample`.
    pub(crate) fn verdicts(&self, properties: &[&str]) -> BTreeMap<String, String> {
        verdicts(properties, &self.traces)
    }
}

/// Each of `properties` → `counterexample` if `broken` holds a trace of it, else `holds`.
pub(crate) fn verdicts<T>(
    properties: &[&str],
    broken: &BTreeMap<String, T>,
) -> BTreeMap<String, String> {
    properties
        .iter()
        .map(|p| {
            let v = if broken.contains_key(*p) {
                "counterexample"
            } else {
                "holds"
            };
            ((*p).to_owned(), v.to_owned())
        })
        .collect()
}

/// Walk every reachable state of `w` breadth-first, checking the properties on each state (then
/// handing it to `visit`) and at each move; with `stop_early`, stop at the first counterexample.
pub(crate) fn walk<W: Walk>(w: &W, stop_early: bool, mut visit: impl FnMut(&W::State)) -> Walked {
    let init = w.start();
    let init_fp = w.fingerprint(&init);
    let mut parents: HashMap<u64, (u64, W::Action)> = HashMap::new();
    parents.insert(init_fp, (init_fp, W::Action::default()));
    let mut queue = VecDeque::from([(init, 0u32)]);
    let mut traces: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let (mut states, mut max_depth) = (0u64, 0u32);
    while let Some((s, depth)) = queue.pop_front() {
        states += 1;
        max_depth = max_depth.max(depth);
        let fp = w.fingerprint(&s);
        for p in w.broken(&s) {
            traces
                .entry(p.to_owned())
                .or_insert_with(|| w.tell(&super::check::path_to(&parents, fp)));
        }
        visit(&s);
        if stop_early && !traces.is_empty() {
            break;
        }
        for action in w.moves(&s) {
            let (next, breach) = w.step(&s, action);
            let nfp = w.fingerprint(&next);
            if let Some(p) = breach {
                traces.entry(p.to_owned()).or_insert_with(|| {
                    let mut path = super::check::path_to(&parents, fp);
                    path.push(action);
                    w.tell(&path)
                });
            }
            if let Entry::Vacant(e) = parents.entry(nfp) {
                e.insert((fp, action));
                queue.push_back((next, depth + 1));
            }
        }
        if states >= super::check::MAX_STATES {
            break;
        }
    }
    Walked {
        states,
        max_depth,
        complete: queue.is_empty() && (!stop_early || traces.is_empty()),
        traces,
    }
}
