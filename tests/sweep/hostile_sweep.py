#!/usr/bin/env python3
"""Hostile-input sweep of the kvzip binary: damaged, forged and odd inputs, signals
during writes, a full disk, concurrent writers and readers, valgrind. Every try runs one real
`kvzip` process and is classified as a clean error (a documented exit status with the
`kvzip: error [code]: ...` line), an unclear message (a documented status without that line,
e.g. the option parser's raw text), a success, a crash (a signal nobody sent, exit 70 or any
undocumented status), a hang (past its timeout), data loss (an input changed, a target that
exists but does not verify, a reader that saw a torn file, or `inspect --verify` passing a file
that another command then rejects), and temporary files left behind.

Runs on the system python3 (Debian 12: 3.11) or any python3 >= 3.8, standard library only.
Seeded (--seed) and bounded (--budget seconds, split over the categories). With --model (or
$KVZIP_MODEL) it also compresses real caches, damages GGUF files and signals `compress`.
Prints a markdown table (and writes it to --out); exits 1 when anything but clean errors and
successes was found.

    python3 tests/sweep/hostile_sweep.py --kvzip build/kvzip --seed 15 --budget 240
"""
import argparse
import hashlib
import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

CLEAN_STATUSES = set(range(2, 14))  # README "Exit statuses": 2..13 are user/input errors
ERROR_LINE = re.compile(r"^kvzip: error \[[a-z_]+\]: .+", re.M)
M64 = (1 << 64) - 1

# ---- xxh64 (seed 0), written from the published algorithm, for re-sealing forged files --------
P1, P2, P3, P4, P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9,
                      0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5)


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M64


def _round(acc, lane):
    return (_rotl((acc + lane * P2) & M64, 31) * P1) & M64


