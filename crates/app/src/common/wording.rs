//! The command layer's words for library errors: the libraries name the thing wrong (a path,
//! a PID, a group, the numbers); these sentences add the command-line flag that sets it and
//! what to give instead. Only this layer knows the flags.

use load::rustls_client::{ClientError, TrustStore};
use load::{ClientBottleneck, ConfigError};
use ossl_build::BuildError;
use std::path::Path;

/// A load run's error, naming the flag where a setting is at fault.
pub fn load_error(e: &load::Error) -> String {
    match e {
        load::Error::Config(c) => load_config(c),
        other => crate::common::error::one_line(other),
    }
}

/// A load setting that cannot run, as the flag that sets it.
pub fn load_config(e: &ConfigError) -> String {
    match e {
        ConfigError::ThreadsZero => "--threads must be at least 1".into(),
        ConfigError::ConnectionsBelowThreads { .. } => {
            "--connections must be at least --threads (each thread needs a connection)".into()
        }
        ConfigError::NoEnd => "give a --duration or a --count".into(),
        ConfigError::Rate { .. } => {
            "--rate must be a positive number of operations per second".into()
        }
        ConfigError::KeepAliveWithoutRequest => {
            "keepalive mode needs a request (--request PATH)".into()
        }
        ConfigError::ResumeRatio { .. } => "--resume-ratio must be between 0 and 1".into(),
        ConfigError::TimeoutZero => "--timeout must be positive".into(),
        ConfigError::FdLimit {
            connections,
            wanted,
            limit,
        } => format!(
            "-c {connections} needs about {wanted} open files, but this process may open only \
             {limit} (ulimit -n; the hard limit allows no more): lower -c or raise the limit"
        ),
    }
}

/// Where a rustls client's trust came from: the flag with its file, or the system's store.
fn trust_store(store: &TrustStore) -> String {
    match store {
        TrustStore::CaFile(path) => format!("--cafile {}", path.display()),
        TrustStore::System(path) => format!("the system's trust store {}", path.display()),
    }
}

/// The flag that chooses a rustls provider, with its value.
fn provider_flag(p: load::rustls_client::Provider) -> String {
    format!("--rustls-provider {}", p.name())
}

/// Why the rustls client cannot run as asked, naming the flag that asked.
pub fn rustls_client(e: &ClientError) -> String {
    use load::rustls_client::Provider;
    match e {
        ClientError::LeanCannotVerify => "--client-work lean does not check the server's \
             signature, so it cannot verify the server either; use --client-work full with \
             --verify"
            .into(),
        ClientError::MlDsaOnRing { store, ml_dsa } => format!(
            "{}: holds an {ml_dsa} certificate, which rustls on ring cannot verify; use {}",
            trust_store(store),
            provider_flag(Provider::AwsLcRs)
        ),
        ClientError::MinVersion { version } => {
            format!("--min-tls {version}: the rustls client speaks TLS 1.2 and 1.3 only")
        }
        ClientError::UnknownSuite {
            tls13,
            list,
            name,
            known,
        } => format!(
            "{} {list}: {name} is not a suite the rustls client has ({})",
            if *tls13 {
                "--ciphersuites"
            } else {
                "--ciphers"
            },
            known.join(", ")
        ),
        ClientError::GroupNotInProvider {
            group,
            provider,
            available,
            hint_provider,
        } => format!(
            "--groups {group}: rustls on {} has {}{}",
            provider.name(),
            available.join(", "),
            hint_provider
                .map(|p| format!("; {} has it", provider_flag(p)))
                .unwrap_or_default()
        ),
        ClientError::SigalgNotVerified { name, verified } => format!(
            "--sigalgs {name}: the rustls client verifies {}",
            verified.join(", ")
        ),
        ClientError::TrustStoreUnusable { store, reason } => {
            format!("{}: {reason}", trust_store(store))
        }
        ClientError::ClientCertificate { path, reason } => {
            format!("--cert {}: {reason}", path.display())
        }
        ClientError::ClientKey { path, reason } => format!("--key {}: {reason}", path.display()),
        ClientError::RingHandshakeFailure { addr } => format!(
            "TLS handshake with {addr} failed: tls alert: handshake failure (if the server's \
             key is ML-DSA: rustls on ring cannot verify it; use {})",
            provider_flag(Provider::AwsLcRs)
        ),
        other => crate::common::error::one_line(other),
    }
}

/// A tracing error, naming the flag where one helps (the kernel backend, the ring size).
pub fn probes_error(e: &probes::Error) -> String {
    match e {
        probes::Error::Attach { pid, reason } => format!(
            "cannot attach the in-process backend to process {pid}: {}",
            refusal(reason)
        ),
        probes::Error::RingSize { bytes, min, max } => format!(
            "--ring-size {bytes}: the in-process backend's rings (one per thread) take a power \
             of two from {min} to {max} bytes"
        ),
        other => crate::common::error::one_line(other),
    }
}

