//! The proxy at work: one thread reads the client, one reads the server, and each gated call runs
//! the gate on a thread of its own, so a slow send holds up nothing else. The client's requests
//! reach the server with the proxy's ids; the answers come back with the client's. The proxy
//! looks into two kinds of answer on the way: a read of the facts a gated tool stands on (what the
//! agent saw is what its next call was decided on) and `tools/list` (the gated tools are marked,
//! and the argument the proxy fills is taken out of their schema).

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use interlock::core::{EffectState, Premises};
use interlock::effect::canonical_json;
use interlock::gate::StopCheck;
use interlock::premise::NoPremises;
use interlock::{
    Bound, Effect, EffectKey, Gate, GateError, Journal, JournalError, Outcome, SystemClock, Target,
};
use interlock_postgres::PgOptions;
use serde_json::{Map, Value, json};

use crate::answer::{self, Call};
use crate::config::{GatedTool, ProxyConfig};
use crate::frame::{self, FromClient, code};
use crate::key;
use crate::tool::{ToolPremises, ToolTarget, content_value};
use crate::upstream::{Routed, Upstream};

/// At most this many gated calls run at once; another is refused until one ends.
pub const MAX_GATED_CALLS: usize = 32;

/// Why the proxy could not start or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// The journal could not be opened.
    #[error("opening the journal {journal}: {source}")]
    Journal {
        /// The journal, as configured (without a password).
        journal: String,
        /// Why.
        source: JournalError,
    },
    /// The gate could not be built or a tool bound (a tier-1 window too short, …).
    #[error("the gate for tool {tool}: {source}")]
    Gate {
        /// The tool (empty: the gate itself).
        tool: String,
        /// Why.
        source: GateError,
    },
    /// A tool's HTTP table does not make a target (a `${VAR}` not set, a window too short).
    #[error("the HTTP target of tool {tool}: {source}")]
    Http {
        /// The tool.
        tool: String,
        /// Why.
        source: interlock_http::HttpTargetError,
    },
    /// The server could not be started.
    #[error("{0}")]
    Start(std::io::Error),
    /// The server went away (it exited, or was stopped because a gated call was cut off at
    /// it) while the client was still connected.
    #[error(
        "the MCP server is gone ({status}); {in_flight} gated call(s) under way were left in \
         flight for the recovery at the next start"
    )]
    ServerExited {
        /// How it exited.
        status: String,
        /// Gated calls under way then.
        in_flight: usize,
    },
}

/// One gated tool, bound.
struct Tool {
    cfg: GatedTool,
    bound: Bound,
    premises: Option<Arc<ToolPremises>>,
    /// For a tool sent through an HTTP table: its reader, for the facts at the call's arrival.
    http_reader: Option<Arc<dyn interlock::PremiseReader>>,
    tier: u8,
}

/// An answer the proxy looks into on its way to the client.
enum Watch {
    /// A read of facts a gated tool stands on: the tool and its arguments.
    Read(String, Value),
    /// The tool list, to mark the gated tools.
    List,
}

enum Event {
    ClientClosed,
    ServerGone(String),
}

