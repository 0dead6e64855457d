//! `tlsscope openssl build` and `list`.

use crate::support::{self, assert_error_line, text, Serve};

#[test]
fn builds_111w_with_symbols_and_an_rpath() {
    let prefix = support::openssl_111w();
    let libssl = prefix.join("lib/libssl.so.1.1");
    let libcrypto = prefix.join("lib/libcrypto.so.1.1");
    assert!(
        libssl.is_file() && libcrypto.is_file(),
        "{}",
        prefix.display()
    );
    let dynamic = std::process::Command::new("readelf")
        .arg("-d")
        .arg(&libssl)
        .output()
        .unwrap();
    let dynamic = text(&dynamic.stdout);
    assert!(
        dynamic.contains(&format!("[{}]", prefix.join("lib").display())),
        "no rpath: {dynamic}"
    );
    // Internal functions stay probeable: the symbol table is kept.
    let symbols = std::process::Command::new("nm")
        .arg(&libcrypto)
        .output()
        .unwrap();
    assert!(text(&symbols.stdout).contains(" rsa_ossl_private_decrypt"));
    // Idempotent: a second build is a no-op that says so.
    let out = support::tlsscope(&["openssl", "build", "1.1.1w"]);
    assert!(out.status.success());
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(said.contains("already built"), "{said}");
    let list = text(&support::tlsscope(&["openssl", "list"]).stdout);
    assert!(
        list.contains("1.1.1w") && list.contains("system: OpenSSL 3."),
        "{list}"
    );
}

#[test]
fn unknown_version_is_a_clear_error() {
    let out = support::tlsscope(&["openssl", "build", "9.9.9"]);
    assert_error_line(&out, &["9.9.9", "1.1.1w"]);
    let out = support::tlsscope(&["openssl", "build", "--source", "/nonexistent/openssl-src"]);
    assert_error_line(&out, &["/nonexistent/openssl-src"]);
}

/// The symbols `readelf --dyn-syms` shows as defined and exported from `library`, with their
/// version (`SSL_new@@OPENSSL_3.0.0`).
fn exported_symbols(library: &std::path::Path) -> Vec<String> {
    let out = std::process::Command::new("readelf")
        .args(["--dyn-syms", "-W"])
        .arg(library)
        .output()
        .unwrap();
    assert!(out.status.success(), "readelf {}", library.display());
    text(&out.stdout)
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // Num: Value Size Type Bind Vis Ndx Name; Ndx UND is an import, ABS a version
            // node's own name.
            (fields.len() == 8 && fields[4] == "GLOBAL" && !["UND", "ABS"].contains(&fields[6]))
                .then(|| fields[7].to_string())
        })
        .collect()
}

// Issue 31: openssl-src's 3.5 and later copies lack util/mkdef.pl, which writes the linker
// version scripts of a shared build; tlsscope writes them from util/*.num instead.
#[test]
fn builds_3_5_5_whose_libraries_export_openssls_symbol_versions() {
    let prefix = support::openssl_355();
    let libssl = exported_symbols(&prefix.join("lib/libssl.so.3"));
    let libcrypto = exported_symbols(&prefix.join("lib/libcrypto.so.3"));
    for (symbols, wanted) in [
        (&libssl, "SSL_new@@OPENSSL_3.0.0"),
        (&libssl, "SSL_get0_group_name@@OPENSSL_3.2.0"),
        (&libssl, "SSL_CTX_set_domain_flags@@OPENSSL_3.5.0"),
        (&libcrypto, "EVP_PKEY_new@@OPENSSL_3.0.0"),
        (&libcrypto, "OPENSSL_version_major@@OPENSSL_3.0.0"),
    ] {
        assert!(symbols.iter().any(|s| s == wanted), "{wanted} not exported");
    }
    // Every export is versioned, and internal functions stay local (but in the symbol table,
    // for probes).
    for symbol in libssl.iter().chain(&libcrypto) {
        assert!(
            symbol.contains("@@OPENSSL_3."),
            "unversioned export {symbol}"
        );
    }
    let symbols = std::process::Command::new("nm")
        .arg(prefix.join("lib/libcrypto.so.3"))
        .output()
        .unwrap();
    let symbols = text(&symbols.stdout);
    assert!(symbols.contains(" t rsa_ossl_private_decrypt"));
    // `local: *` hides the library-internal (non-static) ossl_ functions.
    assert!(symbols.contains(" t ossl_rsa_check_factors"));
    assert!(!libcrypto.iter().any(|s| s.starts_with("ossl_")));
    let list = text(&support::tlsscope(&["openssl", "list"]).stdout);
    assert!(
        list.lines().any(|l| l.starts_with("3.5.5 ")
            && l.contains("openssl-src 300.5.5+3.5.5")
            && l.contains(prefix.to_str().unwrap())),
        "{list}"
    );
}

