"""kvzip.write: a .kvz file from numpy arrays, so that a cache pruned by another tool (kvpress,
the KVzip authors' code) can be answered from by `kvzip query`.

Rows go in per layer and KV head; a head's rows may come in any order (they are sorted by
position here, as the format requires). Keys are post-RoPE in the Hugging Face head-dim order.
"""
import os

import numpy as np

from . import _kvzip
from .errors import InvalidArgumentError

DEFAULT_QUERY_TEMPLATE = "\n\nQuestion: {question}"


def _per_head(x, layer, n_heads, what):
    heads = list(x) if not isinstance(x, np.ndarray) or x.ndim >= 2 else None
    if heads is None or len(heads) != n_heads:
        raise InvalidArgumentError(f"{what}[{layer}]: expected {n_heads} KV heads, found "
                                   f"{'an array of shape ' + str(np.shape(x)) if heads is None else len(heads)}")
    return heads


def _layer(l, keys, values, positions, scores, n_heads, d):
    ks = _per_head(keys, l, n_heads, "keys")
    vs = _per_head(values, l, n_heads, "values")
    ps = _per_head(positions, l, n_heads, "positions")
    ss = _per_head(scores, l, n_heads, "scores") if scores is not None else None
    head_rows, pos, kk, vv, sc = [], [], [], [], []
    for h in range(n_heads):
        p = np.asarray(ps[h]).reshape(-1)
        if p.size and (p.min() < 0 or p.max() >= 2**32):
            raise InvalidArgumentError(f"positions[{l}][{h}]: values must lie in 0 .. 2^32-1")
        k = np.asarray(ks[h], dtype=np.float32).reshape(-1, d) if np.size(ks[h]) else np.zeros((0, d), np.float32)
        v = np.asarray(vs[h], dtype=np.float32).reshape(-1, d) if np.size(vs[h]) else np.zeros((0, d), np.float32)
        if k.shape[0] != p.size or v.shape[0] != p.size:
            raise InvalidArgumentError(f"layer {l} head {h}: {p.size} positions but keys {np.shape(ks[h])} and "
                                       f"values {np.shape(vs[h])}; expected ({p.size}, {d}) each")
        order = np.argsort(p, kind="stable")
        head_rows.append(p.size)
        pos.append(p[order].astype(np.uint32))
        kk.append(k[order])
        vv.append(v[order])
        if ss is not None:
            s = np.asarray(ss[h], dtype=np.float32).reshape(-1)
            if s.size != p.size:
                raise InvalidArgumentError(f"scores[{l}][{h}]: {s.size} values for {p.size} rows")
            sc.append(s[order])
    cat = lambda xs, shape: np.ascontiguousarray(np.concatenate(xs) if xs else np.zeros(shape))  # noqa: E731
    return (np.asarray(head_rows, dtype=np.uint32), cat(pos, (0,)).astype(np.uint32),
            cat(kk, (0, d)).astype(np.float32), cat(vv, (0, d)).astype(np.float32),
            cat(sc, (0,)).astype(np.float32) if ss is not None else None)


def write(path, *, model, keys, values, positions, prefix_tokens, document_tokens, suffix_tokens=(),
          document_text="", query_template=DEFAULT_QUERY_TEMPLATE, method="external", params=None,
          requested_ratio=None, scores=None, kv_dtype="f32", kv_group=0, zstd=0, force=False):
    """Writes a .kvz file atomically (nothing is left behind on error).

    model: a description dict — `Cache.model` of another file, or `kvzip.model_description(path)`
      (arch, name, tokenizer_hash, weights_hash, n_layers, n_kv_heads, head_dim, rope_base,
      rope_scaling); the fingerprint is what `kvzip query` checks against its model.
    keys, values, positions: per layer (L), per KV head (Hkv): keys and values (R_h, D) — keys
      after RoPE, Hugging Face head-dim order — and the original positions (R_h,) of the rows.
      An array of shape (L, Hkv, R, D) / (L, Hkv, R) works too when every head keeps R rows.
    prefix_tokens, document_tokens, suffix_tokens: the token ids around the cache (positions < n_p
      are the prefix; a question is appended at position n_p + n_c as query_template, then suffix).
    scores: optional, like positions: the importance of each row (enables `kvzip prune`).
    kv_dtype: f32, f16, bf16, q8 or q4 (q8/q4 quantized here, kv_group channels per group, 0 = D).
    zstd: 0 (raw sections, zero-copy reads) or a zstd level 1..19.
    """
    n_layers, n_heads, d = int(model["n_layers"]), int(model["n_kv_heads"]), int(model["head_dim"])
    for what, x in (("keys", keys), ("values", values), ("positions", positions)):
        if len(x) != n_layers:
            raise InvalidArgumentError(f"{what}: expected {n_layers} layers (model n_layers), found {len(x)}")
    if scores is not None and len(scores) != n_layers:
        raise InvalidArgumentError(f"scores: expected {n_layers} layers, found {len(scores)}")
    if "{question}" not in query_template:
        raise InvalidArgumentError("query_template must contain {question}")
    layers = [_layer(l, keys[l], values[l], positions[l], None if scores is None else scores[l], n_heads, d)
              for l in range(n_layers)]
    n_p, n_c = len(prefix_tokens), len(document_tokens)
    kept_doc = sum(int((lay[1] >= n_p).sum()) for lay in layers)
    achieved = kept_doc / (n_layers * n_heads * n_c) if n_c else 1.0
    ps = list((params or {}).items())
    if query_template != DEFAULT_QUERY_TEMPLATE and not any(k == "query_template" for k, _ in ps):
        ps.append(("query_template", query_template))
    text = document_text.encode("utf-8") if isinstance(document_text, str) else bytes(document_text)
    header = {
        "model": model,
        "prefix_tokens": [int(t) for t in prefix_tokens],
        "document_tokens": [int(t) for t in document_tokens],
        "suffix_tokens": [int(t) for t in suffix_tokens],
        "document_text": text,
        "method": method,
        "params": [(str(k), str(v)) for k, v in ps],
        "requested_ratio": float(achieved if requested_ratio is None else requested_ratio),
        "achieved_ratio": float(achieved),
    }
    _kvzip.write(os.fspath(path), header, layers, kv_dtype, int(kv_group), int(zstd), bool(force))
