//! How a gate runs: who it is in the claims it writes, how long a send may take, how far a
//! tier-1 target's dedupe window is trusted, and where the liveness locks live. The defaults suit
//! a journal on the local disk; the builder checks what it is given, so a configuration that
//! would cut every send off at once is refused when it is made, not found in production.

use std::path::PathBuf;
use std::time::Duration;

use crate::core::Holder;

/// How the gate runs.
#[derive(Clone, Debug)]
pub struct GateConfig {
    /// Who this gate is, for claims.
    pub holder: Holder,
    /// A send is cut off after this long.
    pub send_timeout: Duration,
    /// Added to the send timeout for a claim's deadline: covers bytes still in flight.
    pub settle: Duration,
    /// A tier-1 target is trusted only until `window − margin` after the first dispatch.
    pub dedupe_margin: Duration,
    /// The liveness lock file (one host only; the name is from when it was a directory of lock
    /// files).
    pub lock_dir: PathBuf,
    /// Suggested wait before retrying an effect in flight elsewhere.
    pub retry_after: Duration,
    /// How old a premise read may be when the dispatch or resend standing on it is written
    /// (`None`: the settle margin, at least one second). Between the read and that write the
    /// gate holds no claim; a process stalled there would otherwise send on facts that stopped
    /// holding long ago.
    pub premise_max_age: Option<Duration>,
}

impl GateConfig {
    /// A builder, starting from the defaults for a journal at `journal_path` (see
    /// [`GateConfig::beside`]).
    pub fn builder(journal_path: impl Into<PathBuf>) -> GateConfigBuilder {
        GateConfigBuilder {
            cfg: Self::beside(journal_path),
        }
    }

    /// Whether this configuration can run a gate.
    pub fn check(&self) -> Result<(), ConfigError> {
        if self.send_timeout.is_zero() {
            return Err(ConfigError::ZeroSendTimeout);
        }
        if self.retry_after.is_zero() {
            return Err(ConfigError::ZeroRetryAfter);
        }
        if self.holder.host.trim().is_empty() {
            return Err(ConfigError::NoHost);
        }
        if self.premise_max_age.is_some_and(|d| d.is_zero()) {
            return Err(ConfigError::ZeroPremiseAge);
        }
        let claim = self.send_timeout.saturating_add(self.settle);
        if let Some(age) = self.premise_max_age.filter(|d| *d > claim) {
            return Err(ConfigError::PremiseAgeOutlivesClaim {
                age_ms: u64::try_from(age.as_millis()).unwrap_or(u64::MAX),
                claim_ms: u64::try_from(claim.as_millis()).unwrap_or(u64::MAX),
            });
        }
        Ok(())
    }

    /// How old a premise read may be when a dispatch or a resend is written on it: the
    /// configured bound, or the settle margin (at least one second, so a configuration with no
    /// settle margin still leaves a read the time to reach its transaction). A send goes out at
    /// most the send timeout after that write, so the facts it stands on were read at most this
    /// plus the send timeout before the request left.
    pub fn max_premise_age(&self) -> Duration {
        self.premise_max_age
            .unwrap_or_else(|| self.settle.max(Duration::from_secs(1)))
    }

    /// Defaults for a journal at `journal_path`: 30 s send timeout, 5 s settle, 1 h dedupe margin,
    /// the liveness lock file beside the journal (in its directory, resolved to a canonical path).
    pub fn beside(journal_path: impl Into<PathBuf>) -> Self {
        // One directory however the journal was named (`./j.db`, `/srv/j.db`, a symlink):
        // a recoverer that probed another directory would find every holder's lock free.
        let path: PathBuf = journal_path.into();
        let path = match (path.parent(), path.file_name()) {
            (Some(dir), Some(name)) => {
                let dir = if dir.as_os_str().is_empty() {
                    std::path::Path::new(".")
                } else {
                    dir
                };
                std::fs::canonicalize(dir).map_or_else(|_| path.clone(), |d| d.join(name))
            }
            _ => path,
        };
        let mut lock_dir = path.into_os_string();
        lock_dir.push(".locks");
        Self::with_lock_dir(lock_dir.into())
    }

