//! Who can reach a server. Every server the project ships — the gate over gRPC, the approvers'
//! inbox, the operators' page, `/metrics` — decides or shows who may move money, so the rule of
//! where it may listen is checked where its socket is bound, whatever path the address came by (a
//! file, a flag, an environment variable, a library call): checked anywhere earlier, a later
//! override walks around it.
//!
//! The rule: loopback (or a unix socket) is always allowed. An address other hosts can reach
//! needs both authentication (a token, a certificate, a sign-in) and an encrypted channel: TLS
//! the server speaks itself, or TLS terminated by a proxy that the configuration names by address.
//! A server behind a named proxy answers that proxy and loopback peers only, so the proxy cannot
//! be stepped around by connecting to the server directly; and it trusts `X-Forwarded-*` from
//! that proxy alone.

use std::net::{IpAddr, SocketAddr};

/// What stands between a listening socket and the network.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reach {
    /// The server speaks TLS itself.
    pub tls: bool,
    /// Every call must prove who makes it (a bearer token, a client certificate, a sign-in).
    pub authenticated: bool,
    /// TLS is terminated by proxies at these addresses, as the configuration says: only they and
    /// loopback peers are answered, and only their `X-Forwarded-*` headers are believed.
    pub proxies: Vec<IpAddr>,
}

/// A server asked to listen where it must not.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("{server} will not listen on {addr}: it is reachable from other hosts, {missing}; {fix}")]
pub struct Exposed {
    /// Which server.
    pub server: String,
    /// The address asked for.
    pub addr: SocketAddr,
    /// What the address would need that is not configured.
    pub missing: String,
    /// How to fix it, in that server's own terms.
    pub fix: String,
}

/// Whether `ip` is this host's alone: 127.0.0.0/8, `::1`, or IPv4 loopback mapped into IPv6.
pub fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

impl Reach {
    /// Only loopback: no TLS, no authentication, no proxy.
    pub fn loopback_only() -> Self {
        Self::default()
    }

    /// Behind TLS-terminating proxies at `proxies` (none: loopback only).
    pub fn behind(proxies: Vec<IpAddr>) -> Self {
        Self {
            proxies,
            ..Self::default()
        }
    }

    /// Whether `server` may listen on `addr`; `fix` is told when it may not (name the flag or
    /// configuration field that provides what is missing).
    pub fn check(&self, server: &str, addr: SocketAddr, fix: &str) -> Result<(), Exposed> {
        if is_loopback(addr.ip()) {
            return Ok(());
        }
        let encrypted = self.tls || !self.proxies.is_empty();
        let missing = match (self.authenticated, encrypted) {
            (true, true) => return Ok(()),
            (false, false) => "yet it has neither authentication nor TLS",
            (false, true) => "yet it has no authentication",
            (true, false) => {
                "yet it has no TLS (of its own, or a TLS proxy named in its configuration)"
            }
        };
        Err(Exposed {
            server: server.to_owned(),
            addr,
            missing: missing.to_owned(),
            fix: fix.to_owned(),
        })
    }

    /// Whether a connection from `peer` is answered: any peer without a named proxy (the address
    /// itself passed [`Reach::check`]), else loopback and the proxies only.
    pub fn admits(&self, peer: IpAddr) -> bool {
        self.proxies.is_empty() || is_loopback(peer) || self.is_proxy(peer)
    }

    /// Whether `peer` is a proxy the configuration names, whose `X-Forwarded-*` may be believed.
    pub fn is_proxy(&self, peer: IpAddr) -> bool {
        let peer = canonical(peer);
        self.proxies.iter().any(|p| canonical(*p) == peer)
    }
}

/// IPv4 mapped into IPv6 (a dual-stack socket's view of an IPv4 peer) as plain IPv4.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Proxy addresses from a comma-separated list (`10.0.0.5, 10.0.0.6`), each checked.
pub fn parse_proxies(text: &str) -> Result<Vec<IpAddr>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<IpAddr>().map_err(|_| {
                format!(
                    "{s:?} is not an IP address: name the TLS proxy by its address, e.g. 10.0.0.5"
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> SocketAddr {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn loopback_is_always_allowed_and_nothing_else_is_without_authentication_and_tls() {
        let open = Reach::loopback_only();
        for ok in [
            "127.0.0.1:1",
            "127.9.9.9:1",
            "[::1]:1",
            "[::ffff:127.0.0.1]:1",
        ] {
            assert_eq!(open.check("s", at(ok), "fix"), Ok(()), "{ok}");
        }
        for exposed in ["0.0.0.0:1", "[::]:1", "192.0.2.1:1", "[::ffff:192.0.2.1]:1"] {
            let e = open.check("s", at(exposed), "the fix").err();
            assert!(
                e.as_ref().is_some_and(|e| e.to_string().contains("the fix")
                    && e.to_string().contains("neither authentication nor TLS")),
                "{exposed}: {e:?}"
            );
        }
        let token_only = Reach {
            authenticated: true,
            ..Reach::default()
        };
        assert!(token_only.check("s", at("0.0.0.0:1"), "f").is_err());
        let tls_only = Reach {
            tls: true,
            ..Reach::default()
        };
        assert!(tls_only.check("s", at("0.0.0.0:1"), "f").is_err());
        let both = Reach {
            tls: true,
            authenticated: true,
            proxies: vec![],
        };
        assert_eq!(both.check("s", at("0.0.0.0:1"), "f"), Ok(()));
        let proxied = Reach {
            authenticated: true,
            ..Reach::behind(vec!["192.0.2.9".parse().unwrap_or(IpAddr::V4(0.into()))])
        };
        assert_eq!(proxied.check("s", at("0.0.0.0:1"), "f"), Ok(()));
    }

    #[test]
    fn behind_a_proxy_only_the_proxy_and_loopback_are_answered() -> Result<(), String> {
        let reach = Reach::behind(parse_proxies("192.0.2.9, 2001:db8::9")?);
        let ip = |s: &str| s.parse::<IpAddr>().map_err(|e| e.to_string());
        assert!(reach.admits(ip("192.0.2.9")?));
        assert!(reach.admits(ip("::ffff:192.0.2.9")?));
        assert!(reach.admits(ip("2001:db8::9")?));
        assert!(reach.admits(ip("127.0.0.1")?));
        assert!(!reach.admits(ip("192.0.2.10")?));
        assert!(reach.is_proxy(ip("::ffff:192.0.2.9")?));
        assert!(!reach.is_proxy(ip("127.0.0.1")?));
        assert!(Reach::loopback_only().admits(ip("192.0.2.10")?));
        assert!(!Reach::loopback_only().is_proxy(ip("127.0.0.1")?));
        assert!(parse_proxies("proxy.internal").is_err());
        Ok(())
    }
}
