//! Liveness locks: while a claim's holder may be sending, it holds a lock that is dropped the
//! instant the holder dies. A recoverer that finds the lock released knows the holder cannot be
//! sending, and need not wait out the claim's deadline; a lock it cannot judge counts as held, and
//! the deadline rules. One lock per key and token, so a zombie that still holds an old token's lock
//! never blocks the claim that replaced it.
//!
//! On one host the locks are byte ranges of one file ([`LockDir`]), each owned by an open file
//! description of its own: the kernel drops them when the description is closed, which a dying
//! process does. A journal shared by several hosts brings its own ([`crate::Journal::liveness`]).
//!
//! Earlier releases made a file per key and token in a directory at the same path, created and
//! removed around every send. A process of such a release judges a holder by that file alone, so
//! it must never see a holder of this scheme: the first process of this release moves the
//! directory aside and puts the lock file in its place, so that a process of an earlier release
//! still running fails to take or judge any lock (its attempts stop and are retried), while the
//! locks it held before the move stay where they were and are judged there.
//!
//! Open file description locks are Linux's. A process that forks without exec after opening the
//! lock file shares its descriptions with the child, which could then take a lock its parent
//! holds: exec (as `std::process::Command` does) closes them.

use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use nix::fcntl::{FcntlArg, fcntl};
use nix::libc;
use sha2::{Digest, Sha256};

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

    /// Give back `lock`, held for `key`'s `up_to_token`, and [`Liveness::forget`] the key's
    /// locks: its effect is resolved. A store that can do both at once does; one may also do it
    /// later (the lock then stays held a while, which no sender of a resolved key needs).
    fn release_resolved(&self, lock: HeldLock, key: &str, up_to_token: u64) {
        drop(lock);
        self.forget(key, up_to_token);
    }

    /// How long, at least, a holder that is alive but cut off keeps its lock. `None`: until its
    /// process dies. A gate refuses a claim deadline longer than this, so a lock that a silent
    /// connection lost is never taken for a holder's death before the deadline rules anyway.
    fn keeps_silent_holder(&self) -> Option<std::time::Duration> {
        None
    }
}

/// A held liveness lock; dropping it (or dying) releases it.
pub struct HeldLock {
    guard: Box<dyn std::any::Any + Send>,
}

impl HeldLock {
    /// A lock held for as long as `guard` lives.
    pub fn new(guard: impl Send + 'static) -> Self {
        Self {
            guard: Box::new(guard),
        }
    }

    /// The guard, if it is a `T` (for the [`Liveness`] that made it); the lock otherwise.
    pub fn downcast<T: Send + 'static>(self) -> Result<T, Self> {
        self.guard
            .downcast::<T>()
            .map(|g| *g)
            .map_err(|guard| Self { guard })
    }
}

impl std::fmt::Debug for HeldLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HeldLock")
    }
}

/// Liveness as byte-range locks in one file, for the processes of one host (Linux: the locks
/// belong to open file descriptions, so two holders in one process exclude each other too).
#[derive(Clone, Debug)]
pub struct LockDir {
    path: PathBuf,
    /// The lock file's device and inode when opened: a file put in its place later holds none of
    /// the locks taken on this one, so every lock is taken and judged on this one only.
    id: (u64, u64),
    host: String,
    /// Descriptions of the lock file that hold no lock, for the next hold or probe.
    idle: Arc<Mutex<Vec<File>>>,
    /// The process that opened them: a child forked without exec shares them, so it opens its
    /// own.
    pid: u32,
    /// When the file's modification time was last set (seconds since the epoch): locks leave a
    /// file's times as they are, and a cleaner that removes old files (`/tmp`'s) must not take
    /// it from under its holders.
    touched: Arc<AtomicU64>,
}

/// How often a holder sets the lock file's modification time, at most.
const TOUCH_EVERY: u64 = 60;

/// Idle descriptions kept open for reuse; more are closed as their locks are given back.
const IDLE: usize = 64;

/// The name a directory of an earlier release's lock files is moved aside under starts with the
/// lock file's own name and this.
const RETIRED: &str = ".retired-";

