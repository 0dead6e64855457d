/* What every tlsscope BPF program has: the PID filter map and the thread filter, per-CPU
 * counters, per-thread state maps, and the enums the Rust loaders read from BTF. Include after
 * the BPF headers, the program's header and its `cfg` (a const volatile struct whose `filter`
 * member is a struct ts_filter and whose `sites` member is a struct ts_site[TS_MAX_SITES]),
 * with TS_NR_COUNTERS defined to the number of its counters. */
#ifndef TLSSCOPE_COMMON_BPF_H
#define TLSSCOPE_COMMON_BPF_H

#include "common.h"

#ifndef TS_NR_COUNTERS
#error "define TS_NR_COUNTERS (how many counters the program keeps) before common.bpf.h"
#endif

/* Puts enum `name` in the object's BTF, so that the generated skeleton declares it as
 * `types::name` and the Rust loader uses the program's own numbers instead of copies: clang
 * describes only the types the object uses, and a read-only global of the enum's type is the
 * cheapest use (4 bytes of .rodata, never read). */
#define TS_EXPORT_ENUM(name) const volatile enum name ts_export_##name = (enum name)0

TS_EXPORT_ENUM(ts_cookie);
TS_EXPORT_ENUM(ts_cookie_field);
TS_EXPORT_ENUM(ts_result_rule);
TS_EXPORT_ENUM(ts_sites);
TS_EXPORT_ENUM(ts_go_deferred_limits);

/* The processes to look at when cfg.filter.by_pid is set (the loader fills it). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, TS_MAX_PIDS);
	__type(key, __u32);
	__type(value, __u8);
} pids SEC(".maps");

/* Per-CPU event counters, indexed by the program's counter enum; the loader sums the CPUs. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TS_NR_COUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

/* Adds one to counter `which`. */
static __always_inline void count(__u32 which)
{
	__u64 *n = bpf_map_lookup_elem(&counters, &which);

	if (n)
		*n += 1;
}

/* Most threads with state at once. */
#define TS_MAX_THREADS 65536

/* A map of per-thread state keyed by thread id. LRU: a thread that exits leaves its element
 * behind, and the oldest go first. */
#define TS_PER_THREAD_MAP(name, value_type)              \
	struct {                                         \
		__uint(type, BPF_MAP_TYPE_LRU_HASH);     \
		__uint(max_entries, TS_MAX_THREADS);     \
		__type(key, __u32);                      \
		__type(value, value_type);               \
	} name SEC(".maps")

/* After a lookup of `key` in hash map `map` missed: inserts `init` (unless another CPU just did)
 * and returns the element; NULL when the map has no room. Kept off the hit path, so that a hit
 * pays nothing for building `init`. */
static __always_inline void *ts_insert_lookup(void *map, const void *key, const void *init)
{
	bpf_map_update_elem(map, key, init, BPF_NOEXIST);
	return bpf_map_lookup_elem(map, key);
}

/* True when the current thread is to be looked at: its process is in `pids` (with by_pid) and
 * its name is `comm` (with by_comm). */
static __always_inline int wanted(__u64 pid_tgid)
{
	__u32 tgid = pid_tgid >> 32;

	if (cfg.filter.by_pid && !bpf_map_lookup_elem(&pids, &tgid))
		return 0;
	if (cfg.filter.by_comm) {
		char current[TS_COMM_LEN];

		bpf_get_current_comm(current, sizeof(current));
		for (int i = 0; i < TS_COMM_LEN; i++) {
			if (current[i] != cfg.filter.comm[i])
				return 0;
			if (current[i] == 0)
				break;
		}
	}
	return 1;
}

static __always_inline const volatile struct ts_site *site_of(__u8 site)
{
	return &cfg.sites[site & (TS_MAX_SITES - 1)];
}

/* At a callee placement's entry: whether this call of the callee comes from the function the
 * probe stands for, by its return address. The handler runs with ip at the probed instruction
 * and the return address at (%rsp) (kernel/events/uprobes.c, handle_swbp). */
static __always_inline int called_from_function(struct pt_regs *ctx, __u8 site)
{
	__u64 ret = 0;

	if (bpf_probe_read_user(&ret, sizeof(ret), (void *)PT_REGS_SP(ctx)))
		return 0;
	return (__s64)(ret - PT_REGS_IP(ctx)) == site_of(site)->return_delta;
}

/* At a callee placement's return: the function's result, from the callee's. */
static __always_inline int function_result(__u8 site, int rc, __u64 out_ptr)
{
	const volatile struct ts_site *s = site_of(site);
	__u8 rule;
	int value, out;

	if (rc > 0) {
		rule = s->rule[0];
		value = s->value[0];
	} else if (rc == 0) {
		rule = s->rule[1];
		value = s->value[1];
	} else {
		rule = s->rule[2];
		value = s->value[2];
	}
	if (rule == TS_RESULT_CONSTANT)
		return value;
	if (rule == TS_RESULT_OUT_INT && !bpf_probe_read_user(&out, sizeof(out), (void *)out_ptr))
		return out;
	return rc;
}

/* Go's deferred exits (go_defers.rs), by TS_FIELD_DEFERRED - 1; the loader fills it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TS_GO_DEFERRED);
	__type(key, __u32);
	__type(value, struct ts_go_deferred);
} go_deferred SEC(".maps");

/* The deferred exit this probe hit's cookie names, or NULL for another probe. */
static __always_inline const struct ts_go_deferred *go_deferred_of(__u64 cookie)
{
	__u32 index = TS_COOKIE_FIELD(cookie, TS_FIELD_DEFERRED);

	if (!index)
		return NULL;
	index -= 1;
	return bpf_map_lookup_elem(&go_deferred, &index);
}

/* One result register's value, from the caller's frame at `frame` (-1: not reloaded: 0). */
static __always_inline __u64 go_frame_word(__u64 frame, __s32 offset)
{
	__u64 word = 0;

	if (offset >= 0)
		bpf_probe_read_user(&word, sizeof(word), (void *)(frame + offset));
	return word;
}

/* At a deferred closure's stack-check branch: whether the function itself called it, at one of
 * its deferred calls (the runtime runs deferred calls too, while a panic unwinds), and then the
 * RAX, RBX and RCX the function returns, from its frame just above the return address. */
static __always_inline int go_deferred_results(struct pt_regs *ctx,
					       const struct ts_go_deferred *d, __u64 regs[3])
{
	__u64 sp = PT_REGS_SP(ctx), ip = PT_REGS_IP(ctx), ret = 0;

	if (bpf_probe_read_user(&ret, sizeof(ret), (void *)sp))
		return 0;
	__s64 delta = (__s64)(ret - ip);
	int from_caller = 0;

	for (int i = 0; i < TS_GO_DEFER_SITES; i++) {
		if (i < d->sites && d->site[i] == delta)
			from_caller = 1;
	}
	if (!from_caller)
		return 0;
	for (int i = 0; i < 3; i++)
		regs[i] = go_frame_word(sp + 8, d->results[i]);
	return 1;
}

#endif
