//! A throwaway PostgreSQL server for tests and the kill matrix: `initdb` in a temporary
//! directory, its own port and socket directory, stopped and removed on drop. Started as an
//! unprivileged user when the caller is root (`initdb` refuses root). `INTERLOCK_DATABASE_URL`
//! points everything at an existing server instead; each test then works in a schema of its own.

use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The variable that names an existing server to use instead of a throwaway one.
pub const DATABASE_URL_VAR: &str = "INTERLOCK_DATABASE_URL";

/// The uid and gid a root caller runs the server as (Debian's `nobody`).
const NOBODY: u32 = 65534;

/// A PostgreSQL server for one test run.
#[derive(Debug)]
pub struct Cluster {
    url: String,
    server: Option<Server>,
}

#[derive(Debug)]
struct Server {
    bin: PathBuf,
    data: PathBuf,
    port: u16,
    child: Child,
    log: PathBuf,
    extra: Vec<String>,
    dir: tempfile::TempDir,
}

fn other(what: String) -> io::Error {
    io::Error::other(what)
}

impl Cluster {
    /// The server named by `INTERLOCK_DATABASE_URL`, or a new throwaway one.
    pub fn start() -> io::Result<Self> {
        if let Some(url) = std::env::var(DATABASE_URL_VAR)
            .ok()
            .filter(|u| !u.is_empty())
        {
            return Ok(Self { url, server: None });
        }
        Self::throwaway()
    }

    /// A new server of our own, whatever the environment says (for tests that stop and restart
    /// it).
    pub fn throwaway() -> io::Result<Self> {
        Self::throwaway_with(&[])
    }