impl LockDir {
    /// The lock file at `path` (created if missing; a directory of an earlier release's lock
    /// files there is moved aside first), judged for holders on `host` only: another host's
    /// process cannot be seen from here, so its locks always count as held.
    pub fn new(path: impl Into<PathBuf>, host: impl Into<String>) -> io::Result<Self> {
        let path = path.into();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| writable(dir, e))?;
        }
        let file = open_in_place(&path)?;
        let meta = file.metadata()?;
        let locks = Self {
            path,
            id: (meta.dev(), meta.ino()),
            host: host.into(),
            idle: Arc::new(Mutex::new(Vec::new())),
            pid: std::process::id(),
            touched: Arc::new(AtomicU64::new(0)),
        };
        locks.touch(&file);
        keep_idle(&locks.idle, file);
        Ok(locks)
    }

    /// Write the file's first byte if that was last done more than a minute ago, which moves its
    /// modification time (write permission is enough; no lock reads the contents). Best effort:
    /// a failure is logged and the hold goes on.
    fn touch(&self, file: &File) {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if secs.saturating_sub(self.touched.load(Ordering::Relaxed)) < TOUCH_EVERY {
            return;
        }
        self.touched.store(secs, Ordering::Relaxed);
        if let Err(e) = file.write_at(&[0], 0) {
            tracing::warn!(path = %self.path.display(), error = %e, "could not refresh the liveness lock file's modification time");
        }
    }

    /// A description of the lock file holding no lock, checked to be the file still at its path.
    fn open(&self) -> io::Result<File> {
        let idle = {
            let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
            if std::process::id() != self.pid {
                idle.clear();
            }
            idle.pop()
        };
        let file = match idle {
            Some(file) => file,
            None => open_file(&self.path)?,
        };
        let (held, here) = (file.metadata()?, std::fs::metadata(&self.path)?);
        if held.nlink() == 0
            || (held.dev(), held.ino()) != self.id
            || (here.dev(), here.ino()) != self.id
        {
            return Err(io::Error::other(format!(
                "the liveness lock file {} was removed or replaced while in use: locks taken on \
                 the old file cannot be seen on the new one; restart every worker that uses it",
                self.path.display()
            )));
        }
        Ok(file)
    }

    /// Whether a directory of an earlier release, moved aside, holds `key`/`token`'s lock.
    fn held_by_earlier_release(&self, key: &str, token: u64) -> io::Result<bool> {
        let (Some(dir), Some(name)) = (self.path.parent(), self.path.file_name()) else {
            return Ok(false);
        };
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        let retired = format!("{}{RETIRED}", name.to_string_lossy());
        let mut stem = sha256_hex(key.as_bytes());
        stem.truncate(32);
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            // Only this release moves directories aside under that name, one at a time.
            if !entry.file_name().to_string_lossy().starts_with(&retired)
                || !entry.file_type()?.is_dir()
            {
                continue;
            }
            let file = match OpenOptions::new()
                .write(true)
                .open(entry.path().join(format!("{stem}.{token}.lock")))
            {
                Ok(file) => file,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            match file.try_lock() {
                Ok(()) => {}
                Err(TryLockError::WouldBlock) => return Ok(true),
                Err(TryLockError::Error(e)) => return Err(e),
            }
        }
        Ok(false)
    }
}

/// The lock file at `path`, moving an earlier release's directory of lock files out of the way.
/// A process of that release may make the directory again meanwhile: it is moved again.
fn open_in_place(path: &Path) -> io::Result<File> {
    let mut tries = 0;
    loop {
        tries += 1;
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.is_dir() => retire_one_at_a_time(path)?,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        match open_file(path) {
            Err(e) if e.kind() == io::ErrorKind::IsADirectory && tries < 5 => continue,
            other => return other,
        }
    }
}

/// [`retire`], by one process of this release at a time, each looking again under the lock: a
/// second one never moves the lock file the first put in its place (it finds a file there, or
/// nothing yet, and opens it).
fn retire_one_at_a_time(path: &Path) -> io::Result<()> {
    let mut migrating = path.as_os_str().to_owned();
    migrating.push(".migrate");
    let migrating = open_file(Path::new(&migrating))?;
    migrating.lock()?;
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
        retire(path)?;
    }
    Ok(())
}

