// SPDX-License-Identifier: Apache-2.0
/* sniff: what TLS libraries read and write, in plaintext. The entry probe notes the call's
 * buffer per thread; a raw sys_enter tracepoint notes the socket the call reads or writes; the
 * return probe sends the bytes the call really moved (up to max_bytes) through a ring buffer in
 * pieces, and counts what did not fit. A function probed at its first callee (placement.rs) is
 * seen through the callee's calls from it: the loader places it there only when the callee gets
 * the function's buffer (and the _ex functions' count pointer) in the same registers, and its
 * result follows from the callee's by the site's rules. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

#include "sniff.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

const volatile struct sn_config cfg = {};

#define TS_NR_COUNTERS SN_COUNTERS
#include "common.bpf.h"

TS_EXPORT_ENUM(sn_limits);
TS_EXPORT_ENUM(sn_kind);
TS_EXPORT_ENUM(sn_count);
TS_EXPORT_ENUM(sn_flags);
TS_EXPORT_ENUM(sn_counter);
TS_EXPORT_ENUM(sn_key_limits);

TS_PER_THREAD_MAP(calls, struct sn_call);

/* The socket last seen under each connection object, for calls that make no syscall (data
 * already decrypted and buffered). */
struct ssl_key {
	__u64 ssl;
	__u32 pid;
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct ssl_key);
	__type(value, struct sn_socket);
} ssl_socks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sn_event);
} scratch SEC(".maps");

/* Size set by the loader (--ring-size). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 * 1024 * 1024);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} call_seq SEC(".maps");

/* NSPR: PRFileDesc starts with its layer's method table (nspr/pr/include/prio.h). */
struct sn_prfiledesc {
	__u64 methods;
};

/* bpf_find_vma's verdict on a method table's address. */
struct layer_check {
	int tls;
};

static long method_table_mapping(struct task_struct *task, struct vm_area_struct *vma,
				 struct layer_check *check)
{
	char name[TS_COMM_LEN] = {};
	const unsigned char *file_name = BPF_CORE_READ(vma, vm_file, f_path.dentry, d_name.name);

	if (!file_name || bpf_probe_read_kernel_str(name, sizeof(name), file_name) < 0)
		return 0;
	check->tls = 1;
	for (int i = 0; i < TS_COMM_LEN; i++) {
		if (name[i] != cfg.tls_layer_file[i]) {
			check->tls = 0;
			break;
		}
		if (!name[i])
			break;
	}
	return 0;
}

enum layer_verdict { LAYER_TLS, LAYER_OTHER, LAYER_UNKNOWN };

#define SN_ENOENT 2

/* Whether NSPR file `fd` is NSS's TLS layer: its method table lies in NSS's libssl. */
static __always_inline enum layer_verdict tls_layer(__u64 fd)
{
	struct sn_prfiledesc desc;
	struct layer_check check = {};

	if (!cfg.tls_layer_file[0] || bpf_probe_read_user(&desc, sizeof(desc), (void *)fd) < 0)
		return LAYER_OTHER; /* no NSS, or not a PRFileDesc NSPR could use either */
	long rc = bpf_find_vma((struct task_struct *)bpf_get_current_task_btf(), desc.methods,
			       method_table_mapping, &check, 0);

	if (rc == -SN_ENOENT)
		return LAYER_OTHER; /* in no mapping: not a library's table */
	if (rc < 0)
		return LAYER_UNKNOWN; /* -EBUSY: the memory map was locked; counted by the caller */
	return check.tls ? LAYER_TLS : LAYER_OTHER;
}

