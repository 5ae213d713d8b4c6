//! The RPCs. Each runs the blocking gate on tokio's blocking pool; the request's task only waits.
//! When a caller goes away (its worker was killed, its deadline passed) or the server drains, the
//! attempt is told through [`Bound::with_stop`] and [`Bound::with_fence`] and stops before the next
//! step that could lead to a send, a dispatch of its own not yet sent included (at every tier),
//! which the caller's next attempt recovers; a send already under way goes out and
//! its answer is journaled, so the next attempt replays it instead of guessing.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use interlock::core::EffectState;
use interlock::verify::{self, Sources};
use interlock::{Bound, Clock, JournalStore};
use tonic::{Request, Response, Status};

use crate::callers::{Caller, Callers};
use crate::convert::{self, Invalid};
use crate::deadline::{CallBudget, MIN_DEADLINE_KEY, call_deadline};
use crate::pb;
use crate::pb::gate_service_server::GateService;
use crate::status;
use crate::targets::{TargetEntry, Targets};

/// Most effects one `ListEffects` page holds.
pub const MAX_PAGE: usize = 1000;
/// Effects per page when the caller does not say.
pub const DEFAULT_PAGE: usize = 100;

/// The service: the journal, the targets, and whether the server is draining.
#[derive(Clone)]
pub struct GateApi {
    journal: Arc<dyn JournalStore>,
    targets: Arc<Targets>,
    clock: Arc<dyn Clock>,
    draining: Arc<AtomicBool>,
    callers: Arc<Callers>,
    budget: Arc<CallBudget>,
    sealer: Option<Arc<crate::page_token::Sealer>>,
}

/// The least deadline a `Submit` or `Recover` must carry before the server has learned more
/// about a target ([`GateApi::with_min_call_deadline`]).
pub const DEFAULT_MIN_CALL_DEADLINE: Duration = Duration::from_millis(100);

