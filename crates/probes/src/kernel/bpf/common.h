/* Shared by tlsscope's BPF programs and, through the generated skeletons' types, their Rust
 * loaders: which threads a program looks at, and how an attach cookie is laid out. */
#ifndef TLSSCOPE_COMMON_H
#define TLSSCOPE_COMMON_H

#define TS_COMM_LEN 16
/* Most processes the PID filter holds (-p, plus tlsscope itself while it calibrates). */
#define TS_MAX_PIDS 1024

/* Every uprobe's attach cookie: the function's index in the one catalog (bits 0-15), then
 * TS_COOKIE_FIELDS one-byte fields, what the catalog says of the function and where it is
 * probed (bits 16-23, 24-31, ...). Every program gets the same cookie and reads the fields it needs. An enum, not
 * defines, so that the Rust loader encodes cookies with these very numbers. */
enum ts_cookie {
	TS_COOKIE_FUNC_BITS = 16,
	TS_COOKIE_FIELD_BITS = 8,
	TS_COOKIE_FIELDS = 6,
};

/* The cookie's fields, by position. */
enum ts_cookie_field {
	TS_FIELD_SEMANTICS = 0,      /* enum ts_semantics (latency.h): how to read the return */
	TS_FIELD_KIND = 1,           /* enum sn_kind (sniff.h): read, write or handshake */
	TS_FIELD_COUNT = 2,          /* enum sn_count (sniff.h): where the byte count is */
	TS_FIELD_TLS_LAYER_ONLY = 3, /* nonzero for NSPR's generic I/O (see sniff.h) */
	TS_FIELD_SITE = 4,	     /* index in cfg.sites of a callee placement, or 0 */
	TS_FIELD_DEFERRED = 5,	     /* 1 + index in go_deferred of a Go deferred exit, or 0 */
};

#define TS_COOKIE_FUNC(c) ((__u16)((c) & 0xffff))
#define TS_COOKIE_FIELD(c, i) \
	((__u8)(((c) >> (TS_COOKIE_FUNC_BITS + TS_COOKIE_FIELD_BITS * (i))) & 0xff))
#define TS_COOKIE_SITE(c) TS_COOKIE_FIELD(c, TS_FIELD_SITE)

/* A function probed at its first callee (placement.rs): the callee's probes see every call of
 * the callee, and keep the calls whose return address is `return_delta` bytes from the probed
 * instruction; the function's result follows from the callee's by `rule[class]` (class 0: the
 * callee returned > 0, 1: == 0, 2: < 0). */
enum ts_result_rule {
	TS_RESULT_CALLEE = 0,  /* the callee's result */
	TS_RESULT_CONSTANT = 1, /* value[class] */
	TS_RESULT_OUT_INT = 2, /* the int at the callee's fourth argument */
};

enum ts_sites {
	TS_MAX_SITES = 64, /* callee placements per program, index 0 unused */
};

struct ts_site {
	__s64 return_delta;
	__s32 value[3];
	__u8 rule[3];
	/* No other probe of the program shares the callee: the latency program may check the
	 * caller at the callee's return (from a register) instead of at its entry (from the stack). */
	__u8 sole_site;
	/* The callee's third argument is the byte count asked for (SSL_read's, SSL_write's), and a
	 * callee result > 0 with a count above zero makes the function's result > 0: the
	 * out int (rule OUT_INT) need not be read to tell the call's outcome class. */
	__u8 positive_with_len3;
};

/* Which threads a program looks at: the first member of each program's configuration. */
struct ts_filter {
	__u8 by_pid;  /* only the processes in the pids map */
	__u8 by_comm; /* only threads named `comm` */
	__u8 _pad[2];
	char comm[TS_COMM_LEN];
};

/* A Go function's returns seen at a deferred closure's stack-check branch (go_defers.rs): the
 * closure runs after the function stored its results in its frame. Its caller's stack pointer
 * is the closure's plus 8 (the return address); results[i] is where RAX, RBX and RCX's values
 * are from there (-1: not reloaded). The word at the closure's stack pointer less its
 * instruction pointer is one of site[0..sites) when the function itself made the call. */
enum ts_go_deferred_limits {
	TS_GO_DEFER_SITES = 16,
	TS_GO_DEFERRED = 255,
};

struct ts_go_deferred {
	__s32 results[3];
	__u32 sites;
	__s64 site[TS_GO_DEFER_SITES];
};

#endif
