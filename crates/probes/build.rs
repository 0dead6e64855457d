//! Compiles the kernel backend's BPF programs in src/kernel/bpf with clang and writes their
//! libbpf-rs skeletons to OUT_DIR. clang comes from the Makefile's install step (Debian's clang
//! package).

use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

/// The BPF programs, by name: `src/kernel/bpf/<name>.bpf.c` becomes `OUT_DIR/<name>.skel.rs`.
const PROGRAMS: &[&str] = &["latency", "sniff"];

/// Where the BPF programs and their headers are.
const BPF_DIR: &str = "src/kernel/bpf";

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let arch = env::var("CARGO_CFG_TARGET_ARCH").expect("cargo sets CARGO_CFG_TARGET_ARCH");
    // The BPF programs include <linux/ptrace.h> for user-space `struct pt_regs`, whose <asm/...>
    // headers live in Debian's multiarch include directory, which clang -target bpf does not
    // search on its own.
    let multiarch = format!("-idirafter/usr/include/{arch}-linux-gnu");
    vmlinux_h(&out);
    let out_include = format!("-I{}", out.display());
    for name in PROGRAMS {
        let src = format!("{BPF_DIR}/{name}.bpf.c");
        SkeletonBuilder::new()
            .source(&src)
            .clang_args([
                "-O2",
                "-g",
                "-Wall",
                "-Werror",
                multiarch.as_str(),
                out_include.as_str(),
            ])
            .build_and_generate(out.join(format!("{name}.skel.rs")))
            .unwrap_or_else(|e| {
                panic!("building {src} failed (is clang installed? `make deps`): {e:#}")
            });
        println!("cargo:rerun-if-changed={src}");
    }
    inproc_library(&out);
    for header in std::fs::read_dir(BPF_DIR).expect("the BPF directory exists") {
        let path = header.expect("readable BPF directory").path();
        if path.extension().is_some_and(|e| e == "h") {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}

/// `vmlinux.h` in OUT_DIR: the kernel's types from its BTF, for the programs that read kernel
/// structures with CO-RE (sniff reads a socket's addresses). bpftool comes from `make deps`.
fn vmlinux_h(out: &std::path::Path) {
    let btf = "/sys/kernel/btf/vmlinux";
    println!("cargo:rerun-if-changed={btf}");
    let output = std::process::Command::new("bpftool")
        .args(["btf", "dump", "file", btf, "format", "c"])
        .output()
        .unwrap_or_else(|e| {
            panic!("running bpftool to write vmlinux.h failed (install Debian's bpftool: `make deps`): {e}")
        });
    assert!(
        output.status.success(),
        "bpftool btf dump {btf} failed (does this kernel have BTF?): {}",
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::write(out.join("vmlinux.h"), output.stdout).expect("writing vmlinux.h");
}

/// The in-process probe library (`crates/inproc`, a cdylib) built in release mode into OUT_DIR,
/// where `probes::inproc` embeds it: tlsscope stays one file. Cargo cannot depend on a cdylib's
/// file, so this runs a second cargo, with a target directory of its own (no lock shared with
/// the build that runs it) and offline (the first one fetched everything).
fn inproc_library(out: &std::path::Path) {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let workspace = manifest.join("../..");
    for dir in ["crates/inproc", "crates/inproc-abi"] {
        println!("cargo:rerun-if-changed={}", workspace.join(dir).display());
    }
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let target_dir = out.join("inproc-target");
    let status = std::process::Command::new(cargo)
        .current_dir(&workspace)
        .args([
            "build",
            "--offline",
            "--release",
            "-p",
            "inproc",
            "--target-dir",
        ])
        .arg(&target_dir)
        // The outer build's settings for this crate are not the library's.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        // Small. Panics unwind, so that each wrapper catches its own (`wrap::guarded`) and the
        // program goes on; none reaches the program's frames, as an `extern "C"` function
        // aborts rather than unwind out.
        .env("CARGO_PROFILE_RELEASE_STRIP", "symbols")
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_PANIC", "unwind")
        .status()
        .unwrap_or_else(|e| panic!("running cargo to build crates/inproc failed: {e}"));
    assert!(status.success(), "building crates/inproc failed ({status})");
    let built = target_dir.join("release/libtlsscope_inproc.so");
    std::fs::copy(&built, out.join("libtlsscope_inproc.so"))
        .unwrap_or_else(|e| panic!("copying {}: {e}", built.display()));
}