def xxh64(data):
    n, i = len(data), 0
    if n >= 32:
        v = [(P1 + P2) & M64, P2, 0, (-P1) & M64]
        lanes = struct.unpack_from("<%dQ" % (n // 32 * 4), data)
        for j in range(0, len(lanes), 4):
            v = [_round(v[k], lanes[j + k]) for k in range(4)]
        i = n // 32 * 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & M64
        for k in range(4):
            h = ((h ^ _round(0, v[k])) * P1 + P4) & M64
    else:
        h = P5
    h = (h + n) & M64
    while i + 8 <= n:
        h ^= _round(0, struct.unpack_from("<Q", data, i)[0])
        h = (_rotl(h, 27) * P1 + P4) & M64
        i += 8
    if i + 4 <= n:
        h ^= (struct.unpack_from("<I", data, i)[0] * P1) & M64
        h = (_rotl(h, 23) * P2 + P3) & M64
        i += 4
    while i < n:
        h ^= (data[i] * P5) & M64
        h = (_rotl(h, 11) * P1) & M64
        i += 1
    h ^= h >> 33
    h = (h * P2) & M64
    h ^= h >> 29
    h = (h * P3) & M64
    return h ^ (h >> 32)


assert xxh64(b"") == 0xEF46DB3751D8E999  # the algorithm's published empty-input value


# ---- .kvz layout (spec/kvzip_format.md): preamble 64 bytes, then 64-byte section entries -------
def sections(b):
    count, data_off = struct.unpack_from("<QQ", b, 16)
    out = []
    for i in range(min(count, 4096)):
        e = 64 + 64 * i
        if e + 64 > len(b):
            break
        kind, flags, codec, layer, off, stored, raw, _ = struct.unpack_from("<IIIIQQQQ", b, e)
        out.append(dict(i=i, entry=e, kind=kind, codec=codec, layer=layer,
                        start=data_off + off, stored=stored, raw=raw))
    return out


def reseal(b, section=None):
    """Recompute the checksum of one section (if given), the table and the header."""
    secs = sections(b)
    if section is not None and section < len(secs):
        s = secs[section]
        if s["start"] + s["stored"] <= len(b):
            struct.pack_into("<Q", b, s["entry"] + 40, xxh64(bytes(b[s["start"]:s["start"] + s["stored"]])))
    count = struct.unpack_from("<Q", b, 16)[0]
    if 64 + 64 * count <= len(b):
        struct.pack_into("<Q", b, 40, xxh64(bytes(b[64:64 + 64 * count])))
    struct.pack_into("<Q", b, 56, xxh64(bytes(b[:56])))


# ---- running kvzip -----------------------------------------------------------------------
class Sweep:
    def __init__(self, args):
        self.kvzip = os.path.abspath(args.kvzip)
        self.model = args.model
        self.rng = random.Random(args.seed)
        self.work = tempfile.mkdtemp(prefix="kvzip-sweep-", dir=args.work)
        self.rows = {}   # category -> counters
        self.examples = []  # (category, outcome, command, stderr tail)
        self.env = dict(os.environ)
        self.env["KVZIP_MODEL"] = self.model or "/nonexistent/kvzip-sweep-model.gguf"

    def count(self, cat, key, n=1):
        row = self.rows.setdefault(cat, dict(tried=0, clean=0, unclear=0, success=0, crash=0, hang=0,
                                             data_loss=0, temps=0, overclaim=0))
        row[key] += n

    def run(self, cat, args, timeout=60, env=None, sent=None, preexec=None, popen_hook=None,
            expect_temp_dir=None):
        """Runs kvzip once and classifies it. Returns (outcome, returncode, stderr)."""
        cmd = [self.kvzip] + args
        t0 = time.time()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             stdin=subprocess.DEVNULL, env=env or self.env, preexec_fn=preexec)
        if popen_hook:
            popen_hook(p)
        try:
            out, err = p.communicate(timeout=timeout)
            hung = False
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            hung = True
        err = err.decode("utf-8", "replace")
        rc = p.returncode
        self.count(cat, "tried")
        if hung:
            outcome = "hang"
        elif rc < 0 and sent is not None and -rc == sent:
            outcome = "clean"  # the signal we sent ended it, as it should
        elif rc < 0:
            outcome = "crash"
        elif rc == 0:
            outcome = "success"
        elif rc in CLEAN_STATUSES and ERROR_LINE.search(err):
            outcome = "clean"
        elif rc in CLEAN_STATUSES:
            outcome = "unclear"
        else:
            outcome = "crash"  # exit 70 (internal), 1, 128+n, or no error line
        self.count(cat, outcome)
        if outcome in ("crash", "hang", "unclear"):
            self.examples.append((cat, outcome, " ".join(args)[:200], err[-300:], rc))
        return outcome, rc, err, time.time() - t0

    def temps_in(self, d):
        return [n for n in os.listdir(d) if ".tmp." in n]

    def data_loss(self, cat, what):
        self.count(cat, "data_loss")
        self.examples.append((cat, "data loss", what, "", None))

    def verifies(self, path):
        p = subprocess.run([self.kvzip, "inspect", "--verify", path], capture_output=True, env=self.env)
        return p.returncode == 0


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def snapshot(d):
    return {n: digest(os.path.join(d, n)) for n in os.listdir(d) if os.path.isfile(os.path.join(d, n))}


def check_inputs_unchanged(sw, cat, d, before):
    for n, h in before.items():
        p = os.path.join(d, n)
        if not os.path.exists(p) or digest(p) != h:
            sw.data_loss(cat, "input %s changed" % n)


# ---- categories ----------------------------------------------------------------------------
def cat_documents(sw, deadline):
    cat = "bad documents"
    d = os.path.join(sw.work, "docs")
    os.makedirs(d)
    cases = {
        "empty.txt": b"", "blank.txt": b" \n\t\n", "nul.txt": b"abc\0def", "latin1.txt": "caf\xe9".encode("latin-1"),
        "cut_utf8.txt": "é".encode()[:1], "bom_only.txt": b"\xef\xbb\xbf", "overlong.txt": b"\xc0\xaf",
        "surrogate.txt": b"\xed\xa0\x80", "binary.txt": bytes(range(256)) * 8,
    }
    for name, data in cases.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
    os.makedirs(os.path.join(d, "adir"))
    os.symlink("loop", os.path.join(d, "loop"))
    names = sorted(cases) + ["adir", "missing.txt", "loop", "/dev/null"]
    for name in names:
        if time.time() > deadline:
            break
        doc = name if name.startswith("/") else os.path.join(d, name)
        for sub in (["compress", doc, "-o", os.path.join(d, "o.kvz"), "-f"],
                    ["calibrate", doc, "-o", os.path.join(d, "o.kvh"), "-f"],
                    ["perplexity", "-f", doc]):
            sw.run(cat, sub)
        left = sw.temps_in(d)
        if left:
            sw.count(cat, "temps", len(left))


def cat_options(sw, deadline):
    cat = "bad options"
    d = os.path.join(sw.work, "opts")
    os.makedirs(d)
    with open(os.path.join(d, "doc.txt"), "w") as f:
        f.write("The Normans were a people.\n")
    golden = os.path.join(d, "g.kvz")
    shutil.copy(GOLDEN, golden)
    values = ["abc", "-1", "0", "1e999", "nan", "inf", "-0", "1,5", "99999999999999999999", "", "0x10", " 3",
              "\uff11", "1" * 300, "-", "--", "0.5", "2", "1e-300"]
    targets = [
        (["compress", os.path.join(d, "doc.txt"), "-o", os.path.join(d, "o.kvz"), "-f"],
         ["--ratio", "--threads", "--zstd", "--chunk", "--level", "--method", "--dtype", "--seed", "--head-window",
          "--device", "-O"]),
        (["query", golden, "q"], ["-n", "--temp", "--seed", "--threads", "--rkv-budget", "--rkv-lambda", "--device"]),
        (["prune", golden, "-o", os.path.join(d, "p.kvz"), "-f"], ["--ratio", "--zstd"]),
        (["inspect", golden], ["--json", "--verify"]),
        (["generate", "-p", "hi"], ["-n", "--top-p", "--top-k", "--temp", "--threads"]),
    ]
    # With a real model, an accepted value would start real work: give the commands no model so
    # that everything that passes the checks stops at loading it.
    env = dict(sw.env)
    env["KVZIP_MODEL"] = "/nonexistent/kvzip-sweep-model.gguf"
    combos = [(base, opt, v) for base, opts in targets for opt in opts for v in values]
    sw.rng.shuffle(combos)
    for base, opt, v in combos:
        if time.time() > deadline:
            break
        args = list(base) + ([opt] if opt in ("--json", "--verify") else [opt, v])
        sw.run(cat, args, env=env, timeout=30)
    for junk in (["--nope"], [], ["frobnicate"], ["compress"], ["prune", golden], ["export", golden]):
        sw.run(cat, junk, env=env)
    left = sw.temps_in(d)
    if left:
        sw.count(cat, "temps", len(left))


def damage(rng, b):
    b = bytearray(b)
    kind = rng.choice(["flip", "flip", "truncate", "append", "zero_block", "swap"])
    if kind == "flip":
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        del b[rng.randrange(len(b)):]
    elif kind == "append":
        b += bytes(rng.randrange(256) for _ in range(rng.randint(1, 5000)))
    elif kind == "zero_block":
        at = rng.randrange(0, max(1, len(b) - 4096))
        b[at:at + 4096] = bytes(min(4096, len(b) - at))
    else:
        i, j = sorted(rng.randrange(len(b)) for _ in range(2))
        n = min(rng.randint(1, 512), len(b) - j)
        b[i:i + n], b[j:j + n] = b[j:j + n], b[i:i + n]
    return bytes(b), kind


def forge(rng, b):
    """Damage inside a section or a table field, then recompute every checksum over it."""
    b = bytearray(b)
    secs = sections(b)
    s = rng.choice(secs)
    kind = rng.choice(["bytes", "bytes", "codec", "raw_size", "zero_section", "kind", "layer"])
    if kind == "bytes" and s["stored"]:
        for _ in range(rng.randint(1, 4)):
            b[s["start"] + rng.randrange(s["stored"])] ^= 1 << rng.randrange(8)
    elif kind == "codec":
        struct.pack_into("<I", b, s["entry"] + 8, 1 - min(s["codec"], 1))
    elif kind == "raw_size":
        struct.pack_into("<Q", b, s["entry"] + 32, max(0, s["raw"] + rng.choice([-8, -4, 4, 8, 4096])))
    elif kind == "zero_section":
        b[s["start"]:s["start"] + s["stored"]] = bytes(s["stored"])
    elif kind == "kind":
        struct.pack_into("<I", b, s["entry"], rng.choice([1, 2, 3, 4, 5, 77]))
    else:
        struct.pack_into("<I", b, s["entry"] + 12, rng.randrange(40))
    reseal(b, s["i"])
    return bytes(b), kind + ":" + str(s["i"])


def base_caches(sw):
    """Small caches to damage: the golden files, plus real ones when a model is available."""
    d = os.path.join(sw.work, "bases")
    os.makedirs(d)
    out = []
    for g in (GOLDEN, GOLDEN_ZSTD):
        shutil.copy(g, d)
        out.append(os.path.join(d, os.path.basename(g)))
    if sw.model:
        doc = os.path.join(d, "doc.txt")
        with open(doc, "w") as f:
            f.write("The Normans were the people who in the 10th and 11th centuries gave their name to "
                    "Normandy, a region in France. They were descended from Norse raiders and pirates.\n")
        for name, extra in (("real_f16_zstd.kvz", ["--dtype", "f16", "--zstd", "3"]), ("real_f32.kvz", [])):
            p = subprocess.run([sw.kvzip, "compress", doc, "-o", os.path.join(d, name), "-q", "--ratio", "0.3",
                                "-t", "2"] + extra, capture_output=True, env=sw.env)
            if p.returncode == 0:
                out.append(os.path.join(d, name))
    return out


def reader_commands(sw, path, d, real):
    cmds = [["inspect", path], ["inspect", "--json", path], ["prune", path, "--ratio", "0.05", "-o",
            os.path.join(d, "p.kvz"), "-f"], ["export", path, "--hdf5", os.path.join(d, "e.h5"), "-f"]]
    if real and sw.model:
        cmds.append(["query", path, "-n", "2", "-q", "Who?"])
    return cmds


def cat_damaged(sw, deadline, bases, forged):
    cat = "forged checksums" if forged else "damaged .kvz"
    d = os.path.join(sw.work, "forged" if forged else "damaged")
    os.makedirs(d)
    originals = {b: open(b, "rb").read() for b in bases}
    n = 0
    while time.time() < deadline:
        base = sw.rng.choice(bases)
        data, how = (forge if forged else damage)(sw.rng, originals[base])
        path = os.path.join(d, "x%04d.kvz" % n)
        n += 1
        with open(path, "wb") as f:
            f.write(data)
        before = snapshot(d)
        real = "real_" in base
        outcome, rc, err, _ = sw.run(cat, ["inspect", "--verify", path])
        for c in reader_commands(sw, path, d, real):
            o2, rc2, err2, _ = sw.run(cat, c, timeout=120)
            # --verify vouched for the file: nothing may reject it as damaged afterwards.
            if rc == 0 and rc2 not in (0, None) and not re.search(r"\[(invalid_argument|model_mismatch)\]", err2):
                sw.count(cat, "overclaim")
                sw.examples.append((cat, "verify over-claims", how + " " + " ".join(c[:1]), err2[-300:], rc2))
        before.pop(os.path.basename(path), None)
        for out in ("p.kvz", "e.h5"):
            before.pop(out, None)
        check_inputs_unchanged(sw, cat, d, {k: v for k, v in before.items() if k.startswith("x")})
        for out in ("p.kvz", "e.h5"):
            if os.path.exists(os.path.join(d, out)):
                os.remove(os.path.join(d, out))
        left = sw.temps_in(d)
        if left:
            sw.count(cat, "temps", len(left))
            for t in left:
                os.remove(os.path.join(d, t))
        os.remove(path)
        if not forged and n >= 200 or forged and n >= 675:
            break


def cat_gguf(sw, deadline):
    cat = "damaged GGUF"
    if not sw.model:
        return
    d = os.path.join(sw.work, "gguf")
    os.makedirs(d)
    src = open(sw.model, "rb").read()
    bad = os.path.join(d, "bad.gguf")
    tries = ["truncate"] * 4 + ["header_flip"] * 6 + ["foreign"] + ["empty", "magic_only"]
    for how in tries:
        if time.time() > deadline:
            break
        if how == "truncate":
            data = src[:sw.rng.randrange(len(src))]
        elif how == "header_flip":
            b = bytearray(src[:1 << 20])
            for _ in range(sw.rng.randint(1, 4)):
                b[sw.rng.randrange(24, len(b))] ^= 1 << sw.rng.randrange(8)
            data = bytes(b) + src[1 << 20:]
        elif how == "foreign":
            at = src.find(b"general.architecture")
            j = src.find(b"llama", at)
            data = src[:j] + b"mamba" + src[j + 5:] if at >= 0 and j >= 0 else src
        elif how == "empty":
            data = b""
        else:
            data = b"GGUF"
        with open(bad, "wb") as f:
            f.write(data)
        sw.run(cat, ["generate", "-m", bad, "-p", "Hello", "-n", "2", "-t", "2"], timeout=120)
        os.remove(bad)


def big_cache(sw, d):
    """A cache of a few MB that zstd level 19 takes seconds to write (an import of golden data
    would be too small): prune of a real cache, or of a synthetic one made by import."""
    if sw.model:
        doc = os.path.join(d, "long.txt")
        with open(doc, "w") as f:
            f.write("The Normans gave their name to Normandy, a region in France. " * 40)
        out = os.path.join(d, "big.kvz")
        p = subprocess.run([sw.kvzip, "compress", doc, "-o", out, "--method", "full", "-q", "-t", "2"],
                           capture_output=True, env=sw.env)
        if p.returncode == 0:
            return out
    return None


def cat_signals(sw, deadline):
    cat = "signals during writes"
    d = os.path.join(sw.work, "signals")
    os.makedirs(d)
    big = big_cache(sw, d) or os.path.join(d, "g.kvz")
    if not os.path.exists(big):
        shutil.copy(GOLDEN, big)
    before = snapshot(d)
    out = os.path.join(d, "out.kvz")
    plans = [(s, w) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL) for w in ("at_temp", "random")] * 3
    sw.rng.shuffle(plans)
    for sig, when in plans:
        if time.time() > deadline:
            break
        delay = sw.rng.uniform(0, 0.4)

        def hook(p):
            if when == "at_temp":
                t_end = time.time() + 60
                while time.time() < t_end and p.poll() is None and not sw.temps_in(d):
                    time.sleep(0.001)
            time.sleep(delay)
            if p.poll() is None:
                p.send_signal(sig)

        sw.run(cat, ["prune", big, "--ratio", "0.5", "--zstd", "19", "-o", out, "-f"], sent=sig, popen_hook=hook,
               timeout=300)
        if sig == signal.SIGKILL:  # leftovers are the next write's to remove
            sw.run(cat, ["prune", big, "--ratio", "0.5", "-o", out, "-f"])
        left = sw.temps_in(d)
        if left:
            sw.count(cat, "temps", len(left))
            for t in left:
                os.remove(os.path.join(d, t))
        if os.path.exists(out):
            if not sw.verifies(out):
                sw.data_loss(cat, "target after signal %d does not verify" % sig)
            os.remove(out)
        check_inputs_unchanged(sw, cat, d, before)
    if sw.model and time.time() < deadline:  # compress itself, twice per signal
        doc = os.path.join(d, "doc.txt")
        with open(doc, "w") as f:
            f.write("The Normans gave their name to Normandy, a region in France. " * 20)
        for sig in (signal.SIGINT, signal.SIGTERM) * 2:
            if time.time() > deadline:
                break

            def hook(p, sig=sig):
                t_end = time.time() + 120
                while time.time() < t_end and p.poll() is None and not sw.temps_in(d):
                    time.sleep(0.001)
                if p.poll() is None:
                    p.send_signal(sig)

            sw.run(cat, ["compress", doc, "-o", out, "--method", "full", "--zstd", "19", "-q", "-f", "-t", "2"],
                   sent=sig, popen_hook=hook, timeout=300)
            left = sw.temps_in(d)
            if left:
                sw.count(cat, "temps", len(left))
                for t in left:
                    os.remove(os.path.join(d, t))
            if os.path.exists(out):
                os.remove(out)


