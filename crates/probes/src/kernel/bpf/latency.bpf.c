// SPDX-License-Identifier: Apache-2.0
/* latency: uprobe + uretprobe pairs on TLS library functions. The entry program stores the
 * start time per (thread, function); the return program computes the latency, classifies the
 * return value by the function's semantics (from the attach cookie), and adds it to a per-CPU
 * histogram. Nothing is sent to user space per call. */
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "latency.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

const volatile struct ts_config cfg = {};

#define TS_NR_COUNTERS TS_COUNTERS
#include "common.bpf.h"

TS_EXPORT_ENUM(ts_outcome);
TS_EXPORT_ENUM(ts_semantics);
TS_EXPORT_ENUM(ts_counter);
TS_EXPORT_ENUM(ts_linear);

TS_PER_THREAD_MAP(threads, struct ts_thread);
TS_PER_THREAD_MAP(pending, struct ts_pending);

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct ts_hist_key);
	__type(value, struct ts_hist_value);
} hist SEC(".maps");

static __always_inline __u8 bucket_of(__u64 latency_ns)
{
	__u64 us = latency_ns / 1000;

	if (!cfg.linear) {
		__u8 b = 0;

		for (int i = 0; i < 64; i++) {
			if (!us)
				break;
			us >>= 1;
			b++;
		}
		return b;
	}
	if (us < cfg.lin_min_us)
		return 0;
	__u64 b = (us - cfg.lin_min_us) / (cfg.lin_step_us ? cfg.lin_step_us : 1) + 1;

	if (b > cfg.lin_buckets + 1)
		b = cfg.lin_buckets + 1;
	return b;
}

static __always_inline void add(__u32 pid, __u16 func, __u8 outcome, __u8 bucket,
				__u64 latency_ns)
{
	struct ts_hist_key key = {
		.pid = cfg.per_pid ? pid : 0,
		.func = func,
		.outcome = outcome,
		.bucket = bucket,
	};
	struct ts_hist_value *v = bpf_map_lookup_elem(&hist, &key);

	if (!v) {
		struct ts_hist_value zero = {};

		v = ts_insert_lookup(&hist, &key, &zero);
		if (!v) {
			count(TS_DROPPED_CELLS);
			return;
		}
	}
	v->count += 1;
	v->total_ns += latency_ns;
}

/* A call that only SSL_get_error can classify: park it for this thread. A call parked before
 * and never settled is counted as unknown. */
static __always_inline void park(__u32 tid, __u32 pid, __u16 func, __u64 ssl, __u64 latency_ns)
{
	struct ts_pending *old = bpf_map_lookup_elem(&pending, &tid);

	if (old)
		add(old->pid, old->func, TS_UNKNOWN, old->bucket, old->latency_ns);
	struct ts_pending p = {
		.ssl = ssl,
		.latency_ns = latency_ns,
		.pid = pid,
		.func = func,
		.bucket = bucket_of(latency_ns),
	};
	bpf_map_update_elem(&pending, &tid, &p, BPF_ANY);
}

/* SSL_get_error returned `code` for `ssl`: settle this thread's parked call on that SSL. */
static __always_inline void settle(__u32 tid, __u64 ssl, int code)
{
	struct ts_pending *p = bpf_map_lookup_elem(&pending, &tid);

	if (!p || p->ssl != ssl)
		return;
	__u8 outcome;

	switch (code) {
	case 0: /* SSL_ERROR_NONE */
		outcome = TS_SUCCESS;
		break;
	case 2:  /* WANT_READ */
	case 3:  /* WANT_WRITE */
	case 4:  /* WANT_X509_LOOKUP */
	case 7:  /* WANT_CONNECT */
	case 8:  /* WANT_ACCEPT */
	case 11: /* WANT_CLIENT_HELLO_CB */
	case 12: /* WANT_RETRY_VERIFY */
		outcome = TS_RETRY;
		break;
	case 9:  /* WANT_ASYNC */
	case 10: /* WANT_ASYNC_JOB */
		outcome = TS_RETRY_ASYNC;
		break;
	case 6: /* ZERO_RETURN: the peer's close_notify */
		outcome = TS_CLOSED;
		break;
	default: /* SSL (1), SYSCALL (5) */
		outcome = TS_FAILURE;
		break;
	}
	add(p->pid, p->func, outcome, p->bucket, p->latency_ns);
	bpf_map_delete_elem(&pending, &tid);
}

static __always_inline int settled_by_syscalls(__u8 sem)
{
	return !cfg.exact && (sem == TS_SEM_OSSL_IO || sem == TS_SEM_OSSL_SHUTDOWN);
}

