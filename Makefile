# tlsscope: `make lab` sets everything up and runs the main experiment; `make test` runs the tests.
SHELL := /bin/bash
CARGO ?= cargo

# Debian packages: the build (gcc, make, perl also build OpenSSL versions; g++, cmake and
# ninja-build build AWS-LC and BoringSSL; binutils' nm and readelf check them), the real peers
# the tests and benchmarks use (openssl s_client/s_server/s_time, curl, nginx, wrk), procps,
# util-linux and mount (taskset, setpriv, unshare, mount), iproute2 (the tests' network
# namespaces), the BPF toolchain (clang, bpftool), perf (linux-perf: `tlsscope profile` drives
# it) and Prometheus with promtool (prometheus: the metrics tests scrape tlsscope with it; its
# service is not started); bash-completion, zsh, fish, man-db and groff-base, which load and
# render the completions and man pages `make build` installs (the tests drive them); Debian's
# Go 1.19 (golang-1.19-go), whose programs have an older layout of Go's function table than the
# machine's Go (the Go reader's tests build with both).
APT_PACKAGES := ca-certificates xz-utils gcc g++ make perl cmake ninja-build pkg-config binutils openssl \
	curl nginx wrk procps util-linux mount iproute2 clang libelf-dev zlib1g-dev linux-libc-dev \
	bpftrace gnutls-bin tshark python3 bpftool libnss3-tools chromium linux-perf prometheus \
	bash-completion zsh fish man-db groff-base golang-1.19-go

# Where `make install-extras` puts the shell completions and man pages the binary generates
# from its argument definitions: the directories the shells and man search; DESTDIR stages them
# under another root (`make install-extras DESTDIR=/tmp/stage`), PREFIX moves the man pages.
PREFIX ?= /usr/local
DESTDIR ?=
MAN1DIR ?= $(PREFIX)/share/man/man1
BASH_COMPLETION_DIR ?= /usr/share/bash-completion/completions
ZSH_COMPLETION_DIR ?= /usr/share/zsh/vendor-completions
FISH_COMPLETION_DIR ?= /usr/share/fish/vendor_completions.d
TLSSCOPE ?= target/release/tlsscope

.PHONY: all deps build install-extras lab test lint fuzz bench clean
all: build

deps:
	@scripts/install-deps $(APT_PACKAGES)

build: deps
	$(CARGO) build --release
	@$(MAKE) --no-print-directory install-extras

# Completions for bash, zsh and fish, and the man pages (tlsscope.1, tlsscope-bench.1, ...);
# then man's index, unless staged under DESTDIR.
install-extras:
	@test -x $(TLSSCOPE) || { echo "install-extras: no $(TLSSCOPE): run make build first, or give TLSSCOPE=PATH" >&2; exit 1; }
	install -d $(DESTDIR)$(BASH_COMPLETION_DIR) $(DESTDIR)$(ZSH_COMPLETION_DIR) \
		$(DESTDIR)$(FISH_COMPLETION_DIR) $(DESTDIR)$(MAN1DIR)
	$(TLSSCOPE) completions bash > $(DESTDIR)$(BASH_COMPLETION_DIR)/tlsscope
	$(TLSSCOPE) completions zsh > $(DESTDIR)$(ZSH_COMPLETION_DIR)/_tlsscope
	$(TLSSCOPE) completions fish > $(DESTDIR)$(FISH_COMPLETION_DIR)/tlsscope.fish
	$(TLSSCOPE) man --dir $(DESTDIR)$(MAN1DIR)
	@if [ -z "$(DESTDIR)" ] && command -v mandb >/dev/null; then mandb -q; fi

# The main experiment: the built-in server loaded, then traced, in five experiments.
lab: build
	target/release/tlsscope lab

lint: deps
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) fmt --manifest-path fuzz/Cargo.toml --check
	$(CARGO) clippy --manifest-path fuzz/Cargo.toml --target-dir target --all-targets -- -D warnings

# The suite runs as on a fresh machine: in a private mount namespace without tracefs or debugfs
# (scripts/fresh-mounts), so a test passes only where tlsscope copes with that by itself.
# Then every fuzz target for FUZZ_SECONDS (25 s) each, from its committed corpus; the corpus
# alone is also replayed by `cargo test` (crates/fuzz-checks).
test: lint
	scripts/fresh-mounts $(CARGO) test --workspace
	scripts/fuzz-smoke

# The fuzz targets alone, longer: `make fuzz FUZZ_SECONDS=600`.
fuzz: deps
	scripts/fuzz-smoke

bench: build
	bench/serve-vs-nginx
	bench/bench-vs-peers
	bench/trace-overhead
	bench/sniff-overhead
	bench/compare-openssl
	bench/pacing
	bench/hostile-clients
	bench/stacks

clean:
	$(CARGO) clean