def cat_full_disk(sw, deadline):
    cat = "full disk"
    d = os.path.join(sw.work, "full")
    os.makedirs(d)
    src = os.path.join(sw.work, "full-src")
    os.makedirs(src)
    shutil.copy(GOLDEN, src)
    golden = os.path.join(src, os.path.basename(GOLDEN))
    subprocess.run([sw.kvzip, "export", golden, "--hdf5", os.path.join(src, "g.h5")], capture_output=True)
    mounted = False
    if os.geteuid() == 0 and shutil.which("mount"):
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", d], capture_output=True).returncode == 0
    preexec = None
    if mounted:
        with open(os.path.join(d, "filler"), "wb") as f:
            try:
                while True:
                    f.write(b"f" * 65536)
                    f.flush()
            except OSError:
                pass
        # room for the test files to begin: free about 8 KiB
        os.truncate(os.path.join(d, "filler"), max(0, os.path.getsize(os.path.join(d, "filler")) - 8192))
    else:
        import resource

        def preexec():
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))
    try:
        cmds = [["prune", golden, "--ratio", "0.1", "-o", os.path.join(d, "p.kvz")],
                ["export", golden, "--hdf5", os.path.join(d, "e.h5")],
                ["import", os.path.join(src, "g.h5"), "-o", os.path.join(d, "i.kvz")],
                ["import", os.path.join(src, "g.h5"), "-o", os.path.join(d, "z.kvz"), "--zstd", "19"]]
        if sw.model:
            doc = os.path.join(src, "doc.txt")
            with open(doc, "w") as f:
                f.write("The Normans gave their name to Normandy. " * 10)
            cmds.append(["compress", doc, "-o", os.path.join(d, "c.kvz"), "-q", "-t", "2"])
            cmds.append(["calibrate", doc, "-o", os.path.join(d, "c.kvh"), "-q", "-t", "2"])
        for c in cmds * 3:
            if time.time() > deadline:
                break
            outcome, rc, err, _ = sw.run(cat, c, preexec=preexec, timeout=300)
            if outcome == "success":  # it fitted after all: must be whole
                target = c[c.index("-o") + 1] if "-o" in c else c[c.index("--hdf5") + 1]
                if target.endswith(".kvz") and not sw.verifies(target):
                    sw.data_loss(cat, "full-disk output does not verify")
            for n in os.listdir(d):
                if n != "filler":
                    if ".tmp." in n:
                        sw.count(cat, "temps")
                    os.remove(os.path.join(d, n))
    finally:
        if mounted:
            subprocess.run(["umount", d])