/// Sets its flag when dropped: the request's task was dropped because its caller went away (or
/// it finished, when the flag no longer matters).
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl GateApi {
    /// A service over `journal` (which keeps the leases) and `targets`.
    pub fn new(journal: Arc<dyn JournalStore>, targets: Targets, clock: Arc<dyn Clock>) -> Self {
        Self {
            journal,
            targets: Arc::new(targets),
            clock,
            draining: Arc::new(AtomicBool::new(false)),
            callers: Arc::new(Callers::new()),
            sealer: crate::page_token::Sealer::new().map(Arc::new),
            budget: Arc::new(CallBudget::new(DEFAULT_MIN_CALL_DEADLINE)),
        }
    }

    /// The least deadline a `Submit` or `Recover` call must carry, whatever the server learns
    /// about its target's attempts (default [`DEFAULT_MIN_CALL_DEADLINE`]).
    pub fn with_min_call_deadline(mut self, floor: Duration) -> Self {
        self.budget = Arc::new(CallBudget::new(floor));
        self
    }

    /// A call whose deadline cannot cover an attempt on `target` is answered
    /// `FAILED_PRECONDITION` with the minimum it needs (in the message, and in milliseconds
    /// under the `interlock-min-deadline-ms` metadata key), before it touches the journal: its
    /// attempt would only be stopped before its send, again and again.
    fn check_deadline(&self, target: &str, deadline: Option<Duration>) -> Result<(), Status> {
        let Some(deadline) = deadline else {
            return Ok(());
        };
        let needed = self.budget.needed(target);
        if deadline >= needed {
            return Ok(());
        }
        let mut status = Status::failed_precondition(format!(
            "this call's deadline ({} ms) cannot cover an attempt on target {target}: attempts \
             there need about {} ms to reach their send (premise read, lookup, journal \
             commits), and an attempt whose caller leaves before then stops with nothing sent; \
             call again with a deadline of at least {} ms",
            deadline.as_millis(),
            needed.as_millis(),
            needed.as_millis()
        ));
        if let Ok(v) = needed.as_millis().to_string().parse() {
            status.metadata_mut().insert(MIN_DEADLINE_KEY, v);
        }
        Err(status)
    }

    /// Who may call, and what each caller may do ([`crate::callers`]); default: no credential
    /// is asked for, and every call is the unauthenticated reader. Administration (`GrantLease`,
    /// `RevokeLease`, `ListLeases`, `SetBudget`, `ListBudgets`, `RemoveBudget`) is for admin
    /// callers only: a lease is an approval and a budget a limit on them, and the credential
    /// that submits effects must neither approve them nor move the limits they are held to.
    pub fn with_callers(mut self, callers: Arc<Callers>) -> Self {
        self.callers = callers;
        self
    }

    /// The caller of `request`: as the server's interceptor found it, else (a service served
    /// without it) found here, from the same credentials.
    fn caller<T>(&self, request: &Request<T>) -> Result<Caller, Status> {
        match request.extensions().get::<Caller>() {
            Some(c) => Ok(c.clone()),
            None => crate::serve::identify(&self.callers, request),
        }
    }

    fn check_admin(&self, caller: &Caller, rpc: &str) -> Result<(), Status> {
        if caller.is_admin() {
            return Ok(());
        }
        tracing::warn!(caller = %caller.name, role = caller.role.as_str(), rpc, "refused: administration needs an admin caller");
        if !self.callers.has_admin() {
            return Err(Status::permission_denied(format!(
                "{rpc}: administration over gRPC is off on this server; set [auth] \
                 admin_token_env (or a caller whose role is admin) in its configuration, or \
                 use `interlock lease` and `interlock budget` on the journal"
            )));
        }
        Err(Status::permission_denied(format!(
            "{rpc} needs an admin caller (the admin token, or a caller whose role is admin); \
             caller {} is a {}",
            caller.name,
            caller.role.as_str()
        )))
    }

    /// Unless `caller` may act on effect `key` (submit it again, recover it) when it is in the
    /// journal — its proposer, or an admin — `PERMISSION_DENIED` for a `Submit` (a key that is
    /// taken must say so, or the caller would take its own effect for lost) and `NOT_FOUND` for
    /// a `Recover`, as for a read. A reader reads every effect but acts only on its own:
    /// continuing another's effect would spend its proposer's lease.
    fn check_actor(
        journal: &dyn JournalStore,
        caller: &Caller,
        rpc: &str,
        key: &interlock::EffectKey,
    ) -> Result<(), Status> {
        if caller.is_admin() {
            return Ok(());
        }
        let state = journal.state(key).map_err(|e| status::journal(&e))?;
        match state.first() {
            Some(first) if !caller.proposed(first.by.as_deref()) && rpc == "Recover" => {
                Err(hidden(caller, rpc, key))
            }
            Some(first) if !caller.proposed(first.by.as_deref()) => Err(crate::callers::denied(
                caller,
                rpc,
                key.as_str(),
                format!(
                    "{rpc}: key {key} is taken by another caller's effect; caller {} acts only \
                     on the effects it proposed (an admin caller may act on any)",
                    caller.name
                ),
            )),
            _ => Ok(()),
        }
    }

    /// From now on, attempts stop before any step that could lead to a send, including an
    /// unsent dispatch of their own (sends under way finish). Called when a graceful shutdown
    /// begins; callers are answered `Superseded` and submit again.
    pub fn drain(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    /// The journal this service writes.
    pub fn journal(&self) -> &Arc<dyn JournalStore> {
        &self.journal
    }

    fn target(&self, name: &str) -> Result<&TargetEntry, Status> {
        self.targets.get(name).map_err(status::unusable)
    }

    /// `bound`, stopped when the request is dropped or the server drains; the guard must live
    /// as long as the request's task. What the attempt shows about `target` is learned: how long
    /// it took to reach its send, or that the call's `deadline` was too short to get there.
    fn stoppable(
        &self,
        bound: &Bound,
        target: &str,
        deadline: Option<Duration>,
    ) -> (Bound, CancelOnDrop) {
        let cancelled = Arc::new(AtomicBool::new(false));
        let draining = self.draining.clone();
        let flag = cancelled.clone();
        let budget = self.budget.clone();
        let name: Arc<str> = target.into();
        let (budget_at_send, name_at_send, caller) =
            (self.budget.clone(), name.clone(), cancelled.clone());
        let noted = AtomicBool::new(false);
        let started = Instant::now();
        let stop: interlock::gate::StopCheck = Arc::new(move || {
            let gone = flag.load(Ordering::SeqCst);
            if let Some(d) = deadline.filter(|_| gone && !noted.swap(true, Ordering::SeqCst)) {
                budget.went_away(&name, d, started.elapsed());
            }
            gone || draining.load(Ordering::SeqCst)
        });
        // Asked at the send itself: an attempt whose caller is still there reached it.
        let at_send = stop.clone();
        let fence: interlock::gate::StopCheck = Arc::new(move || {
            if !caller.load(Ordering::SeqCst) {
                budget_at_send.reached_send(&name_at_send, started.elapsed());
            }
            at_send()
        });
        // A caller that went away will call again (a worker killed mid-call is retried by its
        // workflow engine), and a draining server's callers are told to: both also fence a
        // dispatch that has not been sent.
        (
            bound.clone().with_stop(stop).with_fence(fence),
            CancelOnDrop(cancelled),
        )
    }

    /// An effect submitted without every premise its target reads would skip their re-check.
    fn check_premises(entry: &TargetEntry, effect: &interlock::Effect) -> Result<(), Status> {
        let missing: Vec<&str> = entry
            .required_premises
            .iter()
            .map(String::as_str)
            .filter(|p| !effect.decided.contains_key(*p))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        Err(status::invalid(&Invalid {
            field: "effect.premises".into(),
            message: format!(
                "lacks {}: target {} re-checks these before every send, so an effect must be \
                 decided on them; pass the effect Decide returned",
                missing.join(", "),
                entry.bound.target().name()
            ),
        }))
    }

    fn check_payload(entry: &TargetEntry, payload: &serde_json::Value) -> Result<(), Status> {
        match entry.check_payload {
            Some(check) => check(payload).map_err(|m| {
                status::invalid(&Invalid {
                    field: "payload_json".into(),
                    message: format!(
                        "not a payload for target {}: {m}",
                        entry.bound.target().name()
                    ),
                })
            }),
            None => Ok(()),
        }
    }
}

/// Run blocking work on the pool, and map its death.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, Status> + Send + 'static,
) -> Result<T, Status> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| status::died(&e))?
}