    /// A new server of our own with extra server settings (`name=value`, as `-c` takes them),
    /// for tests of servers set up wrongly.
    pub fn throwaway_with(settings: &[&str]) -> io::Result<Self> {
        let bin = bin_dir()?;
        let dir = tempfile::Builder::new().prefix("interlock-pg-").tempdir()?;
        let data = dir.path().join("data");
        let as_root = is_root();
        if as_root {
            std::os::unix::fs::chown(dir.path(), Some(NOBODY), Some(NOBODY))?;
        }
        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .args(["-D"])
            .arg(&data)
            .args([
                "-U",
                "interlock",
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        unprivileged(&mut initdb, as_root);
        let out = initdb.output().map_err(|e| {
            other(format!(
                "cannot run {}: {e}; install PostgreSQL (scripts/setup --with-postgres)",
                bin.join("initdb").display()
            ))
        })?;
        if !out.status.success() {
            return Err(other(format!(
                "initdb failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let port = free_port()?;
        let log = dir.path().join("server.log");
        let extra: Vec<String> = settings.iter().map(|s| (*s).to_owned()).collect();
        let child = spawn_server(&bin, &data, dir.path(), port, &log, as_root, &extra)?;
        let mut server = Server {
            bin,
            data,
            port,
            child,
            log,
            extra,
            dir,
        };
        let url = format!("postgres://interlock@127.0.0.1:{port}/postgres");
        reaper(server.dir.path())?;
        wait_ready(&url, &mut server)?;
        Ok(Self {
            url,
            server: Some(server),
        })
    }

    /// One server for every test of this process, started by the first that asks. A process
    /// that exits without dropping it (statics are never dropped) leaves a reaper behind that
    /// stops the server and removes its files.
    pub fn shared() -> io::Result<&'static Self> {
        static SHARED: std::sync::OnceLock<Result<Cluster, String>> = std::sync::OnceLock::new();
        SHARED
            .get_or_init(|| Self::start().map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| other(e.clone()))
    }

    /// Where the server is.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The server's URL, logging in as `user` with `password` instead (a throwaway server trusts
    /// every login; another checks the password).
    pub fn url_as(&self, user: &str, password: &str) -> String {
        let (scheme, rest) = self
            .url
            .split_once("://")
            .unwrap_or(("postgres", &self.url));
        let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
        format!("{scheme}://{user}:{password}@{rest}")
    }

    /// The server's socket address (`host:port` of its URL, as an IP address), for a proxy in
    /// front of it; `None` where the URL names a host by name or a socket directory.
    pub fn address(&self) -> Option<std::net::SocketAddr> {
        let rest = self
            .url
            .split_once("://")
            .map_or(self.url.as_str(), |(_, r)| r);
        let authority = rest.split('/').next()?;
        authority
            .rsplit_once('@')
            .map_or(authority, |(_, a)| a)
            .parse()
            .ok()
    }

    /// A schema name no other test of this run uses.
    pub fn fresh_schema(&self, label: &str) -> String {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let label: String = label
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .take(30)
            .collect();
        format!("t_{label}_{}_{n}", std::process::id())
    }

    /// Stop the server at once (SIGKILL, as a crash would), then start it again on the same data
    /// and port. Only for a throwaway server.
    pub fn crash_and_restart(&mut self) -> io::Result<()> {
        let url = self.url.clone();
        let Some(s) = self.server.as_mut() else {
            return Err(other(format!(
                "{DATABASE_URL_VAR} names a server this test does not own; it cannot restart it"
            )));
        };
        let _ = s.child.kill();
        let _ = s.child.wait();
        // The postmaster's children notice it died and exit; wait for the port to free.
        std::thread::sleep(Duration::from_millis(200));
        let dir = s.dir.path().to_path_buf();
        s.child = spawn_server(&s.bin, &s.data, &dir, s.port, &s.log, is_root(), &s.extra)?;
        wait_ready(&url, s)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(s) = self.server.as_mut() {
            // Fast shutdown: SIGINT.
            let _ = Command::new("kill")
                .args(["-INT", &s.child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if matches!(s.child.try_wait(), Ok(Some(_))) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = s.child.kill();
            let _ = s.child.wait();
        }
    }
}

/// A shell that outlives this process: once the process is gone and the server's directory is
/// still there, it stops the server (fast, then by force) and removes the directory.
fn reaper(dir: &Path) -> io::Result<()> {
    let dir = dir.display().to_string();
    let script = format!(
        "while kill -0 {parent} 2>/dev/null && [ -d '{dir}' ]; do sleep 0.5; done
         if [ -d '{dir}' ]; then
           pid=$(head -1 '{dir}/data/postmaster.pid' 2>/dev/null)
           if [ -n \"$pid\" ]; then kill -INT $pid 2>/dev/null; sleep 3; kill -KILL $pid 2>/dev/null; fi
           rm -rf '{dir}'
         fi",
        parent = std::process::id()
    );
    Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(drop)
}

fn is_root() -> bool {
    // The owner of /proc/self is this process's effective user.
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false)
}

fn unprivileged(cmd: &mut Command, as_root: bool) {
    if as_root {
        cmd.uid(NOBODY).gid(NOBODY).env("HOME", "/tmp");
    }
}

/// Debian keeps the server's programs under /usr/lib/postgresql/<version>/bin; elsewhere they
/// are on the PATH.
fn bin_dir() -> io::Result<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((v, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Ok(bin);
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .find(|d| d.join("initdb").exists() && d.join("postgres").exists());
    on_path.ok_or_else(|| {
        other(format!(
            "no PostgreSQL server programs (initdb, postgres) found: run scripts/setup --with-postgres, or set \
             {DATABASE_URL_VAR} to an existing server"
        ))
    })
}

fn free_port() -> io::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

fn spawn_server(
    bin: &Path,
    data: &Path,
    socket_dir: &Path,
    port: u16,
    log: &Path,
    as_root: bool,
    extra: &[String],
) -> io::Result<Child> {
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    if as_root {
        std::os::unix::fs::chown(log, Some(NOBODY), Some(NOBODY))?;
    }
    let mut cmd = Command::new(bin.join("postgres"));
    cmd.arg("-D")
        .arg(data)
        .args(["-p", &port.to_string(), "-k"])
        .arg(socket_dir)
        .args([
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            "max_connections=300",
            "-c",
            "shared_buffers=64MB",
        ]);
    for setting in extra {
        cmd.args(["-c", setting]);
    }
    cmd.stdout(Stdio::null()).stderr(log_file);
    unprivileged(&mut cmd, as_root);
    cmd.spawn().map_err(|e| {
        other(format!(
            "cannot start {}: {e}",
            bin.join("postgres").display()
        ))
    })
}

fn wait_ready(url: &str, s: &mut Server) -> io::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut cfg: postgres::Config = url
        .parse()
        .map_err(|e| other(format!("bad url {url}: {e}")))?;
    cfg.connect_timeout(Duration::from_secs(1));
    loop {
        if let Ok(Some(status)) = s.child.try_wait() {
            let log = std::fs::read_to_string(&s.log).unwrap_or_default();
            return Err(other(format!(
                "the PostgreSQL server exited ({status}) before it was ready: {}",
                log.lines().rev().take(5).collect::<Vec<_>>().join(" | ")
            )));
        }
        if cfg.connect(postgres::NoTls).is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(other(format!(
                "the PostgreSQL server on port {} was not ready within 30 s (log: {})",
                s.port,
                s.log.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
