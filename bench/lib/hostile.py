#!/usr/bin/env python3
"""bench/lib/hostile.py: one kind of hostile client, kept up against 127.0.0.1:PORT for a while.

Used by bench/hostile-clients while it measures the built-in server's keep-alive rate. Each
attack runs at a fixed, modest intensity (the constants below) until --duration has passed or
SIGTERM arrives, then prints one JSON line saying what it did. Only 127.0.0.1 is ever contacted;
every loop is bounded by the deadline, and every socket call by a timeout.

    hostile.py ATTACK --port PORT --duration SECONDS

ATTACK is one of: slowloris, half-open, garbage, oversized, pipelining, renegotiation, resets.
"""
import argparse
import json
import signal
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time

HOST = "127.0.0.1"

# Intensities (per attacker process).
SLOW_HEADS = 100          # TLS connections sending their request head a byte a second
SLOW_HANDSHAKES = 50      # TCP connections sending their ClientHello a byte a second
HALF_OPEN_PER_S = 500     # new connections per second that stop mid-handshake
HALF_OPEN_HELD = 3000     # at most this many held at once (the oldest are let go)
GARBAGE_PER_S = 500       # connections per second sending something that is not TLS
OVERSIZED_PER_S = 20      # TLS connections per second with an oversized head
PIPELINERS = 4            # connections flooding pipelined requests without reading
PIPELINE_HOLD_S = 1.0     # how long a flooder holds its stalled connection before a reset
RENEGOTIATIONS_PER_S = 2   # s_client runs per second asking for a TLS 1.2 renegotiation
RESETS_PER_S = 10         # 10 MB downloads per second reset after 64 KiB

STOP = threading.Event()


def tls_context(tls12=False):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if tls12:
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    return ctx


def tcp(port, timeout=2.0):
    return socket.create_connection((HOST, port), timeout=timeout)


def tls(port, ctx, timeout=2.0):
    return ctx.wrap_socket(tcp(port, timeout))


def client_hello():
    """A real ClientHello, captured from a handshake against a listener of our own."""
    with socket.socket() as listener:
        listener.bind((HOST, 0))
        listener.listen(1)
        raw = socket.create_connection(listener.getsockname(), timeout=2)
        peer, _ = listener.accept()
        raw.setblocking(False)
        client = tls_context().wrap_socket(raw, do_handshake_on_connect=False)
        try:
            client.do_handshake()
        except ssl.SSLWantReadError:
            pass
        peer.settimeout(2)
        hello = peer.recv(4096)
        client.close()
        peer.close()
    return hello


def paced(per_s, deadline):
    """Yields once per tick at `per_s` ticks a second until the deadline (or a stop)."""
    gap = 1.0 / per_s
    next_at = time.monotonic()
    while not STOP.is_set() and time.monotonic() < deadline:
        yield
        next_at += gap
        pause = next_at - time.monotonic()
        if pause > 0:
            STOP.wait(pause)
        elif pause < -1.0:
            next_at = time.monotonic()  # fell behind by a second: do not try to catch up


def read_to_close(sock, limit=1 << 20):
    got = b""
    try:
        while len(got) < limit:
            chunk = sock.recv(65536)
            if not chunk:
                break
            got += chunk
    except (OSError, ssl.SSLError):
        pass
    return got


def slowloris(port, deadline, did):
    """Heads and ClientHellos sent a byte a second; a connection the server closes is opened
    again, so the attack keeps its size."""
    head = b"GET / HTTP/1.1\r\nHost: localhost\r\nUser-Agent: slowloris\r\nX-a: b\r\n"
    hello = client_hello()
    ctx = tls_context()
    conns = []  # [socket, bytes to send, position, is_tls]

    def fresh(is_tls):
        try:
            s = tls(port, ctx) if is_tls else tcp(port)
        except (OSError, ssl.SSLError):
            return None
        did["connections"] += 1
        return [s, head if is_tls else hello, 0, is_tls]

    for i in range(SLOW_HEADS + SLOW_HANDSHAKES):
        c = fresh(i < SLOW_HEADS)
        if c:
            conns.append(c)
    for _ in paced(1, deadline):
        for i, c in enumerate(conns):
            s, data, pos, is_tls = c
            try:
                s.send(data[pos % len(data):pos % len(data) + 1])
                c[2] += 1
                did["bytes"] += 1
            except (OSError, ssl.SSLError):
                did["closed_by_server"] += 1
                s.close()
                conns[i] = fresh(is_tls) or c
    for c in conns:
        c[0].close()


