//! Compiles the BPF programs in src/bpf with clang and writes their libbpf-rs skeletons to
//! OUT_DIR. clang comes from the Makefile's install step (Debian's clang package).

use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

/// The BPF programs, by name: `src/bpf/<name>.bpf.c` becomes `OUT_DIR/<name>.skel.rs`.
const PROGRAMS: &[&str] = &["latency"];

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let arch = env::var("CARGO_CFG_TARGET_ARCH").expect("cargo sets CARGO_CFG_TARGET_ARCH");
    // The BPF programs include <linux/ptrace.h> for user-space `struct pt_regs`, whose <asm/...>
    // headers live in Debian's multiarch include directory, which clang -target bpf does not
    // search on its own.
    let multiarch = format!("-idirafter/usr/include/{arch}-linux-gnu");
    for name in PROGRAMS {
        let src = format!("src/bpf/{name}.bpf.c");
        SkeletonBuilder::new()
            .source(&src)
            .clang_args(["-O2", "-g", "-Wall", "-Werror", multiarch.as_str()])
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
