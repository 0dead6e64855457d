//! A server to connect to, as a user names it: `HOST`, `HOST:PORT`, `[IPv6]:PORT` or an https
//! URL, like curl and wrk take. The host is resolved once, here, and every address is kept so
//! that the caller can show them and use the first that answers.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::str::FromStr;

/// The port when none is given: HTTPS's.
pub const DEFAULT_PORT: u16 = 443;

/// The forms a target may take, for error messages.
pub const FORMS: &str =
    "HOST, HOST:PORT, [IPv6]:PORT or https://HOST[:PORT]/PATH (port 443 when none is given)";

/// Why a target was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("{given:?} is not a target: {why}; use {FORMS}")]
    Syntax { given: String, why: String },
    #[error("{host} does not resolve: {reason}")]
    Resolve { host: String, reason: String },
}

/// A target: the host as given, its port, every address it resolved to (in the resolver's
/// order), and the path of a URL (`None` for a bare host).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
    pub addrs: Vec<SocketAddr>,
    pub path: Option<String>,
}

impl Endpoint {
    /// Parses and resolves `given`.
    pub fn parse(given: &str) -> Result<Endpoint, TargetError> {
        let parts = split(given)?;
        let addrs = resolve(&parts.host, parts.port)?;
        Ok(Endpoint {
            host: parts.host,
            port: parts.port,
            addrs,
            path: parts.path,
        })
    }

    /// The first address (the resolver's preference).
    pub fn addr(&self) -> SocketAddr {
        self.addrs[0]
    }

    /// The host's name when it is one (not an IP literal): the SNI and the name a certificate
    /// is checked against, as curl does.
    pub fn name(&self) -> Option<&str> {
        self.host
            .parse::<IpAddr>()
            .is_err()
            .then_some(self.host.as_str())
    }

    /// "localhost:4433 (127.0.0.1:4433, [::1]:4433)", or just the address for an IP literal.
    pub fn describe(&self) -> String {
        let addrs: Vec<String> = self.addrs.iter().map(SocketAddr::to_string).collect();
        if self.name().is_none() && self.addrs.len() == 1 {
            return addrs[0].clone();
        }
        format!("{}:{} ({})", self.host, self.port, addrs.join(", "))
    }
}

impl FromStr for Endpoint {
    type Err = TargetError;

