"""Two `kvzip serve` replicas sharing one cache folder behind nginx (scripts/serve/nginx-replicas.conf:
consistent hashing on the cache id of the /c/{cache}/v1/... path form), with the official `openai`
client, whose only change is its base URL. Real model ($KVZIP_MODEL); nginx from Debian's package
(skipped when missing, a failure with KVZIP_REQUIRE_NGINX=1). Steps:
  1. compress 4 documents; the reference answers of `kvzip query`;
  2. two replicas on free loopback ports, nginx in front (run by this script, without root);
  3. one question at a time on every cache through the proxy: answers equal `kvzip query`'s, and
     every cache's requests went to one replica (nginx's access log); a compress job started
     through the proxy (POST /c/doc4/v1/caches) is polled at its Location through the proxy too
     (job status lives in the replica that runs it) and the new cache answers;
  4. 32 concurrent clients over the 4 caches; once the replica owning the most caches is
     answering at least 4 of them, it is killed (SIGKILL). Every non-streaming request still
     succeeds with a correct answer (the proxy retried the ones the dead replica never answered,
     and the log shows such retries); a streaming request either completes or fails with an error
     at the client (never a hang, never an answer cut short without one);
  5. after the kill every cache is answered by the survivor, exactly as `kvzip query` answers;
  6. no cache file is damaged (`kvzip inspect --verify`) and the folder holds nothing else.
Usage: failover_test.py KVZIP_BINARY SOURCE_DIR SCRATCH_DIR
"""
import concurrent.futures
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_support import ask, check, documents, finish, make_caches, run, start_server  # noqa: E402

KVZIP, SRC, SCRATCH = sys.argv[1], sys.argv[2], sys.argv[3]

nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)
if not nginx:
    print("skipped: nginx is not installed (apt-get install nginx) for the failover test")
    sys.exit(1 if os.environ.get("KVZIP_REQUIRE_NGINX") == "1" else 77)

# ---- 1: caches and reference answers -------------------------------------------------------------
shutil.rmtree(SCRATCH, ignore_errors=True)
os.makedirs(SCRATCH)
docs, questions, _ = documents(SRC)
caches, want = make_caches(KVZIP, SCRATCH, docs, questions)
ids = [f"doc{i}" for i in range(4)]

procs = []


def stop_all():
    for p in procs:
        if p.poll() is None:
            # nginx's master stops its workers on SIGTERM; a SIGKILLed master would leave them.
            if p.args[0] == nginx:
                p.terminate()
                try:
                    p.wait(10)
                    continue
                except subprocess.TimeoutExpired:
                    pass
            p.kill()
            p.wait()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


