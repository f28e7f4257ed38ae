"""Load benchmark of `kvzip serve`, optionally side by side with llama.cpp's `llama-server` on the
same model in the same run. Standard library only: run it with any python3 (3.8+).

Workload: 4 documents (groups of paragraphs of examples/normans.json) x 24 questions each.
kvzip answers from the 4 compressed caches (`kvzip compress --ratio R`); llama-server gets each
document as a full prompt (system message = the document, user message = the question) with its
prompt cache on (`cache_prompt`) and as many slots as clients. For each client count (default
1, 4, 16, 32) every client takes questions from a shared list until all 96 are answered;
greedy decoding, max_tokens N. Per run: aggregate answer tokens/s (all answer tokens / wall time),
p50, p95 and p99 time to first token (request sent -> first content chunk of the SSE stream).

--compositions N adds N clients that, for as long as each kvzip run lasts, keep sending requests
composing --compose-k single-paragraph caches (`"model": "p0+p1+..."`, the file's first
paragraphs, each compressed alone); the table still reports the single-cache requests only, so a run with and one
without shows what compositions in flight cost them (`--compositions 0,4`).

  python3 bench/serve_load.py --kvzip build/kvzip --model $KVZIP_MODEL \
      [--llama-server /work/ext/llama-build/bin/llama-server] [--clients 1,4,16,32] [--out F.json] \
      [--compositions 0,4 --compose-k 16 --questions 24]
"""
import argparse
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)


def documents():
    squad = json.load(open(os.path.join(SRC, "examples", "normans.json")))
    paras = squad["data"][0]["paragraphs"]
    docs = []
    for i in range(4):
        group = paras[i * 9:i * 9 + 9]
        qs = [q["question"] for p in group for q in p["qas"]]
        docs.append(("\n\n".join(p["context"] for p in group), qs[:24]))
    return docs


def wait_port(proc, pattern, timeout=300):
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line and proc.poll() is not None:
            break
        m = re.search(pattern, line)
        if m:
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return int(m.group(1))
    raise SystemExit("server did not start")


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_health(url, proc, timeout=600):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit("server exited")
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.5)
    raise SystemExit("server did not become healthy")