SEC("uprobe.multi")
int BPF_KPROBE(sniff_enter)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid;
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u8 site = TS_COOKIE_SITE(cookie);

	/* A callee placement sees every call of the callee: only the function's count. */
	if (site && !called_from_function(ctx, site))
		return 0;
	if (!wanted(pid_tgid))
		return 0;
	if (SN_COOKIE_TLS_LAYER_ONLY(cookie)) {
		enum layer_verdict v = tls_layer(PT_REGS_PARM1(ctx));

		if (v == LAYER_OTHER)
			return 0;
		if (v == LAYER_UNKNOWN) {
			count(SN_UNCHECKED);
			count(SN_CALLS);
			count(SN_LOST_CALLS);
			return 0;
		}
	}
	struct sn_call c = {
		.start_ns = bpf_ktime_get_ns(),
		.ssl = PT_REGS_PARM1(ctx),
		.buf = PT_REGS_PARM2(ctx),
		.count_ptr = PT_REGS_PARM4(ctx),
		.sp_low = (__u32)PT_REGS_SP(ctx),
		.func = TS_COOKIE_FUNC(cookie),
		.sock = { .fd = -1 },
	};
	bpf_map_update_elem(&calls, &tid, &c, BPF_ANY);
	return 0;
}

/* The syscalls:sys_enter_* tracepoints of the read/write family: the first argument is the
 * socket (format in /sys/kernel/tracing/events/syscalls/sys_enter_read/format). */
struct sn_sys_enter {
	__u64 common;
	int syscall_nr;
	int _pad;
	unsigned long fd;
};

#define SN_AF_INET 2
#define SN_AF_INET6 10

/* The socket file `fd` of the current task names, read through task->files (CO-RE); NULL when
 * it names none. */
static __always_inline struct socket *socket_of(int fd, struct file **file)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct file **fds = BPF_CORE_READ(task, files, fdt, fd);
	struct file *f = NULL;

	if (fd < 0 || bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]) < 0 || !f)
		return NULL;
	struct socket *sock = BPF_CORE_READ(f, private_data);

	if (!sock || BPF_CORE_READ(sock, file) != f)
		return NULL; /* not a socket */
	*file = f;
	return sock;
}

/* The inode of the socket `fd` names now; 0 when it names none. */
static __always_inline __u64 socket_inode(int fd)
{
	struct file *f = NULL;

	if (!socket_of(fd, &f))
		return 0;
	return BPF_CORE_READ(f, f_inode, i_ino);
}

/* The socket `fd` of the current task names: its inode and two ends. A file that is not a
 * socket, or not IPv4/IPv6, leaves the ends unknown (family 0). */
static __always_inline void read_socket(int fd, struct sn_socket *s)
{
	struct sn_endpoints *ends = &s->ends;
	struct file *f = NULL;
	struct socket *sock = socket_of(fd, &f);

	if (!sock)
		return;
	s->inode = BPF_CORE_READ(f, f_inode, i_ino);
	struct sock *sk = BPF_CORE_READ(sock, sk);

	if (!sk)
		return;
	__u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);

	if (family == SN_AF_INET) {
		bpf_core_read(ends->local_addr, 4, &sk->__sk_common.skc_rcv_saddr);
		bpf_core_read(ends->peer_addr, 4, &sk->__sk_common.skc_daddr);
	} else if (family == SN_AF_INET6) {
		bpf_core_read(ends->local_addr, 16, &sk->__sk_common.skc_v6_rcv_saddr);
		bpf_core_read(ends->peer_addr, 16, &sk->__sk_common.skc_v6_daddr);
	} else {
		return;
	}
	ends->local_port = BPF_CORE_READ(sk, __sk_common.skc_num);
	ends->peer_port = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
	ends->family = family;
}

/* Notes the socket a sniffed call reads or writes, and its two ends, once per call. */
SEC("tracepoint")
int sniff_sys_enter(struct sn_sys_enter *ctx)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct sn_call *c = bpf_map_lookup_elem(&calls, &tid);

	if (!c)
		return 0;
	int fd = (int)ctx->fd;

	if (c->sock.fd == fd && c->sock.ends.family)
		return 0;
	c->sock = (struct sn_socket){ .fd = fd };
	read_socket(fd, &c->sock);
	return 0;
}

struct piece_ctx {
	__u64 buf;
	__u32 captured;
	__u32 total;
	__u8 lost;
};