    /// Defaults for a journal that brings its own liveness locks (a database that workers on
    /// several hosts share, such as `interlock-postgres`): no lock directory is used, and a gate
    /// over a journal without its own liveness refuses this configuration.
    pub fn shared() -> Self {
        Self::with_lock_dir(PathBuf::new())
    }

    /// A builder from [`GateConfig::shared`].
    pub fn shared_builder() -> GateConfigBuilder {
        GateConfigBuilder {
            cfg: Self::shared(),
        }
    }

    fn with_lock_dir(lock_dir: PathBuf) -> Self {
        Self {
            holder: Holder {
                host: host_name(),
                pid: std::process::id(),
                attempt: "1".into(),
                caller: None,
            },
            send_timeout: Duration::from_secs(30),
            settle: Duration::from_secs(5),
            dedupe_margin: Duration::from_secs(3600),
            lock_dir,
            retry_after: Duration::from_millis(500),
            premise_max_age: None,
        }
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// A configuration that cannot run a gate.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// Every send would be cut off before it started.
    #[error(
        "the send timeout is zero: every send would be cut off at once; give it at least the target's usual answer time"
    )]
    ZeroSendTimeout,
    /// Callers told to retry at once would spin.
    #[error(
        "retry_after is zero: callers would retry an effect in flight in a tight loop; give it a pause (the default is 500 ms)"
    )]
    ZeroRetryAfter,
    /// No premise read could ever be young enough to send on.
    #[error(
        "premise_max_age is zero: no premise read could be young enough to dispatch on; give it \
         at least the premise reader's usual read time (the default is the settle margin, 5 s)"
    )]
    ZeroPremiseAge,
    /// A premise read may age longer than a whole claim lives.
    #[error(
        "premise_max_age is {age_ms} ms, longer than a claim lives (send timeout + settle, \
         {claim_ms} ms): the gate would send on facts older than anything else it bounds; \
         lower it (the default is the settle margin)"
    )]
    PremiseAgeOutlivesClaim {
        /// The configured bound, in ms.
        age_ms: u64,
        /// Send timeout plus settle, in ms.
        claim_ms: u64,
    },
    /// Claims must name a host.
    #[error("the holder's host name is empty: claims must name the host that may be sending")]
    NoHost,
    /// A journal with no liveness of its own needs a lock directory.
    #[error(
        "no lock directory: this journal keeps no liveness locks of its own, so give the gate \
         one (GateConfig::beside(journal_path) puts it beside the journal)"
    )]
    NoLockDir,
    /// A claim would outlive the liveness lock of a holder that is alive but cut off.
    #[error(
        "a claim lasts {claim_ms} ms (send timeout + settle) but the journal's liveness locks \
         keep a cut-off holder's lock for only {kept_ms} ms: shorten the send timeout"
    )]
    ClaimOutlastsLiveness {
        /// Send timeout plus settle, in ms.
        claim_ms: u64,
        /// How long the liveness keeps a silent holder's lock, in ms.
        kept_ms: u64,
    },
    /// Signed approvals need the leases kept in the journal's own store.
    #[error(
        "signed approvals are checked against the request's route inside the journal's \
         transaction, so the leases must be kept in the journal's store: pass the journal itself \
         as the lease store"
    )]
    ApprovalsOutsideJournal,
    /// The approver directory contradicts itself.
    #[error("{0}")]
    Approvers(String),
}

/// Builds a [`GateConfig`]: the journal's path first, then only what differs from the defaults.
#[derive(Clone, Debug)]
pub struct GateConfigBuilder {
    cfg: GateConfig,
}

impl GateConfigBuilder {
    /// A send is cut off after this long (default 30 s).
    pub fn send_timeout(mut self, d: Duration) -> Self {
        self.cfg.send_timeout = d;
        self
    }