def stream_request(url, body, headers):
    """Returns (ttft_s, answer tokens, total_s); tokens from the usage chunk."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", **headers})
    t0 = time.time()
    ttft, tokens = None, 0
    with urllib.request.urlopen(req, timeout=3600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            j = json.loads(line[6:])
            if j.get("usage"):
                tokens = j["usage"]["completion_tokens"]
            for c in j.get("choices", []):
                if ttft is None and (c.get("delta") or {}).get("content"):
                    ttft = time.time() - t0
    total = time.time() - t0
    return (ttft if ttft is not None else total), tokens, total


def composition_paragraphs(k):
    squad = json.load(open(os.path.join(SRC, "examples", "normans.json")))
    paras = squad["data"][0]["paragraphs"]
    if len(paras) < k:
        raise SystemExit(f"--compose-k {k}: examples/normans.json has {len(paras)} paragraphs")
    return [p["context"] for p in paras[:k]]


def keep_busy(make_request, stop):
    """Sends requests one after another until `stop` is set; returns how many completed."""
    done = [0]

    def loop():
        while not stop.is_set():
            try:
                make_request()
                done[0] += 1
            except Exception as e:  # keep loading; report the first failure
                print("composition failed:", e, file=sys.stderr, flush=True)
                time.sleep(0.5)
    return loop, done


def run_load(make_request, work, clients):
    q = queue.Queue()
    for w in work:
        q.put(w)
    results, lock = [], threading.Lock()

    def client():
        while True:
            try:
                w = q.get_nowait()
            except queue.Empty:
                return
            r = make_request(w)
            with lock:
                results.append(r)

    t0 = time.time()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - t0
    ttfts = sorted(r[0] for r in results)
    tokens = sum(r[1] for r in results)
    pct = lambda p: ttfts[min(len(ttfts) - 1, int(p * len(ttfts)))]
    return {"clients": clients, "requests": len(results), "wall_s": round(wall, 2),
            "answer_tokens": tokens, "tok_per_s": round(tokens / wall, 2),
            "ttft_p50_s": round(pct(0.50), 3), "ttft_p95_s": round(pct(0.95), 3),
            "ttft_p99_s": round(pct(0.99), 3)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvzip", required=True)
    ap.add_argument("--model", default=os.environ.get("KVZIP_MODEL"))
    ap.add_argument("--llama-server")
    ap.add_argument("--clients", default="1,4,16,32")
    ap.add_argument("--ratio", default="0.3")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--threads", default="2")
    ap.add_argument("--out")
    ap.add_argument("--compositions", default="0", help="composing clients in flight, per run (comma-separated)")
    ap.add_argument("--compose-k", type=int, default=16, help="caches per composition")
    ap.add_argument("--questions", type=int, default=24, help="questions per document")
    a = ap.parse_args()
    counts = [int(c) for c in a.clients.split(",")]
    comps = [int(c) for c in a.compositions.split(",")]
    docs = documents()
    work = [(d, q) for d in range(4) for q in docs[d][1][:a.questions]]
    tmp = tempfile.mkdtemp(prefix="kvzip-serve-bench-")
    caches = os.path.join(tmp, "caches")
    os.makedirs(caches)
    report = {"machine": os.uname().machine, "cpus": os.cpu_count(), "model": a.model,
              "ratio": a.ratio, "max_tokens": a.max_tokens, "docs": [len(d[0]) for d in docs],
              "kvzip": [], "llama_server": []}
    for i, (text, _) in enumerate(docs):
        path = os.path.join(tmp, f"doc{i}.txt")
        open(path, "w").write(text)
        subprocess.run([a.kvzip, "compress", path, "-m", a.model, "-o", os.path.join(caches, f"doc{i}.kvz"),
                        "-q", "-t", a.threads, "--ratio", a.ratio], check=True)
    if max(comps) > 0:
        for i, text in enumerate(composition_paragraphs(a.compose_k)):
            path = os.path.join(tmp, f"p{i}.txt")
            open(path, "w").write(text)
            subprocess.run([a.kvzip, "compress", path, "-m", a.model, "-o", os.path.join(caches, f"p{i}.kvz"),
                            "-q", "-t", a.threads, "--ratio", a.ratio], check=True)
    try:
        proc = subprocess.Popen([a.kvzip, "serve", "--caches", caches, "-m", a.model, "--port", "0",
                                 "-t", a.threads, "--parallel", str(max(counts) + max(comps)), "--queue", "256"],
                                stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        port = wait_port(proc, r"listening on http://127\.0\.0\.1:(\d+)")
        url = f"http://127.0.0.1:{port}/v1/chat/completions"

        def kvzip_req(w):
            d, q = w
            return stream_request(url, {"model": f"doc{d}", "messages": [{"role": "user", "content": q}],
                                        "max_tokens": a.max_tokens, "temperature": 0, "stream": True,
                                        "stream_options": {"include_usage": True}}, {})

        composed_id = "+".join(f"p{i}" for i in range(a.compose_k))

        def composed_req():
            return stream_request(url, {"model": composed_id, "messages": [{"role": "user",
                                                                             "content": "Who ruled Normandy?"}],
                                        "max_tokens": 4, "temperature": 0, "stream": True}, {})
        for n in comps:
            for c in counts:
                stop = threading.Event()
                loops = [keep_busy(composed_req, stop) for _ in range(n)]
                busy = [threading.Thread(target=loop) for loop, _ in loops]
                for t in busy:
                    t.start()
                if n:
                    time.sleep(1.0)  # the compositions are composing before the first single request
                r = run_load(kvzip_req, work, c)
                stop.set()
                for t in busy:
                    t.join()
                r["compositions_in_flight"] = n
                r["compositions_done"] = sum(d[0] for _, d in loops)
                print("kvzip", json.dumps(r), flush=True)
                report["kvzip"].append(r)
        proc.terminate()
        proc.wait()
        if a.llama_server:
            # One slot per client, each with room for the longest document plus its answer; the
            # prompt cache is on by default (and asked for per request below).
            ctx = 2560 * max(counts)
            port = free_port()
            proc = subprocess.Popen([a.llama_server, "-m", a.model, "--port", str(port), "--host", "127.0.0.1",
                                     "-t", a.threads, "-np", str(max(counts)), "-c", str(ctx)],
                                    stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL, text=True)
            wait_health(f"http://127.0.0.1:{port}/health", proc)
            url = f"http://127.0.0.1:{port}/v1/chat/completions"

            def llama_req(w):
                d, q = w
                return stream_request(url, {"messages": [{"role": "system", "content": docs[d][0]},
                                                         {"role": "user", "content": q}],
                                            "max_tokens": a.max_tokens, "temperature": 0, "stream": True,
                                            "cache_prompt": True,
                                            "stream_options": {"include_usage": True}}, {})
            for c in counts:
                r = run_load(llama_req, work, c)
                print("llama-server", json.dumps(r), flush=True)
                report["llama_server"].append(r)
            proc.terminate()
            proc.wait()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if a.out:
        json.dump(report, open(a.out, "w"), indent=1)
    single = report["kvzip"][0]["tok_per_s"] if report["kvzip"] else 0
    for r in report["kvzip"]:
        print(f"kvzip {r['clients']:>2} clients: {r['tok_per_s']:7.1f} tok/s ({r['tok_per_s'] / single:.2f}x single), "
              f"TTFT p50 {r['ttft_p50_s']:.3f} s p95 {r['ttft_p95_s']:.3f} s")
    for r, k in zip(report["llama_server"], report["kvzip"]):
        print(f"llama-server {r['clients']:>2} clients: {r['tok_per_s']:7.1f} tok/s, TTFT p50 {r['ttft_p50_s']:.3f} s "
              f"(kvzip {r['ttft_p50_s'] / max(k['ttft_p50_s'], 1e-9):.1f}x lower)")


if __name__ == "__main__":
    sys.exit(main())
