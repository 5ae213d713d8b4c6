//! Liveness locks: while a claim's holder may be sending, it holds an OS file lock that the kernel
//! drops the instant the process dies. A recoverer that can take the lock knows the holder cannot
//! be sending, and need not wait out a deadline. One file per key and token, so a zombie that
//! still holds an old token's lock never blocks the claim that replaced it.

use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::path::{Path, PathBuf};

use crate::effect::sha256_hex;

#[derive(Clone, Debug)]
pub(crate) struct LockDir {
    dir: PathBuf,
}

/// A held lock; dropping it (or dying) releases it.
#[derive(Debug)]
pub(crate) struct HeldLock {
    _file: File,
}

impl LockDir {
    pub(crate) fn new(dir: impl Into<PathBuf>) -> io::Result<Self> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir)?;
        Ok(Self { dir })
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, key: &str, token: u64) -> PathBuf {
        // Keys a caller fixed may hold characters a file name cannot.
        self.dir.join(format!(
            "{}.{token}.lock",
            &sha256_hex(key.as_bytes())[..32]
        ))
    }

    /// Take the lock for `key`/`token` if nobody holds it.
    pub(crate) fn try_hold(&self, key: &str, token: u64) -> io::Result<Option<HeldLock>> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.path(key, token))?;
        match file.try_lock() {
            Ok(()) => Ok(Some(HeldLock { _file: file })),
            Err(TryLockError::WouldBlock) => Ok(None),
            Err(TryLockError::Error(e)) => Err(e),
        }
    }

    /// Whether nobody holds the lock for `key`/`token` right now.
    pub(crate) fn is_free(&self, key: &str, token: u64) -> io::Result<bool> {
        Ok(self.try_hold(key, token)?.is_some())
    }

    /// Remove a resolved key's lock files (best effort: a leftover file is harmless).
    pub(crate) fn forget(&self, key: &str, up_to_token: u64) {
        for t in 1..=up_to_token.saturating_add(1) {
            let _ = std::fs::remove_file(self.path(key, t));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_is_busy_until_dropped_and_tokens_are_independent() -> io::Result<()> {
        let tmp = tempfile::tempdir()?;
        let locks = LockDir::new(tmp.path())?;
        let held = locks.try_hold("k", 1)?;
        assert!(held.is_some());
        assert!(!locks.is_free("k", 1)?);
        assert!(locks.is_free("k", 2)?);
        drop(held);
        assert!(locks.is_free("k", 1)?);
        Ok(())
    }
}