try:
    # ---- 2: replicas and the proxy -----------------------------------------------------------
    replicas = {}  # "127.0.0.1:port" -> process
    for name in ("a", "b"):
        proc, port = start_server(KVZIP, caches, os.path.join(SCRATCH, f"replica-{name}.log"),
                                  "--parallel", "8", "--max-client-connections", "0")
        procs.append(proc)
        replicas[f"127.0.0.1:{port}"] = proc
    prefix = os.path.join(SCRATCH, "nginx")
    os.makedirs(prefix)
    listen = free_port()
    conf = open(os.path.join(SRC, "scripts", "serve", "nginx-replicas.conf")).read()
    conf = (conf.replace("@PREFIX@", prefix)
                .replace("@LISTEN@", f"127.0.0.1:{listen}")
                .replace("@USER_LINE@", "user root;" if os.geteuid() == 0 else "")
                .replace("@SERVERS@", "\n".join(f"    server {addr} max_fails=1 fail_timeout=60s;"
                                                for addr in replicas)))
    open(os.path.join(prefix, "nginx.conf"), "w").write(conf)
    proxy = subprocess.Popen([nginx, "-p", prefix, "-e", os.path.join(prefix, "error.log"),
                              "-c", os.path.join(prefix, "nginx.conf")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    procs.append(proxy)
    base = f"http://127.0.0.1:{listen}"
    deadline = time.time() + 30
    while True:
        try:
            with urllib.request.urlopen(base + "/c/doc0/v1/models", timeout=5) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if proxy.poll() is not None or time.time() > deadline:
            raise SystemExit("nginx did not start: " + (proxy.stderr.read() if proxy.poll() is not None else "timeout"))
        time.sleep(0.1)
    access_log = os.path.join(prefix, "access.log")

    def client(cache):
        # What a user changes to go through the proxy: the base URL.
        return openai.OpenAI(base_url=f"{base}/c/{cache}/v1", api_key="unused", max_retries=0, timeout=300)

    def log_lines():
        """(cache, [upstream addresses tried], status) of each chat completion in nginx's log."""
        out = []
        for line in open(access_log):
            m = re.match(r'(\S*) (.+?) (\d{3}) "POST /c/\S+/v1/chat/completions', line)
            if m:
                out.append((m.group(1), [a.strip() for a in m.group(2).split(",")], int(m.group(3))))
        return out

    def settled_log_lines(at_least=0):
        """log_lines() once nginx has written the lines of the requests already answered: nginx
        logs a request after its response has gone out, so a line can trail the client's read."""
        deadline = time.time() + 10
        last = log_lines()
        while time.time() < deadline:
            time.sleep(0.3)
            now = log_lines()
            if len(now) == len(last) and len(now) >= at_least:
                return now
            last = now
        return last

    models = sorted(m.id for m in client("doc0").models.list().data)
    check(models == ids, f"GET /c/doc0/v1/models through the proxy lists the caches: {models}")

    # ---- 3: one at a time, exact, and one replica per cache ---------------------------------
    for cache in ids:
        for q in questions[int(cache[-1])][:2]:
            text, n, _ = ask(client(cache), cache, q)
            check((text, n) == want[(cache, q)], f"through the proxy {cache} '{q}' == kvzip query")
    owner = {}
    for cache, tried, status in settled_log_lines(at_least=8):
        owner.setdefault(cache, set()).add(tried[-1])
    check(sorted(owner) == ids and all(len(v) == 1 for v in owner.values()),
          f"each cache's requests went to one replica: {owner}")
    owner = {c: next(iter(v)) for c, v in owner.items()}
    counts = {addr: sum(o == addr for o in owner.values()) for addr in replicas}
    victim = max(counts, key=counts.get)
    survivor = next(a for a in replicas if a != victim)
    print(f"replica {victim} owns {counts[victim]} caches and will be killed; {survivor} survives")
    n_before = len(settled_log_lines())

    # ---- 3b: a compress job through the proxy: its status is asked of the replica running it ----
    def call(method, path, body=None):
        req = urllib.request.Request(base + path, method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.headers.get("Location"), json.loads(r.read())

    status, location, job = call("POST", "/c/doc4/v1/caches", {"text": docs[0][:600], "ratio": 0.5})
    check(status == 202 and job["cache"] == "doc4" and location == "/c/doc4/v1/jobs/" + job["id"],
          f"POST /c/doc4/v1/caches starts a job for doc4 whose URL keeps the prefix ({status}, {location})")
    deadline = time.time() + 300
    while job["status"] in ("queued", "running") and time.time() < deadline:
        time.sleep(0.2)
        job = call("GET", location)[2]  # a job only its replica knows: the hash finds it again
    check(job["status"] == "succeeded", f"the job succeeded ({job['status']} {job.get('error', '')})")
    text, n, _ = ask(client("doc4"), "doc4", questions[0][0])
    check(n >= 1, "the new cache answers through the proxy")

    # ---- 4: 32 concurrent clients, the busier replica killed mid-load ------------------------
    jobs = [(ids[i % 4], questions[i % 4][(i // 4) % len(questions[i % 4])], i >= 28)
            for i in range(32)]  # (cache, question, stream): 4 streaming requests, one per cache

    def one(job):
        cache, q, stream = job
        try:
            return ("ok",) + ask(client(cache), cache, q, stream=stream)
        except Exception as e:  # what the client raises when a stream is cut or a request fails
            return ("error", f"{type(e).__name__}: {e}")

    def active(addr):
        try:
            with urllib.request.urlopen(f"http://{addr}/metrics", timeout=2) as r:
                m = re.search(rb"^kvzip_active_requests (\S+)", r.read(), re.M)
                return float(m.group(1)) if m else 0.0
        except OSError:
            return 0.0

    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        futures = [pool.submit(one, j) for j in jobs]
        deadline = time.time() + 120
        busy = 0.0
        while time.time() < deadline and busy < 4:
            busy = active(victim)
            time.sleep(0.02)
        check(busy >= 4, f"the replica to kill is answering {busy:.0f} requests")
        replicas[victim].send_signal(signal.SIGKILL)
        replicas[victim].wait()
        killed_at = time.time()
        done, pending = concurrent.futures.wait(futures, timeout=600)
        check(not pending, f"every client returned ({len(pending)} still waiting after 600 s)")
        results = [f.result() for f in futures if f.done()]
    print(f"all clients returned {time.time() - killed_at:.1f} s after the kill")

    exact = 0
    for job, r in zip(jobs, results):
        cache, q, stream = job
        if r[0] == "error":
            print(f"  {'stream' if stream else 'request'} {cache} '{q}' failed at the client: {r[1][:160]}")
            check(stream, f"only a stream already started on the killed replica fails at the client: {cache} '{q}'")
            continue
        text, n, finish_reason = r[1:]
        check(finish_reason in ("stop", "length") and n and n >= 1,
              f"{'stream' if stream else 'request'} {cache} '{q}' completed ({finish_reason})")
        if (text, n) == want[(cache, q)]:
            exact += 1
        else:
            print(f"  differs: {cache} '{q}': {text!r} vs {want[(cache, q)][0]!r}")
            check(text[:12] == want[(cache, q)][0][:12], f"a batched answer that differs shares its start: {cache} '{q}'")
    n_ok = sum(r[0] == "ok" for r in results)
    print(f"{n_ok}/32 completed, {exact} identical to kvzip query")
    check(exact >= n_ok - 3, f"completed greedy answers equal kvzip query's ({exact}/{n_ok}, at most 3 near-ties)")
    during = settled_log_lines()[n_before:]
    retried = [t for _, t, s in during if len(t) > 1 and t[0] == victim and t[-1] == survivor and s == 200]
    print(f"the proxy retried {len(retried)} request(s) on the survivor")
    check(len(retried) >= 1, "requests in flight on the killed replica were retried on the survivor")

    # ---- 5: after the kill, the survivor answers every cache ---------------------------------
    n_before = len(settled_log_lines())
    for cache in ids:
        q = questions[int(cache[-1])][2]
        text, n, _ = ask(client(cache), cache, q)
        check((text, n) == want[(cache, q)], f"after the kill {cache} '{q}' == kvzip query")
    after = settled_log_lines(at_least=n_before + 4)[n_before:]
    check(len(after) == 4 and all(t[-1] == survivor and s == 200 for _, t, s in after),
          f"after the kill every request ends on the survivor: {after}")

    # ---- 6: the shared folder ------------------------------------------------------------------
    left = sorted(os.listdir(caches))
    check(left == [c + ".kvz" for c in ids + ["doc4"]], f"the cache folder holds the caches and nothing else: {left}")
    for c in ids + ["doc4"]:
        r = subprocess.run([KVZIP, "inspect", "--verify", os.path.join(caches, c + ".kvz")],
                           capture_output=True, text=True)
        check(r.returncode == 0, f"{c}.kvz passes inspect --verify")
finally:
    stop_all()

finish("failover")