struct Shared {
    config: ProxyConfig,
    tools: BTreeMap<String, Tool>,
    journal: Arc<dyn Journal>,
    upstream: Arc<Upstream>,
    out: Mutex<std::io::Stdout>,
    /// What the client last read from each premise read (tool, canonical arguments): the facts
    /// its next gated call is taken to be decided on.
    seen: Mutex<HashMap<(String, Vec<u8>), Value>>,
    /// Answers to look into, by the client's id.
    watch: Mutex<HashMap<Vec<u8>, Watch>>,
    /// Gated calls under way, by the client's id: whether each was cancelled.
    gated: Mutex<HashMap<Vec<u8>, Arc<AtomicBool>>>,
    /// Whether this start's recovery ran after the server's handshake (held while it runs).
    recovered: Mutex<bool>,
    /// Whether the client's `notifications/initialized` went to the server.
    initialized: AtomicBool,
    events: Sender<Event>,
    retry_after: Duration,
    drain: Duration,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn id_key(id: &Value) -> Vec<u8> {
    canonical_json(id)
}

/// A read's arguments as the proxy matches them: an argument given as null is an argument left
/// out (clients in strict function-calling modes send every optional argument, null when unset),
/// so `{payment_intent, excluding: null}` is the read the proxy makes with `{payment_intent}`.
fn read_key(args: &Value) -> Vec<u8> {
    match args {
        Value::Object(m) => {
            let given: Map<String, Value> = m
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            canonical_json(&Value::Object(given))
        }
        other => canonical_json(other),
    }
}

/// Run the proxy on this process's stdin and stdout in front of the server `command`, until the
/// client closes its side (then `Ok`) or the server exits (then an error). `journal` is used
/// when the configuration names none.
pub fn run(config: ProxyConfig, journal: &str, command: &[String]) -> Result<(), ProxyError> {
    let clock = Arc::new(SystemClock);
    let journal = config.journal.clone().unwrap_or_else(|| journal.to_owned());
    let shown = interlock_postgres::shown(&journal);
    let opened = interlock_postgres::open_named(
        &journal,
        clock.clone(),
        &PgOptions::in_schema(config.journal_schema.clone()),
    )
    .map_err(|source| ProxyError::Journal {
        journal: shown.clone(),
        source,
    })?;
    let mut gate_cfg = opened.config;
    if let Some(ms) = config.send_timeout_ms {
        gate_cfg = gate_cfg.send_timeout(Duration::from_millis(ms));
    }
    let gate_err = |source: GateError| ProxyError::Gate {
        tool: String::new(),
        source,
    };
    let gate_cfg = gate_cfg.build().map_err(|e| gate_err(e.into()))?;
    let retry_after = gate_cfg.retry_after;
    // A read (a lookup, a premise) may take the longest any tool allows it.
    let longest_read = config
        .tools
        .values()
        .filter_map(|t| t.http.as_ref())
        .map(|h| Duration::from_millis(h.read_timeout_ms))
        .fold(crate::tool::READ_TIMEOUT, Duration::max);
    let drain = gate_cfg.send_timeout + gate_cfg.settle + 2 * longest_read;
    let store = opened.store;
    let gate = Gate::new(store.clone(), store.clone(), clock, gate_cfg).map_err(gate_err)?;
    let (upstream, server_out) = Upstream::spawn(command).map_err(ProxyError::Start)?;
    let upstream = Arc::new(upstream);
    let mut tools = BTreeMap::new();
    for (name, cfg) in &config.tools {
        if let Some(table) = &cfg.http {
            let (bound, reader, tier) =
                crate::http_tool::bind(&gate, name, cfg, table).map_err(|source| {
                    upstream.shut_down(Duration::from_secs(1));
                    ProxyError::Http {
                        tool: name.clone(),
                        source,
                    }
                })?;
            let tier = u8::from(tier);
            tracing::info!(tool = %name, tier, journal = %shown, "gating tool sent over HTTP");
            tools.insert(
                name.clone(),
                Tool {
                    cfg: cfg.clone(),
                    bound,
                    premises: None,
                    http_reader: Some(reader),
                    tier,
                },
            );
            continue;
        }
        let target: Arc<dyn Target> = Arc::new(ToolTarget::new(name, cfg, upstream.clone()));
        let premises = cfg
            .premises
            .as_ref()
            .map(|p| Arc::new(ToolPremises::new(p, upstream.clone())));
        let reader: Arc<dyn interlock::PremiseReader> = match &premises {
            Some(p) => p.clone(),
            None => Arc::new(NoPremises),
        };
        let bound = match gate.bind(target, reader) {
            Ok(b) => b,
            Err(source) => {
                upstream.shut_down(Duration::from_secs(1));
                return Err(ProxyError::Gate {
                    tool: name.clone(),
                    source,
                });
            }
        };
        let tier = u8::from(cfg.tier());
        tracing::info!(tool = %name, tier, journal = %shown, "gating tool");
        tools.insert(
            name.clone(),
            Tool {
                cfg: cfg.clone(),
                bound,
                premises,
                http_reader: None,
                tier,
            },
        );
    }
    let (events, ended) = mpsc::channel();
    let told = Mutex::new(events.clone());
    upstream.on_gone(Box::new(move |why: &str| {
        let _ = lock(&told).send(Event::ServerGone(why.to_owned()));
    }));
    let shared = Arc::new(Shared {
        config,
        tools,
        journal: store,
        upstream,
        out: Mutex::new(std::io::stdout()),
        seen: Mutex::default(),
        watch: Mutex::default(),
        gated: Mutex::default(),
        recovered: Mutex::new(false),
        initialized: AtomicBool::new(false),
        events,
        retry_after,
        drain,
    });
    let s = shared.clone();
    std::thread::Builder::new()
        .name("mcp-server-reader".into())
        .spawn(move || s.read_server(server_out))
        .map_err(ProxyError::Start)?;
    let s = shared.clone();
    std::thread::Builder::new()
        .name("mcp-client-reader".into())
        .spawn(move || s.read_client(std::io::stdin().lock()))
        .map_err(ProxyError::Start)?;
    match ended.recv() {
        Ok(Event::ServerGone(why)) => {
            // Gated calls that already have their answer (or are journaling it) finish and are
            // answered; those cut off by the server's end wait, parked, for the process to end.
            let until = Instant::now() + Duration::from_secs(5);
            while lock(&shared.gated).len() > shared.upstream.parked() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(ProxyError::ServerExited {
                status: why,
                in_flight: lock(&shared.gated).len(),
            })
        }
        Ok(Event::ClientClosed) | Err(_) => {
            // The client is done: let the gated calls under way finish (their answers are
            // journaled whether or not anyone hears them), then stop the server.
            let until = Instant::now() + shared.drain;
            while !lock(&shared.gated).is_empty() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(20));
            }
            let status = shared.upstream.shut_down(Duration::from_secs(2));
            tracing::info!(server = %status, "the client closed; the proxy stopped");
            Ok(())
        }
    }
}

