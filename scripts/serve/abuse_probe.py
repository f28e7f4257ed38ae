#!/usr/bin/env python3
"""Hostile-client probes against `kvzip serve` (docs/serve-production.md), with full-size numbers:
slow heads (N connections trickling header bytes) while /health and a short chat are timed; big
bodies (Content-Length and chunked) to every route while the server's resident memory is sampled;
abandoned non-streaming requests and the wait of a request behind them; a burst of
parallel + queue streams; a second server on the same port. Standard library only.

Usage: abuse_probe.py KVZIP CACHES_DIR CACHE_ID [--slow 300] [--upload-mib 1100] [--body-mib 300]
       [--parallel 4] [--queue 8] [--proxy HOST:PORT]
Starts `kvzip serve` itself ($KVZIP_MODEL) on --port (0: any free port); with --proxy the
requests go through that proxy instead (e.g. nginx from scripts/serve/nginx-replicas.conf, started
beforehand with the server's --port as its upstream).
"""
import argparse
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time

ap = argparse.ArgumentParser()
ap.add_argument("kvzip")
ap.add_argument("caches")
ap.add_argument("cache")
ap.add_argument("--slow", type=int, default=300)
ap.add_argument("--upload-mib", type=int, default=1100)
ap.add_argument("--body-mib", type=int, default=300)
ap.add_argument("--parallel", type=int, default=4)
ap.add_argument("--queue", type=int, default=8)
ap.add_argument("--port", type=int, default=0)
ap.add_argument("--proxy", default="")
args = ap.parse_args()

srv = subprocess.Popen([args.kvzip, "serve", "--caches", args.caches, "--port", str(args.port), "-t", "2",
                        "--parallel", str(args.parallel), "--queue", str(args.queue)],
                       stderr=subprocess.PIPE, text=True)
port = None
while port is None:
    line = srv.stderr.readline()
    if not line:
        sys.exit("server did not start")
    m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
    if m:
        port = int(m.group(1))
threading.Thread(target=lambda: [None for _ in srv.stderr], daemon=True).start()
print(f"server pid {srv.pid} port {port}", flush=True)
target = ("127.0.0.1", port)
if args.proxy:
    h, p = args.proxy.split(":")
    target = (h, int(p))

results = {}


