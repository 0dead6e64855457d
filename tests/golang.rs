//! Go programs: the functions and Go version `probes::GoBinary` reads from real Go binaries,
//! built here by three Go toolchains (two layouts of Go's function table), checked against the
//! Go toolchain's own `go version` and `go tool nm`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use probes::{Error, GoBinary, GoError};

use crate::support;
use crate::support::go::go;

/// The Go toolchains the tests build with: the machine's own, the one other version approved
/// here, which `go` fetches as a module (GOTOOLCHAIN) on first use, and Debian's Go 1.19
/// (golang-1.19-go, `make deps`), whose function table has the Go 1.18-1.19 layout.
const TOOLCHAINS: [Toolchain; 3] = [Toolchain::Local, Toolchain::Go1_27_3, Toolchain::Debian1_19];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Toolchain {
    /// Whatever `go` is installed (go1.26.8 on the project's machines).
    Local,
    Go1_27_3,
    Debian1_19,
}

impl Toolchain {
    /// GOTOOLCHAIN's value (Go 1.19 knows no GOTOOLCHAIN, and builds with itself).
    fn gotoolchain(self) -> &'static str {
        match self {
            Toolchain::Local | Toolchain::Debian1_19 => "local",
            Toolchain::Go1_27_3 => "go1.27.3",
        }
    }

    /// The go command.
    fn go(self) -> PathBuf {
        match self {
            Toolchain::Debian1_19 => support::go::debian_go_1_19(),
            _ => go(),
        }
    }

    /// The release `go version` must name, where it is not the machine's own.
    fn release(self) -> Option<&'static str> {
        match self {
            Toolchain::Local => None,
            Toolchain::Go1_27_3 => Some("go1.27.3"),
            Toolchain::Debian1_19 => Some("go1.19"),
        }
    }

    /// The go.mod's go line: the oldest toolchain's own release where it builds.
    fn go_mod(self) -> &'static str {
        match self {
            Toolchain::Debian1_19 => "module example\n\ngo 1.19\n",
            _ => "module example\n\ngo 1.22\n",
        }
    }
}

/// Runs `go ARGS` with `toolchain` in `dir`; panics with its stderr unless it succeeds.
fn run_go(toolchain: Toolchain, dir: &Path, args: &[&str]) -> String {
    let out = support::run_with_timeout(
        Command::new(toolchain.go())
            .args(args)
            .current_dir(dir)
            .env("GOTOOLCHAIN", toolchain.gotoolchain())
            .env("GOFLAGS", "-mod=mod"),
        Duration::from_secs(600),
    );
    assert!(
        out.status.success(),
        "go {args:?} ({toolchain:?}): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const TLS_SERVER: &str = r#"package main

import (
	"log"
	"net/http"
)

func main() {
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("hello\n")) })
	log.Fatal(http.ListenAndServeTLS("127.0.0.1:0", "cert.pem", "key.pem", nil))
}
"#;

const NO_TLS: &str = r#"package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stdout, "hello", len(os.Args))
}
"#;

/// The programs one toolchain built.
struct Programs {
    toolchain: Toolchain,
    /// The HTTPS server, built normally.
    tls: PathBuf,
    /// The same server built with `-ldflags=-s -w`: no .symtab, no DWARF.
    tls_stripped: PathBuf,
    /// The same server as a position-independent executable (`-buildmode=pie`).
    tls_pie: PathBuf,
    /// A program that does not use TLS.
    no_tls: PathBuf,
}

/// Builds each program once per test run and toolchain.
fn programs(toolchain: Toolchain) -> &'static Programs {
    static BUILT: [OnceLock<Programs>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    let slot = TOOLCHAINS.iter().position(|&t| t == toolchain).unwrap();
    BUILT[slot].get_or_init(|| build(toolchain))
}

