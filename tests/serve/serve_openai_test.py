"""Integration test of `kvzip serve` with the official `openai` Python client (pinned by
tests/serve/run_py_test.sh, which runs this file with the python of a venv under the build
folder). Real model ($KVZIP_MODEL). Steps:
  1. compress 4 documents (examples/normans.json) with `kvzip compress`;
  2. `kvzip query --json` answers = the reference (greedy, 24 tokens);
  3. start `kvzip serve` on a free loopback port with an API key;
  4. non-streaming and streaming completions on two caches equal the reference text and token
     count exactly (one request at a time: the same chunk shapes as `kvzip query`);
  5. 32 concurrent clients over the 4 caches all complete; their greedy answers equal the
     reference except where batched arithmetic (other matmul T, summation order) flips a near-tie:
     the test requires >= 90% exact and every answer to share its first 4 tokens' text;
  6. hostile requests get their status codes and the server stays healthy;
  7. SIGTERM during a compress job: the server exits and leaves no partial or temporary file.
Usage: serve_openai_test.py KVZIP_BINARY SOURCE_DIR SCRATCH_DIR
"""
import concurrent.futures
import json
import os
import shutil
import signal
import sys
import time
import urllib.error
import urllib.request

import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_support import N_TOKENS, ask as ask_with, check, documents, finish as finish_checks, make_caches, start_server as start  # noqa: E402

KVZIP, SRC, SCRATCH = sys.argv[1], sys.argv[2], sys.argv[3]
KEY = "test-key-0123456789"

# ---- 1, 2: caches and reference answers ---------------------------------------------------------
shutil.rmtree(SCRATCH, ignore_errors=True)
os.makedirs(SCRATCH)
docs, questions, paras = documents(SRC)
caches, want = make_caches(KVZIP, SCRATCH, docs, questions)

# ---- 3: the server --------------------------------------------------------------------------------
key_file = os.path.join(SCRATCH, "key")
open(key_file, "w").write(KEY + "\n")


def start_server(*extra):
    return start(KVZIP, caches, os.path.join(SCRATCH, "serve.log"), "--api-key-file", key_file, *extra)


server, port = start_server("--parallel", "8")
base = f"http://127.0.0.1:{port}"
client = openai.OpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0, timeout=600)

models = sorted(m.id for m in client.models.list().data)
check(models == ["doc0", "doc1", "doc2", "doc3"], f"GET /v1/models lists the caches: {models}")


def ask(cache, q, stream=False):
    return ask_with(client, cache, q, stream)


# ---- 4: one at a time, exact ---------------------------------------------------------------------
for cache in ("doc0", "doc1"):
    for q in questions[int(cache[-1])][:3]:
        text, n, finish = ask(cache, q)
        check((text, n) == want[(cache, q)], f"non-streaming {cache} '{q}' == kvzip query ({n} tokens)")
        check(finish in ("stop", "length"), f"finish_reason {finish}")
        text, n, finish = ask(cache, q, stream=True)
        check((text, n) == want[(cache, q)], f"streaming {cache} '{q}' == kvzip query")

# ---- 4b: a conversation: the earlier turn is part of the prompt -----------------------------------
q1, q2 = questions[0][0], questions[0][1]
one = client.chat.completions.create(model="doc0", messages=[{"role": "user", "content": q1}],
                                     max_tokens=N_TOKENS, temperature=0)
conv = client.chat.completions.create(
    model="doc0", max_tokens=N_TOKENS, temperature=0,
    messages=[{"role": "system", "content": "ignored: the cache holds its system prompt"},
              {"role": "user", "content": q1}, {"role": "assistant", "content": want[("doc0", q1)][0]},
              {"role": "user", "content": q2}])
check(conv.usage.prompt_tokens > one.usage.prompt_tokens + want[("doc0", q1)][1]
      and conv.choices[0].finish_reason in ("stop", "length"),
      f"a two-turn conversation is answered over both turns ({conv.usage.prompt_tokens} prompt tokens)")

