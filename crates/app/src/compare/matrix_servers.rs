//! The servers of `compare --matrix`: one per server kind, library, certificate, groups and
//! resumption the variants ask for, started before the first round and shared by the variants
//! that ask for the same; each stopped at the end with its own count of what it served.

use std::path::{Path, PathBuf};

use super::matrix::{MatrixConfig, ServerKind, SYSTEM_BUNDLE};
use crate::common::error::{Context, Result};
use crate::common::servers::{
    mapped_libssl, start_nginx, try_start_builtin, Builtin, Nginx, NginxServer, NotStarted,
    ServerProcess,
};
use crate::fail;

/// What a server is started for: the variants that share all of it share one server.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct ServerKey {
    pub(super) kind: ServerKind,
    /// None: the system's.
    pub(super) library: Option<String>,
    pub(super) cert: ossl::CertType,
    pub(super) groups: Option<String>,
    /// Session cache and tickets on: resumed handshakes were asked for.
    pub(super) resumption: bool,
    /// The built-in server's CPUs, one worker thread each (nginx takes the first).
    pub(super) cpus: Vec<usize>,
}

/// A server process of either kind.
pub(super) enum Running {
    /// Its final counters are written to `stats` when it stops.
    Builtin {
        process: ServerProcess,
        stats: PathBuf,
    },
    Nginx(NginxServer),
}

/// A running server, the CA file that trusts it and the libssl it mapped.
pub(super) struct Server {
    pub(super) running: Running,
    pub(super) cafile: PathBuf,
    pub(super) libssl: Option<PathBuf>,
}

impl Server {
    pub(super) fn process(&self) -> &ServerProcess {
        match &self.running {
            Running::Builtin { process, .. } => process,
            Running::Nginx(n) => &n.process,
        }
    }

    /// Stops it (by its PID) and returns its own count: the handshakes in the built-in
    /// server's final counters, or the connections nginx handled on its TLS port (read from
    /// its status page just before it stops).
    pub(super) fn stop_and_count(&mut self) -> Result<u64> {
        match &mut self.running {
            Running::Builtin { process, stats } => {
                process.stop();
                let text = std::fs::read(&*stats).with_context(|| {
                    format!("reading the server's counters {}", stats.display())
                })?;
                let v: serde_json::Value = serde_json::from_slice(&text)?;
                let h = &v["handshakes"];
                Ok(["full", "resumed_session_id", "resumed_ticket"]
                    .iter()
                    .filter_map(|k| h[*k].as_u64())
                    .sum())
            }
            Running::Nginx(n) => {
                let count = n.tls_connections();
                n.process.stop();
                count
            }
        }
    }
}

/// Why a server key has no process.
pub(super) enum NoServer {
    Failed(String),
    /// The library cannot run under this server at all.
    NotRun(String),
}

pub(super) type ServerSlot = (ServerKey, std::result::Result<Server, NoServer>);

pub(super) fn start_server(
    c: &MatrixConfig,
    key: &ServerKey,
    prefix: Option<&Path>,
    dir: &Path,
    index: usize,
) -> std::result::Result<Server, NoServer> {
    match key.kind {
        ServerKind::Builtin => start_builtin_server(c, key, dir, index).map_err(|e| match e {
            NotStarted::NotInLibrary(why) => NoServer::NotRun(why),
            NotStarted::Failed(e) => NoServer::Failed(format!("the server did not start: {e}")),
        }),
        ServerKind::Nginx => {
            let name = key.library.as_deref().unwrap_or("system");
            let lib_dir = match prefix {
                Some(p) => Some(nginx_library_dir(p, name).map_err(NoServer::NotRun)?),
                None => None,
            };
            // nginx only says its group list failed: the built-in server on the same library
            // and groups says whether the library lacks one (and stops at once).
            if key.groups.is_some() {
                let builtin = ServerKey {
                    kind: ServerKind::Builtin,
                    ..key.clone()
                };
                if let Err(NotStarted::NotInLibrary(why)) =
                    start_builtin_server(c, &builtin, dir, index)
                {
                    return Err(NoServer::NotRun(why));
                }
            }
            start_nginx_server(c, key, lib_dir.as_deref(), dir, index)
                .map_err(|e| NoServer::Failed(format!("nginx: {e}")))
        }
    }
}

/// The CA file a server's clients verify against: the system's bundle plus `cert` (as curl
/// loads its bundle).
fn ca_bundle(cert: &Path, dir: &Path, index: usize) -> Result<PathBuf> {
    let mut pem = std::fs::read(SYSTEM_BUNDLE).unwrap_or_default();
    pem.extend_from_slice(&std::fs::read(cert).context("reading the server's certificate")?);
    let cafile = dir.join(format!("ca-{index}.pem"));
    std::fs::write(&cafile, pem)?;
    Ok(cafile)
}

