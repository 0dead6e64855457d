//! The command line's words for the errors of the crates only it uses (the OpenSSL build
//! cache, the built-in server): the libraries name the thing wrong; these sentences add the
//! flag that changes it. The other libraries' errors are worded in `experiments::wording`.

use std::path::Path;

use ossl_build::BuildError;

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