fn build(toolchain: Toolchain) -> Programs {
    if let Some(release) = toolchain.release() {
        // GOTOOLCHAIN is Go 1.21's: an older go ignores it and would build with itself.
        let version = run_go(toolchain, Path::new("."), &["version"]);
        assert!(
            version.contains(release),
            "{toolchain:?} gave {version:?}: switching toolchains needs a local go of 1.21 or later"
        );
    }
    let root = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("golang")
        .join(format!("{toolchain:?}"));
    let module = |name: &str, source: &str| -> PathBuf {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("go.mod"), toolchain.go_mod()).unwrap();
        std::fs::write(dir.join("main.go"), source).unwrap();
        dir
    };
    let tls_dir = module("tls-server", TLS_SERVER);
    let no_tls_dir = module("no-tls", NO_TLS);
    run_go(toolchain, &tls_dir, &["build", "-o", "server", "."]);
    run_go(
        toolchain,
        &tls_dir,
        &["build", "-ldflags=-s -w", "-o", "server-stripped", "."],
    );
    run_go(
        toolchain,
        &tls_dir,
        &["build", "-buildmode=pie", "-o", "server-pie", "."],
    );
    run_go(toolchain, &no_tls_dir, &["build", "-o", "hello", "."]);
    Programs {
        toolchain,
        tls: tls_dir.join("server"),
        tls_stripped: tls_dir.join("server-stripped"),
        tls_pie: tls_dir.join("server-pie"),
        no_tls: no_tls_dir.join("hello"),
    }
}

/// What `go version FILE` says built it: "FILE: go1.26.8".
fn go_version_of(programs: &Programs, binary: &Path) -> String {
    let out = run_go(
        programs.toolchain,
        Path::new("."),
        &["version", binary.to_str().unwrap()],
    );
    out.trim()
        .rsplit(' ')
        .next()
        .expect("go version prints the version last")
        .to_string()
}