/* Sends piece `i` of the call's data; stops the loop after the last one. */
static long send_piece(__u32 i, struct piece_ctx *p)
{
	__u32 zero = 0;
	struct sn_event *e = bpf_map_lookup_elem(&scratch, &zero);

	if (!e)
		return 1;
	__u64 offset = (__u64)i * SN_PIECE;
	__u64 captured = p->captured;

	if (offset >= captured && !(i == 0 && captured == 0))
		return 1;
	__u64 len = captured - offset;

	if (len > SN_PIECE)
		len = SN_PIECE;
	/* Keep the clamped value in the register the helpers get, for the verifier. */
	barrier_var(len);
	int last = offset + len >= captured;

	e->offset = offset;
	e->len = len;
	e->flags = (e->flags & ~SN_LAST_PIECE) | (last ? SN_LAST_PIECE : 0);
	e->uncaptured = last ? p->total - p->captured : 0;
	if (len > 0 && bpf_probe_read_user(e->data, len, (void *)(p->buf + offset)) < 0) {
		/* Unreadable (paged out): send what is known, without the bytes. */
		e->uncaptured += len;
		e->len = 0;
		len = 0;
	}
	__u64 size = __builtin_offsetof(struct sn_event, data) + len;

	if (size > sizeof(*e))
		size = sizeof(*e);
	barrier_var(size);
	/* No wakeup per record: user space reads the ring on a timer, so the traced process does
	 * not pay for waking the reader. */
	if (bpf_ringbuf_output(&events, e, size, BPF_RB_NO_WAKEUP) < 0) {
		count(SN_LOST_RECORDS);
		p->lost = 1;
	}
	return last ? 1 : 0;
}

/* Sends a finished call: its record(s), the data it moved up to max_bytes in pieces. */
static __always_inline void emit(struct sn_call *call, long ret, __u64 total, __u8 kind, __u16 func,
				 __u64 pid_tgid, __u8 flags, __u64 now)
{
	/* Without --handshake, a handshake call only teaches its connection's socket. */
	if (kind == SN_HANDSHAKE && !cfg.handshake_records)
		return;

	__u32 zero = 0;
	struct sn_event *e = bpf_map_lookup_elem(&scratch, &zero);
	__u64 *seq = bpf_map_lookup_elem(&call_seq, &zero);

	if (!e || !seq)
		return;
	*seq += 1;
	e->flags = flags;
	e->call_id = (*seq << 8) | (bpf_get_smp_processor_id() & 0xff);
	e->start_ns = call->start_ns;
	e->latency_ns = now - call->start_ns;
	e->ret = ret;
	e->ssl = call->ssl;
	e->pid = pid_tgid >> 32;
	e->tid = (__u32)pid_tgid;
	e->fd = call->sock.fd;
	e->ends = call->sock.ends;
	e->total_bytes = total > 0xffffffff ? 0xffffffff : (__u32)total;
	e->func = func;
	e->kind = kind;
	bpf_get_current_comm(e->comm, sizeof(e->comm));

	struct piece_ctx p = {
		.buf = call->buf,
		.captured = total < cfg.max_bytes ? (__u32)total : cfg.max_bytes,
		.total = e->total_bytes,
	};
	count(SN_CALLS);
	bpf_loop(SN_MAX_PIECES, send_piece, &p, 0);
	if (p.lost)
		count(SN_LOST_CALLS);
}

