//! Go programs for the tests: the sources in tests/fixtures/go/<name>/main.go, built with the
//! machine's Go toolchain (on PATH, or /usr/local/go/bin/go; `make deps` installs Debian's
//! golang-go where there is none), once per test run, plain and stripped (`-ldflags=-s -w`,
//! which drops the symbol table and DWARF but keeps Go's own .gopclntab).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// The go command.
pub fn go() -> PathBuf {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("go"))
            .find(|p| p.is_file())
    });
    let go = on_path.unwrap_or_else(|| PathBuf::from("/usr/local/go/bin/go"));
    assert!(
        go.exists(),
        "no Go toolchain: `go` is not on PATH nor at /usr/local/go/bin/go (make deps installs one)"
    );
    go
}

/// Debian's Go 1.19 (package golang-1.19-go, installed by `make deps`): an older layout of
/// Go's function table than the current releases'.
pub fn debian_go_1_19() -> PathBuf {
    let go = PathBuf::from("/usr/lib/go-1.19/bin/go");
    assert!(
        go.exists(),
        "no Go 1.19 at {}: make deps installs Debian's golang-1.19-go",
        go.display()
    );
    go
}

/// A built Go program: its plain and its stripped binary.
#[derive(Clone, Debug)]
pub struct GoBuild {
    pub plain: PathBuf,
    pub stripped: PathBuf,
}

/// `tests/fixtures/go/<name>`, built (once per test run) with `toolchain` (None: the machine's
/// Go; Some("go1.27.3"): that release, fetched by the go command from the module proxy;
/// Some("debian-go1.19"): Debian's Go 1.19).
pub fn build(name: &str, toolchain: Option<&str>) -> GoBuild {
    static BUILT: OnceLock<Mutex<HashMap<String, GoBuild>>> = OnceLock::new();
    let key = format!("{name}@{}", toolchain.unwrap_or("local"));
    let built = BUILT.get_or_init(|| Mutex::new(HashMap::new()));
    let mut built = built.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(b) = built.get(&key) {
        return b.clone();
    }
    let source = super::workspace_path(&format!("tests/fixtures/go/{name}"));
    let out = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("go-programs")
        .join(&key);
    std::fs::create_dir_all(&out).unwrap();
    let debian = toolchain == Some("debian-go1.19");
    let go_line = if debian { "1.19" } else { "1.22" };
    std::fs::write(
        out.join("go.mod"),
        format!("module example\n\ngo {go_line}\n"),
    )
    .unwrap();
    std::fs::copy(source.join("main.go"), out.join("main.go")).unwrap();
    let b = GoBuild {
        plain: out.join(name),
        stripped: out.join(format!("{name}-stripped")),
    };
    for (binary, flags) in [(&b.plain, ""), (&b.stripped, "-s -w")] {
        let mut cmd = Command::new(if debian { debian_go_1_19() } else { go() });
        cmd.current_dir(&out)
            .args(["build", "-trimpath", "-ldflags", flags, "-o"])
            .arg(binary)
            .arg(".")
            .env("GOFLAGS", "-mod=mod");
        match toolchain {
            Some(t) if !debian => cmd.env("GOTOOLCHAIN", t),
            _ => cmd.env("GOTOOLCHAIN", "local"),
        };
        let result = super::run_with_timeout(&mut cmd, Duration::from_secs(600));
        assert!(
            result.status.success(),
            "go build of {name} ({key}) failed: {}",
            super::text(&result.stderr)
        );
    }
    built.insert(key, b.clone());
    b
}
