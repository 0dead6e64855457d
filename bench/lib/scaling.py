#!/usr/bin/env python3
"""Arranges bench/scaling's compare documents as Markdown tables.

Usage: scaling.py SUMMARY_MD [--profile LIBRARY PROFILE_TXT] COMPARE_JSON...
Per library, handshake kind and TLS version: the rate at 1 thread and at each N, the scaling
efficiency with its interval (and, for the engine, with the time other tasks held the CPUs
taken out), and the CPU and blocked time per handshake at 1 and N. Variants that could not be
placed are listed with why. The figures are tlsscope's; this only arranges them.
"""
import json
import sys


def fmt_interval(i):
    return f"{i['estimate']:.2f} [{i['low']:.2f}, {i['high']:.2f}]"


def settings_key(v):
    s = v["settings"]
    return (s.get("openssl", "?"), s.get("resume", "?"), s.get("tls", "?"))


def table(doc):
    exp = "engine" if any(s["metric"] == "engine_rate" for s in doc.get("scaling", [])) \
        or "engine" in doc["experiment"].get("target", "") else "load"
    rows = []
    rates_1 = {}
    for v in doc["variants"]:
        if v["settings"].get("threads") == "1" and not v.get("error") and not v.get("not_run"):
            m = next((m for m in v["metrics"] if m["name"] in ("engine_rate", "load_handshake_rate")), None)
            if m:
                rates_1[settings_key(v)] = m["summary"]["median"]
    head = ["library", "handshake", "TLS", "threads", "rate at 1 /s", "rate at N /s",
            "efficiency", "on idle CPUs", "CPU us/hs 1 -> N", "blocked us/hs 1 -> N",
            "blocks/hs at N", "note"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    by_label = {v["label"]: v for v in doc["variants"]}
    for s in doc.get("scaling", []):
        v = by_label[s["variant"]]
        lib, resume, tls = settings_key(v)
        per = s.get("per_handshake")
        idle = s.get("efficiency_on_idle_cpus")
        out.append("| " + " | ".join([
            lib, resume, tls, str(s["threads"]), f"{s['rate_1']:.0f}", f"{s['rate_n']:.0f}",
            fmt_interval(s["efficiency"]), fmt_interval(idle) if idle else "-",
            f"{per['cpu_us'][0]:.0f} -> {per['cpu_us'][1]:.0f}" if per else "-",
            f"{per['blocked_us'][0]:.0f} -> {per['blocked_us'][1]:.0f}" if per else "-",
            f"{per['blocks'][1]:.2f}" if per else "-",
            s.get("caveat", ""),
        ]) + " |")
    if len(out) == 2:
        out = ["No variant on more than one thread was measured."]
    one_only = [f"- {lib} {resume} TLS {tls}: {rate:.0f}/s at 1 thread"
                for (lib, resume, tls), rate in sorted(rates_1.items())]
    reasons = {}
    for v in doc["variants"]:
        if v.get("not_run"):
            reasons.setdefault(v["not_run"], []).append(v["label"])
    not_run = [f"- {len(labels)} variants ({labels[0]}, ...): {why}" if len(labels) > 1
               else f"- {labels[0]}: {why}" for why, labels in sorted(reasons.items())]
    failed = [f"- {v['label']}: {v['error']}" for v in doc["variants"] if v.get("error")]
    text = [f"## {exp}", "", f"{doc['experiment']['repeat']} rounds, rotated; efficiency = rate at N / "
            f"(N x rate at 1) from the paired rounds, {doc['level'] * 100:.0f}% interval.", ""]
    text += out
    if not_run:
        text += ["", "Not run:", ""] + not_run
    if failed:
        text += ["", "Failed:", ""] + failed
    if exp == "load" and len(out) <= 2:
        text += ["", "Rates at 1 thread:", ""] + one_only
    return text


def main():
    args = sys.argv[1:]
    summary = args.pop(0)
    profile = None
    if args and args[0] == "--profile":
        args.pop(0)
        profile = (args.pop(0), args.pop(0))
    docs = [json.load(open(p)) for p in args]
    env = docs[0]["environment"] if docs else {}
    lines = ["# bench/scaling", "",
             f"Machine: {env.get('cpu_model', '?')}, {env.get('cpus', '?')} CPUs, kernel "
             f"{env.get('kernel', '?')}.", ""]
    for d in docs:
        lines += table(d) + [""]
    if profile:
        lib, path = profile
        fam = [l for l in open(path) if "locks and atomics" in l]
        lines += [f"## Where {lib}'s lost time goes (profile.txt, full TLS 1.3 handshakes)", "",
                  "CPU-us per handshake in each family of functions (share of the CPU):", ""]
        lines += ["    " + l.strip() for l in fam] + [""]
    open(summary, "w").write("\n".join(lines))


if __name__ == "__main__":
    main()
