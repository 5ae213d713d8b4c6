//! Liveness locks: while a claim's holder may be sending, it holds a lock that is dropped the
//! instant the holder dies. A recoverer that finds the lock released knows the holder cannot be
//! sending, and need not wait out the claim's deadline; a lock it cannot judge counts as held, and
//! the deadline rules. One lock per key and token, so a zombie that still holds an old token's lock
//! never blocks the claim that replaced it.
//!
//! On one host the locks are files ([`LockDir`]): the kernel drops an `flock` when its process
//! dies. A journal shared by several hosts brings its own ([`crate::Journal::liveness`]).

use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::path::{Path, PathBuf};

use crate::effect::sha256_hex;

/// Where the gate takes and tests liveness locks.
pub trait Liveness: Send + Sync {
    /// Where the locks live, for messages.
    fn place(&self) -> String;

    /// Take the lock for `key`/`token` if nobody holds it. It is held until the returned guard
    /// drops or its holder dies.
    fn try_hold(&self, key: &str, token: u64) -> io::Result<Option<HeldLock>>;

    /// Whether the holder of `key`/`token`, which ran on `host`, certainly holds no lock now —
    /// so it cannot be sending. `false` whenever that cannot be told.
    fn released(&self, key: &str, token: u64, host: &str) -> io::Result<bool>;

    /// Drop what a resolved key's locks left behind (best effort: leftovers are harmless).
    fn forget(&self, _key: &str, _up_to_token: u64) {}

    /// How long, at least, a holder that is alive but cut off keeps its lock. `None`: until its
    /// process dies. A gate refuses a claim deadline longer than this, so a lock that a silent
    /// connection lost is never taken for a holder's death before the deadline rules anyway.
    fn keeps_silent_holder(&self) -> Option<std::time::Duration> {
        None
    }
}

/// A held liveness lock; dropping it (or dying) releases it.
pub struct HeldLock {
    _guard: Box<dyn Send>,
}

impl HeldLock {
    /// A lock held for as long as `guard` lives.
    pub fn new(guard: impl Send + 'static) -> Self {
        Self {
            _guard: Box::new(guard),
        }
    }
}

impl std::fmt::Debug for HeldLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HeldLock")
    }
}

/// Liveness as lock files in one directory, for the processes of one host.
#[derive(Clone, Debug)]
pub struct LockDir {
    dir: PathBuf,
    host: String,
}

impl LockDir {
    /// Lock files in `dir` (created if missing), judged for holders on `host` only: another
    /// host's process cannot be seen from here, so its locks always count as held.
    pub fn new(dir: impl Into<PathBuf>, host: impl Into<String>) -> io::Result<Self> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|e| writable(&dir, e))?;
        Ok(Self {
            dir,
            host: host.into(),
        })
    }

    fn path(&self, key: &str, token: u64) -> PathBuf {
        self.path_at(&Self::stem(key), token)
    }

    /// The part of a key's lock files' names that comes from the key: keys a caller fixed may
    /// hold characters a file name cannot.
    fn stem(key: &str) -> String {
        let mut hex = sha256_hex(key.as_bytes());
        hex.truncate(32);
        hex
    }

    fn path_at(&self, stem: &str, token: u64) -> PathBuf {
        self.dir.join(format!("{stem}.{token}.lock"))
    }
}

fn writable(dir: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{e}: make {} writable", dir.display()))
}

impl Liveness for LockDir {
    fn place(&self) -> String {
        self.dir.display().to_string()
    }

    fn try_hold(&self, key: &str, token: u64) -> io::Result<Option<HeldLock>> {
        let file: File = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.path(key, token))
            .map_err(|e| writable(&self.dir, e))?;
        match file.try_lock() {
            Ok(()) => Ok(Some(HeldLock::new(file))),
            Err(TryLockError::WouldBlock) => Ok(None),
            Err(TryLockError::Error(e)) => Err(e),
        }
    }

    fn released(&self, key: &str, token: u64, host: &str) -> io::Result<bool> {
        Ok(host == self.host && self.try_hold(key, token)?.is_some())
    }

    fn forget(&self, key: &str, up_to_token: u64) {
        let stem = Self::stem(key);
        for t in 1..=up_to_token.saturating_add(1) {
            let _ = std::fs::remove_file(self.path_at(&stem, t));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_is_busy_until_dropped_and_tokens_are_independent() -> io::Result<()> {
        let tmp = tempfile::tempdir()?;
        let locks = LockDir::new(tmp.path(), "here")?;
        let held = locks.try_hold("k", 1)?;
        assert!(held.is_some());
        assert!(!locks.released("k", 1, "here")?);
        assert!(locks.released("k", 2, "here")?);
        drop(held);
        assert!(locks.released("k", 1, "here")?);
        Ok(())
    }

    #[test]
    fn another_hosts_lock_is_never_judged_released() -> io::Result<()> {
        let tmp = tempfile::tempdir()?;
        let locks = LockDir::new(tmp.path(), "here")?;
        assert!(!locks.released("k", 1, "elsewhere")?);
        Ok(())
    }
}
