#!/usr/bin/env python3
"""Counts the verdicts of bench/compare-verdicts' runs and checks them against issue 30's targets.

Usage: verdicts.py WORK RUNS SLOWER RUN_DIR. Reads WORK/{aa,calibrated}-N.json (tlsscope compare
documents) and WORK/durations ("kind N milliseconds" lines); writes RUN_DIR/summary.md and
RUN_DIR/verdicts.csv.gz. Exits 1 when a target is missed. The statistics are tlsscope's: this
only counts what each run concluded.
"""
import csv
import gzip
import io
import json
import sys
from collections import Counter, defaultdict

# Metrics the calibrated extra client work lands in, and those it does not touch.
CLIENT_METRICS = ["pretransfer", "request_total", "engine_handshake", "engine_client",
                  "client_cpu_per_connection"]
SERVER_METRICS = ["engine_server", "server_cpu_per_connection"]
NEEDED = 19  # of 20: scaled to RUNS below


def main():
    work, runs, slower, run_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    needed = -(-NEEDED * runs // 20)
    durations = {}
    with open(f"{work}/durations") as f:
        for line in f:
            kind, i, ms = line.split()
            durations[(kind, int(i))] = int(ms) / 1000
    tally = defaultdict(Counter)
    rows = []
    for kind in ["aa", "calibrated"]:
        for i in range(1, runs + 1):
            doc = json.load(open(f"{work}/{kind}-{i}.json"))
            for c in doc["comparisons"]:
                cmp = c["comparison"]
                tally[(kind, c["metric"])][cmp["verdict"]] += 1
                rows.append([kind, i, c["metric"], cmp["method"], f'{cmp["ratio"]["estimate"]:.4f}',
                             f'{cmp["ratio"]["low"]:.4f}', f'{cmp["ratio"]["high"]:.4f}',
                             f'{cmp["p_value"]:.3g}', f'{(cmp["noise_floor"] or float("nan")):.4f}',
                             cmp["verdict"], f"{durations[(kind, i)]:.1f}"])
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(["kind", "run", "metric", "method", "ratio", "low", "high", "p", "noise_floor",
                "verdict", "run_seconds"])
    w.writerows(rows)
    with gzip.open(f"{run_dir}/verdicts.csv.gz", "wt") as f:
        f.write(out.getvalue())

    def median_ratio(kind, metric):
        values = sorted(float(r[4]) for r in rows if r[0] == kind and r[2] == metric)
        return values[len(values) // 2] if values else float("nan")

    def median_floor(kind, metric):
        values = sorted(float(r[8]) for r in rows if r[0] == kind and r[2] == metric)
        return values[len(values) // 2] if values else float("nan")

    lines = [f"# compare verdicts over {runs} runs of each kind", "",
             f"Targets (issue 30): A/A, no significant difference in >= {needed}/{runs} runs for "
             f"every metric; calibrated {slower}% slower client, called slower in >= {needed}/{runs} "
             "for the client's metrics (the server's metrics untouched: no verdict, as A/A), every "
             "run under 60 s.", "",
             "| kind | metric | no significant difference | slower | faster | too few | "
             "median ratio | median noise floor | target | met |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    missed = []
    metrics = CLIENT_METRICS + SERVER_METRICS
    for kind in ["aa", "calibrated"]:
        for metric in metrics:
            t = tally[(kind, metric)]
            if not t:
                continue
            if kind == "calibrated" and metric in CLIENT_METRICS:
                target, got = "slower", t["worse"]
            else:
                target, got = "no significant difference", t["no_significant_difference"]
            met = got >= needed
            if not met:
                missed.append(f"{kind} {metric}: {target} in {got}/{runs}")
            lines.append(
                f"| {kind} | {metric} | {t['no_significant_difference']} | {t['worse']} | "
                f"{t['better']} | {t['untestable']} | {median_ratio(kind, metric):.4f} | "
                f"±{100 * median_floor(kind, metric):.2f}% | {target} >= {needed} | "
                f"{'yes' if met else 'NO'} |")
    longest = max(durations.values())
    lines += ["", f"Longest run: {longest:.1f} s (target: under 60 s); median "
              f"{sorted(durations.values())[len(durations) // 2]:.1f} s."]
    if longest >= 60:
        missed.append(f"a run took {longest:.1f} s")
    lines += ["", "Verdict: " + ("every target met." if not missed else
                                 "missed: " + "; ".join(missed) + ".")]
    with open(f"{run_dir}/summary.md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
