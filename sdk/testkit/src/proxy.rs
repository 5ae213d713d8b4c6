//! A TCP proxy that can fail the network between a worker and its database the two ways that
//! matter: go silent (every connection stays open but no byte moves, as when a host is cut off)
//! and come back, or cut every connection at once (as a reset would).

use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

/// A proxy from a local port to `upstream`.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    state: Arc<State>,
}

#[derive(Debug, Default)]
struct State {
    silent: AtomicBool,
    /// Bumped by `cut`: connections of an older generation close.
    generation: AtomicU64,
    stopped: AtomicBool,
}

impl Proxy {
    /// Listen on a free local port and forward every connection to `upstream`.
    pub fn start(upstream: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let state = Arc::new(State::default());
        let s = state.clone();
        thread::spawn(move || accept(&listener, upstream, &s));
        Ok(Self { addr, state })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stop moving bytes; every connection stays open and silent.
    pub fn go_silent(&self) {
        self.state.silent.store(true, Ordering::SeqCst);
    }

    /// Move bytes again; what was held back arrives.
    pub fn heal(&self) {
        self.state.silent.store(false, Ordering::SeqCst);
    }

    /// Close every open connection at once (new ones are still accepted).
    pub fn cut(&self) {
        self.state.generation.fetch_add(1, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state.stopped.store(true, Ordering::SeqCst);
        self.cut();
    }
}

fn accept(listener: &TcpListener, upstream: SocketAddr, state: &Arc<State>) {
    while !state.stopped.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((client, _)) => {
                let Ok(server) = TcpStream::connect(upstream) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                // Small protocol messages go out at once, as they would without a proxy.
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let generation = state.generation.load(Ordering::SeqCst);
                for (from, to) in [(&client, &server), (&server, &client)] {
                    let (Ok(from), Ok(to)) = (from.try_clone(), to.try_clone()) else {
                        continue;
                    };
                    let state = state.clone();
                    thread::spawn(move || pump(from, to, generation, &state));
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                thread::sleep(Duration::from_millis(2));
            }
            Err(_) => thread::sleep(Duration::from_millis(10)),
        }
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream, generation: u64, state: &State) {
    let _ = from.set_nonblocking(false);
    let _ = from.set_read_timeout(Some(Duration::from_millis(5)));
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if state.generation.load(Ordering::SeqCst) != generation {
            break;
        }
        if state.silent.load(Ordering::SeqCst) {
            // Read nothing: the sender's bytes wait in its socket, as behind a dead link.
            thread::sleep(Duration::from_millis(5));
            continue;
        }
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}
