//! `tlsscope openssl build` and `list`.

use crate::support::{self, assert_error_line, text};

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