/// Why the in-process backend cannot attach, with its remedy: the kernel backend's flag.
pub fn refusal(r: &probes::Refusal) -> String {
    let what = r.what();
    match (r.other_remedy(), r.kernel_backend_can()) {
        (Some(other), true) => format!("{what}: {other}, or use --backend kernel"),
        (None, true) => format!("{what}: use --backend kernel"),
        _ => what,
    }
}

/// Why a function is not probed, naming the flag or the command form that gets it.
pub fn missing_reason(r: &probes::MissingReason) -> String {
    use probes::MissingReason as M;
    match r {
        M::InternalToLibrary => "internal to its library (called without the PLT): only the \
             kernel backend (--backend kernel) can probe it"
            .into(),
        M::NoOwnGotEntry => "the attached processes call it through no GOT entry of their own \
             (not at all, or through dlsym pointers as tlsscope's built-in server does: start \
             such a program under tlsscope, trace -- COMMAND)"
            .into(),
        M::NsprNotBeside => "NSS's data calls are in NSPR, and no libnspr4.so is beside its \
             libssl3.so; give --lib PATH/libnspr4.so"
            .into(),
        M::Other(why) => why.clone(),
    }
}

/// Checks that every CPU in `cpus` exists here; the error names `flag` and the first CPU
/// that does not.
pub fn check_cpus(flag: &str, cpus: &[usize]) -> Result<(), String> {
    host::check_cpus(cpus).map_err(|e| match e {
        host::Error::NoSuchCpu { cpu, online } => {
            format!("{flag} {cpu}: this machine has CPUs 0 to {}", online - 1)
        }
    })
}

/// The warning that the client set the rate, naming the flags that give it more room.
pub fn client_bottleneck(b: &ClientBottleneck) -> String {
    let cheaper = if b.cheaper_engine {
        "; or the cheaper client for full handshakes, --client-engine rustls (see bench/client-cost)"
    } else {
        ""
    };
    format!(
        "the client was the bottleneck: a load thread was {:.0}% busy{}; add --threads with a \
         CPU each (--cpus){cheaper}, or the figures describe tlsscope rather than the server",
        b.busiest_pct,
        load::server_busy(b.server_busy_pct)
    )
}

/// A build-cache error, naming the flag that helps where one does.
pub fn build_error(e: BuildError) -> anyhow::Error {
    match build_words_if_flagged(&e) {
        Some(words) => anyhow::anyhow!(words),
        None => e.into(),
    }
}

/// A build-cache error in one line, as a batch shows each failed build.
pub fn build_words(e: &BuildError) -> String {
    build_words_if_flagged(e).unwrap_or_else(|| e.to_string())
}

fn build_words_if_flagged(e: &BuildError) -> Option<String> {
    Some(match e {
        BuildError::UnknownVersion { version, known } => format!(
            "openssl-src has no release of OpenSSL {version} (known: {known}): pick one of \
             those or pass --source PATH"
        ),
        BuildError::TrimmedSource { version, missing } => format!(
            "the source of OpenSSL {version} lacks util/mkdef.pl and {missing}, one of which \
             building shared libraries needs: pass --source with an official release tarball"
        ),
        BuildError::IncompleteInstall {
            target,
            missing,
            log,
        } => format!(
            "{target} installed without {}: see {} and build again with --force",
            missing.display(),
            log.display()
        ),
        BuildError::HeaderVersion {
            path,
            macro_name,
            library,
            log,
        } => format!(
            "{} does not define {macro_name}, which gives the {library} version: see {} and \
             build again with --force",
            path.display(),
            log.display()
        ),
        BuildError::NotBuilt { name } => format!("--openssl {name}: {e}"),
        _ => return None,
    })
}

/// What `openssl list` says of a cache with no builds in it.
pub fn empty_cache(root: &Path) -> String {
    format!(
        "No OpenSSL builds in {} yet: build one with `tlsscope openssl build 3.0.2` (or \
         --source PATH for a local tree or tarball).",
        root.display()
    )
}