/// The span of one call, a child of the caller's trace when its metadata carries one
/// (`traceparent`): the gate's spans for the call nest under it.
fn call_span(rpc: &'static str, metadata: &tonic::metadata::MetadataMap) -> tracing::Span {
    let span = tracing::info_span!("interlock.rpc", rpc, target = tracing::field::Empty);
    interlock_telemetry::continue_trace(&span, metadata);
    span
}

/// The answer for a key with no effect, and for another caller's.
fn not_found(key: &interlock::EffectKey) -> Status {
    Status::not_found(format!(
        "no effect with key {key} is in the journal that this caller may read"
    ))
}

/// Another caller's effect, answered as no effect (not even its existence shows), and logged.
fn hidden(caller: &Caller, rpc: &str, key: &interlock::EffectKey) -> Status {
    tracing::warn!(caller = %caller.name, rpc, key = %key, "refused: another caller's effect");
    not_found(key)
}

/// `NOT_FOUND` unless `caller` may read the effect whose state is `state` ([`hidden`]).
fn check_reader(
    caller: &Caller,
    rpc: &str,
    key: &interlock::EffectKey,
    state: &EffectState,
) -> Result<(), Status> {
    if caller.owns(state.first().and_then(|f| f.by.as_deref())) {
        Ok(())
    } else {
        Err(hidden(caller, rpc, key))
    }
}