SEC("uretprobe.multi")
int BPF_KRETPROBE(sniff_return)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid, pid = pid_tgid >> 32;
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u8 site = TS_COOKIE_SITE(cookie);
	struct sn_call *c = bpf_map_lookup_elem(&calls, &tid);

	if (!c)
		return 0;
	/* A callee placement's return is its own only for the call its entry kept: the same
	 * function, entered with %rsp just below where it is now that the return address is
	 * popped (handle_trampoline). Other returns of the callee are other callers'. */
	if (site && (c->func != TS_COOKIE_FUNC(cookie) || c->sp_low != (__u32)(PT_REGS_SP(ctx) - 8)))
		return 0;
	struct sn_call call = *c;

	bpf_map_delete_elem(&calls, &tid);

	__u8 kind = SN_COOKIE_KIND(cookie);
	long ret = PT_REGS_RC(ctx);
	__u64 total = 0;

	if (site)
		ret = function_result(site, (int)ret, call.count_ptr);

	if (SN_COOKIE_COUNT(cookie) == SN_COUNT_ARG4_PTR) {
		ret = (int)ret;
		if (ret == 1 && call.count_ptr)
			bpf_probe_read_user(&total, sizeof(total), (void *)call.count_ptr);
	} else {
		/* int for OpenSSL and NSPR, ssize_t for GnuTLS; a byte count never has bit 31. */
		ret = (int)ret;
		if (ret > 0)
			total = ret;
	}
	if (kind == SN_HANDSHAKE)
		total = 0;

	struct ssl_key sk = { .ssl = call.ssl, .pid = pid };
	__u8 flags = 0;

	if (call.sock.fd >= 0) {
		bpf_map_update_elem(&ssl_socks, &sk, &call.sock, BPF_ANY);
	} else {
		struct sn_socket *known = bpf_map_lookup_elem(&ssl_socks, &sk);

		/* Only while its fd still names that socket: not a later connection's. */
		if (known && known->inode && socket_inode(known->fd) == known->inode) {
			call.sock = *known;
			flags = SN_FD_GUESSED;
		}
	}
	emit(&call, ret, total, kind, TS_COOKIE_FUNC(cookie), pid_tgid, flags, now);
	return 0;
}

/* Go's calls in progress, by goroutine (r14 in Go's register ABI): a goroutine parked in a Read
 * resumes on whichever thread runs it next. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct sn_call);
} go_calls SEC(".maps");

/* The socket under a Go crypto/tls.Conn: its first field is the net.Conn it wraps (an
 * interface: type word, data word); for a *net.TCPConn the data word points at a struct
 * whose first field is the *netFD, whose poll.FD starts with a 16-byte fdMutex and then
 * Sysfd. Anything else (a net.Pipe, a wrapped conn) gives no socket: the fd stays unknown. */
static __always_inline int go_conn_fd(__u64 conn)
{
	__u64 data = 0, netfd = 0;
	__s64 fd = -1;

	if (bpf_probe_read_user(&data, sizeof(data), (void *)(conn + 8)) || !data)
		return -1;
	if (bpf_probe_read_user(&netfd, sizeof(netfd), (void *)data) || !netfd)
		return -1;
	if (bpf_probe_read_user(&fd, sizeof(fd), (void *)(netfd + 16)) || fd < 0 || fd > 0x7fffffff)
		return -1;
	return (int)fd;
}

/* A Go call starts: (*Conn).Read/Write(b []byte) has the *Conn in rax and b's bytes in rbx;
 * the handshakes have the *Conn alone. The socket is read from the Conn here, once per call. */
SEC("uprobe.multi")
int BPF_KPROBE(go_sniff_enter)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 cookie = bpf_get_attach_cookie(ctx);

	if (!wanted(pid_tgid))
		return 0;
	__u64 g = ctx->r14;
	struct sn_call c = {
		.start_ns = bpf_ktime_get_ns(),
		.ssl = ctx->ax,
		.buf = ctx->bx,
		.func = TS_COOKIE_FUNC(cookie),
		.sock = { .fd = -1 },
	};
	int fd = go_conn_fd(c.ssl);

	if (fd >= 0) {
		c.sock.fd = fd;
		read_socket(fd, &c.sock);
		if (!c.sock.inode)
			c.sock.fd = -1; /* not a socket: the layout was not a TCPConn's */
	}
	bpf_map_update_elem(&go_calls, &g, &c, BPF_ANY);
	return 0;
}