#[test]
fn openssl_3_5_5_serves_full_handshakes_its_own_client_obtains() {
    let prefix = support::openssl_355().to_str().unwrap().to_string();
    let serve = Serve::start_with(&["--openssl", &prefix], &[]);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let out = support::tlsscope(&[
        "--openssl",
        &prefix,
        "bench",
        &serve.addr.to_string(),
        "--client-engine",
        "openssl",
        "--mode",
        "full",
        "-n",
        "30",
        "-c",
        "2",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    support::assert_matches_schema(&doc, "bench.v1");
    let result = &doc["result"];
    let library = result["client"]["library"].as_str().unwrap();
    assert!(library.starts_with("OpenSSL 3.5.5"), "{library}");
    let bench_full = result["handshakes"]["full"].as_u64().unwrap();
    assert_eq!(bench_full, 30, "{}", result["handshakes"]);
    let stats = serve.stop();
    let server_library = stats["library"].as_str().unwrap();
    assert!(
        server_library.starts_with("OpenSSL 3.5.5"),
        "{server_library}"
    );
    // The server also counts bench's check connection before the run.
    assert_eq!(
        stats["handshakes"]["full"].as_u64(),
        Some(bench_full + 1),
        "{stats}"
    );
    assert_eq!(stats["handshakes"]["failed"].as_u64(), Some(0), "{stats}");
}

/// The line of `tlsscope openssl list` whose first word is `name`.
fn listed(name: &str) -> String {
    let list = text(&support::tlsscope(&["openssl", "list"]).stdout);
    list.lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("{name} not in `openssl list`: {list}"))
        .to_string()
}

/// Checks a CMake build (AWS-LC, BoringSSL) at `prefix`: shared `libssl.so` and `libcrypto.so`
/// exporting the OpenSSL names unprefixed, a symbol table kept, a RUNPATH to its own `lib/`, a
/// second build that does nothing, and a listing with its flavour and `version`.
fn assert_cmake_build(name: &str, prefix: &std::path::Path, flavour: &str, version: &str) {
    let lib = prefix.join("lib");
    let libssl = lib.join("libssl.so");
    let libcrypto = lib.join("libcrypto.so");
    assert!(libcrypto.is_file(), "{}", libcrypto.display());
    let exported = exported_symbols(&libssl);
    for wanted in ["SSL_do_handshake", "SSL_CTX_new", "SSL_read", "SSL_write"] {
        assert!(
            exported.iter().any(|s| s == wanted),
            "{wanted} not exported unprefixed by {}",
            libssl.display()
        );
    }
    // `nm` without -D reads .symtab, which a stripped library lacks: internal (local)
    // functions stay visible to probes and profiles.
    let symbols = std::process::Command::new("nm")
        .arg(&libssl)
        .output()
        .unwrap();
    let symbols = text(&symbols.stdout);
    assert!(symbols.contains(" T SSL_do_handshake\n"), "no symtab");
    assert!(
        symbols.lines().filter(|l| l.contains(" t ")).count() > 100,
        "few local symbols in {}",
        libssl.display()
    );
    for library in [&libssl, &libcrypto] {
        let dynamic = std::process::Command::new("readelf")
            .arg("-d")
            .arg(library)
            .output()
            .unwrap();
        let dynamic = text(&dynamic.stdout);
        assert!(
            dynamic
                .lines()
                .any(|l| l.contains("(RUNPATH)") && l.contains(&format!("[{}]", lib.display()))),
            "no RUNPATH to {}: {dynamic}",
            lib.display()
        );
    }
    // Idempotent: a second build is a no-op that says so, naming the library and version.
    let out = support::tlsscope(&["openssl", "build", name]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(
        said.contains(&format!(
            "{flavour} {version} already built at {}",
            prefix.display()
        )),
        "{said}"
    );
    let line = listed(name);
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words[1], flavour, "{line}");
    assert!(line.contains(&format!(" {version} ")), "{line}");
    assert!(words.contains(&prefix.to_str().unwrap()), "{line}");
}

// Issue 31: AWS-LC from the aws-lc-sys crate's sources, its version from its own headers.
#[test]
fn aws_lc_builds_unprefixed_shared_libraries_with_symbols_and_a_runpath() {
    let prefix = support::openssl_aws_lc();
    let base_h = std::fs::read_to_string(prefix.join("include/openssl/base.h")).unwrap();
    assert!(base_h.contains("#define AWSLC_VERSION_NUMBER_STRING \"5.12.0\""));
    assert_cmake_build("aws-lc", prefix, "AWS-LC", "5.12.0");
    assert!(listed("aws-lc").contains("aws-lc-sys 0.47.0"));
}

// Issue 31: BoringSSL from the boring-sys crate's sources (deps/boringssl), named by its API.
#[test]
fn boringssl_builds_unprefixed_shared_libraries_with_symbols_and_a_runpath() {
    let prefix = support::openssl_boringssl();
    let base_h = std::fs::read_to_string(prefix.join("include/openssl/base.h")).unwrap();
    let api = base_h
        .lines()
        .find_map(|l| l.strip_prefix("#define BORINGSSL_API_VERSION "))
        .expect("BORINGSSL_API_VERSION in base.h")
        .trim();
    assert_cmake_build("boringssl", prefix, "BoringSSL", &format!("API {api}"));
    assert!(listed("boringssl").contains("boring-sys 5.4.0"));
}

#[test]
fn openssl_4_0_3_is_listed_with_its_flavour_and_version() {
    let prefix = support::openssl_403();
    let line = listed("4.0.3");
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words[..3], ["4.0.3", "OpenSSL", "4.0.3"], "{line}");
    assert!(line.contains("openssl-src 400.0.2+4.0.3"), "{line}");
    assert!(words.contains(&prefix.to_str().unwrap()), "{line}");
}