/// Move an earlier release's directory of lock files aside, after checking that it holds lock
/// files and nothing else (a directory of someone else's is never moved).
fn retire(path: &Path) -> io::Result<()> {
    let entries = match std::fs::read_dir(path) {
        Ok(entries) => entries,
        // Another process of this release moved it, or put the lock file there, first.
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    for entry in entries {
        let name = entry?.file_name();
        let name = name.to_string_lossy();
        if !is_earlier_lock_file(&name) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "{} is a directory holding {name:?}, which is not a lock file of an earlier \
                     release: the liveness lock file goes at this path; point the lock path \
                     elsewhere or remove the directory",
                    path.display()
                ),
            ));
        }
    }
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut aside = path.as_os_str().to_owned();
    aside.push(format!("{RETIRED}{}-{stamp}", std::process::id()));
    match std::fs::rename(path, &aside) {
        Ok(()) => {
            tracing::warn!(
                from = %path.display(),
                to = %Path::new(&aside).display(),
                "moved an earlier release's liveness lock files aside; its locks are still judged there"
            );
            Ok(())
        }
        // Another process of this release moved it first.
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!(
                "{e}: cannot move the directory {} aside; the liveness lock is now one file at \
                 this path (let this process rename entries beside it, or point the lock path \
                 at a file elsewhere)",
                path.display()
            ),
        )),
    }
}

/// `<32 hex digits>.<token>.lock`, as an earlier release named a key's lock file.
fn is_earlier_lock_file(name: &str) -> bool {
    let mut parts = name.split('.');
    matches!(
        (parts.next(), parts.next(), parts.next(), parts.next()),
        (Some(stem), Some(token), Some("lock"), None)
            if stem.len() == 32
                && stem.bytes().all(|b| b.is_ascii_hexdigit())
                && !token.is_empty()
                && token.bytes().all(|b| b.is_ascii_digit())
    )
}

/// The lock file (or the migration's), owner-only and never through a symbolic link: a user who
/// could open it could hold a lock every new send waits on ([`crate::private_file`]).
fn open_file(path: &Path) -> io::Result<File> {
    crate::private_file::open(path)
}

fn writable(dir: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{e}: make {} writable", dir.display()))
}

/// The byte that stands for `key`/`token`: a collision between two pairs can only make a free
/// lock look held (the deadline rules) or a lock look taken (the attempt is told it is busy).
fn byte_of(key: &str, token: u64) -> libc::off_t {
    let digest = Sha256::digest(format!("{token}:{key}").as_bytes());
    let mut first = [0; 8];
    first.copy_from_slice(&digest[..8]);
    let n = u64::from_be_bytes(first);
    // Below half the largest offset: the range's end stays a valid file offset.
    let below = u64::try_from(libc::off_t::MAX).unwrap_or(u64::MAX) / 2;
    libc::off_t::try_from(n % below).unwrap_or(0)
}

fn range(kind: libc::c_int, start: libc::off_t) -> libc::flock {
    libc::flock {
        l_type: i16::try_from(kind).unwrap_or(libc::F_WRLCK as i16),
        l_whence: libc::SEEK_SET as i16,
        l_start: start,
        l_len: 1,
        l_pid: 0,
    }
}

/// Take the write lock on byte `start` for `file`'s description: `false` if another holds it.
fn try_take(file: &File, start: libc::off_t) -> io::Result<bool> {
    match fcntl(file, FcntlArg::F_OFD_SETLK(&range(libc::F_WRLCK, start))) {
        Ok(_) => Ok(true),
        Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EACCES) => Ok(false),
        Err(e) => Err(io::Error::from(e)),
    }
}

fn give_back(file: &File, start: libc::off_t) -> io::Result<()> {
    fcntl(file, FcntlArg::F_OFD_SETLK(&range(libc::F_UNLCK, start)))
        .map(drop)
        .map_err(io::Error::from)
}