def cat_concurrent(sw, deadline):
    cat = "concurrent writers + readers"
    d = os.path.join(sw.work, "conc")
    os.makedirs(d)
    g = os.path.join(d, "g.kvz")
    shutil.copy(GOLDEN_ZSTD, g)
    target = os.path.join(d, "t.kvz")
    shutil.copy(GOLDEN, target)
    for rnd in range(5):
        if time.time() > deadline:
            break
        procs = []
        for i in range(3):
            procs.append(("w", subprocess.Popen([sw.kvzip, "prune", g, "--ratio", str(0.1 + 0.05 * i), "-o", target, "-f",
                                                 "--zstd", str(sw.rng.choice([0, 3, 19]))],
                                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=sw.env)))
            procs.append(("r", subprocess.Popen([sw.kvzip, "inspect", "--verify", target],
                                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=sw.env)))
        for role, p in procs:
            try:
                _, err = p.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()
                sw.count(cat, "tried")
                sw.count(cat, "hang")
                continue
            sw.count(cat, "tried")
            err = err.decode("utf-8", "replace")
            if p.returncode == 0:
                sw.count(cat, "success")
            elif p.returncode < 0 or p.returncode not in CLEAN_STATUSES:
                sw.count(cat, "crash")
            elif not ERROR_LINE.search(err):
                sw.count(cat, "unclear")
            elif role == "r" and re.search(r"\[(truncated|corrupt|checksum_mismatch|bad_magic)\]", err):
                sw.count(cat, "clean")
                sw.data_loss(cat, "a reader saw a torn file: " + err[-200:])
            else:
                sw.count(cat, "clean")
        if not sw.verifies(target):
            sw.data_loss(cat, "target does not verify after concurrent writes")
        left = sw.temps_in(d)
        if left:
            sw.count(cat, "temps", len(left))