/// Who a budget change is journaled as made by: the verified caller, with the name the request
/// gave beside it when that is another.
fn verified_by(caller: &Caller, stated: &str) -> String {
    if stated == &*caller.name {
        stated.to_owned()
    } else {
        format!("{} (for {stated})", caller.name)
    }
}

fn invalid(e: Invalid) -> Status {
    status::invalid(&e)
}

#[tonic::async_trait]
impl GateService for GateApi {
    async fn decide(
        &self,
        request: Request<pb::DecideRequest>,
    ) -> Result<Response<pb::DecideResponse>, Status> {
        let span = call_span("Decide", request.metadata());
        let caller = self.caller(&request)?;
        let r = request.into_inner();
        caller.check_target("Decide", &r.target)?;
        let entry = self.target(&r.target)?;
        span.record("target", r.target.as_str());
        let key = convert::key("key", &r.key).map_err(invalid)?;
        let payload =
            convert::json_field("payload_json", &r.payload_json, true).map_err(invalid)?;
        let lease = convert::name("lease", &r.lease).map_err(invalid)?;
        Self::check_payload(entry, &payload)?;
        let bound = entry.bound.clone();
        let effect = blocking(move || {
            span.in_scope(|| bound.decide(key, &payload, lease))
                .map_err(|e| status::decide(&e))
        })
        .await?;
        Ok(Response::new(pb::DecideResponse {
            effect: Some(convert::effect_to(&effect)),
        }))
    }

    async fn submit(
        &self,
        request: Request<pb::SubmitRequest>,
    ) -> Result<Response<pb::SubmitResponse>, Status> {
        let span = call_span("Submit", request.metadata());
        let deadline = call_deadline(request.metadata());
        let caller = self.caller(&request)?;
        let r = request.into_inner();
        caller.check_target("Submit", &r.target)?;
        let entry = self.target(&r.target)?;
        span.record("target", r.target.as_str());
        let effect = convert::effect_from(r.effect.as_ref()).map_err(invalid)?;
        Self::check_payload(entry, &effect.payload)?;
        Self::check_premises(entry, &effect)?;
        self.check_deadline(&r.target, deadline)?;
        let (mut bound, _guard) = self.stoppable(&entry.bound, &r.target, deadline);
        if !r.attempt.is_empty() {
            let attempt = convert::name("attempt", &r.attempt).map_err(invalid)?;
            bound = bound.with_attempt(format!("grpc:{attempt}"));
        }
        let bound = bound.with_caller(&*caller.name);
        let journal = self.journal.clone();
        let outcome = blocking(move || {
            // Before: another caller's effect is neither replayed nor recovered for this one.
            // After: a proposal of another caller's that won the race to the key is not
            // answered to this one either (this attempt could only have continued it, as
            // proposed, under its proposer's authority).
            Self::check_actor(journal.as_ref(), &caller, "Submit", &effect.key)?;
            let outcome = span
                .in_scope(|| bound.submit(&effect))
                .map_err(|e| status::gate(&e))?;
            Self::check_actor(journal.as_ref(), &caller, "Submit", &effect.key)?;
            Ok(outcome)
        })
        .await?;
        Ok(Response::new(pb::SubmitResponse {
            outcome: Some(convert::outcome(outcome)),
        }))
    }

    async fn recover(
        &self,
        request: Request<pb::RecoverRequest>,
    ) -> Result<Response<pb::RecoverResponse>, Status> {
        let span = call_span("Recover", request.metadata());
        let deadline = call_deadline(request.metadata());
        let caller = self.caller(&request)?;
        let r = request.into_inner();
        caller.check_target("Recover", &r.target)?;
        let entry = self.target(&r.target)?;
        span.record("target", r.target.as_str());
        let key = convert::key("key", &r.key).map_err(invalid)?;
        self.check_deadline(&r.target, deadline)?;
        let (bound, _guard) = self.stoppable(&entry.bound, &r.target, deadline);
        let bound = bound.with_caller(&*caller.name);
        let journal = self.journal.clone();
        let outcome = blocking(move || {
            // Before, and after: a proposal of another caller's that took the key meanwhile
            // is not answered to this one.
            Self::check_actor(journal.as_ref(), &caller, "Recover", &key)?;
            let outcome = span
                .in_scope(|| bound.recover(&key))
                .map_err(|e| status::gate(&e))?;
            Self::check_actor(journal.as_ref(), &caller, "Recover", &key)?;
            Ok(outcome)
        })
        .await?;
        Ok(Response::new(pb::RecoverResponse {
            outcome: Some(convert::outcome(outcome)),
        }))
    }