/// Whether any description other than `file`'s holds byte `start` (`file` holds nothing).
fn taken_elsewhere(file: &File, start: libc::off_t) -> io::Result<bool> {
    let mut probe = range(libc::F_WRLCK, start);
    fcntl(file, FcntlArg::F_OFD_GETLK(&mut probe)).map_err(io::Error::from)?;
    Ok(i32::from(probe.l_type) != libc::F_UNLCK)
}

/// A held byte: given back when dropped, and its description kept for the next hold.
struct Held {
    file: Option<File>,
    start: libc::off_t,
    idle: Arc<Mutex<Vec<File>>>,
}

impl Drop for Held {
    fn drop(&mut self) {
        let Some(file) = self.file.take() else {
            return;
        };
        // If the lock cannot be given back, closing the description (dropping it) does.
        if give_back(&file, self.start).is_ok() {
            keep_idle(&self.idle, file);
        }
    }
}

/// Keep `file`, which holds no lock, for the next hold or probe (or close it: enough are kept).
fn keep_idle(idle: &Mutex<Vec<File>>, file: File) {
    let mut idle = idle.lock().unwrap_or_else(PoisonError::into_inner);
    if idle.len() < IDLE {
        idle.push(file);
    }
}

impl Liveness for LockDir {
    fn place(&self) -> String {
        self.path.display().to_string()
    }

    fn try_hold(&self, key: &str, token: u64) -> io::Result<Option<HeldLock>> {
        let file = self.open()?;
        self.touch(&file);
        let start = byte_of(key, token);
        if !try_take(&file, start)? {
            keep_idle(&self.idle, file);
            return Ok(None);
        }
        Ok(Some(HeldLock::new(Held {
            file: Some(file),
            start,
            idle: self.idle.clone(),
        })))
    }

