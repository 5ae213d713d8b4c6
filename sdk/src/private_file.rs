//! The files the gate keeps on a host — the SQLite journal with its WAL and shared-memory files,
//! the liveness lock file — are its owner's alone. The journal holds every lease and payload;
//! the lock file, opened by anyone who can read it, lets them hold a byte that every new send
//! then waits on. So each is created owner-only (owner and group when
//! [`GROUP_SHARED_ENV`] says the workers of one group share them), an existing one that others
//! may read is narrowed, one of another user's is refused, none is opened through a
//! symbolic link, and a directory any user may write without the sticky bit is refused: there
//! anyone could put a file of theirs in the journal's place.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use nix::libc;

/// Set to `1` to create the gate's files readable and writable by their group too (workers of
/// one host running as different users of one group).
pub const GROUP_SHARED_ENV: &str = "INTERLOCK_FILES_GROUP_SHARED";

/// The permission bits the gate's files are created with.
pub fn wanted_mode() -> u32 {
    match std::env::var(GROUP_SHARED_ENV) {
        Ok(v) if v.trim() == "1" => 0o660,
        _ => 0o600,
    }
}

/// Open (or create) `path` for reading and writing as a file of the gate's: never through a
/// symbolic link, created with [`wanted_mode`], an existing one this user's own and narrowed to it.
pub fn open(path: &Path) -> io::Result<File> {
    check_dir(path)?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(wanted_mode())
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| named(path, e))?;
    check_file(path, &file.metadata()?, &file)?;
    Ok(file)
}

/// Create `path` owner-only if it is missing, and check it if it is not: what [`open`] does, for
/// a file another library opens. Its WAL and shared-memory files are made here too, owner-only
/// (SQLite takes an empty one as it would a new one), so that SQLite never creates them itself
/// after these checks, where another user of a shared sticky directory could have put theirs
/// first; an existing rollback journal is checked.
pub fn prepare_sqlite(path: &Path) -> io::Result<()> {
    drop(open(path)?);
    for suffix in ["-wal", "-shm"] {
        let mut side = path.as_os_str().to_owned();
        side.push(suffix);
        drop(open(Path::new(&side))?);
    }
    {
        let mut side = path.as_os_str().to_owned();
        side.push("-journal");
        let side = Path::new(&side);
        match std::fs::symlink_metadata(side) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!(
                        "{} is a symbolic link: the journal's files are never opened through one; \
                         remove it",
                        side.display()
                    ),
                ));
            }
            Ok(_) => {
                let file = OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                    .open(side)
                    .map_err(|e| named(side, e))?;
                check_file(side, &file.metadata()?, &file)?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(named(side, e)),
        }
    }
    Ok(())
}

/// Refuse a directory any user may write without the sticky bit.
fn check_dir(path: &Path) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let meta = std::fs::metadata(dir).map_err(|e| named(dir, e))?;
    let mode = meta.permissions().mode();
    if mode & 0o002 != 0 && mode & 0o1000 == 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is writable by every user (mode {:o}) without the sticky bit: anyone could put \
                 a file of theirs in place of {}; use a directory others cannot write (chmod o-w), \
                 or set its sticky bit",
                dir.display(),
                mode & 0o7777,
                path.display()
            ),
        ));
    }
    Ok(())
}

/// A regular file of this user's, narrowed to [`wanted_mode`] (earlier releases created them with
/// the umask's bits). A file of another user's is refused whatever its mode: its owner could
/// widen it again, or read what the gate writes.
fn check_file(path: &Path, meta: &std::fs::Metadata, file: &File) -> io::Result<()> {
    if !meta.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a regular file", path.display()),
        ));
    }
    if meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} belongs to another user (uid {}): the journal and its lock file must be this \
                 user's own; remove it (or have its owner remove it), or use another path",
                path.display(),
                meta.uid()
            ),
        ));
    }
    let wanted = wanted_mode();
    let mode = meta.permissions().mode() & 0o777;
    if mode & !wanted == 0 {
        return Ok(());
    }
    file.set_permissions(std::fs::Permissions::from_mode(mode & wanted))
        .map_err(|e| named(path, e))?;
    tracing::warn!(
        path = %path.display(),
        was = format!("{mode:o}"),
        now = format!("{:o}", mode & wanted),
        "narrowed a file of the gate's that other users could open"
    );
    Ok(())
}

fn named(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_s_files_are_created_owner_only_and_narrowed_when_older() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let fresh = dir.path().join("journal.db");
        drop(open(&fresh)?);
        assert_eq!(
            std::fs::metadata(&fresh)?.permissions().mode() & 0o777,
            0o600
        );
        let old = dir.path().join("old.db");
        File::create(&old)?.set_permissions(std::fs::Permissions::from_mode(0o644))?;
        let mut wal = old.as_os_str().to_owned();
        wal.push("-wal");
        File::create(&wal)?.set_permissions(std::fs::Permissions::from_mode(0o666))?;
        // Missing side files are made owner-only before SQLite could make them.
        let fresh = dir.path().join("fresh.db");
        prepare_sqlite(&fresh)?;
        for side in ["fresh.db-wal", "fresh.db-shm"] {
            let m = std::fs::metadata(dir.path().join(side))?;
            assert_eq!(m.permissions().mode() & 0o777, 0o600, "{side}");
        }
        prepare_sqlite(&old)?;
        assert_eq!(std::fs::metadata(&old)?.permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::metadata(&wal)?.permissions().mode() & 0o777, 0o600);
        Ok(())
    }

    #[test]
    fn no_file_of_the_gate_s_is_opened_through_a_symbolic_link() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let elsewhere = dir.path().join("elsewhere");
        File::create(&elsewhere)?;
        let link = dir.path().join("journal.db.locks");
        std::os::unix::fs::symlink(&elsewhere, &link)?;
        assert!(open(&link).is_err());
        let db = dir.path().join("j.db");
        let mut shm = db.as_os_str().to_owned();
        shm.push("-shm");
        std::os::unix::fs::symlink(&elsewhere, &shm)?;
        assert!(prepare_sqlite(&db).is_err());
        Ok(())
    }

    #[test]
    fn a_directory_any_user_may_write_without_the_sticky_bit_is_refused() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777))?;
        let e = open(&dir.path().join("journal.db")).err();
        assert!(
            e.as_ref()
                .is_some_and(|e| e.to_string().contains("sticky bit")),
            "{e:?}"
        );
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777))?;
        drop(open(&dir.path().join("journal.db"))?);
        Ok(())
    }
}