/// One line from a reader, cut off unread past `max` bytes.
enum Line {
    Frame(Vec<u8>),
    TooLong(usize),
    End,
}

fn read_line(r: &mut impl BufRead, max: usize) -> std::io::Result<Line> {
    let mut line = Vec::new();
    let mut len = 0usize;
    let mut too_long = false;
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            return Ok(match (len, too_long) {
                (0, _) => Line::End,
                (_, true) => Line::TooLong(len),
                _ => Line::Frame(line),
            });
        }
        let (chunk, used, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], i + 1, true),
            None => (buf, buf.len(), false),
        };
        len = len.saturating_add(chunk.len());
        if !too_long {
            if line.len() + chunk.len() > max {
                too_long = true;
                line = Vec::new();
            } else {
                line.extend_from_slice(chunk);
            }
        }
        r.consume(used);
        if done {
            if too_long {
                return Ok(Line::TooLong(len));
            }
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            return Ok(Line::Frame(line));
        }
    }
}

impl Shared {
    fn to_client(&self, message: &Value) {
        let mut line = match serde_json::to_vec(message) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(%e, "an answer could not be written as JSON");
                return;
            }
        };
        line.push(b'\n');
        let mut out = lock(&self.out);
        // A client that went away is noticed by the client reader.
        let _ = out.write_all(&line).and_then(|()| out.flush());
    }

    fn read_client(self: &Arc<Self>, input: impl Read) {
        let mut input = BufReader::new(input);
        let max = self.config.max_message_bytes;
        loop {
            match read_line(&mut input, max) {
                Ok(Line::End) | Err(_) => break,
                Ok(Line::TooLong(n)) => self.to_client(&frame::error(
                    Value::Null,
                    code::INVALID_REQUEST,
                    format!(
                        "the message is {n} bytes, over the proxy's limit of {max}; nothing was \
                         sent"
                    ),
                )),
                Ok(Line::Frame(f)) if f.iter().all(u8::is_ascii_whitespace) => {}
                Ok(Line::Frame(f)) => self.from_client(&f),
            }
        }
        let _ = self.events.send(Event::ClientClosed);
    }

    fn from_client(self: &Arc<Self>, f: &[u8]) {
        let judged = frame::classify(f, &self.config, self.config.max_message_bytes);
        let batch = f.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[');
        let plain = judged
            .iter()
            .all(|j| matches!(j, FromClient::Request { .. } | FromClient::Forward(_)));
        if batch && plain {
            // A batch with nothing for the gate passes as the batch it is.
            let messages: Vec<Value> = judged
                .into_iter()
                .map(|j| match j {
                    FromClient::Request { id, message } => {
                        self.note_request(&id, &message);
                        message
                    }
                    FromClient::Forward(m) => m,
                    _ => Value::Null,
                })
                .collect();
            let notes: Vec<Value> = messages
                .iter()
                .filter(|m| m.get("id").is_none())
                .cloned()
                .collect();
            self.upstream_or_log(self.upstream.forward_requests(Value::Array(messages)));
            for m in &notes {
                self.forwarded(m);
            }
            return;
        }
        for j in judged {
            self.one_from_client(j);
        }
    }

    fn upstream_or_log(&self, r: Result<(), crate::upstream::UpstreamError>) {
        if let Err(e) = r {
            tracing::warn!(%e, "a message for the MCP server could not be written");
        }
    }

    fn one_from_client(self: &Arc<Self>, j: FromClient) {
        match j {
            FromClient::Request { id, message } => {
                self.note_request(&id, &message);
                self.upstream_or_log(self.upstream.forward_requests(message));
            }
            FromClient::Gated {
                id,
                tool,
                arguments,
                key,
                lease,
            } => self.start_gated(id, tool, arguments, key, lease),
            FromClient::Cancelled { id, message } => {
                let gated = lock(&self.gated).get(&id_key(&id)).cloned();
                match gated {
                    // Stopped before its send if it has not gone out; never forwarded, so a
                    // send under way is never cut off halfway.
                    Some(stop) => stop.store(true, Ordering::SeqCst),
                    None => self.upstream_or_log(self.upstream.cancel(&id, message)),
                }
            }
            FromClient::Forward(m) => {
                self.upstream_or_log(self.upstream.forward(&m));
                self.forwarded(&m);
            }
            FromClient::Refused(e) => self.to_client(&e),
            FromClient::Dropped(why) => tracing::warn!(%why, "a client message was dropped"),
        }
    }

    /// After a notification went to the server: the handshake's end starts this start's
    /// recovery, off the client's thread (the recovery's own calls need the server's answers, and
    /// the client may go on talking meanwhile; gated calls wait for it).
    fn forwarded(self: &Arc<Self>, m: &Value) {
        if m.get("method") != Some(&json!("notifications/initialized")) {
            return;
        }
        self.initialized.store(true, Ordering::SeqCst);
        let s = self.clone();
        let _ = std::thread::Builder::new()
            .name("mcp-recovery".into())
            .spawn(move || s.ensure_recovered());
    }

    /// Remember the client's requests whose answers the proxy looks into.
    fn note_request(&self, id: &Value, message: &Value) {
        let method = message.get("method").and_then(Value::as_str);
        let watch = match method {
            Some("tools/list") => Watch::List,
            Some("tools/call") => {
                let params = &message["params"];
                let tool = params["name"].as_str().unwrap_or_default();
                let reads = self
                    .tools
                    .values()
                    .any(|t| t.premises.as_ref().is_some_and(|p| p.tool() == tool));
                if !reads {
                    return;
                }
                let args = match params.get("arguments") {
                    Some(a @ Value::Object(_)) => a.clone(),
                    _ => json!({}),
                };
                Watch::Read(tool.to_owned(), args)
            }
            _ => return,
        };
        let mut watching = lock(&self.watch);
        // A client reusing an id under way: neither answer can be told apart, so neither is
        // taken as what the agent read.
        if watching.remove(&id_key(id)).is_none() {
            watching.insert(id_key(id), watch);
        }
    }

    fn read_server(self: &Arc<Self>, output: impl Read) {
        let mut output = BufReader::new(output);
        loop {
            let mut line = Vec::new();
            match output.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let message: Value = match serde_json::from_slice(&line) {
                Ok(m) => m,
                Err(e) => {
                    if !line.iter().all(u8::is_ascii_whitespace) {
                        tracing::warn!(%e, "the MCP server wrote a line that is not JSON; dropped");
                    }
                    continue;
                }
            };
            let out = match message {
                Value::Array(items) => {
                    let answers: Vec<Value> = items
                        .into_iter()
                        .filter_map(|m| self.for_client(m))
                        .collect();
                    if answers.is_empty() {
                        continue;
                    }
                    Value::Array(answers)
                }
                m => match self.for_client(m) {
                    Some(m) => m,
                    None => continue,
                },
            };
            self.to_client(&out);
        }
        self.upstream.gone("its output closed".into());
        let status = self.upstream.exit_status();
        tracing::error!(server = %status, "the MCP server exited");
    }

    /// A message from the server, routed; what the client gets of it, looked into.
    fn for_client(&self, message: Value) -> Option<Value> {
        let Routed::ToClient(mut m) = self.upstream.route(message) else {
            return None;
        };
        let is_answer = m.get("method").is_none();
        let watched = is_answer
            .then(|| m.get("id").map(id_key))
            .flatten()
            .and_then(|k| lock(&self.watch).remove(&k));
        match (watched, m.get_mut("result")) {
            (Some(Watch::Read(tool, args)), Some(result)) => {
                if result.get("isError") != Some(&json!(true))
                    && let Some(v) = content_value(result)
                {
                    lock(&self.seen).insert((tool, read_key(&args)), v);
                }
            }
            (Some(Watch::List), Some(result)) => self.mark_gated(result),
            _ => {}
        }
        Some(m)
    }

    /// Mark the gated tools in a `tools/list` answer: what the gate does, in words a model
    /// reads and in `_meta`; the argument the proxy fills is not the agent's to give.
    fn mark_gated(&self, result: &mut Value) {
        // A cursor that is null or empty goes nowhere: that page is the last.
        let last_page = result
            .get("nextCursor")
            .is_none_or(|c| c.is_null() || c.as_str() == Some(""));
        let Some(list) = result.get_mut("tools").and_then(Value::as_array_mut) else {
            return;
        };
        // The tools the proxy offers itself: a server's tool of the same name is hidden (its
        // calls would never reach it), and the proxy's are listed once, on the last page.
        list.retain(|t| {
            let name = t.get("name").and_then(Value::as_str).unwrap_or_default();
            let own = self.tools.get(name).is_some_and(|t| t.cfg.http.is_some());
            if own {
                tracing::warn!(
                    tool = name,
                    "the MCP server lists a tool the proxy sends over HTTP; the server's is hidden"
                );
            }
            !own
        });
        if last_page {
            for (name, tool) in &self.tools {
                if let Some(table) = &tool.cfg.http {
                    list.push(crate::http_tool::listing(name, &tool.cfg, table));
                }
            }
        }
        for t in list {
            let Some(name) = t.get("name").and_then(Value::as_str).map(str::to_owned) else {
                continue;
            };
            let Some(tool) = self.tools.get(&name) else {
                continue;
            };
            let cfg = &tool.cfg;
            let reads = cfg.premises.as_ref().map(|p| p.tool.clone());
            let facts = match &cfg.http {
                Some(table) if !table.premises.is_empty() => format!(
                    "; the service's {} are read when the call arrives and must not have \
                     changed when it is sent",
                    table
                        .premises
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                Some(_) => String::new(),
                None => reads.as_ref().map_or_else(String::new, |r| {
                    format!("; the facts read with {r} must not have changed since you read them")
                }),
            };
            let note = format!(
                "\n\nGated by Interlock (tier {}): calls with the same {} are one request, carried \
                 out at most once; argument {:?} must name a live approval{facts}. A refused call \
                 answers with what changed and what would still fit.",
                tool.tier,
                cfg.key.join(", "),
                cfg.lease,
            );
            let description = t
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            t["description"] = json!(description + &note);
            let meta = t
                .as_object_mut()
                .map(|o| o.entry("_meta").or_insert_with(|| json!({})));
            if let Some(Value::Object(meta)) = meta {
                meta.insert(
                    "interlock/gated".into(),
                    json!({"tier": tool.tier, "key": cfg.key, "lease": cfg.lease, "premises": reads}),
                );
            }
            if let Some(id_arg) = &cfg.idempotency_argument
                && let Some(schema) = t.get_mut("inputSchema")
            {
                if let Some(p) = schema.get_mut("properties").and_then(Value::as_object_mut) {
                    p.remove(id_arg);
                }
                if let Some(r) = schema.get_mut("required").and_then(Value::as_array_mut) {
                    r.retain(|a| a.as_str() != Some(id_arg));
                }
            }
        }
    }

    /// This start's recovery, before any gated call goes to the server: every effect of a
    /// gated tool left in flight (a crash, a server that exited mid-call) is resolved by its
    /// tier — its lease and premises read again before any resend. It counts as done once it
    /// ran after the server's handshake; a gated call before the handshake tries it first too
    /// (a server that answers nothing before its handshake leaves those effects for the next
    /// try).
    fn ensure_recovered(&self) {
        let mut done = lock(&self.recovered);
        if *done {
            return;
        }
        *done = self.initialized.load(Ordering::SeqCst);
        let keys = match self.journal.keys_with("DISPATCHED") {
            Ok(k) => k,
            Err(e) => {
                tracing::error!(%e, "recovery at start could not list the journal; effects in flight stay so");
                return;
            }
        };
        let mut recovered = 0usize;
        for k in keys {
            let Ok(key) = EffectKey::fixed(k) else {
                continue;
            };
            let Ok(EffectState::InFlight { first, .. }) = self.journal.state(&key) else {
                continue;
            };
            let Some(tool) = self
                .tools
                .iter()
                .find(|(name, t)| t.cfg.target_name(name) == first.target)
                .map(|(_, t)| t)
            else {
                continue;
            };
            recovered += 1;
            match tool.bound.recover(&key) {
                Ok(o) => {
                    tracing::warn!(key = %key, outcome = %o.label(), "recovered an effect left in flight")
                }
                Err(e) => {
                    tracing::error!(key = %key, %e, "recovering an effect left in flight failed")
                }
            }
        }
        tracing::info!(recovered, "recovery at start done");
    }

    fn start_gated(
        self: &Arc<Self>,
        id: Value,
        tool: String,
        arguments: Map<String, Value>,
        key_values: Vec<Value>,
        lease: String,
    ) {
        let stop = Arc::new(AtomicBool::new(false));
        {
            let mut gated = lock(&self.gated);
            if gated.len() >= MAX_GATED_CALLS {
                drop(gated);
                self.to_client(&frame::error(
                    id,
                    -32000,
                    format!("{MAX_GATED_CALLS} gated calls are under way; nothing was sent, call again shortly"),
                ));
                return;
            }
            if gated.contains_key(&id_key(&id)) {
                drop(gated);
                self.to_client(&frame::error(
                    id,
                    code::INVALID_REQUEST,
                    "a gated call with this id is already under way; nothing was sent",
                ));
                return;
            }
            gated.insert(id_key(&id), stop.clone());
        }
        // What the client had read when the call arrived: a read answered later (one sent
        // beside the call) is not what the call was decided on.
        let payload = Value::Object(arguments);
        let seen = self.seen_for(&tool, &payload);
        let s = self.clone();
        let spawned = std::thread::Builder::new()
            .name("mcp-gated-call".into())
            .spawn(move || {
                let answer = s.gated_call(&tool, payload, seen, &key_values, lease, &stop);
                lock(&s.gated).remove(&id_key(&id));
                match answer {
                    Gated::Answer(result) => {
                        s.to_client(&json!({"jsonrpc": "2.0", "id": id, "result": result}));
                    }
                    Gated::Error(message) => {
                        s.to_client(&frame::error(id, code::INTERNAL_ERROR, message));
                    }
                    // A request the client cancelled and that was stopped before its send is
                    // not answered, as MCP asks.
                    Gated::Cancelled => {
                        tracing::info!(tool = %tool, "a gated call was cancelled before its send; nothing was sent");
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::error!(%e, "a thread for a gated call could not be started");
        }
    }

    /// One gated call through the gate.
    fn gated_call(
        &self,
        tool_name: &str,
        payload: Value,
        seen: Option<Value>,
        key_values: &[Value],
        lease: String,
        stop: &Arc<AtomicBool>,
    ) -> Gated {
        let t0 = Instant::now();
        self.ensure_recovered();
        let Some(tool) = self.tools.get(tool_name) else {
            return Gated::Error(format!("tool {tool_name} is not gated"));
        };
        let base = key::base(tool_name, key_values);
        let payload = match &tool.cfg.http {
            Some(_) => crate::http_tool::payload(&tool.cfg, &payload),
            None => payload,
        };
        let answer = |key: &EffectKey, outcome: &Outcome, receipt: Option<Value>| {
            let call = Call {
                tool: tool_name,
                key: key.as_str(),
                tier: tool.tier,
            };
            Gated::Answer(answer::for_outcome(&call, outcome, receipt))
        };
        let retry = |reason: String, key: &EffectKey| {
            let outcome = Outcome::Retry {
                retry_after: self.retry_after,
                reason,
            };
            answer(key, &outcome, None)
        };
        let decided = match Self::decided(tool, seen, &base, &payload) {
            Ok(d) => d,
            Err(why) => return retry(why, &base),
        };
        let hash = interlock::effect::sha256_hex(&canonical_json(&payload));
        let call = key::Decision {
            payload_hash: &hash,
            decided: &decided,
            lease: &lease,
        };
        let key = match key::choose(&base, &call, |k| {
            let seen = self.journal.read(k)?;
            let events = seen.records().iter().map(|r| &r.event);
            let landed = !interlock::core::state::landed_late(seen.state(), events).is_empty();
            Ok((seen.into_state(), landed))
        }) {
            Ok(k) => k,
            Err(e) => return retry(format!("the journal could not be read: {e}"), &base),
        };
        let effect = match Effect::new(key.clone(), &payload, lease) {
            Ok(e) => e.premises(decided),
            Err(e) => return Gated::Error(e.to_string()),
        };
        let flag = stop.clone();
        let stopped: StopCheck = Arc::new(move || flag.load(Ordering::SeqCst));
        let outcome = match tool.bound.clone().with_stop(stopped).submit(&effect) {
            Ok(o) => o,
            Err(e) => {
                return Gated::Error(format!(
                    "the gate could not finish the call: {e}. It may be in flight; calling again \
                     with the same arguments will not send it twice"
                ));
            }
        };
        if matches!(outcome, Outcome::Superseded { .. }) && stop.load(Ordering::SeqCst) {
            return Gated::Cancelled;
        }
        tracing::info!(
            tool = %tool_name,
            key = %key,
            outcome = %outcome.label(),
            ms = t0.elapsed().as_millis(),
            "gated call"
        );
        if let (Outcome::Refused(r), Some(p)) = (&outcome, &tool.premises) {
            // The refusal told the agent the facts as the gate read them: its next call is
            // decided on those.
            if let Ok(args) = p.arguments(&payload) {
                let mut seen = lock(&self.seen);
                if let Some(facts) =
                    seen.get_mut(&(p.tool().to_owned(), read_key(&Value::Object(args))))
                {
                    for c in &r.changes {
                        crate::tool::set_path(facts, &c.field, c.now.clone());
                    }
                }
            }
        }
        let receipt = matches!(outcome, Outcome::Committed { .. })
            .then(|| self.journal.history(&key).ok())
            .flatten()
            .and_then(|records| interlock::receipt::build(&records))
            .and_then(|r| serde_json::to_value(r).ok());
        answer(&key, &outcome, receipt)
    }

    /// What the client last read with the read a call of `tool` stands on, if it did.
    fn seen_for(&self, tool: &str, payload: &Value) -> Option<Value> {
        let p = self.tools.get(tool)?.premises.as_ref()?;
        let args = p.arguments(payload).ok()?;
        lock(&self.seen)
            .get(&(p.tool().to_owned(), read_key(&Value::Object(args))))
            .cloned()
    }

    /// The facts a call was decided on: what the client had read with the same read when the
    /// call arrived (`seen`), or, if it read nothing, what the read answers now.
    fn decided(
        tool: &Tool,
        seen: Option<Value>,
        base: &EffectKey,
        payload: &Value,
    ) -> Result<Premises, String> {
        if let Some(reader) = &tool.http_reader {
            return reader
                .read(base, payload)
                .map_err(|e| format!("the facts the call stands on could not be read: {e}"));
        }
        let Some(p) = &tool.premises else {
            return Ok(Premises::new());
        };
        match seen {
            Some(v) => p
                .fields_of(&v)
                .map_err(|e| format!("the facts you read with {} cannot be used: {e}", p.tool())),
            None => interlock::PremiseReader::read(&**p, base, payload)
                .map_err(|e| format!("the facts the call stands on could not be read: {e}")),
        }
    }
}

/// How a gated call ended, for the client.
enum Gated {
    /// A tool result (committed, or a tool error saying why not).
    Answer(Value),
    /// The gate failed: a JSON-RPC error.
    Error(String),
    /// Cancelled by the client before its send: no answer.
    Cancelled,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::*;

    #[test]
    fn a_read_argument_given_as_null_is_the_argument_left_out() {
        let strict = json!({"payment_intent": "pi_1", "excluding": null});
        let plain = json!({"payment_intent": "pi_1"});
        assert_eq!(read_key(&strict), read_key(&plain));
        let other = json!({"payment_intent": "pi_1", "excluding": "k"});
        assert_ne!(read_key(&other), read_key(&plain));
    }

    #[test]
    fn a_line_over_the_limit_is_skipped_unread_and_the_next_is_read_whole() {
        let mut input =
            std::io::Cursor::new([b"x".repeat(100), b"\n{\"a\":1}\r\n\n{\"b\"".to_vec()].concat());
        let mut r = BufReader::with_capacity(8, &mut input);
        assert!(matches!(read_line(&mut r, 50).unwrap(), Line::TooLong(100)));
        assert!(matches!(read_line(&mut r, 50).unwrap(), Line::Frame(f) if f == b"{\"a\":1}"));
        assert!(matches!(read_line(&mut r, 50).unwrap(), Line::Frame(f) if f.is_empty()));
        // A last line without its newline is still a frame; then the end.
        assert!(matches!(read_line(&mut r, 50).unwrap(), Line::Frame(f) if f == b"{\"b\""));
        assert!(matches!(read_line(&mut r, 50).unwrap(), Line::End));
    }
}