def cat_valgrind(sw, deadline):
    cat = "valgrind"
    if not shutil.which("valgrind"):
        return
    d = os.path.join(sw.work, "vg")
    os.makedirs(d)
    g = os.path.join(d, "g.kvz")
    shutil.copy(GOLDEN_ZSTD, g)
    cmds = [["--version"], ["inspect", g], ["inspect", "--verify", "--json", g],
            ["prune", g, "--ratio", "0.1", "-o", os.path.join(d, "p.kvz")],
            ["export", g, "--hdf5", os.path.join(d, "e.h5")], ["compress", "/nonexistent.txt"]]
    for k, c in enumerate(cmds):
        if k >= 2 and time.time() > deadline:  # start-up and one read are always checked
            break
        p = subprocess.run(["valgrind", "-q", "--error-exitcode=99"] + [sw.kvzip] + c, capture_output=True,
                           env=sw.env, timeout=300)
        sw.count(cat, "tried")
        err = p.stderr.decode("utf-8", "replace")
        if p.returncode == 0:
            sw.count(cat, "success")
        elif p.returncode in CLEAN_STATUSES and ERROR_LINE.search(err) and "==" not in err:
            sw.count(cat, "clean")
        elif p.returncode in CLEAN_STATUSES and "==" not in err:
            sw.count(cat, "unclear")
        else:
            sw.count(cat, "crash")
            sw.examples.append((cat, "crash", " ".join(c), err[-400:], p.returncode))


