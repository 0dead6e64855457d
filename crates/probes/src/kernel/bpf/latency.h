/* latency: the latency of TLS library calls, aggregated in the kernel. Shared by
 * latency.bpf.c and the Rust loader (through the generated skeleton's types). */
#ifndef TLSSCOPE_LATENCY_H
#define TLSSCOPE_LATENCY_H

#include "common.h"

/* How a call ended. */
enum ts_outcome {
	TS_SUCCESS = 0,
	/* Would block: the caller must call again (non-blocking I/O). */
	TS_RETRY = 1,
	TS_FAILURE = 2,
	/* The return value alone cannot tell retry from failure, and the follow-up call that
	 * would tell (SSL_get_error) was not seen. */
	TS_UNKNOWN = 3,
	/* The peer closed the connection cleanly (SSL_ERROR_ZERO_RETURN: its close_notify). */
	TS_CLOSED = 4,
	/* A retry of the async kind (SSL_ERROR_WANT_ASYNC, WANT_ASYNC_JOB): an async engine's
	 * job paused the call; it goes on when the job's wait fd is readable. */
	TS_RETRY_ASYNC = 5,
};

/* How to read a function's return value. The attach cookie carries it in field
 * TS_FIELD_SEMANTICS (see enum ts_cookie_field in common.h). */
enum ts_semantics {
	/* OpenSSL SSL_read/SSL_write/SSL_do_handshake/..., and the _ex variants: int > 0 is
	 * success; <= 0 is settled by the caller's next SSL_get_error on the same SSL. */
	TS_SEM_OSSL_IO = 0,
	/* SSL_shutdown: 0 (sent, not yet received) and 1 are success; < 0 as TS_SEM_OSSL_IO. */
	TS_SEM_OSSL_SHUTDOWN = 1,
	/* SSL_get_error itself: settles the pending call; not counted on its own. */
	TS_SEM_OSSL_GET_ERROR = 2,
	/* libcrypto functions returning int: > 0 success, <= 0 failure. */
	TS_SEM_POSITIVE = 3,
	/* GnuTLS (ssize_t or int): >= 0 success, -28 (AGAIN) and -52 (INTERRUPTED) retry, other
	 * negative values failure. */
	TS_SEM_GNUTLS = 4,
	/* NSS SECStatus: 0 success, -1 retry or failure (PR_GetError would tell; not traced). */
	TS_SEM_NSS_STATUS = 5,
	/* NSPR PR_Read/PR_Write (int32): >= 0 success, < 0 retry or failure (as above). */
	TS_SEM_NSPR_IO = 6,
	/* Int, >= 0 success (rsa_ossl_* return a length), < 0 failure. */
	TS_SEM_NONNEGATIVE = 7,
	/* Go's crypto/tls (*Conn).Read and Write, (n int, err error) in Go's register ABI: rax n,
	 * the error's type word in rbx and data word in rcx. nil success; io.EOF closed; a passed
	 * deadline retry; any other error failure. Probed at the entry and at each return
	 * instruction (go_enter, go_exit). */
	TS_SEM_GO_IO = 8,
	/* Go's handshake, (err error): the error's words in rax and rbx. As TS_SEM_GO_IO. */
	TS_SEM_GO_ERROR = 9,
};

#define TS_COOKIE_SEM(c) TS_COOKIE_FIELD(c, TS_FIELD_SEMANTICS)

/* The per-CPU counters. */
enum ts_counter {
	TS_CALLS = 0,         /* probed calls (entry program runs, filtered or not) */
	TS_DROPPED_CELLS = 1, /* cells the hist map had no room for */
	TS_COUNTERS = 2,
};

enum ts_linear {
	/* Most in-range buckets in linear mode (the bucket number is a __u8, with one bucket
	 * below the range and one at or over its top). */
	TS_MAX_LINEAR_BUCKETS = 253,
};

/* One histogram cell. The bucket is log2 microseconds (0: under 1 us, b: [2^(b-1), 2^b) us),
 * or in linear mode 0: under lin_min_us, b: [lin_min + (b-1) step, lin_min + b step), the last
 * bucket (lin_buckets + 1) everything at or over the top. */
struct ts_hist_key {
	__u32 pid; /* 0 unless per_pid */
	__u16 func;
	__u8 outcome;
	__u8 bucket;
};

struct ts_hist_value {
	__u64 count;
	__u64 total_ns;
};

/* Calls in progress on one thread, innermost last (SSL_connect holds SSL_do_handshake, which
 * holds EVP_DigestSign, ...). Deeper calls are not timed. */
#define TS_MAX_DEPTH 8

struct ts_frame {
	__u64 start_ns;
	__u64 arg0;    /* the SSL * of OpenSSL calls */
	__u64 out_ptr; /* a callee placement's fourth argument (where SSL_read's count goes), or 0
			* where the result's sign is known without it (ts_site.positive_with_len3) */
	__u32 sp_low;  /* a callee placement's %rsp at entry, low half: which return is its own */
	__u16 func;
	__u8 _pad[2];
};

/* Per thread: its call stack, and the result of the last read/write-family syscall made inside
 * an OpenSSL call: how a call returning <= 0 is classified without probing SSL_get_error
 * (-EAGAIN: retry; EOF or another error: failure). Kept between calls, so a thread's calls
 * update this in place instead of inserting and deleting map elements. */
struct ts_thread {
	__s64 last_syscall_ret;
	__u32 depth;
	__u32 _pad;
	struct ts_frame frames[TS_MAX_DEPTH];
};

/* An OpenSSL call that returned <= 0, waiting for the caller's SSL_get_error. Per thread. */
struct ts_pending {
	__u64 ssl;
	__u64 latency_ns;
	__u32 pid;
	__u16 func;
	__u8 bucket;
	__u8 _pad;
};

/* A Go call in progress, by goroutine: Go's register ABI keeps the running goroutine's g in
 * r14, and a goroutine can leave its thread while it waits (a Read parked on the network
 * poller resumes on whichever thread runs it next), so the thread id cannot pair an entry with
 * its return. */
struct ts_go_key {
	__u64 g;
	__u16 func;
	__u8 _pad[6];
};

struct ts_go_call {
	__u64 start_ns;
};


/* last_syscall_ret before any syscall. */
#define TS_NO_SYSCALL 0x7fffffffffffffffLL

/* Settings, fixed before the programs load. */
struct ts_config {
	struct ts_filter filter;
	__u8 per_pid; /* key histograms by process */
	__u8 linear;  /* linear buckets instead of log2 */
	__u8 exact;   /* settle OpenSSL <= 0 returns with SSL_get_error, not syscall results */
	__u8 _pad;
	__u32 lin_buckets;
	__u32 _pad2;
	__u64 lin_min_us;
	__u64 lin_step_us;
	struct ts_site sites[TS_MAX_SITES];
};

#endif
