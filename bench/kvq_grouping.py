#!/usr/bin/env python3
# Which grouping for 4/8-bit K and V? Reads an uncompressed f32 .kvz (kvzip compress --dtype f32)
# and quantizes every layer's K and V rows with several group layouts, printing the relative RMS
# error (||x - x^||/ ||x||, over the whole cache) and the parameter overhead in bits per value.
# `--skip-prefix` leaves out each head's prefix rows (stored as f16 since format v1.2); the
# "Hadamard" schemes rotate every row by the orthonormal Walsh-Hadamard matrix first (v1.3).
# Needs numpy: run with the pyenv python3 (`python3 bench/kvq_grouping.py cache.kvz`); the system
# /usr/bin/python3 has no numpy. Parsing follows spec/kvzip_format.md (raw sections only).
import struct
import sys

import numpy as np


def read_kvz(path):
    b = open(path, "rb").read()
    count, data_off = struct.unpack_from("<QQ", b, 16)
    secs = []
    for i in range(count):
        kind, flags, codec, layer, offset, stored, raw, _ = struct.unpack_from("<IIIIQQQQ", b, 64 + 64 * i)
        if codec != 0:
            sys.exit("sections must be raw (no --zstd)")
        secs.append((kind, layer, data_off + offset, stored))
    meta = {}
    for kind, layer, off, size in secs:
        if kind != 1:
            continue
        n, p = struct.unpack_from("<Q", b, off)[0], off + 8
        for _ in range(n):
            kl = struct.unpack_from("<Q", b, p)[0]
            key = b[p + 8:p + 8 + kl].decode()
            t, _, vs = struct.unpack_from("<IIQ", b, p + 8 + kl)
            v = b[p + 24 + kl:p + 24 + kl + vs]
            if t == 1:
                meta[key] = struct.unpack("<Q", v)[0]
            p += 24 + kl + vs
    L, H, D = meta["model.n_layers"], meta["model.n_kv_heads"], meta["model.head_dim"]
    if meta["kv.dtype"] != 1:
        sys.exit("needs an f32 cache")
    index = next(s for s in secs if s[0] == 2)
    rows = np.frombuffer(b, np.uint64, L * H * 2, index[2]).reshape(L, H, 2)[:, :, 0].astype(int)
    layers = []
    skip = meta["kv.prefix_length"] if SKIP_PREFIX else 0  # a head's first rows: never evicted
    for kind, layer, off, size in secs:
        if kind != 4:
            continue
        R = int(rows[layer].sum())
        kv = np.frombuffer(b, np.float32, 2 * R * D, off).reshape(2, R, D)
        starts = np.concatenate([[0], np.cumsum(rows[layer])])
        layers.append([(kv[0, starts[h] + skip:starts[h + 1]], kv[1, starts[h] + skip:starts[h + 1]]) for h in range(H)])
    return layers, D


def f16(x):
    return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)


def q_groups(x, bits, asym):
    """x: (n, G) groups -> reconstruction with f16 parameters (scale[, min]) per group."""
    levels = (1 << bits) - 1
    if asym:
        lo, hi = x.min(1, keepdims=True), x.max(1, keepdims=True)
        mn = f16(lo)
        sc = f16((hi - mn) / levels)
        safe = np.where(sc > 0, sc, 1)
        q = np.clip(np.rint((x - mn) / safe), 0, levels)
        return mn + sc * q
    half = levels // 2  # symmetric: codes -half..half
    sc = f16(np.abs(x).max(1, keepdims=True) / half)
    safe = np.where(sc > 0, sc, 1)
    return sc * np.clip(np.rint(x / safe), -half, half)


def per_token(x, bits, G, asym, prescale=None):
    c = np.ones(x.shape[1], np.float32) if prescale is None else prescale
    y = x / c
    r = q_groups(y.reshape(-1, G), bits, asym).reshape(x.shape)
    return r * c


def per_channel_blocks(x, bits, B, asym):
    out = np.empty_like(x)
    for s in range(0, x.shape[0], B):
        blk = x[s:s + B]
        out[s:s + B] = q_groups(blk.T.copy(), bits, asym).T
    return out


def hadamard(D):
    h = np.ones((1, 1))
    while h.shape[0] < D:
        h = np.block([[h, h], [h, -h]])
    return h / np.sqrt(D)


def rotated(fn):
    """fn applied to the rotated rows x·H, the result rotated back (H is symmetric, H·H = I)."""
    def g(x, bits):
        h = hadamard(x.shape[1])
        return fn(x @ h, bits) @ h
    return g


def chan_absmax(x):
    a = np.abs(x).max(0)
    return f16(np.where(a > 0, a, 1))  # stored per head and channel


def main(path):
    layers, D = read_kvz(path)
    schemes = {
        # name: (fn(x, bits), overhead bits per value; prune-safe?)
        "token G=D asym": (lambda x, b: per_token(x, b, D, True), 32 / D, "yes"),
        "token G=32 asym": (lambda x, b: per_token(x, b, 32, True), 1.0, "yes"),
        "token G=D sym": (lambda x, b: per_token(x, b, D, False), 16 / D, "yes"),
        "chan-prescale + token G=D asym": (lambda x, b: per_token(x, b, D, True, chan_absmax(x)), 32 / D, "yes"),
        "chan-prescale + token G=D sym": (lambda x, b: per_token(x, b, D, False, chan_absmax(x)), 16 / D, "yes"),
        "chan-prescale + token G=32 asym": (lambda x, b: per_token(x, b, 32, True, chan_absmax(x)), 1.0, "yes"),
        "Hadamard + chan-prescale + token G=D asym": (
            rotated(lambda x, b: per_token(x, b, D, True, chan_absmax(x))), 32 / D, "yes"),
        "Hadamard + chan-prescale + token G=D sym": (
            rotated(lambda x, b: per_token(x, b, D, False, chan_absmax(x))), 16 / D, "yes"),
        "Hadamard + token G=D sym": (rotated(lambda x, b: per_token(x, b, D, False)), 16 / D, "yes"),
        "channel, 32-row blocks asym (KIVI)": (lambda x, b: per_channel_blocks(x, b, 32, True), 1.0, "no"),
        "channel, whole head asym": (lambda x, b: per_channel_blocks(x, b, 1 << 30, True), 0.0, "yes"),
    }
    print(f"{path}: {sum(len(l) for l in layers)} heads, {sum(k.shape[0] for l in layers for k, _ in l)} rows, D={D}")
    print("| scheme | prune-safe | overhead bits/value | K q8 | K q4 | V q8 | V q4 |")
    print("|---|---|---|---|---|---|---|")
    for name, (fn, ovh, safe) in schemes.items():
        cells = []
        for which in (0, 1):
            for bits in (8, 4):
                num = den = 0.0
                for layer in layers:
                    for head in layer:
                        x = head[which].astype(np.float64)
                        if x.shape[0] == 0:
                            continue
                        r = fn(x, bits)
                        num += ((x - r) ** 2).sum()
                        den += (x ** 2).sum()
                cells.append(f"{np.sqrt(num / den):.4f}")
        print(f"| {name} | {safe} | {ovh:.2f} | " + " | ".join(cells) + " |")


SKIP_PREFIX = False

if __name__ == "__main__":
    args = sys.argv[1:]
    if "--skip-prefix" in args:
        args.remove("--skip-prefix")
        SKIP_PREFIX = True
    main(args[0])