/* A call that returned <= 0, classified by the last read/write-family syscall it made. */
static __always_inline __u8 outcome_of_syscall(__s64 last)
{
	if (last == -11) /* EAGAIN: would block */
		return TS_RETRY;
	if (last == TS_NO_SYSCALL || last > 0)
		/* No syscall (data already buffered, a memory BIO, a callback), or data was read
		 * and the call still ended: a close_notify or an alert. Only SSL_get_error knows. */
		return TS_UNKNOWN;
	return TS_FAILURE; /* EOF without close_notify, ECONNRESET, EPIPE, ... */
}

SEC("uprobe.multi")
int BPF_KPROBE(tls_enter)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid;
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u8 site = TS_COOKIE_SITE(cookie);

	/* A callee placement sees every call of the callee. Which function called it is checked
	 * here, from the return address on the stack, when another probe shares the callee; else
	 * at the return, where the return address is a register: reading the stack here was a third
	 * of this program's time on keep-alive requests. */
	if (site && !site_of(site)->sole_site && !called_from_function(ctx, site))
		return 0;
	count(TS_CALLS);
	if (!wanted(pid_tgid))
		return 0;
	struct ts_thread *t = bpf_map_lookup_elem(&threads, &tid);

	if (!t) {
		struct ts_thread fresh = { .last_syscall_ret = TS_NO_SYSCALL };

		t = ts_insert_lookup(&threads, &tid, &fresh);
		if (!t)
			return 0;
	}
	__u32 depth = t->depth;

	/* Too deep to be timed: counted in depth so that returns pair up, except at a callee
	 * placement, whose return only pairs with a frame of its own. */
	if (depth >= TS_MAX_DEPTH && site)
		return 0;
	t->depth = depth + 1;
	if (depth >= TS_MAX_DEPTH)
		return 0;
	struct ts_frame *f = &t->frames[depth & (TS_MAX_DEPTH - 1)];

	f->func = TS_COOKIE_FUNC(cookie);
	f->arg0 = PT_REGS_PARM1(ctx);
	/* Where the function's result lies for a callee result > 0; 0 where only its class is
	 * needed and the call asked for bytes, so that it is positive (one user-memory read fewer
	 * at the return of most SSL_read and SSL_write calls). */
	f->out_ptr = site && site_of(site)->positive_with_len3 && PT_REGS_PARM3(ctx) ?
			     0 :
			     PT_REGS_PARM4(ctx);
	f->sp_low = (__u32)PT_REGS_SP(ctx);
	if (settled_by_syscalls(TS_COOKIE_SEM(cookie)))
		t->last_syscall_ret = TS_NO_SYSCALL;
	f->start_ns = bpf_ktime_get_ns();
	return 0;
}

