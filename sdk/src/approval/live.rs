//! The approver directory as it is now, not as it was when a process started. A person removed
//! from the directory, or re-keyed, must not go on approving through a worker or a gate server
//! that read the file hours ago: each check asks its source, and a file is read again whenever
//! it changed. A file that cannot be read or does not check is an error, never the directory it
//! used to be: the approval is not judged, and nothing is sent on it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::{Approvers, DirectoryError};

/// Where a gate finds the approver directory at each check.
pub trait DirectorySource: Send + Sync {
    /// The directory as of now, or why it cannot be had.
    fn current(&self) -> Result<Arc<Approvers>, DirectoryError>;
}

/// A directory that never changes (a test's, or one the caller keeps current itself).
pub struct Fixed(pub Arc<Approvers>);

impl DirectorySource for Fixed {
    fn current(&self) -> Result<Arc<Approvers>, DirectoryError> {
        Ok(self.0.clone())
    }
}

/// Which version of the file a read saw: a new file put in its place, or any write to it,
/// changes one of these.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

/// The file's stamp, read through a handle opened now: on a network file system an open
/// revalidates the file's attributes, where a `stat` by name may be answered from a cache.
fn stamp(path: &Path) -> std::io::Result<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::File::open(path)?.metadata()?;
    let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
    Ok(Stamp {
        dev: m.dev(),
        ino: m.ino(),
        len: m.len(),
        mtime_ns: ns(m.mtime(), m.mtime_nsec()),
        ctime_ns: ns(m.ctime(), m.ctime_nsec()),
    })
}

/// How recently a file may have been written and still be read again at every check.
const RACY_NS: i128 = 2_000_000_000;

/// A directory file (JSON), read again whenever it changed.
pub struct DirectoryFile {
    path: PathBuf,
    seen: Mutex<Option<(Stamp, Arc<Approvers>)>>,
}

impl DirectoryFile {
    /// The file at `path`, read and checked now, so that a wrong path or a bad file is an error
    /// at start-up rather than at the first approval.
    pub fn open(path: impl Into<PathBuf>) -> Result<Self, DirectoryError> {
        let file = Self {
            path: path.into(),
            seen: Mutex::new(None),
        };
        file.current()?;
        Ok(file)
    }

    fn unreadable(&self, what: impl std::fmt::Display) -> DirectoryError {
        DirectoryError::Unreadable {
            place: self.path.display().to_string(),
            what: what.to_string(),
        }
    }
}

impl DirectorySource for DirectoryFile {
    fn current(&self) -> Result<Arc<Approvers>, DirectoryError> {
        let before = stamp(&self.path).map_err(|e| self.unreadable(e))?;
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((at, dir)) = seen.as_ref().filter(|(at, _)| *at == before) {
            tracing::trace!(?at, "the approver directory is unchanged");
            return Ok(dir.clone());
        }
        // Forget the old directory first: if the new one cannot be read, nothing stands in.
        *seen = None;
        let text = std::fs::read_to_string(&self.path).map_err(|e| self.unreadable(e))?;
        let dir = Arc::new(Approvers::from_json(
            &self.path.display().to_string(),
            &text,
        )?);
        // Kept only when nothing can have changed unseen: not written while it was read, and
        // old enough that another write within the same timestamp tick would show (a file
        // system's clock may tick coarsely; a file changed that recently is read every time).
        let settled = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i128::try_from(d.as_nanos()).unwrap_or(i128::MAX))
            .is_ok_and(|now| now - before.mtime_ns.max(before.ctime_ns) > RACY_NS);
        if settled && stamp(&self.path).is_ok_and(|after| after == before) {
            *seen = Some((before, dir.clone()));
        }
        Ok(dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approval::ApproverKey;

    fn write(path: &Path, members: &[(&str, u8)]) {
        let approvers: serde_json::Map<String, serde_json::Value> = members
            .iter()
            .map(|(who, seed)| {
                let key = ApproverKey::from_seed(*who, [*seed; 32]).public_hex();
                ((*who).to_owned(), serde_json::json!({ "public_key": key }))
            })
            .collect();
        let names: Vec<&str> = members.iter().map(|(w, _)| *w).collect();
        let body = serde_json::json!({
            "approvers": approvers,
            "groups": {"support": names},
            "chain": [{"group": "support", "sla_ms": 1000}],
        });
        // Written beside and renamed into place, as a careful editor or a deploy does.
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, body.to_string()).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    }

    #[test]
    fn a_removed_or_rekeyed_approver_is_seen_at_the_next_check_and_a_broken_file_is_no_directory() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("approvers.json");
        write(&path, &[("ana", 1), ("ben", 2)]);
        let file = DirectoryFile::open(&path).unwrap();
        assert!(file.current().unwrap().key_of("ana").is_some());
        write(&path, &[("ben", 2)]);
        assert!(
            file.current().unwrap().key_of("ana").is_none(),
            "ana removed"
        );
        write(&path, &[("ben", 3)]);
        let now = file.current().unwrap().key_of("ben");
        assert_eq!(
            now.map(|k| hex::encode(k.to_bytes())),
            Some(ApproverKey::from_seed("ben", [3; 32]).public_hex()),
            "ben re-keyed"
        );
        std::fs::write(&path, "{ not json").unwrap();
        assert!(file.current().is_err(), "a broken file is not the old one");
        std::fs::remove_file(&path).unwrap();
        assert!(file.current().is_err());
        assert!(DirectoryFile::open(dir.path().join("missing.json")).is_err());
    }
}