    async fn get_effect(
        &self,
        request: Request<pb::GetEffectRequest>,
    ) -> Result<Response<pb::GetEffectResponse>, Status> {
        let caller = self.caller(&request)?;
        let whole = caller.is_admin();
        let key = convert::key("key", &request.into_inner().key).map_err(invalid)?;
        let journal = self.journal.clone();
        blocking(move || {
            let records = journal.history(&key).map_err(|e| status::journal(&e))?;
            if records.is_empty() {
                return Err(not_found(&key));
            }
            let state = journal.state(&key).map_err(|e| status::journal(&e))?;
            check_reader(&caller, "GetEffect", &key, &state)?;
            Ok(Response::new(pb::GetEffectResponse {
                key: key.to_string(),
                status: convert::status(state.status()).into(),
                records: if whole {
                    records.iter().map(convert::record).collect()
                } else {
                    let leases = crate::withheld::lease_ids(&records);
                    records
                        .iter()
                        .map(|r| crate::withheld::record(r, &leases))
                        .collect()
                },
            }))
        })
        .await
    }

    async fn list_effects(
        &self,
        request: Request<pb::ListEffectsRequest>,
    ) -> Result<Response<pb::ListEffectsResponse>, Status> {
        let caller = self.caller(&request)?;
        let r = request.into_inner();
        let size = match usize::try_from(r.page_size).unwrap_or(usize::MAX) {
            0 => DEFAULT_PAGE,
            n if n > MAX_PAGE => {
                return Err(Status::invalid_argument(format!(
                    "page_size: {n}; at most {MAX_PAGE}"
                )));
            }
            n => n,
        };
        // The last key of the previous page: the next starts strictly after it, so a key
        // appended meanwhile shifts nothing (an offset would repeat or skip keys).
        let after = if r.page_token.is_empty() {
            None
        } else {
            let opened = match (&self.sealer, caller.reads_all()) {
                (Some(sealer), true) => sealer.open_any(&r.page_token),
                (Some(sealer), false) => sealer.open(&r.page_token),
                (None, true) => crate::page_token::decode(&r.page_token),
                (None, false) => None,
            };
            Some(opened.ok_or_else(|| {
                Status::invalid_argument(
                    "page_token: not a token this server gave; pass next_page_token unchanged",
                )
            })?)
        };
        let journal = self.journal.clone();
        let sealer = self.sealer.clone();
        blocking(move || {
            // One key past the page says whether another page follows.
            let mut keys = journal
                .keys_page(after.as_ref().map(|k| k.as_str()), size.saturating_add(1))
                .map_err(|e| status::journal(&e))?;
            let more = keys.len() > size;
            keys.truncate(size);
            let mut effects = Vec::with_capacity(keys.len());
            for k in &keys {
                let key = convert::key("key", k).map_err(|e| Status::internal(e.to_string()))?;
                let state = journal.state(&key).map_err(|e| status::journal(&e))?;
                // A worker's page lists its own effects: it may hold fewer than asked.
                if !caller.owns(state.first().and_then(|f| f.by.as_deref())) {
                    continue;
                }
                effects.push(pb::EffectSummary {
                    key: k.clone(),
                    status: convert::status(state.status()).into(),
                    target: state.first().map(|f| f.target.clone()).unwrap_or_default(),
                });
            }
            Ok(Response::new(pb::ListEffectsResponse {
                effects,
                next_page_token: match keys.last() {
                    Some(last) if more && caller.reads_all() => crate::page_token::encode(last),
                    // The last key scanned may be another caller's: sealed, it tells nothing.
                    Some(last) if more => {
                        sealer.as_ref().and_then(|s| s.seal(last)).ok_or_else(|| {
                            Status::internal("no page token could be sealed: no randomness")
                        })?
                    }
                    _ => String::new(),
                },
            }))
        })
        .await
    }