    fn released(&self, key: &str, token: u64, host: &str) -> io::Result<bool> {
        if host != self.host {
            return Ok(false);
        }
        let file = self.open()?;
        let taken = taken_elsewhere(&file, byte_of(key, token));
        keep_idle(&self.idle, file);
        Ok(!taken? && !self.held_by_earlier_release(key, token)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_is_busy_until_dropped_and_tokens_are_independent() -> io::Result<()> {
        let tmp = tempfile::tempdir()?;
        let path = tmp.path().join("j.db.locks");
        let locks = LockDir::new(&path, "here")?;
        let held = locks.try_hold("k", 1)?;
        assert!(held.is_some());
        assert!(!locks.released("k", 1, "here")?);
        assert!(locks.released("k", 2, "here")?);
        assert!(locks.released("other", 1, "here")?);
        assert!(
            locks.try_hold("k", 1)?.is_none(),
            "another holder in the same process is refused"
        );
        let elsewhere = LockDir::new(&path, "here")?;
        assert!(
            !elsewhere.released("k", 1, "here")?,
            "seen by another handle"
        );
        assert!(elsewhere.try_hold("k", 1)?.is_none());
        drop(held);
        assert!(locks.released("k", 1, "here")?);
        assert!(elsewhere.released("k", 1, "here")?);
        assert!(elsewhere.try_hold("k", 1)?.is_some(), "free to take again");
        Ok(())
    }

    #[test]
    fn many_locks_held_at_once_are_each_held_and_each_given_back() -> io::Result<()> {
        let tmp = tempfile::tempdir()?;
        let locks = LockDir::new(tmp.path().join("l"), "here")?;
        let held: Vec<HeldLock> = (0..200)
            .map(|i| locks.try_hold(&format!("k{i}"), 1))
            .collect::<io::Result<Option<Vec<_>>>>()?
            .ok_or_else(|| io::Error::other("a free lock was refused"))?;
        for i in 0..200 {
            assert!(!locks.released(&format!("k{i}"), 1, "here")?);
        }
        drop(held);
        for i in 0..200 {
            assert!(locks.released(&format!("k{i}"), 1, "here")?);
        }
        Ok(())
    }

    #[test]
    fn another_hosts_lock_is_never_judged_released() -> io::Result<()> {
        let tmp = tempfile::tempdir()?;
        let locks = LockDir::new(tmp.path().join("l"), "here")?;
        assert!(!locks.released("k", 1, "elsewhere")?);
        Ok(())
    }

    #[test]
    fn an_earlier_releases_directory_is_moved_aside_and_the_locks_held_in_it_still_count()
    -> io::Result<()> {
        let tmp = tempfile::tempdir()?;
        let path = tmp.path().join("j.db.locks");
        std::fs::create_dir(&path)?;
        let mut stem = sha256_hex(b"k");
        stem.truncate(32);
        let earlier = File::create(path.join(format!("{stem}.1.lock")))?;
        earlier.lock()?;
        File::create(path.join(format!("{stem}.2.lock")))?;
        let locks = LockDir::new(&path, "here")?;
        assert!(path.is_file(), "the lock file is where the directory was");
        assert!(
            OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .open(path.join(format!("{stem}.3.lock")))
                .is_err(),
            "a process of the earlier release can no longer make a lock file there"
        );
        assert!(
            !locks.released("k", 1, "here")?,
            "a lock the earlier release holds counts as held"
        );
        assert!(
            locks.released("k", 2, "here")?,
            "its lock file that nobody holds does not"
        );
        drop(earlier);
        assert!(locks.released("k", 1, "here")?);
        let again = LockDir::new(&path, "here")?;
        assert!(
            again.released("k", 1, "here")?,
            "a second open moves nothing"
        );
        Ok(())
    }

    #[test]
    fn a_lock_file_removed_or_replaced_in_use_is_an_error_not_a_free_lock() -> io::Result<()> {
        let tmp = tempfile::tempdir()?;
        let path = tmp.path().join("l");
        let locks = LockDir::new(&path, "here")?;
        let held = locks.try_hold("k", 1)?;
        assert!(held.is_some());
        std::fs::remove_file(&path)?;
        assert!(locks.released("k", 1, "here").is_err(), "removed");
        std::fs::write(&path, "")?;
        assert!(locks.released("k", 1, "here").is_err(), "replaced");
        assert!(
            locks.try_hold("k", 2).is_err(),
            "nothing taken on the new file"
        );
        drop(held);
        Ok(())
    }

    #[test]
    fn processes_opening_at_once_move_the_earlier_directory_once_and_share_one_file()
    -> io::Result<()> {
        let tmp = tempfile::tempdir()?;
        let path = tmp.path().join("j.db.locks");
        std::fs::create_dir(&path)?;
        File::create(path.join(format!("{}.1.lock", "a".repeat(32))))?;
        let opened: Vec<LockDir> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| s.spawn(|| LockDir::new(&path, "here")))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(io::Error::other("panicked")))
                })
                .collect::<io::Result<_>>()
        })?;
        assert!(path.is_file());
        let aside: Vec<_> = std::fs::read_dir(tmp.path())?
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().contains(RETIRED))
            .collect();
        assert_eq!(aside.len(), 1, "moved aside once");
        assert!(
            aside[0].file_type()?.is_dir(),
            "the directory, never the lock file"
        );
        let held = opened[0].try_hold("k", 1)?;
        assert!(held.is_some());
        for other in &opened[1..] {
            assert!(
                !other.released("k", 1, "here")?,
                "every handle sees one file"
            );
        }
        Ok(())
    }

    #[test]
    fn opening_the_lock_file_moves_its_modification_time() -> io::Result<()> {
        let tmp = tempfile::tempdir()?;
        let path = tmp.path().join("l");
        let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        File::create(&path)?.set_modified(old)?;
        let _locks = LockDir::new(&path, "here")?;
        assert!(std::fs::metadata(&path)?.modified()? > old);
        Ok(())
    }

    #[test]
    fn a_directory_of_other_files_is_never_moved() -> io::Result<()> {
        let tmp = tempfile::tempdir()?;
        let path = tmp.path().join("mine");
        std::fs::create_dir(&path)?;
        std::fs::write(path.join("notes.txt"), "keep")?;
        let refused = LockDir::new(&path, "here");
        let Err(e) = refused else {
            panic!("a directory of someone else's files was taken");
        };
        assert!(e.to_string().contains("notes.txt"), "{e}");
        assert!(path.join("notes.txt").is_file());
        Ok(())
    }
}