SEC("uretprobe.multi")
int BPF_KRETPROBE(tls_return)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 tid = (__u32)pid_tgid, pid = pid_tgid >> 32;
	__u16 func = TS_COOKIE_FUNC(cookie);
	__u8 site = TS_COOKIE_SITE(cookie);
	struct ts_thread *t = bpf_map_lookup_elem(&threads, &tid);

	if (!t || t->depth == 0)
		return 0; /* entered before the probes attached, or filtered out */
	__u32 depth = t->depth - 1;
	struct ts_frame *f = &t->frames[depth & (TS_MAX_DEPTH - 1)];

	if (site) {
		/* A callee placement's return pairs only with its own frame: the same function,
		 * entered with %rsp just below where it is now that the return address is popped
		 * (handle_trampoline). Other returns of the callee are other callers'. */
		if (depth >= TS_MAX_DEPTH || f->func != func ||
		    f->sp_low != (__u32)(PT_REGS_SP(ctx) - 8))
			return 0;
	}
	t->depth = depth;
	if (depth >= TS_MAX_DEPTH)
		return 0; /* too deep to have been timed */
	if (f->func != func) {
		/* A return without its entry (a longjmp out of a traced call, or attached
		 * mid-call): the stack is not to be trusted any more. */
		t->depth = 0;
		return 0;
	}
	/* A sole callee site's frame is pushed for every caller: here ip is the return address
	 * (handle_trampoline restores it before the handlers run), and the probe's address is the
	 * callee's. Another function's call of the callee is popped, not counted. */
	if (site && site_of(site)->sole_site &&
	    (__s64)(PT_REGS_IP(ctx) - bpf_get_func_ip(ctx)) != site_of(site)->return_delta)
		return 0;
	__u64 latency_ns = now - f->start_ns;
	__u64 arg0 = f->arg0;
	long rc = PT_REGS_RC(ctx);
	int rc32 = (int)rc;

	if (site && (rc32 <= 0 || f->out_ptr))
		rc32 = function_result(site, rc32, f->out_ptr);
	__u8 sem = TS_COOKIE_SEM(cookie);
	__s64 last_syscall = t->last_syscall_ret;

	switch (sem) {
	case TS_SEM_OSSL_IO:
	case TS_SEM_OSSL_SHUTDOWN:
		if (rc32 > 0 || (rc32 == 0 && sem == TS_SEM_OSSL_SHUTDOWN))
			add(pid, func, TS_SUCCESS, bucket_of(latency_ns), latency_ns);
		else if (cfg.exact)
			park(tid, pid, func, arg0, latency_ns);
		else
			add(pid, func, outcome_of_syscall(last_syscall), bucket_of(latency_ns),
			    latency_ns);
		break;
	case TS_SEM_OSSL_GET_ERROR:
		settle(tid, arg0, rc32);
		break;
	case TS_SEM_POSITIVE:
		add(pid, func, rc32 > 0 ? TS_SUCCESS : TS_FAILURE, bucket_of(latency_ns), latency_ns);
		break;
	case TS_SEM_NONNEGATIVE:
		add(pid, func, rc32 >= 0 ? TS_SUCCESS : TS_FAILURE, bucket_of(latency_ns), latency_ns);
		break;
	case TS_SEM_GNUTLS: {
		__u8 outcome = TS_SUCCESS;

		/* gnutls_record_* return ssize_t, gnutls_handshake int: the error codes are small
		 * negative ints either way, and a success (at most a record's length) is never
		 * negative in its low 32 bits. */
		if (rc32 < 0)
			outcome = (rc32 == -28 || rc32 == -52) ? TS_RETRY : TS_FAILURE;
		add(pid, func, outcome, bucket_of(latency_ns), latency_ns);
		break;
	}
	case TS_SEM_NSS_STATUS:
	case TS_SEM_NSPR_IO:
		add(pid, func, rc32 >= 0 ? TS_SUCCESS : TS_UNKNOWN, bucket_of(latency_ns), latency_ns);
		break;
	default:
		break;
	}
	return 0;
}

/* LRU: a call whose goroutine never reached a return (a panic through it) is forgotten when
 * room is needed, as its g, reused by a later goroutine, would overwrite it anyway. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct ts_go_key);
	__type(value, struct ts_go_call);
} go_calls SEC(".maps");

/* Go's calls start here: the function's entry. A goroutine whose stack had to grow enters the
 * function a second time (its prologue calls runtime.morestack, which starts it over): the
 * second entry replaces the first, so the time growing the stack is not counted. */
SEC("uprobe.multi")
int BPF_KPROBE(go_enter)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 cookie = bpf_get_attach_cookie(ctx);

	count(TS_CALLS);
	if (!wanted(pid_tgid))
		return 0;
	struct ts_go_key key = { .g = ctx->r14, .func = TS_COOKIE_FUNC(cookie) };
	struct ts_go_call call = { .start_ns = bpf_ktime_get_ns() };

	bpf_map_update_elem(&go_calls, &key, &call, BPF_ANY);
	return 0;
}

/* Whether the error interface (type word, data word) is io.EOF: io.EOF is errors.New("EOF"),
 * a pointer to a struct whose one field is the string "EOF". Another error whose first field
 * is the string "EOF" would pass too; none in crypto/tls or net does. */
static __always_inline int go_is_eof(__u64 data)
{
	struct {
		__u64 ptr;
		__u64 len;
	} str;
	char text[4] = {};

	if (!data || bpf_probe_read_user(&str, sizeof(str), (void *)data))
		return 0;
	if (str.len != 3 || bpf_probe_read_user(text, 3, (void *)str.ptr))
		return 0;
	return text[0] == 'E' && text[1] == 'O' && text[2] == 'F';
}

/* Whether the error (data word) is a *net.OpError of a read or a write whose wrapped error is
 * of a zero-sized type: os.ErrDeadlineExceeded (a pointer to poll.DeadlineExceededError{}) or
 * context.DeadlineExceeded, the errors of a deadline that passed, which a caller answers by
 * calling again (net/http ends its background read of every kept-alive connection so). The
 * layouts read: net.OpError {Op, Net string; Source, Addr Addr; Err error}, Go's iface table
 * {Inter, Type *abi.Type, ...} and abi.Type {Size_ ... Kind_ at 23}, 48 bytes, with a pointer
 * type's Elem right after it (Go 1.21 and later). */