# ---- 5: 32 concurrent clients over 4 caches -----------------------------------------------------
jobs = [(f"doc{i % 4}", questions[i % 4][(i // 4) % len(questions[i % 4])]) for i in range(32)]
t0 = time.time()
with concurrent.futures.ThreadPoolExecutor(32) as pool:
    results = list(pool.map(lambda j: ask(j[0], j[1], stream=(hash(j[1]) % 2 == 0)), jobs))
elapsed = time.time() - t0
exact = sum((r[0], r[1]) == want[j] for j, r in zip(jobs, results))
print(f"32 concurrent clients: {elapsed:.1f} s, {exact}/32 answers identical to kvzip query")
check(all(r[2] in ("stop", "length") and r[1] >= 1 for r in results), "all 32 concurrent answers complete")
check(exact >= 29, f"concurrent greedy answers equal kvzip query's ({exact}/32, >= 29 required)")
for j, r in zip(jobs, results):
    if (r[0], r[1]) != want[j]:
        print(f"  differs: {j}: {r[0]!r} vs {want[j][0]!r}")
        check(r[0][:12] == want[j][0][:12], f"a batched answer that differs shares its start: {j}")

# ---- 6: hostile requests --------------------------------------------------------------------------
def raw(method, path, body=None, headers=None, auth=True, ctype="application/json"):
    h = {"Content-Type": ctype}
    if auth:
        h["Authorization"] = "Bearer " + KEY
    h.update(headers or {})
    data = body if isinstance(body, bytes) or body is None else body.encode()
    req = urllib.request.Request(base + path, data=data, method=method, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


msg = [{"role": "user", "content": "hi"}]
cases = [
    ("no key", "POST", "/v1/chat/completions", json.dumps({"model": "doc0", "messages": msg}), {}, False, 401),
    ("wrong key", "POST", "/v1/chat/completions", json.dumps({"model": "doc0", "messages": msg}),
     {"Authorization": "Bearer " + KEY[:-1] + "X"}, True, 401),
    ("malformed JSON", "POST", "/v1/chat/completions", '{"model": "doc0", "messages": [', {}, True, 400),
    ("not an object", "POST", "/v1/chat/completions", "[1, 2]", {}, True, 400),
    ("messages of the wrong type", "POST", "/v1/chat/completions", json.dumps({"model": "doc0", "messages": "hi"}), {}, True, 400),
    ("temperature of the wrong type", "POST", "/v1/chat/completions",
     json.dumps({"model": "doc0", "messages": msg, "temperature": "hot"}), {}, True, 400),
    ("negative max_tokens", "POST", "/v1/chat/completions", json.dumps({"model": "doc0", "messages": msg, "max_tokens": -5}), {}, True, 400),
    ("huge max_tokens", "POST", "/v1/chat/completions",
     '{"model": "doc0", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1e400}', {}, True, 400),
    ("max_tokens past the cap", "POST", "/v1/chat/completions", json.dumps({"model": "doc0", "messages": msg, "max_tokens": 10**12}), {}, True, 400),
    ("unknown cache", "POST", "/v1/chat/completions", json.dumps({"model": "nope", "messages": msg}), {}, True, 404),
    ("cache id with a path", "POST", "/v1/chat/completions", json.dumps({"model": "../caches/doc0", "messages": msg}), {}, True, 400),
    ("body over 1 MiB", "POST", "/v1/chat/completions",
     json.dumps({"model": "doc0", "messages": [{"role": "user", "content": "x" * (2 << 20)}]}), {}, True, 413),
    ("PUT of a truncated .kvz", "PUT", "/v1/caches/cut", open(os.path.join(caches, "doc0.kvz"), "rb").read()[:50000], {}, True, 400),
    ("PUT to a path", "PUT", "/v1/caches/..%2Fx", b"x", {}, True, 404),  # no route matches
    ("PUT to an id outside the charset", "PUT", "/v1/caches/a%20b", b"x", {}, True, 400),
    ("DELETE of an unknown cache", "DELETE", "/v1/caches/nope", None, {}, True, 404),
    ("unknown job", "GET", "/v1/jobs/job-999", None, {}, True, 404),
    ("a model other than the path's cache", "POST", "/c/doc0/v1/chat/completions",
     json.dumps({"model": "doc1", "messages": msg}), {}, True, 400),
    ("an unknown cache in the path", "POST", "/c/nope/v1/chat/completions",
     json.dumps({"model": "nope", "messages": msg}), {}, True, 404),
    ("PUT under another cache's path", "PUT", "/c/doc0/v1/caches/doc1", b"x", {}, True, 400),
]
for name, method, path, body, headers, auth, code in cases:
    ctype = "application/octet-stream" if method == "PUT" else "application/json"
    status, payload = raw(method, path, body, headers, auth, ctype)
    ok = status == code
    try:
        ok = ok and "error" in json.loads(payload)
    except ValueError:
        ok = False
    check(ok, f"hostile: {name} -> {status} (want {code}) with an OpenAI error object")
check(not os.path.exists(os.path.join(caches, "cut.kvz")), "a rejected upload leaves no file")
status, _ = raw("GET", "/health", auth=False)
check(status == 200, "the server is healthy after the hostile requests")
text, n, _ = ask("doc2", questions[2][0])
check((text, n) == want[("doc2", questions[2][0])], "and still answers correctly")
status, body = raw("GET", "/metrics")
check(status == 200 and b"kvzip_time_to_first_token_seconds_bucket" in body, "/metrics has the TTFT histogram")

# ---- 7: SIGTERM during a compress job --------------------------------------------------------------
long_doc = "\n\n".join(p["context"] for p in paras[:30])
status, body = raw("POST", "/v1/caches", json.dumps({"id": "long", "text": long_doc, "ratio": 0.3, "chunk": 256}))
check(status == 202, f"POST /v1/caches starts a job ({status})")
job = json.loads(body)["id"]
deadline = time.time() + 120
while time.time() < deadline:
    s = json.loads(raw("GET", "/v1/jobs/" + job)[1])
    if s["status"] == "running" and s["progress"] > 0:
        break
    time.sleep(0.05)
check(s["status"] == "running", f"the job runs ({s['status']}, progress {s['progress']:.2f})")
server.send_signal(signal.SIGTERM)
rc = server.wait(timeout=120)
check(rc in (0, -signal.SIGTERM, 143), f"the server exits on SIGTERM (status {rc})")
left = sorted(os.listdir(caches))
check(left == ["doc0.kvz", "doc1.kvz", "doc2.kvz", "doc3.kvz"], f"no partial or temporary file: {left}")

finish_checks("serve integration")