CATEGORIES = [  # name, share of the budget
    ("documents", 0.05), ("options", 0.12), ("damaged", 0.22), ("forged", 0.25), ("gguf", 0.08),
    ("signals", 0.12), ("full_disk", 0.06), ("concurrent", 0.04), ("valgrind", 0.06)]


def main():
    global GOLDEN, GOLDEN_ZSTD
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    ap.add_argument("--kvzip", default=os.path.join(root, "build", "kvzip"))
    ap.add_argument("--model", default=os.environ.get("KVZIP_MODEL", ""))
    ap.add_argument("--seed", type=int, default=15)
    ap.add_argument("--budget", type=float, default=240, help="seconds, over all categories")
    ap.add_argument("--work", default=None, help="folder for the scratch directory (default: $TMPDIR)")
    ap.add_argument("--out", default=None, help="also write the markdown table here")
    args = ap.parse_args()
    if args.model and not os.path.isfile(args.model):
        args.model = ""
    GOLDEN = os.path.join(root, "tests/golden/kvz/tiny_v1_f32.kvz")
    GOLDEN_ZSTD = os.path.join(root, "tests/golden/kvz/tiny_v1_bf16_zstd.kvz")
    sw = Sweep(args)
    t0 = time.time()
    try:
        bases = base_caches(sw)
        for name, share in CATEGORIES:
            deadline = time.time() + share * args.budget
            if name == "documents":
                cat_documents(sw, deadline)
            elif name == "options":
                cat_options(sw, deadline)
            elif name == "damaged":
                cat_damaged(sw, deadline, bases, forged=False)
            elif name == "forged":
                cat_damaged(sw, deadline, bases, forged=True)
            elif name == "gguf":
                cat_gguf(sw, deadline)
            elif name == "signals":
                cat_signals(sw, deadline)
            elif name == "full_disk":
                cat_full_disk(sw, deadline)
            elif name == "concurrent":
                cat_concurrent(sw, deadline)
            elif name == "valgrind":
                cat_valgrind(sw, deadline)
    finally:
        shutil.rmtree(sw.work, ignore_errors=True)
    cols = ["tried", "clean", "unclear", "success", "crash", "hang", "data_loss", "temps", "overclaim"]
    heads = ["tried", "clean error", "unclear message", "success", "crash", "hang", "data loss",
             "temp files left", "--verify over-claims"]
    lines = ["| category | " + " | ".join(heads) + " |", "|---|" + "---:|" * len(heads)]
    total = dict.fromkeys(cols, 0)
    for cat, row in sw.rows.items():
        lines.append("| %s | %s |" % (cat, " | ".join(str(row[c]) for c in cols)))
        for c in cols:
            total[c] += row[c]
    lines.append("| **all** | %s |" % " | ".join("**%d**" % total[c] for c in cols))
    table = "\n".join(lines)
    info = "seed %d, budget %.0f s (took %.0f s), model %s, kvzip %s" % (
        args.seed, args.budget, time.time() - t0, os.path.basename(args.model) if args.model else "none",
        subprocess.run([sw.kvzip, "--version"], capture_output=True).stdout.decode().strip())
    print(info)
    print(table)
    shown = {}
    for ex in sw.examples:
        shown.setdefault((ex[0], ex[1]), []).append(ex)
    for ex in [e for group in shown.values() for e in group[:2]][:24]:
        print("  %s / %s: %s -> %s %s" % (ex[0], ex[1], ex[2], ex[4], ex[3].strip().replace("\n", " | ")))
    if args.out:
        with open(args.out, "w") as f:
            f.write(info + "\n\n" + table + "\n")
    bad = (total["unclear"] + total["crash"] + total["hang"] + total["data_loss"] + total["temps"] +
           total["overclaim"])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