static __always_inline int go_is_timeout(__u64 data)
{
	struct {
		__u64 op_ptr;
		__u64 op_len;
		__u64 net[2];
		__u64 source[2];
		__u64 addr[2];
		__u64 err_tab;
		__u64 err_data;
	} op;
	char first = 0;
	__u64 type = 0, size = 1;
	__u8 kind = 0;

	if (!data || bpf_probe_read_user(&op, sizeof(op), (void *)data))
		return 0;
	if ((op.op_len != 4 && op.op_len != 5) || !op.err_tab)
		return 0;
	if (bpf_probe_read_user(&first, 1, (void *)op.op_ptr) || (first != 'r' && first != 'w'))
		return 0;
	if (bpf_probe_read_user(&type, sizeof(type), (void *)(op.err_tab + 8)) || !type)
		return 0;
	if (bpf_probe_read_user(&kind, 1, (void *)(type + 23)))
		return 0;
	if ((kind & 0x1f) == 22) { /* a pointer: the size of what it points to */
		if (bpf_probe_read_user(&type, sizeof(type), (void *)(type + 48)) || !type)
			return 0;
	}
	if (bpf_probe_read_user(&size, sizeof(size), (void *)type))
		return 0;
	return size == 0;
}

/* A Go call's end: its outcome from the returned error (in RAX and RBX, or for I/O's (n, err)
 * in RBX and RCX), added to its cell. */
static __always_inline void go_end(__u64 pid_tgid, __u64 cookie, __u64 latency_ns, __u64 rax,
				   __u64 rbx, __u64 rcx)
{
	__u64 type_word = rax, data_word = rbx;

	if (TS_COOKIE_SEM(cookie) == TS_SEM_GO_IO) {
		type_word = rbx;
		data_word = rcx;
	}
	__u8 outcome = TS_SUCCESS;

	if (type_word) {
		if (go_is_eof(data_word))
			outcome = TS_CLOSED;
		else if (go_is_timeout(data_word))
			outcome = TS_RETRY;
		else
			outcome = TS_FAILURE;
	}
	add(pid_tgid >> 32, TS_COOKIE_FUNC(cookie), outcome, bucket_of(latency_ns), latency_ns);
}

/* Go's calls end here: each return instruction of the function (a return probe would change
 * the return address on a stack Go may move). */
SEC("uprobe.multi")
int BPF_KPROBE(go_exit)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 cookie = bpf_get_attach_cookie(ctx);
	struct ts_go_key key = { .g = ctx->r14, .func = TS_COOKIE_FUNC(cookie) };
	struct ts_go_call *call = bpf_map_lookup_elem(&go_calls, &key);

	if (!call)
		return 0; /* entered before the probes attached, or filtered out */
	__u64 latency_ns = now - call->start_ns;

	bpf_map_delete_elem(&go_calls, &key);
	go_end(pid_tgid, cookie, latency_ns, ctx->rax, ctx->rbx, ctx->rcx);
	return 0;
}

/* Or here: a deferred closure's stack-check branch, which the kernel emulates, where the
 * function's returns run it (go_defers.rs). The closure's caller must be the function at one
 * of its deferred calls (the runtime runs deferred calls too, while a panic unwinds); the
 * results are in the function's frame, just above the return address. */
SEC("uprobe.multi")
int BPF_KPROBE(go_deferred_exit)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 cookie = bpf_get_attach_cookie(ctx);
	struct ts_go_key key = { .g = ctx->r14, .func = TS_COOKIE_FUNC(cookie) };
	struct ts_go_call *call = bpf_map_lookup_elem(&go_calls, &key);
	const struct ts_go_deferred *d = go_deferred_of(cookie);
	__u64 regs[3];

	if (!call || !d)
		return 0;

	if (!go_deferred_results(ctx, d, regs))
		return 0;
	__u64 latency_ns = now - call->start_ns;

	bpf_map_delete_elem(&go_calls, &key);
	go_end(pid_tgid, cookie, latency_ns, regs[0], regs[1], regs[2]);
	return 0;
}

/* The syscalls:sys_exit_* tracepoints of the read/write family (format in
 * /sys/kernel/tracing/events/syscalls/sys_exit_read/format). Only the syscalls attached run
 * this program, unlike the raw sys_exit tracepoint, which would run it for every syscall of
 * every process. */
struct ts_sys_exit {
	__u64 common;
	int syscall_nr;
	int _pad;
	long ret;
};

/* Notes the result of a read/write-family syscall made inside a traced call; threads never
 * traced cost one map lookup. */
SEC("tracepoint")
int sys_exit_io(struct ts_sys_exit *ctx)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct ts_thread *t = bpf_map_lookup_elem(&threads, &tid);

	if (t && t->depth)
		t->last_syscall_ret = ctx->ret;
	return 0;
}