/// The built-in server's error, naming --listen when the address is taken.
pub fn server_error(e: server::Error) -> anyhow::Error {
    match e {
        server::Error::AddrInUse { addr } => anyhow::anyhow!(
            "cannot listen on {addr}: the address is already in use; pick another with \
             --listen or stop the program using it"
        ),
        other => other.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_settings_are_worded_with_their_flags() {
        let e = ConfigError::FdLimit {
            connections: 100_000,
            wanted: 100_064,
            limit: 2000,
        };
        assert_eq!(
            load_config(&e),
            "-c 100000 needs about 100064 open files, but this process may open only 2000 \
             (ulimit -n; the hard limit allows no more): lower -c or raise the limit"
        );
        let e = load::Error::Config(ConfigError::ConnectionsBelowThreads {
            connections: 2,
            threads: 4,
        });
        assert_eq!(
            load_error(&e),
            "--connections must be at least --threads (each thread needs a connection)"
        );
    }

    #[test]
    fn rustls_client_errors_name_the_flag_and_the_fix() {
        use load::rustls_client::Provider;
        let group = "X25519MLKEM768"
            .parse::<ossl::GroupList>()
            .unwrap()
            .groups()[0];
        let e = ClientError::GroupNotInProvider {
            group,
            provider: Provider::Ring,
            available: vec!["x25519", "secp256r1"],
            hint_provider: Some(Provider::AwsLcRs),
        };
        assert_eq!(
            rustls_client(&e),
            "--groups X25519MLKEM768: rustls on ring has x25519, secp256r1; \
             --rustls-provider aws-lc-rs has it"
        );
        let e = ClientError::UnknownSuite {
            tls13: false,
            list: "HIGH:!aNULL".into(),
            name: "HIGH".into(),
            known: vec!["ECDHE-ECDSA-AES128-GCM-SHA256"],
        };
        assert_eq!(
            rustls_client(&e),
            "--ciphers HIGH:!aNULL: HIGH is not a suite the rustls client has \
             (ECDHE-ECDSA-AES128-GCM-SHA256)"
        );
        let e = ClientError::MlDsaOnRing {
            store: TrustStore::CaFile("ca.pem".into()),
            ml_dsa: "ML-DSA-44",
        };
        assert_eq!(
            rustls_client(&e),
            "--cafile ca.pem: holds an ML-DSA-44 certificate, which rustls on ring cannot \
             verify; use --rustls-provider aws-lc-rs"
        );
        let e = ClientError::RingHandshakeFailure {
            addr: ([127, 0, 0, 1], 8443).into(),
        };
        assert!(
            rustls_client(&e).ends_with("; use --rustls-provider aws-lc-rs)"),
            "{}",
            rustls_client(&e)
        );
    }

    #[test]
    fn tracing_errors_name_the_backend_flag_and_the_ring_size() {
        let e = probes::Error::Attach {
            pid: 42,
            reason: probes::Refusal::TracedAlready { tracer: "7".into() },
        };
        assert_eq!(
            probes_error(&e),
            "cannot attach the in-process backend to process 42: it is being traced already \
             (by PID 7, a debugger or strace?): detach that first, or use --backend kernel"
        );
        let e = probes::Error::Attach {
            pid: 42,
            reason: probes::Refusal::Failed("no such process".into()),
        };
        assert_eq!(
            probes_error(&e),
            "cannot attach the in-process backend to process 42: no such process"
        );
        let e = probes::Error::RingSize {
            bytes: 4096,
            min: 65536,
            max: 1 << 30,
        };
        assert!(probes_error(&e).starts_with("--ring-size 4096: "));
        assert!(missing_reason(&probes::MissingReason::NsprNotBeside)
            .ends_with("give --lib PATH/libnspr4.so"));
    }

    #[test]
    fn a_cpu_beyond_the_machine_is_named_with_its_flag() {
        assert_eq!(check_cpus("--cpus", &[0]), Ok(()));
        let e = check_cpus("--server-cpu", &[100_000]).unwrap_err();
        assert!(
            e.starts_with("--server-cpu 100000: this machine has CPUs 0 to"),
            "{e}"
        );
    }

    #[test]
    fn the_bottleneck_warning_names_the_flags_that_help() {
        let b = ClientBottleneck {
            busiest_pct: 98.0,
            server_busy_pct: Some(52.0),
            cheaper_engine: true,
        };
        assert_eq!(
            client_bottleneck(&b),
            "the client was the bottleneck: a load thread was 98% busy while the server was \
             52% busy; add --threads with a CPU each (--cpus); or the cheaper client for full \
             handshakes, --client-engine rustls (see bench/client-cost), or the figures \
             describe tlsscope rather than the server"
        );
        let b = ClientBottleneck {
            cheaper_engine: false,
            server_busy_pct: None,
            ..b
        };
        assert!(!client_bottleneck(&b).contains("--client-engine"));
    }

    #[test]
    fn build_cache_errors_name_their_flags() {
        let e = BuildError::NotBuilt {
            name: "3.5.5".into(),
        };
        assert_eq!(
            build_words(&e),
            "--openssl 3.5.5: 3.5.5 is not in the build cache; run `tlsscope openssl build \
             3.5.5` first, or pass an install prefix"
        );
        let e = BuildError::IncompleteInstall {
            target: "AWS-LC".into(),
            missing: "lib/libssl.so".into(),
            log: "/c/build.log".into(),
        };
        assert!(build_words(&e).ends_with("build again with --force"));
        let e = BuildError::BatchFailed {
            failed: vec!["x".into()],
            total: 2,
        };
        assert_eq!(build_words(&e), e.to_string());
        assert!(empty_cache(Path::new("/c")).contains("--source PATH"));
    }

    #[test]
    fn a_taken_address_names_listen() {
        let e = server_error(server::Error::AddrInUse {
            addr: ([127, 0, 0, 1], 8443).into(),
        });
        assert!(
            e.to_string()
                .ends_with("pick another with --listen or stop the program using it"),
            "{e}"
        );
    }
}