    async fn verify(
        &self,
        request: Request<pb::VerifyRequest>,
    ) -> Result<Response<pb::VerifyResponse>, Status> {
        let caller = self.caller(&request)?;
        let whole = caller.is_admin();
        let r = request.into_inner();
        let key = convert::key("key", &r.key).map_err(invalid)?;
        let journal = self.journal.clone();
        let targets = self.targets.clone();
        blocking(move || {
            let state = journal.state(&key).map_err(|e| status::journal(&e))?;
            if matches!(state, EffectState::Absent) {
                return Err(not_found(&key));
            }
            check_reader(&caller, "Verify", &key, &state)?;
            let records = match (r.ask_target, state.first()) {
                (true, Some(first)) => Some(
                    targets
                        .by_target_name(&first.target)
                        .and_then(|t| t.records.clone())
                        .ok_or_else(|| {
                            Status::failed_precondition(format!(
                                "the effect was proposed for target {}, whose records this \
                                 server cannot read; verify without ask_target",
                                first.target
                            ))
                        })?,
                ),
                _ => None,
            };
            let budgets = journal.budget_changes().map_err(|e| status::lease(&e))?;
            let leases = if whole {
                Vec::new()
            } else {
                crate::withheld::lease_ids(&journal.history(&key).map_err(|e| status::journal(&e))?)
            };
            let v = verify::verify(
                journal.as_ref(),
                &key,
                &Sources {
                    leases: Some(journal.as_ref()),
                    records: records.as_deref(),
                    budgets: Some(&budgets),
                    ..Sources::default()
                },
            );
            Ok(Response::new(pb::VerifyResponse {
                key: v.key.clone(),
                status: convert::status(v.outcome).into(),
                holds: v.holds(),
                columns: v
                    .columns
                    .iter()
                    .map(|c| pb::VerifyColumn {
                        name: c.name.to_owned(),
                        verdict: match c.holds {
                            Some(true) => pb::VerifyVerdict::Holds,
                            Some(false) => pb::VerifyVerdict::Fails,
                            None => pb::VerifyVerdict::NotApplicable,
                        }
                        .into(),
                        detail: if whole {
                            c.detail.clone()
                        } else {
                            crate::withheld::column_detail(c.name, &c.detail, &leases)
                        },
                    })
                    .collect(),
            }))
        })
        .await
    }

    async fn grant_lease(
        &self,
        request: Request<pb::GrantLeaseRequest>,
    ) -> Result<Response<pb::GrantLeaseResponse>, Status> {
        let caller = self.caller(&request)?;
        self.check_admin(&caller, "GrantLease")?;
        let mut grant =
            convert::lease_from(request.into_inner().lease.as_ref(), self.clock.now_ms())
                .map_err(invalid)?;
        // Recorded by the verified caller, in the approver's name it gave.
        grant.approver = verified_by(&caller, &grant.approver);
        let journal = self.journal.clone();
        blocking(move || {
            if journal
                .describe(&grant.id)
                .map_err(|e| status::lease(&e))?
                .is_some()
            {
                return Err(Status::already_exists(format!(
                    "lease {} already exists: revoke it and grant a new id",
                    grant.id
                )));
            }
            journal.grant_lease(&grant).map_err(|e| status::lease(&e))?;
            Ok(Response::new(pb::GrantLeaseResponse {
                lease: Some(convert::lease_to(&grant, &[])),
            }))
        })
        .await
    }

