//! Compiles the BPF programs in src/bpf with clang and writes their libbpf-rs skeletons to
//! OUT_DIR. clang comes from the Makefile's install step (Debian's clang package).

use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

/// The BPF programs, by name: `src/bpf/<name>.bpf.c` becomes `OUT_DIR/<name>.skel.rs`.
const PROGRAMS: &[&str] = &["latency", "sniff"];

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
        let src = format!("src/bpf/{name}.bpf.c");
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
    for header in std::fs::read_dir("src/bpf").expect("src/bpf exists") {
        let path = header.expect("readable src/bpf").path();
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
