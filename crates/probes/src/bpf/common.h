/* Shared by tlsscope's BPF programs: which processes to trace, and the types both sides read. */
#ifndef TLSSCOPE_COMMON_H
#define TLSSCOPE_COMMON_H

#define TS_COMM_LEN 16
/* Most processes the PID filter holds (-p, plus tlsscope itself while it calibrates). */
#define TS_MAX_PIDS 1024

#endif