    fn from_str(s: &str) -> Result<Endpoint, TargetError> {
        Endpoint::parse(s)
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

/// A target split into its parts, not resolved.
#[derive(Debug, PartialEq, Eq)]
struct Parts {
    host: String,
    port: u16,
    path: Option<String>,
}

fn split(given: &str) -> Result<Parts, TargetError> {
    let bad = |why: &str| TargetError::Syntax {
        given: given.to_string(),
        why: why.to_string(),
    };
    let s = given.trim();
    let (authority, path) = match s.split_once("://") {
        Some((scheme, rest)) => {
            if !scheme.eq_ignore_ascii_case("https") {
                return Err(bad(&format!(
                    "tlsscope speaks TLS, so the scheme is https, not {scheme}"
                )));
            }
            match rest.find('/') {
                Some(i) => (&rest[..i], Some(rest[i..].to_string())),
                None => (rest, None),
            }
        }
        None if s.contains('/') => return Err(bad("a path needs an https:// URL")),
        None => (s, None),
    };
    if authority.contains('@') {
        return Err(bad("user names in URLs are not supported"));
    }
    let (host, port) = host_and_port(authority).map_err(|why| bad(&why))?;
    if host.is_empty() {
        return Err(bad("no host"));
    }
    Ok(Parts {
        host,
        port: port.unwrap_or(DEFAULT_PORT),
        path,
    })
}

/// `[v6]:port`, `[v6]`, a bare IPv6 literal, `host:port` or `host`.
fn host_and_port(authority: &str) -> Result<(String, Option<u16>), String> {
    if let Some(rest) = authority.strip_prefix('[') {
        let (ip, after) = rest.split_once(']').ok_or("an opening [ without its ]")?;
        ip.parse::<std::net::Ipv6Addr>()
            .map_err(|_| format!("{ip} in brackets is not an IPv6 address"))?;
        let port = match after {
            "" => None,
            _ => Some(port(after.strip_prefix(':').ok_or("text after ]")?)?),
        };
        return Ok((ip.to_string(), port));
    }
    if authority.matches(':').count() > 1 {
        // Only an IPv6 literal has several colons; with a port it must be bracketed.
        return match authority.parse::<std::net::Ipv6Addr>() {
            Ok(ip) => Ok((ip.to_string(), None)),
            Err(_) => Err("an IPv6 address with a port goes in brackets".into()),
        };
    }
    match authority.split_once(':') {
        Some((host, p)) => Ok((host.to_string(), Some(port(p)?))),
        None => Ok((authority.to_string(), None)),
    }
}

fn port(s: &str) -> Result<u16, String> {
    s.parse::<u16>()
        .map_err(|_| format!("{s:?} is not a port (0 to 65535)"))
}

fn resolve(host: &str, port: u16) -> Result<Vec<SocketAddr>, TargetError> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let failed = |reason: String| TargetError::Resolve {
        host: host.to_string(),
        reason,
    };
    let mut addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| failed(e.to_string()))?
        .collect();
    addrs.dedup();
    if addrs.is_empty() {
        return Err(failed("no address".into()));
    }
    Ok(addrs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(s: &str) -> Parts {
        split(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn hosts_ports_and_urls_split() {
        let p = parts("localhost:4433");
        assert_eq!((p.host.as_str(), p.port, p.path), ("localhost", 4433, None));
        let p = parts("127.0.0.1");
        assert_eq!((p.host.as_str(), p.port), ("127.0.0.1", 443));
        let p = parts("https://127.0.0.1:4433/index.html");
        assert_eq!(
            (p.host.as_str(), p.port, p.path.as_deref()),
            ("127.0.0.1", 4433, Some("/index.html"))
        );
        let p = parts("https://example.test");
        assert_eq!(
            (p.host.as_str(), p.port, p.path),
            ("example.test", 443, None)
        );
        let p = parts("[::1]:8443");
        assert_eq!((p.host.as_str(), p.port), ("::1", 8443));
        let p = parts("https://[::1]/x?y=1");
        assert_eq!((p.port, p.path.as_deref()), (443, Some("/x?y=1")));
        assert_eq!(parts("::1").port, 443);
    }

    #[test]
    fn bad_targets_say_what_is_wrong_and_the_forms() {
        for (given, why) in [
            ("http://127.0.0.1:80/", "scheme is https"),
            ("127.0.0.1:http", "not a port"),
            ("127.0.0.1:70000", "not a port"),
            ("[::1:4433", "without its ]"),
            ("::1:4433:x", "in brackets"),
            ("/index.html", "https:// URL"),
            ("https://:4433/", "no host"),
        ] {
            let e = split(given).unwrap_err().to_string();
            assert!(e.contains(why), "{given}: {e}");
            assert!(e.contains("[IPv6]:PORT"), "{given}: {e}");
        }
    }

    #[test]
    fn ip_literals_need_no_resolver_and_have_no_name() {
        let e = Endpoint::parse("[::1]:4433").unwrap();
        assert_eq!(e.addr(), "[::1]:4433".parse().unwrap());
        assert_eq!(e.name(), None);
        assert_eq!(e.describe(), "[::1]:4433");
    }

    #[test]
    fn localhost_resolves_to_loopback_addresses() {
        let e = Endpoint::parse("localhost:4433").unwrap();
        assert!(!e.addrs.is_empty());
        assert!(e
            .addrs
            .iter()
            .all(|a| a.ip().is_loopback() && a.port() == 4433));
        assert_eq!(e.name(), Some("localhost"));
        assert!(
            e.describe().starts_with("localhost:4433 ("),
            "{}",
            e.describe()
        );
    }
}
