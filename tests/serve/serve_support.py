"""Shared by the `kvzip serve` integration tests (serve_openai_test.py, failover_test.py): check
bookkeeping, the four Normans documents and their questions, compressing them, the reference
answers of `kvzip query`, starting a server, and asking with the `openai` client.
Runs under the python of the venv that tests/serve/run_py_test.sh makes."""
import json
import os
import re
import subprocess
import sys
import threading
import time

N_TOKENS = 24  # answer length of every reference and every request
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def finish(what):
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print(f"all {what} checks passed")


def run(kvzip, *args, **kw):
    return subprocess.run([kvzip, *args], check=True, capture_output=True, text=True, **kw)


def documents(src):
    """Four documents of three Normans paragraphs each, with up to 8 questions each; and the
    article's paragraphs (for a long document)."""
    squad = json.load(open(os.path.join(src, "examples", "normans.json")))
    paras = squad["data"][0]["paragraphs"]
    docs, questions = [], []
    for i in range(4):
        group = paras[i * 3:i * 3 + 3]
        docs.append("\n\n".join(p["context"] for p in group))
        questions.append([q["question"] for p in group for q in p["qas"]][:8])
    return docs, questions, paras


def make_caches(kvzip, scratch, docs, questions):
    """Compresses the documents into SCRATCH/caches/doc{i}.kvz at ratio 0.3 and returns the folder
    and the reference answers {(cache, question): (text, tokens)} of `kvzip query --json`."""
    caches = os.path.join(scratch, "caches")
    os.makedirs(caches)
    for i, text in enumerate(docs):
        path = os.path.join(scratch, f"doc{i}.txt")
        open(path, "w").write(text)
        run(kvzip, "compress", path, "-o", os.path.join(caches, f"doc{i}.kvz"), "-q", "-t", "2",
            "--ratio", "0.3")
    want = {}
    for i in range(len(docs)):
        qfile = os.path.join(scratch, f"q{i}.txt")
        open(qfile, "w").write("\n".join(questions[i]) + "\n")
        out = run(kvzip, "query", os.path.join(caches, f"doc{i}.kvz"), "--questions", qfile, "--json",
                  "-q", "-n", str(N_TOKENS), "-t", "2").stdout
        for line in out.splitlines():
            a = json.loads(line)
            want[(f"doc{i}", a["question"])] = (a["answer"], a["tokens"])
    return caches, want


def start_server(kvzip, caches, log_path, *extra):
    """Starts `kvzip serve --port 0` and returns (process, port) once it listens; its stderr (the
    access log) keeps being drained into log_path so the server never blocks on a full pipe."""
    log = open(log_path, "a")
    proc = subprocess.Popen([kvzip, "serve", "--caches", caches, "--port", "0", "-t", "2", *extra],
                            stdout=log, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline:
        line = proc.stderr.readline()
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            def drain(stream=proc.stderr, sink=log):
                for l in stream:
                    sink.write(l)
                    sink.flush()
            threading.Thread(target=drain, daemon=True).start()
            return proc, int(m.group(1))
        if proc.poll() is not None:
            break
    raise SystemExit("kvzip serve did not start: " + proc.stderr.read())


def ask(client, cache, q, stream=False, max_tokens=N_TOKENS):
    """(text, completion tokens, finish_reason) of one greedy chat completion."""
    msgs = [{"role": "user", "content": q}]
    if not stream:
        r = client.chat.completions.create(model=cache, messages=msgs, max_tokens=max_tokens,
                                           temperature=0)
        return r.choices[0].message.content, r.usage.completion_tokens, r.choices[0].finish_reason
    text, finish_reason, usage = "", None, None
    for chunk in client.chat.completions.create(model=cache, messages=msgs, max_tokens=max_tokens,
                                                temperature=0, stream=True,
                                                stream_options={"include_usage": True}):
        if chunk.usage:
            usage = chunk.usage.completion_tokens
        for c in chunk.choices:
            text += c.delta.content or ""
            finish_reason = c.finish_reason or finish_reason
    return text, usage, finish_reason