    async fn revoke_lease(
        &self,
        request: Request<pb::RevokeLeaseRequest>,
    ) -> Result<Response<pb::RevokeLeaseResponse>, Status> {
        let caller = self.caller(&request)?;
        self.check_admin(&caller, "RevokeLease")?;
        let id = convert::name("id", &request.into_inner().id).map_err(invalid)?;
        let journal = self.journal.clone();
        blocking(move || {
            let revoked = journal.revoke_lease(&id).map_err(|e| status::lease(&e))?;
            Ok(Response::new(pb::RevokeLeaseResponse { revoked }))
        })
        .await
    }

    async fn list_leases(
        &self,
        request: Request<pb::ListLeasesRequest>,
    ) -> Result<Response<pb::ListLeasesResponse>, Status> {
        // A lease's id, scope and cap are what a caller would need to spend it on other keys:
        // reading them is administration too.
        let caller = self.caller(&request)?;
        self.check_admin(&caller, "ListLeases")?;
        let journal = self.journal.clone();
        blocking(move || {
            let leases = journal.leases().map_err(|e| status::lease(&e))?;
            let mut out = Vec::with_capacity(leases.len());
            for g in &leases {
                let used = if g.limit().limits() {
                    journal.lease_uses(&g.id).map_err(|e| status::lease(&e))?
                } else {
                    Vec::new()
                };
                out.push(convert::lease_to(g, &used));
            }
            Ok(Response::new(pb::ListLeasesResponse { leases: out }))
        })
        .await
    }

    async fn set_budget(
        &self,
        request: Request<pb::SetBudgetRequest>,
    ) -> Result<Response<pb::SetBudgetResponse>, Status> {
        let caller = self.caller(&request)?;
        self.check_admin(&caller, "SetBudget")?;
        let r = request.into_inner();
        let budget = convert::budget::budget_from(r.budget.as_ref()).map_err(invalid)?;
        let by = verified_by(&caller, &convert::name("by", &r.by).map_err(invalid)?);
        let journal = self.journal.clone();
        blocking(move || {
            let change = journal
                .set_budget(&budget, &by)
                .map_err(|e| status::lease(&e))?;
            Ok(Response::new(pb::SetBudgetResponse {
                change: Some(convert::budget::change_to(&change)),
            }))
        })
        .await
    }

    async fn list_budgets(
        &self,
        request: Request<pb::ListBudgetsRequest>,
    ) -> Result<Response<pb::ListBudgetsResponse>, Status> {
        // Which scopes are limited and how much room is left tells a caller where to aim:
        // administration too.
        let caller = self.caller(&request)?;
        self.check_admin(&caller, "ListBudgets")?;
        let journal = self.journal.clone();
        let now = self.clock.now_ms();
        blocking(move || {
            let changes = journal.budget_changes().map_err(|e| status::lease(&e))?;
            let mut budgets = Vec::new();
            for b in interlock::lease::in_force(&changes) {
                let counters = interlock::budget::counters(journal.as_ref(), &b, now)
                    .map_err(|e| status::lease(&e))?;
                budgets.push(convert::budget::in_force_to(&b, now, &counters, &changes));
            }
            Ok(Response::new(pb::ListBudgetsResponse { budgets }))
        })
        .await
    }

    async fn remove_budget(
        &self,
        request: Request<pb::RemoveBudgetRequest>,
    ) -> Result<Response<pb::RemoveBudgetResponse>, Status> {
        let caller = self.caller(&request)?;
        self.check_admin(&caller, "RemoveBudget")?;
        let r = request.into_inner();
        let id = convert::name("id", &r.id).map_err(invalid)?;
        let by = verified_by(&caller, &convert::name("by", &r.by).map_err(invalid)?);
        let journal = self.journal.clone();
        blocking(move || {
            let change = journal
                .remove_budget(&id, &by)
                .map_err(|e| status::lease(&e))?;
            Ok(Response::new(pb::RemoveBudgetResponse {
                change: change.as_ref().map(convert::budget::change_to),
            }))
        })
        .await
    }
}