/* A Go call's end on goroutine `g`, with the registers it returns: its record. Read and Write
 * return (n int, err error) in rax, rbx:rcx; the handshakes return err in rax:rbx. A call's
 * ret is n, or -1 with no byte when it failed without moving any. */
static __always_inline void go_sniff_end(__u64 g, __u64 cookie, __u64 rax, __u64 rbx)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct sn_call *c = bpf_map_lookup_elem(&go_calls, &g);

	if (!c)
		return;
	struct sn_call call = *c;

	bpf_map_delete_elem(&go_calls, &g);
	if (call.func != TS_COOKIE_FUNC(cookie))
		return; /* another function's return on this goroutine: its entry was missed */
	__u8 kind = SN_COOKIE_KIND(cookie);
	long ret = 0;
	__u64 total = 0;

	if (kind == SN_HANDSHAKE) {
		ret = rax ? -1 : 1; /* the error's type word: nil is success */
	} else {
		__s64 n = (__s64)rax;

		ret = n > 0 ? n : (rbx ? -1 : 0);
		if (n > 0)
			total = n;
	}
	emit(&call, ret, total, kind, call.func, pid_tgid, 0, now);
}

/* A Go call ends here, at one of its return instructions. */
SEC("uprobe.multi")
int BPF_KPROBE(go_sniff_exit)
{
	go_sniff_end(ctx->r14, bpf_get_attach_cookie(ctx), ctx->ax, ctx->bx);
	return 0;
}

/* Or at a deferred closure's stack-check branch (go_defers.rs), with the results read from the
 * function's frame; the buffer's bytes, written by the call, are where its entry saw them. */
SEC("uprobe.multi")
int BPF_KPROBE(go_sniff_deferred_exit)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	const struct ts_go_deferred *d = go_deferred_of(cookie);
	__u64 regs[3];

	if (!d || !go_deferred_results(ctx, d, regs))
		return 0;
	go_sniff_end(ctx->r14, cookie, regs[0], regs[1]);
	return 0;
}

/* The record's layout, for the Rust reader (the skeleton's types come from globals). */
const volatile struct sn_key ts_export_sn_key = {};

/* Key log lines (sniff --keylog): a few per handshake, read at the sniffer's pace. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} keys SEC(".maps");

/* A length from a Go slice or string header, cut to `most`. */
static __always_inline __u32 go_len(__u64 len, __u32 most)
{
	return len > most ? most : (__u32)len;
}

/* Go's key log hook: crypto/tls.(*Config).writeKeyLog(label string, clientRandom, secret
 * []byte) runs at every handshake secret, and returns at once when no KeyLogWriter is set. In
 * Go's register ABI the receiver is in rax, the label in rbx (bytes) and rcx (length), the
 * random in rdi and rsi, the secret in r9 and r10 (r8 and r11 are the slices' capacities). */
SEC("uprobe.multi")
int BPF_KPROBE(go_keylog)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();

	if (!wanted(pid_tgid))
		return 0;
	struct sn_key *k = bpf_ringbuf_reserve(&keys, sizeof(*k), 0);

	if (!k) {
		count(SN_LOST_KEYS);
		return 0;
	}
	__u32 label_len = go_len(ctx->cx, SN_KEY_LABEL);
	__u32 random_len = go_len(ctx->si, SN_KEY_RANDOM);
	__u32 secret_len = go_len(ctx->r10, SN_KEY_SECRET);

	k->pid = pid_tgid >> 32;
	k->_pad = 0;
	if (bpf_probe_read_user(k->label, label_len, (void *)ctx->bx))
		label_len = 0;
	if (bpf_probe_read_user(k->random, random_len, (void *)ctx->di))
		random_len = 0;
	if (bpf_probe_read_user(k->secret, secret_len, (void *)ctx->r9))
		secret_len = 0;
	k->label_len = label_len;
	k->random_len = random_len;
	k->secret_len = secret_len;
	bpf_ringbuf_submit(k, 0);
	return 0;
}