def rss_mib():
    with open(f"/proc/{srv.pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def exchange(raw, timeout=30.0, body_iter=None):
    """Sends raw (then body_iter's pieces until refused); returns (status, seconds)."""
    t = time.time()
    s = socket.create_connection(target, timeout=timeout)
    try:
        s.sendall(raw)
        if body_iter:
            try:
                for piece in body_iter:
                    s.sendall(piece)
            except OSError:
                pass
        data = b""
        while b"\r\n\r\n" not in data or data.startswith(b"HTTP/1.1 100"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
            if data.startswith(b"HTTP/1.1 100") and data.count(b"\r\n\r\n") >= 2:
                data = data.split(b"\r\n\r\n", 1)[1]
        m = re.match(rb"HTTP/1.1 (\d+)", data)
        return (int(m.group(1)) if m else 0), time.time() - t
    except OSError:
        return 0, time.time() - t
    finally:
        s.close()


def req(method, path, body=b"", headers=""):
    return (f"{method} {path} HTTP/1.1\r\nHost: x\r\n{headers}Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def chat(max_tokens, stream=False):
    return json.dumps({"model": args.cache, "messages": [{"role": "user", "content": "What is this about?"}],
                       "max_tokens": max_tokens, "temperature": 0, "stream": stream}).encode()


# ---- slow heads --------------------------------------------------------------------------------
stop = threading.Event()
slow = []
for _ in range(args.slow):
    try:
        slow.append(socket.create_connection(target, timeout=5))
    except OSError:
        break


def trickle():
    i = 0
    while not stop.is_set():
        for s in list(slow):
            try:
                s.send(b"GET /health HTTP/1.1\r\nX"[i % 24:i % 24 + 1] if i < 24 else b"a")
            except OSError:
                slow.remove(s)
                try:
                    slow.append(socket.create_connection(target, timeout=5))  # the attacker reconnects
                except OSError:
                    pass
        i += 1
        stop.wait(1.0)


th = threading.Thread(target=trickle, daemon=True)
th.start()
time.sleep(3)
health = [exchange(req("GET", "/health"), 10) for _ in range(5)]
chats = [exchange(req("POST", "/v1/chat/completions", chat(8)), 30) for _ in range(3)]
stop.set()
th.join()
for s in slow:
    s.close()
results["slow_heads"] = {"connections": args.slow,
                         "health_s": [round(t, 3) for _, t in health], "health_status": [c for c, _ in health],
                         "chat_s": [round(t, 3) for _, t in chats], "chat_status": [c for c, _ in chats]}
print(json.dumps(results["slow_heads"]), flush=True)

# ---- big bodies --------------------------------------------------------------------------------
peak = [rss_mib()]
base = peak[0]
sampling = threading.Event()


def sample():
    while not sampling.is_set():
        peak[0] = max(peak[0], rss_mib())
        time.sleep(0.05)


threading.Thread(target=sample, daemon=True).start()
mib = b"x" * (1 << 20)


def chunked(n_mib):
    for _ in range(n_mib):
        yield b"100000\r\n" + mib + b"\r\n"
    yield b"0\r\n\r\n"


bodies = {}
bodies["chunked PUT upload"] = exchange(b"PUT /v1/caches/probe-upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
                                        120, chunked(args.upload_mib))
for path in ("/v1/chat/completions", "/v1/caches", f"/c/{args.cache}/v1/chat/completions"):
    bodies[f"Content-Length POST {path}"] = exchange(
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {args.body_mib << 20}\r\n\r\n".encode(), 60,
        (mib for _ in range(args.body_mib)))
    bodies[f"chunked POST {path}"] = exchange(
        f"POST {path} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".encode(), 60, chunked(args.body_mib))
bodies["Expect 2 GiB PUT"] = exchange(b"PUT /v1/caches/x HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                                      b"Content-Length: 2147483648\r\n\r\n", 10)
sampling.set()
results["bodies"] = {k: {"status": c, "s": round(t, 3)} for k, (c, t) in bodies.items()}
results["rss_mib"] = {"before": round(base, 1), "peak": round(peak[0], 1)}
print(json.dumps(results["bodies"]), json.dumps(results["rss_mib"]), flush=True)

# ---- abandoned requests, then one behind them ------------------------------------------------
for _ in range(8):
    s = socket.create_connection(target)
    s.sendall(req("POST", "/v1/chat/completions", chat(600)))
    s.close()
time.sleep(0.2)
code, secs = exchange(req("POST", "/v1/chat/completions", chat(8)), 300)
results["behind_abandoned"] = {"status": code, "s": round(secs, 3)}
print(json.dumps(results["behind_abandoned"]), flush=True)

# ---- a burst of parallel + queue streams -------------------------------------------------------
n = args.parallel + args.queue
codes = [None] * n
go = threading.Barrier(n)


def one(i):
    go.wait()
    codes[i] = exchange(req("POST", "/v1/chat/completions", chat(16, stream=True)), 120)[0]


ths = [threading.Thread(target=one, args=(i,)) for i in range(n)]
for t in ths:
    t.start()
for t in ths:
    t.join()
results["burst"] = {"requests": n, "429": codes.count(429), "200": codes.count(200)}
print(json.dumps(results["burst"]), flush=True)

# ---- a second server on the same port ---------------------------------------------------------
second = subprocess.run([args.kvzip, "serve", "--caches", args.caches, "--port", str(port), "-t", "1"],
                        capture_output=True, text=True, timeout=60)
results["second_server"] = {"exit": second.returncode, "stderr": second.stderr.strip().splitlines()[-1:]}
print(json.dumps(results["second_server"]), flush=True)

srv.terminate()
srv.wait(30)
