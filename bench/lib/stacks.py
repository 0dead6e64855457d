#!/usr/bin/env python3
"""Summarizes bench/stacks' compare document and checks issue 31's targets.

Usage: stacks.py COMPARE_JSON SUMMARY_MD. One row per variant: rate, client and server CPU per
full handshake (medians over the rounds, with tlsscope's intervals), the server's busy share,
the verdict against the same-settings baseline; then the targets: the built-in server >= 97%
busy under the rustls client, and the rustls client's CPU per handshake <= 0.5x the OpenSSL
client's for the same server, group and certificate. The figures are tlsscope's; this only
arranges them.
"""
import json
import sys

METRICS = [
    ("load_handshake_rate", "rate /s", "{:.0f}"),
    ("load_client_cpu_per_handshake", "client us/hs", "{:.0f}"),
    ("load_server_cpu_per_handshake", "server us/hs", "{:.0f}"),
    ("load_server_busy", "server busy %", "{:.1f}"),
]


def median(v, name):
    m = next((m for m in v["metrics"] if m["name"] == name), None)
    return None if m is None else m["median"]


def main():
    doc = json.load(open(sys.argv[1]))
    out = [f"# bench/stacks: {doc['experiment'].get('target', '')}", ""]
    out.append(f"{doc['experiment']['count']} handshakes x {doc['experiment']['repeat']} rounds "
               f"per variant; medians [{doc['level'] * 100:.0f}% interval]; verdicts against "
               "the first library under the same settings.")
    rustls = sorted({v.get("library", "") for v in doc["variants"]
                     if v["settings"].get("client") == "rustls" and v.get("library")})
    if rustls:
        out.append("")
        out.append("The rustls client: " + "; ".join(rustls) + ".")
    out.append("")
    keys = ["openssl", "cert", "group", "client", "server"]
    head = keys + [h for _, h, _ in METRICS] + ["server CPU vs baseline", "status"]
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "---|" * len(head))
    verdicts = {(c["variant"], c["metric"]): c for c in doc["comparisons"]}
    for v in doc["variants"]:
        s = v["settings"]
        row = [s.get(k, "-") for k in keys]
        for name, _, fmt in METRICS:
            m = median(v, name)
            row.append("-" if m is None else
                       f"{fmt.format(m['estimate'])} [{fmt.format(m['low'])}, {fmt.format(m['high'])}]")
        c = verdicts.get((v["label"], "load_server_cpu_per_handshake"))
        row.append("-" if c is None else
                   f"{c['comparison']['ratio']['estimate']:.3f} ({c['comparison']['verdict']})")
        row.append("FAILED: " + v["error"] if v.get("error") else
                   ("not run: " + v["not_run"] if v.get("not_run") else "ok"))
        out.append("| " + " | ".join(row) + " |")
    out += ["", "## Targets", ""]
    by = {}
    for v in doc["variants"]:
        s = v["settings"]
        by[(s.get("openssl"), s.get("cert"), s.get("group"), s.get("server"), s.get("client"))] = v
    for (lib, cert, group, server, client), v in sorted(by.items(), key=str):
        if client != "rustls" or not v["metrics"]:
            continue
        busy = median(v, "load_server_busy")
        line = f"- {lib} {cert} {group} {server}:"
        if server == "builtin" and busy is not None:
            ok = "met" if busy["estimate"] >= 97 else "MISSED"
            line += f" server {busy['estimate']:.1f}% busy ({ok}, target >= 97%);"
        other = by.get((lib, cert, group, server, "openssl"))
        if other and other["metrics"]:
            a = median(v, "load_client_cpu_per_handshake")["estimate"]
            b = median(other, "load_client_cpu_per_handshake")["estimate"]
            ok = "met" if a <= 0.5 * b else "MISSED"
            line += f" rustls client {a:.0f} us vs OpenSSL client {b:.0f} us = {a / b:.2f}x ({ok}, target <= 0.5x)"
        out.append(line)
    for w in doc["warnings"]:
        out.append(f"- warning: {w}")
    open(sys.argv[2], "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