/// The text symbols `go tool nm -size` lists: name to (address, size).
fn nm_text_symbols(programs: &Programs, binary: &Path) -> HashMap<String, (u64, u64)> {
    let out = run_go(
        programs.toolchain,
        Path::new("."),
        &["tool", "nm", "-size", binary.to_str().unwrap()],
    );
    let mut symbols = HashMap::new();
    for line in out.lines() {
        // "  5ae700        950 T crypto/tls.(*Conn).Read": the name may hold spaces.
        let mut fields = line.split_whitespace();
        let (Some(address), Some(size), Some(kind)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if kind != "T" && kind != "t" {
            continue;
        }
        let name = fields.collect::<Vec<_>>().join(" ");
        let address = u64::from_str_radix(address, 16).expect("a hex address");
        let size: u64 = size.parse().expect("a decimal size");
        symbols.insert(name, (address, size));
    }
    symbols
}

/// Text symbols that are markers, not functions, so the function table does not list them:
/// the bounds of the text (`runtime.text`, `runtime.etext`), the build ID note at its start,
/// and the section symbols of the C objects a cgo program links in ("net(.text)",
/// "runtime/cgo(.text.unlikely)"), which start where the object's first function does.
fn is_marker(name: &str, size: u64) -> bool {
    matches!(name, "runtime.text" | "runtime.etext" | "go:buildid")
        || name.contains("(.text")
        || size == 0
}

/// A function table name as the ELF symbol table writes it: Go's middle dot
/// ("type:.eq.net.dialResult·2") as a plain dot.
fn elf_name(name: &str) -> String {
    name.replace('·', ".")
}

/// The function table's name for a symbol: the ELF symbol table marks assembly functions of
/// the old calling convention with ".abi0" ("runtime.call16384.abi0"); the function table
/// does not. Go 1.18-1.19's linker also shortened a generic function's type arguments to
/// "[...]" in the table ("crypto/elliptic.(*nistCurve[...]).ScalarBaseMult"), where the symbol
/// table spells them out: both sides are compared in that short form.
fn go_name(nm_name: &str) -> String {
    short_generics(nm_name.strip_suffix(".abi0").unwrap_or(nm_name))
}

/// `name` with each outermost [type arguments] as "[...]".
fn short_generics(name: &str) -> String {
    let (mut out, mut depth) = (String::with_capacity(name.len()), 0usize);
    for c in name.chars() {
        match c {
            '[' => {
                if depth == 0 {
                    out.push_str("[...]");
                }
                depth += 1;
            }
            ']' if depth > 0 => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

#[test]
fn the_go_version_is_what_go_version_prints() {
    for toolchain in TOOLCHAINS {
        let p = programs(toolchain);
        for binary in [&p.tls, &p.tls_stripped, &p.tls_pie, &p.no_tls] {
            let go = GoBinary::read(binary).unwrap();
            assert_eq!(
                go.go_version(),
                Some(go_version_of(p, binary).as_str()),
                "{}",
                binary.display()
            );
            assert_eq!(go.main_module(), Some("example"));
            assert_eq!(go.main_package(), Some("example"));
        }
    }
    assert_ne!(
        GoBinary::read(&programs(Toolchain::Local).tls)
            .unwrap()
            .go_version(),
        GoBinary::read(&programs(Toolchain::Go1_27_3).tls)
            .unwrap()
            .go_version(),
        "the two toolchains are different Go versions"
    );
}

#[test]
fn every_function_go_tool_nm_lists_is_found_at_its_address_with_its_size() {
    for toolchain in TOOLCHAINS {
        let p = programs(toolchain);
        let go = GoBinary::read(&p.tls).unwrap();
        let nm = nm_text_symbols(p, &p.tls);
        assert!(
            nm.len() > 1000,
            "{toolchain:?}: nm listed {} text symbols",
            nm.len()
        );
        let by_address: HashMap<u64, &probes::GoFunction> =
            go.functions().map(|f| (f.address, f)).collect();
        let mut checked = 0;
        for (name, &(address, size)) in &nm {
            if is_marker(name, size) {
                continue;
            }
            // By address, then the name: a function and its ABI wrapper share a name in the
            // table.
            let f = by_address
                .get(&address)
                .unwrap_or_else(|| panic!("{toolchain:?}: {name} at {address:#x} not found"));
            assert_eq!(
                short_generics(&elf_name(&f.name)),
                go_name(name),
                "{toolchain:?}: at {address:#x}"
            );
            if f.exact_size {
                assert_eq!(f.size, size, "{toolchain:?}: {name}");
            } else {
                // C code (cgo): the table has no size, so it runs to the next function.
                assert!(f.size >= size, "{toolchain:?}: {name}: {} < {size}", f.size);
            }
            checked += 1;
        }
        assert!(checked > 1000, "{toolchain:?}: checked {checked}");
        // And no function the table has is unknown to nm.
        let nm_names: std::collections::HashSet<String> = nm.keys().map(|n| go_name(n)).collect();
        for f in go.functions() {
            let name = short_generics(&elf_name(&f.name));
            assert!(
                nm_names.contains(name.as_str()),
                "{toolchain:?}: {name} not in nm"
            );
        }
    }
}

#[test]
fn a_stripped_build_gives_the_same_functions_and_addresses() {
    for toolchain in TOOLCHAINS {
        let p = programs(toolchain);
        let full = GoBinary::read(&p.tls).unwrap();
        let stripped = GoBinary::read(&p.tls_stripped).unwrap();
        let symtab = |path: &Path| {
            let data = std::fs::read(path).unwrap();
            probes::SymbolTable::parse(path, &data)
                .unwrap()
                .has_full_table()
        };
        assert!(
            symtab(&p.tls) && !symtab(&p.tls_stripped),
            "-s removed .symtab"
        );
        let names = |b: &GoBinary| {
            b.functions()
                .map(|f| (f.name.clone(), f.address, f.size))
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&full), names(&stripped), "{toolchain:?}");
        // The same code, at each binary's own file offset: the same length and prologue (the
        // displacements to data differ, since stripping moves the read-only data).
        let read = full.function("crypto/tls.(*Conn).Read").unwrap();
        let read_stripped = stripped.function("crypto/tls.(*Conn).Read").unwrap();
        let (code, code_stripped) = (
            full.code(read).unwrap(),
            stripped.code(read_stripped).unwrap(),
        );
        assert_eq!(code.len(), code_stripped.len());
        assert_eq!(code[..16], code_stripped[..16]);
    }
}

/// A position-independent build: the same functions, each at the file offset of its own code
/// (checked against the ELF symbol table the PIE build keeps).
#[test]
fn a_pie_build_gives_each_function_its_own_file_offset() {
    for toolchain in TOOLCHAINS {
        let p = programs(toolchain);
        let pie = GoBinary::read(&p.tls_pie).unwrap();
        let plain = GoBinary::read(&p.tls).unwrap();
        let names = |b: &GoBinary| b.functions().map(|f| f.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&pie), names(&plain), "{toolchain:?}");
        let symbols = probes::SymbolTable::read(&p.tls_pie).unwrap();
        for name in [
            "crypto/tls.(*Conn).Read",
            "crypto/tls.(*Conn).Write",
            "main.main",
        ] {
            let f = pie.function(name).unwrap();
            assert_eq!(
                Some(f.address),
                symbols.function(name).map(|s| s.address),
                "{toolchain:?}: {name}"
            );
            assert_eq!(
                pie.uprobe_offset(name).unwrap(),
                symbols.uprobe_offset(name).unwrap(),
                "{toolchain:?}: {name}"
            );
        }
    }
}

/// The functions the later parts of issue 34 put uprobes on.
#[test]
fn tls_conn_functions_are_found_in_a_tls_program_and_absent_from_another() {
    for toolchain in TOOLCHAINS {
        let p = programs(toolchain);
        for binary in [&p.tls, &p.tls_stripped, &p.tls_pie] {
            let go = GoBinary::read(binary).unwrap();
            let data = std::fs::read(binary).unwrap();
            for name in ["crypto/tls.(*Conn).Read", "crypto/tls.(*Conn).Write"] {
                let f = go.function(name).unwrap_or_else(|| {
                    panic!("{toolchain:?}: {name} missing from {}", binary.display())
                });
                let code = go.code(f).unwrap();
                assert_eq!(code.len() as u64, f.size);
                assert_eq!(
                    &data[f.file_offset as usize..][..code.len()],
                    code,
                    "{name}: the code is at its file offset"
                );
                assert_eq!(go.uprobe_offset(name).unwrap(), f.file_offset);
            }
            assert!(
                go.function("crypto/tls.(*Conn).HandshakeContext").is_some()
                    || go.function("crypto/tls.(*Conn).handshakeContext").is_some(),
                "{toolchain:?}: no handshake function in {}",
                binary.display()
            );
        }
        let plain = GoBinary::read(&p.no_tls).unwrap();
        assert!(plain.function("main.main").is_some());
        assert!(
            plain
                .functions()
                .all(|f| !f.name.starts_with("crypto/tls.")),
            "{toolchain:?}: the program without TLS has crypto/tls functions"
        );
        assert!(matches!(
            plain.uprobe_offset("crypto/tls.(*Conn).Read"),
            Err(Error::NoSymbol { .. })
        ));
    }
}

#[test]
fn a_program_that_is_not_go_is_not_go() {
    let err = GoBinary::read(Path::new("/bin/true")).unwrap_err();
    assert!(
        matches!(&err, Error::Go(GoError::NotGo { path }) if path == Path::new("/bin/true")),
        "{err}"
    );
    assert!(err.to_string().contains("not a Go program"), "{err}");
}

#[test]
fn a_truncated_go_program_is_an_error_not_a_panic() {
    let p = programs(Toolchain::Local);
    let data = std::fs::read(&p.tls_stripped).unwrap();
    let path = Path::new("truncated");
    // Cut inside the text, and in the read-only data before the function table: the table
    // is gone, or the functions' code is.
    for len in [data.len() / 8, data.len() / 2] {
        assert!(
            GoBinary::parse(path, &data[..len]).is_err(),
            "a copy cut to {len} of {} bytes read",
            data.len()
        );
    }
    // Cuts anywhere: an error, or functions whose code lies inside what is left.
    for len in (0..data.len()).step_by(data.len() / 64) {
        if let Ok(go) = GoBinary::parse(path, &data[..len]) {
            for f in go.functions() {
                assert!(
                    f.file_offset + f.size <= len as u64,
                    "{} past the cut",
                    f.name
                );
            }
        }
    }
}
