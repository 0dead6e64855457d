/* sniff: the plaintext TLS libraries read and write, per call, through a ring buffer. Shared by
 * sniff.bpf.c and the Rust loader (through the generated skeleton's types). */
#ifndef TLSSCOPE_SNIFF_H
#define TLSSCOPE_SNIFF_H

#include "common.h"

enum sn_limits {
	/* Bytes of payload per ring-buffer record: a full TLS record. A call that moved more is
	 * sent in several records (pieces) with increasing offsets. */
	SN_PIECE = 16384,
	/* Most pieces of one call (bounds --max-bytes at 16 MiB). */
	SN_MAX_PIECES = 1024,
};

/* What a probe does with its call's data. */
enum sn_kind {
	SN_READ = 0,      /* SSL_read, gnutls_record_recv, PR_Read, PR_Recv: copied on return */
	SN_WRITE = 1,     /* SSL_write, gnutls_record_send, PR_Write, PR_Send */
	SN_HANDSHAKE = 2, /* SSL_do_handshake & co. with --handshake: no data */
};

/* How the byte count is returned. */
enum sn_count {
	SN_COUNT_RET = 0,      /* the return value (int or ssize_t) */
	SN_COUNT_ARG4_PTR = 1, /* through the size_t * fourth argument (SSL_read_ex/SSL_write_ex) */
};

/* The attach cookie's fields sniff reads (see enum ts_cookie_field in common.h): the kind, the
 * count, and nonzero for NSPR's generic I/O (PR_Read, PR_Send, ...), which serves every kind
 * of file: the call is sniffed only when its PRFileDesc is a TLS layer (see sn_config). */
#define SN_COOKIE_KIND(c) TS_COOKIE_FIELD(c, TS_FIELD_KIND)
#define SN_COOKIE_COUNT(c) TS_COOKIE_FIELD(c, TS_FIELD_COUNT)
#define SN_COOKIE_TLS_LAYER_ONLY(c) TS_COOKIE_FIELD(c, TS_FIELD_TLS_LAYER_ONLY)

/* sn_event.flags */
enum sn_flags {
	SN_LAST_PIECE = 1, /* the call's last record */
	SN_FD_GUESSED = 2, /* no syscall in this call: the fd last seen with this SSL object */
};

/* A TCP socket's two ends, read from the kernel's socket when the call's syscall names it
 * (family 0: unknown). Addresses in network order; IPv4 in the first 4 bytes. */
struct sn_endpoints {
	__u16 family;     /* AF_INET (2) or AF_INET6 (10) */
	__u16 local_port; /* host order */
	__u16 peer_port;  /* host order */
	__u16 _pad;
	__u8 local_addr[16];
	__u8 peer_addr[16];
};

/* What is known of a connection object's socket, for calls that make no syscall: used only
 * while the fd still names the same socket (its inode), as the in-process backend does: a
 * program gives the fd and, through its allocator, the connection object to its next
 * connection. */
struct sn_socket {
	__s32 fd;
	__u32 _pad;
	__u64 inode; /* the socket's inode; 0: not a socket */
	struct sn_endpoints ends;
};

/* One ring-buffer record: a piece of one call's data, or (len 0) a call without data. */
struct sn_event {
	__u64 call_id;    /* unique per call (per CPU counter << 8 | cpu) */
	__u64 start_ns;   /* CLOCK_MONOTONIC at entry */
	__u64 latency_ns;
	__s64 ret;        /* the call's return value */
	__u64 ssl;        /* the library's connection object (SSL *, gnutls_session_t, PRFileDesc *) */
	__u32 pid;
	__u32 tid;
	__s32 fd;         /* the socket the call read or wrote; -1 when unknown */
	__u32 total_bytes;  /* bytes the call moved (0 when it failed) */
	__u32 offset;       /* of this piece within the call's data */
	__u32 len;          /* bytes in this piece */
	__u32 uncaptured;   /* bytes over --max-bytes, not sent (in the last piece) */
	__u16 func;       /* the function's index in the catalog */
	__u8 kind;
	__u8 flags;
	struct sn_endpoints ends;
	char comm[TS_COMM_LEN];
	__u8 data[SN_PIECE]; /* last: only `len` bytes of it travel */
};

/* A call in progress, per thread. */
struct sn_call {
	__u64 start_ns;
	__u64 ssl;
	__u64 buf;
	/* The fourth argument: the _ex functions' size_t *; at a callee placement the callee's,
	 * which is also where SSL_read's count goes (TS_RESULT_OUT_INT). */
	__u64 count_ptr;
	__u32 sp_low; /* a callee placement's %rsp at entry, low half: which return is its own */
	__u16 func;
	__u8 _pad[2];
	struct sn_socket sock;
};

/* Settings, fixed before the programs load. */
struct sn_config {
	struct ts_filter filter;
	__u32 max_bytes;
	/* Nonzero: a record per handshake call (--handshake); else handshake probes only note
	 * their connection's socket, for data calls that make no syscall. */
	__u8 handshake_records;
	__u8 _pad[3];
	/* The file name of NSS's libssl (libssl3.so): a PRFileDesc whose methods table lies in a
	 * mapping of this file is NSS's TLS layer. Empty: no NSPR probes. */
	char tls_layer_file[TS_COMM_LEN];
	/* The callee placements (placement.rs), by the cookie's TS_FIELD_SITE. */
	struct ts_site sites[TS_MAX_SITES];
};

/* The per-CPU counters. */
enum sn_counter {
	SN_LOST_RECORDS = 0, /* ring buffer full: records not sent */
	SN_LOST_CALLS = 1,   /* calls with at least one record lost */
	SN_CALLS = 2,        /* calls seen (sent in full or not) */
	SN_UNCHECKED = 3,    /* NSPR calls whose layer could not be checked (also lost calls) */
	SN_LOST_KEYS = 4,    /* key log records that did not fit their ring buffer */
	SN_COUNTERS = 5,
};

/* Sizes of a key log record's fields: the longest label Go writes
 * ("CLIENT_HANDSHAKE_TRAFFIC_SECRET", 31 bytes), a ClientHello random, and the longest secret
 * (SHA-384's 48 bytes; TLS 1.2's master secret is 48 too). */
enum sn_key_limits {
	SN_KEY_LABEL = 40,
	SN_KEY_RANDOM = 32,
	SN_KEY_SECRET = 64,
};

/* One line of a program's key log (NSS key log format: LABEL RANDOM SECRET), as Go's
 * crypto/tls hands it to its key log hook, whether or not the program set a KeyLogWriter. */
struct sn_key {
	__u32 pid;
	__u8 label_len;
	__u8 random_len;
	__u8 secret_len;
	__u8 _pad;
	char label[SN_KEY_LABEL];
	__u8 random[SN_KEY_RANDOM];
	__u8 secret[SN_KEY_SECRET];
};

#endif