    /// Added to the send timeout for a claim's deadline (default 5 s).
    pub fn settle(mut self, d: Duration) -> Self {
        self.cfg.settle = d;
        self
    }

    /// How long before its dedupe window ends a tier-1 target stops being trusted (default 1 h).
    pub fn dedupe_margin(mut self, d: Duration) -> Self {
        self.cfg.dedupe_margin = d;
        self
    }

    /// How old a premise read may be when the dispatch or resend standing on it is written
    /// (default: the settle margin, at least one second).
    pub fn premise_max_age(mut self, d: Duration) -> Self {
        self.cfg.premise_max_age = Some(d);
        self
    }

    /// Suggested wait before retrying an effect in flight elsewhere (default 500 ms).
    pub fn retry_after(mut self, d: Duration) -> Self {
        self.cfg.retry_after = d;
        self
    }

    /// The liveness lock file (default: `<journal>.locks`, beside the journal). A directory of an
    /// earlier release's lock files at that path is moved aside when the gate opens it.
    pub fn lock_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cfg.lock_dir = dir.into();
        self
    }

    /// Who this gate is in the claims it writes (default: this host and process, attempt 1).
    pub fn holder(mut self, holder: Holder) -> Self {
        self.cfg.holder = holder;
        self
    }

    /// The principal this gate acts for ([`crate::Gate::with_caller`]): a worker's own name,
    /// so the leases that name their spenders can be spent by it, and its effects say whose
    /// they are. Unset: none is journaled.
    pub fn principal(mut self, principal: impl Into<String>) -> Self {
        self.cfg.holder.caller = Some(principal.into());
        self
    }

    /// The configuration, once checked.
    pub fn build(self) -> Result<GateConfig, ConfigError> {
        self.cfg.check()?;
        Ok(self.cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configuration_that_would_cut_every_send_off_is_refused_when_built() {
        let zero = GateConfig::builder("j.db")
            .send_timeout(Duration::ZERO)
            .build();
        assert_eq!(zero.err(), Some(ConfigError::ZeroSendTimeout));
        let spin = GateConfig::builder("j.db")
            .retry_after(Duration::ZERO)
            .build();
        assert_eq!(spin.err(), Some(ConfigError::ZeroRetryAfter));
        let ageless = GateConfig::builder("j.db")
            .premise_max_age(Duration::ZERO)
            .build();
        assert_eq!(ageless.err(), Some(ConfigError::ZeroPremiseAge));
        let ancient = GateConfig::builder("j.db")
            .premise_max_age(Duration::from_secs(3600))
            .build();
        assert!(matches!(
            ancient.err(),
            Some(ConfigError::PremiseAgeOutlivesClaim { .. })
        ));
        let age = |settle_ms| {
            GateConfig::builder("j.db")
                .settle(Duration::from_millis(settle_ms))
                .build()
                .map(|c| c.max_premise_age())
                .ok()
        };
        assert_eq!(
            age(1_500),
            Some(Duration::from_millis(1_500)),
            "the settle margin"
        );
        assert_eq!(
            age(700),
            Some(Duration::from_secs(1)),
            "never under one second"
        );
        let ok = GateConfig::builder("j.db")
            .send_timeout(Duration::from_secs(2))
            .settle(Duration::from_millis(100))
            .build();
        assert_eq!(
            ok.map(|c| c.send_timeout).ok(),
            Some(Duration::from_secs(2))
        );
    }

    #[test]
    fn one_journal_reached_by_two_paths_has_one_lock_directory() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let real = dir.path().join("real");
        std::fs::create_dir(&real)?;
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link)?;
        let by_real = GateConfig::beside(real.join("j.db")).lock_dir;
        let by_link = GateConfig::beside(link.join("./j.db")).lock_dir;
        let dotted = GateConfig::beside(real.join("..").join("real").join("j.db")).lock_dir;
        assert_eq!(by_real, by_link);
        assert_eq!(by_real, dotted);
        Ok(())
    }
}