def half_open(port, deadline, did):
    """New connections that send nothing or half a ClientHello, then hold."""
    hello = client_hello()
    held = []
    for _ in paced(HALF_OPEN_PER_S, deadline):
        try:
            s = tcp(port, timeout=1.0)
            if did["connections"] % 2:
                s.send(hello[:len(hello) // 2])
        except OSError:
            did["connect_failures"] += 1
            continue
        did["connections"] += 1
        held.append(s)
        if len(held) > HALF_OPEN_HELD:
            held.pop(0).close()
    for s in held:
        s.close()


GARBAGE = [
    b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n",
    b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n",
    bytes(range(64)),
    b"\x16\x03\x01\x00\x05\x99\x99\x99\x99\x99",
]


def garbage(port, deadline, did):
    """Something that is not TLS where the ClientHello should be; waits for the close."""
    for _ in paced(GARBAGE_PER_S, deadline):
        try:
            with tcp(port) as s:
                s.sendall(GARBAGE[did["connections"] % len(GARBAGE)])
                read_to_close(s)
        except OSError:
            did["connect_failures"] += 1
            continue
        did["connections"] += 1


def oversized(port, deadline, did):
    """Heads over the server's limits: a 10 KiB request line, a 64 KiB line with no end, a
    20 KiB head; reads the error response."""
    line = b"GET /" + b"a" * 10000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"
    endless = b"GET /" + b"b" * 65536
    head = b"GET / HTTP/1.1\r\nHost: x\r\n" + b"X-Filler: 0123456789abcdef\r\n" * 800 + b"\r\n"
    ctx = tls_context()
    for _ in paced(OVERSIZED_PER_S, deadline):
        request = (line, endless, head)[did["connections"] % 3]
        try:
            with tls(port, ctx) as s:
                try:
                    s.sendall(request)
                except (OSError, ssl.SSLError):
                    pass  # the server may refuse before it has read it all
                reply = read_to_close(s)
        except (OSError, ssl.SSLError):
            did["connect_failures"] += 1
            continue
        did["connections"] += 1
        if reply[9:12] in (b"414", b"431"):
            did["refused"] += 1


def reset(sock):
    """Closes with SO_LINGER 0: the kernel resets the connection."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def pipeliner(port, deadline, did, lock):
    """Pipelined requests written back to back, never reading, until the writes stall; holds
    the stalled connection a moment, resets it, starts over."""
    batch = b"GET /bytes/16384 HTTP/1.1\r\nHost: x\r\n\r\n" * 100
    ctx = tls_context()
    while not STOP.is_set() and time.monotonic() < deadline:
        try:
            s = tls(port, ctx)
        except (OSError, ssl.SSLError):
            with lock:
                did["connect_failures"] += 1
            STOP.wait(0.1)
            continue
        s.settimeout(0.5)
        sent = 0
        try:
            # Bounded: at most 256 MiB of requests per connection.
            for _ in range((256 << 20) // len(batch)):
                s.sendall(batch)
                sent += 100
        except (OSError, ssl.SSLError):
            pass  # stalled: the server stopped reading
        with lock:
            did["connections"] += 1
            did["requests_sent"] += sent
        STOP.wait(PIPELINE_HOLD_S)
        reset(s)


def pipelining(port, deadline, did):
    lock = threading.Lock()
    threads = [threading.Thread(target=pipeliner, args=(port, deadline, did, lock))
               for _ in range(PIPELINERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def renegotiation(port, deadline, did):
    """openssl s_client over TLS 1.2 typing R (renegotiate); the refusal ends it."""
    for _ in paced(RENEGOTIATIONS_PER_S, deadline):
        p = subprocess.Popen(
            ["openssl", "s_client", "-connect", f"{HOST}:{port}", "-tls1_2"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        p.stdin.write(b"R\n")
        p.stdin.flush()
        try:
            out, _ = p.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        did["connections"] += 1
        if b"no renegotiation" in out:
            did["refused"] += 1


def resets(port, deadline, did):
    """Asks for 10 MB, reads 64 KiB, resets the connection under the server's writes."""
    ctx = tls_context()
    for _ in paced(RESETS_PER_S, deadline):
        try:
            s = tls(port, ctx)
            s.sendall(b"GET /bytes/10000000 HTTP/1.1\r\nHost: x\r\n\r\n")
            got = 0
            while got < 65536:
                chunk = s.recv(65536)
                if not chunk:
                    break
                got += len(chunk)
            reset(s)
        except (OSError, ssl.SSLError):
            did["connect_failures"] += 1
            continue
        did["connections"] += 1


ATTACKS = {
    "slowloris": slowloris,
    "half-open": half_open,
    "garbage": garbage,
    "oversized": oversized,
    "pipelining": pipelining,
    "renegotiation": renegotiation,
    "resets": resets,
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("attack", choices=sorted(ATTACKS))
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--duration", type=float, required=True)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: STOP.set())
    did = {"attack": args.attack, "connections": 0, "connect_failures": 0,
           "closed_by_server": 0, "refused": 0, "bytes": 0, "requests_sent": 0}
    started = time.monotonic()
    ATTACKS[args.attack](args.port, started + args.duration, did)
    did["seconds"] = round(time.monotonic() - started, 2)
    print(json.dumps(did), flush=True)


if __name__ == "__main__":
    sys.exit(main())