fn start_builtin_server(
    c: &MatrixConfig,
    key: &ServerKey,
    dir: &Path,
    index: usize,
) -> std::result::Result<Server, NotStarted> {
    let cert_out = dir.join(format!("server-{index}.pem"));
    let stats = dir.join(format!("server-{index}-stats.json"));
    let mut extra = vec![
        "--cert-out".to_string(),
        cert_out.display().to_string(),
        "--stats-json".into(),
        stats.display().to_string(),
    ];
    if let Some(g) = &key.groups {
        extra.extend(["--groups".to_string(), g.clone()]);
    }
    if !key.resumption {
        extra.extend(["--session-cache", "off", "--tickets", "off"].map(String::from));
    }
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let process = try_start_builtin(&Builtin {
        exe: &c.exe,
        openssl: key.library.as_deref(),
        cert_type: key.cert,
        cpus: &key.cpus,
        extra: &extra,
        prepare: None,
    })?;
    let libssl = mapped_libssl(process.pid()).ok();
    Ok(Server {
        cafile: ca_bundle(&cert_out, dir, index)?,
        running: Running::Builtin { process, stats },
        libssl,
    })
}

/// nginx on the key's library (through `LD_LIBRARY_PATH` when it is not the system's), its
/// mapped libssl checked against the one asked for.
fn start_nginx_server(
    c: &MatrixConfig,
    key: &ServerKey,
    lib_dir: Option<&Path>,
    dir: &Path,
    index: usize,
) -> Result<Server> {
    let n = start_nginx(&Nginx {
        cert: key.cert,
        cpu: key.cpus.first().copied().unwrap_or(c.server_cpu),
        library_dir: lib_dir,
        groups: key.groups.as_deref(),
        resumption: key.resumption,
        prepare: None,
    })?;
    if let Some(want) = lib_dir {
        let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        let mapped_dir = n.libssl.parent().map(canonical);
        if mapped_dir.as_deref() != Some(canonical(want).as_path()) {
            fail!(
                "nginx (PID {}) mapped {}, not the libssl.so.3 in {}",
                n.process.pid(),
                n.libssl.display(),
                want.display()
            );
        }
    }
    Ok(Server {
        cafile: ca_bundle(&n.ca, dir, index)?,
        libssl: Some(n.libssl.clone()),
        running: Running::Nginx(n),
    })
}

/// The directory of a library's `libssl.so.3`, which Debian's nginx (linked to it) can run
/// against; or why it cannot: another soname (1.1.1) or another ABI (4.0, AWS-LC, BoringSSL).
pub(super) fn nginx_library_dir(prefix: &Path, name: &str) -> std::result::Result<PathBuf, String> {
    let dirs = [
        prefix.join("lib"),
        prefix.join("lib64"),
        prefix.to_path_buf(),
    ];
    if let Some(d) = dirs.iter().find(|d| d.join("libssl.so.3").exists()) {
        return Ok(d.clone());
    }
    let files: Vec<String> = dirs
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flatten()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("libssl.so"))
        .collect();
    let versioned = files.iter().find(|f| f.starts_with("libssl.so."));
    Err(match versioned {
        Some(f) if f == "libssl.so.1.1" => {
            format!("nginx is linked to libssl.so.3; {name} is libssl.so.1.1, another soname")
        }
        Some(f) => format!("nginx is linked to libssl.so.3; {name} is {f}, another ABI"),
        None if !files.is_empty() => format!(
            "nginx is linked to libssl.so.3; {name} has only an unversioned libssl.so (AWS-LC or BoringSSL), another ABI"
        ),
        None => format!("{name} has no libssl under {}", prefix.display()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An install prefix whose lib/ holds files of these names (empty: only the names count).
    fn prefix_with(files: &[&str]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("lib")).unwrap();
        for f in files {
            std::fs::write(dir.path().join("lib").join(f), b"").unwrap();
        }
        dir
    }

    #[test]
    fn nginx_runs_only_on_a_libssl_so_3_and_says_why_not() {
        let ok = prefix_with(&["libssl.so", "libssl.so.3"]);
        assert_eq!(
            nginx_library_dir(ok.path(), "3.5.5").unwrap(),
            ok.path().join("lib")
        );
        for (files, name, words) in [
            (
                &["libssl.so", "libssl.so.1.1"][..],
                "1.1.1w",
                "libssl.so.1.1, another soname",
            ),
            (
                &["libssl.so", "libssl.so.4"][..],
                "4.0.3",
                "libssl.so.4, another ABI",
            ),
            (
                &["libssl.so"][..],
                "aws-lc",
                "only an unversioned libssl.so",
            ),
        ] {
            let dir = prefix_with(files);
            let why = nginx_library_dir(dir.path(), name).unwrap_err();
            assert!(
                why.contains(name) && why.contains(words) && why.contains("libssl.so.3"),
                "{why}"
            );
        }
    }
}
