# tlsscope: `make lab` sets everything up and runs the main experiment; `make test` runs the tests.
SHELL := /bin/bash
CARGO ?= cargo

# Debian packages: the build (gcc, make, perl also build OpenSSL versions), the real peers the
# tests and benchmarks use (openssl s_client/s_server/s_time, curl, nginx, wrk), and procps.
APT_PACKAGES := ca-certificates gcc make perl pkg-config openssl curl nginx wrk procps util-linux \
	clang libelf-dev zlib1g-dev linux-libc-dev bpftrace gnutls-bin tshark python3 bpftool libnss3-tools chromium

.PHONY: all deps build lab test lint bench clean
all: build

deps:
	@scripts/install-deps $(APT_PACKAGES)

build: deps
	$(CARGO) build --release

# Until `tlsscope lab` exists: the built-in server and handshakes against it.
lab: build
	target/release/tlsscope lab

lint: deps
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

test: lint
	$(CARGO) test --workspace

bench: build
	bench/serve-vs-nginx
	bench/bench-vs-peers
	bench/trace-overhead
	bench/sniff-overhead
	bench/compare-openssl

clean:
	$(CARGO) clean
