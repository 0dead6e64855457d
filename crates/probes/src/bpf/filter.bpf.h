/* Helpers both BPF programs use: which threads they look at, and per-CPU counters. Include
 * after the BPF headers. */
#ifndef TLSSCOPE_FILTER_BPF_H
#define TLSSCOPE_FILTER_BPF_H

#include "common.h"

/* The processes to look at when a program filters by PID (the loader fills it). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, TS_MAX_PIDS);
	__type(key, __u32);
	__type(value, __u8);
} pids SEC(".maps");

/* Adds one to counter `which` of a per-CPU array map. */
static __always_inline void ts_count(void *counters, __u32 which)
{
	__u64 *n = bpf_map_lookup_elem(counters, &which);

	if (n)
		*n += 1;
}

/* True when the current thread is to be looked at: its process is in `pids` (when
 * `filter_pids`) and its name is `comm` (when `filter_comm`). */
static __always_inline int ts_wanted(__u64 pid_tgid, __u8 filter_pids, __u8 filter_comm,
				     const volatile char *comm)
{
	__u32 tgid = pid_tgid >> 32;

	if (filter_pids && !bpf_map_lookup_elem(&pids, &tgid))
		return 0;
	if (filter_comm) {
		char current[TS_COMM_LEN];

		bpf_get_current_comm(current, sizeof(current));
		for (int i = 0; i < TS_COMM_LEN; i++) {
			if (current[i] != comm[i])
				return 0;
			if (current[i] == 0)
				break;
		}
	}
	return 1;
}

#endif