/// A directory of links to every program on PATH except `left_out`, to be used as PATH.
fn path_without(dir: &std::path::Path, left_out: &[&str]) -> std::path::PathBuf {
    let bin = dir.join(format!("bin-without-{}", left_out[0]));
    std::fs::create_dir(&bin).unwrap();
    let path = std::env::var_os("PATH").unwrap();
    for entries in std::env::split_paths(&path).filter_map(|d| std::fs::read_dir(d).ok()) {
        for program in entries.filter_map(Result::ok) {
            let name = program.file_name();
            let kept = !left_out.iter().any(|out| name == *out);
            if kept && !bin.join(&name).exists() {
                std::os::unix::fs::symlink(program.path(), bin.join(&name)).unwrap();
            }
        }
    }
    bin
}

#[test]
fn a_cmake_build_missing_cmake_ninja_or_gxx_fails_in_one_line_naming_it() {
    // A PATH with every program of the real one but the tool, and a fresh cache.
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let cases: [(&[&str], &str, &str); 3] = [
        (&["cmake"], "cmake", "apt-get install cmake"),
        (&["ninja"], "ninja", "apt-get install ninja-build"),
        (&["g++", "c++"], "g++", "apt-get install g++"),
    ];
    for (left_out, tool, hint) in cases {
        let bin = path_without(dir.path(), left_out);
        assert!(bin.join("cargo").exists() && bin.join("gcc").exists());
        for (name, flavour) in [("aws-lc", "AWS-LC"), ("boringssl", "BoringSSL")] {
            let out = support::run_with_timeout(
                support::command_in(&[])
                    .args(["openssl", "build", name])
                    .env("PATH", &bin)
                    .env("XDG_CACHE_HOME", &cache),
                std::time::Duration::from_secs(60),
            );
            let cannot = format!("cannot build {flavour}: '{tool}' is not installed");
            assert_error_line(&out, &[&cannot, hint]);
            assert!(!cache.join("tlsscope/openssl").join(name).exists());
        }
    }
}

#[test]
fn an_unbuilt_flavour_given_to_openssl_says_how_to_build_it() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["aws-lc", "boringssl"] {
        let out = support::run_with_timeout(
            support::command_in(&[])
                .args(["--openssl", name, "handshake", "127.0.0.1:9"])
                .env("XDG_CACHE_HOME", dir.path()),
            std::time::Duration::from_secs(60),
        );
        let flag = format!("--openssl {name}: ");
        let how = format!("{name} is not in the build cache; run `tlsscope openssl build {name}`");
        assert_error_line(&out, &[&flag, &how]);
    }
}
