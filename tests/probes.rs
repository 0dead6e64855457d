//! Where uprobes attach: the TLS libraries a process maps and the file offsets of their
//! functions, checked against where the dynamic loader really put them.

use std::ffi::CString;

use probes::{tls_libraries, LibraryKind, SymbolTable, Table};

use crate::support;

/// The runtime address of `symbol` in the already loaded `library`.
fn runtime_address(library: &str, symbol: &str) -> u64 {
    let lib = CString::new(library).unwrap();
    let sym = CString::new(symbol).unwrap();
    // SAFETY: RTLD_NOLOAD only looks up an already loaded library; dlsym reads its table.
    unsafe {
        let handle = libc::dlopen(lib.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
        assert!(!handle.is_null(), "{library} is not loaded");
        let address = libc::dlsym(handle, sym.as_ptr());
        assert!(!address.is_null(), "{symbol} not found at run time");
        address as u64
    }
}

#[test]
fn uprobe_offsets_match_where_the_loader_mapped_the_code() {
    ossl::Library::load(&ossl::LibrarySource::System).unwrap();
    let libs = tls_libraries(std::process::id()).unwrap();
    let libssl = libs
        .iter()
        .find(|l| l.kind == LibraryKind::OpensslSsl)
        .expect("libssl mapped");
    assert!(
        libs.iter().any(|l| l.kind == LibraryKind::OpensslCrypto),
        "{libs:?}"
    );

    let maps = probes::maps::parse_maps(&std::fs::read_to_string("/proc/self/maps").unwrap());
    let table = SymbolTable::read(&libssl.path).unwrap();
    for function in [
        "SSL_do_handshake",
        "SSL_read",
        "SSL_read_ex",
        "SSL_write",
        "SSL_write_ex",
    ] {
        let address = runtime_address("libssl.so.3", function);
        let mapping = maps
            .iter()
            .find(|m| address >= m.start && address < m.end)
            .expect("a mapping holds the function");
        assert_eq!(mapping.path.as_deref(), Some(libssl.path.as_path()));
        assert!(mapping.executable, "{function} is in executable memory");
        let expected = address - mapping.start + mapping.offset;
        assert_eq!(
            table.uprobe_offset(function).unwrap(),
            expected,
            "{function}"
        );
        assert_eq!(table.function(function).unwrap().table, Table::Dynamic);
    }
}

#[test]
fn internal_functions_need_a_full_symbol_table() {
    // Debian's libcrypto is stripped: exported EVP functions only.
    let debian = SymbolTable::read("/usr/lib/x86_64-linux-gnu/libcrypto.so.3".as_ref()).unwrap();
    assert!(!debian.has_full_table());
    assert!(debian.uprobe_offset("EVP_DigestSign").is_ok());
    let err = debian
        .uprobe_offset("rsa_ossl_private_decrypt")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("rsa_ossl_private_decrypt") && err.contains("stripped"),
        "{err}"
    );

    // A build by `tlsscope openssl build` keeps them.
    let built = SymbolTable::read(&support::openssl_111w().join("lib/libcrypto.so.1.1")).unwrap();
    assert!(built.has_full_table());
    for internal in [
        "rsa_ossl_private_decrypt",
        "ossl_ecdsa_sign",
        "ecdh_simple_compute_key",
    ] {
        assert!(built.uprobe_offset(internal).is_ok(), "{internal}");
        assert_eq!(built.function(internal).unwrap().table, Table::Full);
    }
    assert!(built.function("EVP_DigestSign").is_some());
}

#[test]
fn bad_files_and_processes_are_named() {
    let err = SymbolTable::read("/etc/hostname".as_ref())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("/etc/hostname") && err.contains("not an ELF"),
        "{err}"
    );
    let err = SymbolTable::read("/nonexistent/libssl.so".as_ref())
        .unwrap_err()
        .to_string();
    assert!(err.contains("/nonexistent/libssl.so"), "{err}");
    let err = tls_libraries(u32::MAX - 1).unwrap_err().to_string();
    assert!(err.contains(&(u32::MAX - 1).to_string()), "{err}");
}
