"""kvzip.open: a .kvz file as numpy arrays (metadata, and per layer and KV head the kept rows).

Rows of a file stored raw as f32 are zero-copy, read-only views of the memory-mapped file; f16,
bf16 and compressed files are decoded a layer at a time; q8/q4 are dequantized on request
(`keys`, `values`) and their stored codes are available as they are (`quantized`).
"""
import functools
import os

import numpy as np

from . import _kvzip


class Layer:
    """One layer's rows: head-major, increasing position within a head."""

    __slots__ = ("head_rows", "positions", "keys", "values", "scores", "_offsets")

    def __init__(self, head_rows, positions, keys, values, scores):
        self.head_rows = head_rows
        self.positions = positions
        self.keys = keys
        self.values = values
        self.scores = scores
        self._offsets = np.concatenate([[0], np.cumsum(head_rows, dtype=np.int64)])

    def head(self, h):
        """(positions, keys, values) of KV head h: views into the layer's arrays."""
        a, b = self._offsets[h], self._offsets[h + 1]
        return self.positions[a:b], self.keys[a:b], self.values[a:b]

    def head_scores(self, h):
        if self.scores is None:
            return None
        return self.scores[self._offsets[h]:self._offsets[h + 1]]


class Cache:
    """A validated, memory-mapped .kvz file. Use kvzip.open(path)."""

    def __init__(self, reader):
        self._r = reader
        self._h = reader.header()
        self._layer = functools.lru_cache(maxsize=2)(self._read_layer)

    # ---- metadata -------------------------------------------------------------------------
    path = property(lambda self: self._r.path)
    version = property(lambda self: self._r.version, doc="(major, minor) format version")
    file_size = property(lambda self: self._r.file_size)
    header = property(lambda self: dict(self._h), doc="every header field as a dict")
    model = property(lambda self: dict(self._h["model"]),
                     doc="fingerprint (arch, name, tokenizer_hash, weights_hash) and shape (n_layers, "
                         "n_kv_heads, head_dim, rope_base, rope_scaling)")
    n_layers = property(lambda self: self._h["model"]["n_layers"])
    n_kv_heads = property(lambda self: self._h["model"]["n_kv_heads"])
    head_dim = property(lambda self: self._h["model"]["head_dim"])
    kv_dtype = property(lambda self: self._h["kv_dtype"])
    method = property(lambda self: self._h["method"])
    params = property(lambda self: dict(self._h["params"]))
    requested_ratio = property(lambda self: self._h["requested_ratio"])
    achieved_ratio = property(lambda self: self._h["achieved_ratio"])
    query_template = property(lambda self: self._h["query_template"])
    has_scores = property(lambda self: self._r.has_scores)
    prefix_tokens = property(lambda self: np.asarray(self._h["prefix_tokens"], dtype=np.uint32))
    document_tokens = property(lambda self: np.asarray(self._h["document_tokens"], dtype=np.uint32))
    suffix_tokens = property(lambda self: np.asarray(self._h["suffix_tokens"], dtype=np.uint32))
    document_text = property(lambda self: self._h["document_text"].decode("utf-8", "replace"))

    @property
    def logical_length(self):
        """Prefix plus document tokens: the position the next appended token takes."""
        return len(self._h["prefix_tokens"]) + len(self._h["document_tokens"])

    # ---- rows -----------------------------------------------------------------------------
    def head_rows(self, layer):
        """(Hkv,) uint32: kept rows per KV head of `layer`."""
        return self._r.head_rows(layer)

    def _read_layer(self, layer):
        kv = self._r.kv_view(layer)
        if kv is None:
            kv = self._r.read_kv(layer)
        return Layer(self._r.head_rows(layer), self._r.positions(layer), kv[0], kv[1], self._r.scores(layer))

    def layer(self, layer):
        """The layer's rows (Layer): keys and values f32 (R, D) — zero-copy views for a raw f32
        file, else decoded (f16/bf16 widened, q8/q4 dequantized exactly as kvzip attends them)."""
        return self._layer(layer)

    def positions(self, layer, head=None):
        lay = self.layer(layer)
        return lay.positions if head is None else lay.head(head)[0]

    def keys(self, layer, head=None):
        """Post-RoPE keys, (R, D) f32, Hugging Face head-dim order (RoPE pairs (i, i + D/2))."""
        lay = self.layer(layer)
        return lay.keys if head is None else lay.head(head)[1]

    def values(self, layer, head=None):
        lay = self.layer(layer)
        return lay.values if head is None else lay.head(head)[2]

    def scores(self, layer, head=None):
        """Importance of each kept row (R,) f32, or None when the file stores no scores."""
        lay = self.layer(layer)
        return lay.scores if head is None else lay.head_scores(head)

    def quantized(self, layer):
        """q8/q4 only: (k, v), each a dict of the stored arrays: channel_scale (Hkv, D) f32, dense
        (R_f16, D) f16 bits of the f16 rows, params (R_q, ...) uint16 group parameters, codes
        (R_q, bytes) uint8 (q4: channel 2i in the low nibble). See spec/kvzip_format.md §12.1."""
        return self._r.read_quant(layer)

    def verify(self):
        """Every checksum, all padding and every K/V section decoded and checked (kvzip inspect --verify)."""
        self._r.verify()

    def describe(self, json=False):
        """The text (or JSON) of `kvzip inspect`."""
        return self._r.describe(json)

    def check_model(self, model, force=False):
        """ModelMismatchError unless `model` (a description dict) has this cache's fingerprint."""
        return self._r.check_model(model, force)

    def __repr__(self):
        return (f"<kvzip.Cache {self.path!r}: {self.method} ratio {self.achieved_ratio:.3f}, "
                f"{self.n_layers}x{self.n_kv_heads}x{self.head_dim} {self.kv_dtype}, "
                f"{len(self._h['document_tokens'])} document tokens>")


def open(path, verify="on_access"):  # noqa: A001 - the package's entry point mirrors builtins.open
    """Opens and validates a .kvz file. verify: "metadata" (small sections only), "on_access"
    (each layer's checksum when first read; the default) or "full" (everything now)."""
    return Cache(_kvzip.Reader.open(os.fspath(path), verify))
