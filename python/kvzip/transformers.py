"""kvzip.transformers: a .kvz cache inside a Hugging Face transformers model (needs torch and
transformers).

  load(cache, model)                     -> KvzipCache, a transformers Cache for model.generate
  generate(model, tokenizer, cache, q)   -> the answer text, the cache's query template applied
  save(path, model, past_key_values, positions, ...)  a .kvz from a transformers cache

Ragged heads: each KV head of a .kvz keeps its own number of rows. KvzipCache pads every head of a
layer to the layer's longest head with rows whose keys are NaN, and load() switches the model to
the attention function "kvzip" (registered through transformers' AttentionInterface), which masks
rows with NaN keys per head and is otherwise transformers' eager attention. NaN rather than zeros
because a padded row that reached another attention function would then poison the output
instead of silently taking softmax weight. Positions continue from the original document: the
cache reports its logical length (prefix + document tokens), so new tokens take positions T,
T+1, ... as they did when the document was whole; get_mask_sizes shifts the key indices by the
rows evicted so the causal mask stays right. transformers builds one mask for all layers (sized
for layer 0); the attention function aligns it on the right, where the appended rows are, since
layers differ only in how many file rows they hold.
"""
import inspect

import numpy as np
import torch
from transformers import AttentionInterface
from transformers.cache_utils import Cache, DynamicLayer
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

from . import _cache
from ._write import DEFAULT_QUERY_TEMPLATE, write
from .errors import InvalidArgumentError, ModelMismatchError

ATTENTION = "kvzip"


def kvzip_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Attention that skips key rows whose first channel is NaN (padding of
    a ragged KvzipCache layer), per KV head. query (B, Hq, q, D); key, value (B, Hkv, kv, D)."""
    b, hq, q, _ = query.shape
    hkv, kv = key.shape[1], key.shape[2]
    pad = torch.isnan(key[..., 0])  # (B, Hkv, kv)
    keep = ~pad
    key = key.masked_fill(pad[..., None], 0.0)
    value = value.masked_fill(pad[..., None], 0.0)
    g = hq // hkv
    if g > 1:
        key = key.repeat_interleave(g, dim=1)
        value = value.repeat_interleave(g, dim=1)
        keep = keep.repeat_interleave(g, dim=1)
    keep = keep[:, :, None, :]  # (B, Hq, 1, kv)
    if attention_mask is None:
        # the q new tokens are the last q keys; every earlier key is visible to all of them
        i = torch.arange(q, device=query.device)[:, None]
        j = torch.arange(kv, device=query.device)[None, :]
        keep = keep & (j <= kv - q + i)
    else:
        m = attention_mask if attention_mask.dtype == torch.bool else (
            attention_mask > torch.finfo(attention_mask.dtype).min / 2)
        w = m.shape[-1]
        if w > kv:  # a KvzipCache layer shorter than the one the mask was made for
            m = m[..., w - kv:]
        elif w < kv:  # longer: the extra keys on the left are file rows, visible to every query
            m = torch.cat([m.new_ones((*m.shape[:-1], kv - w)), m], dim=-1)
        keep = keep & m
    # eager attention, as transformers' eager_attention_forward computes it
    scores = torch.matmul(query, key.transpose(2, 3)) * (scaling if scaling is not None else query.shape[-1] ** -0.5)
    scores = scores.masked_fill(~keep, float("-inf"))
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    probs = torch.nn.functional.dropout(probs, p=dropout, training=module.training)
    return torch.matmul(probs, value).transpose(1, 2).contiguous(), None


AttentionInterface.register(ATTENTION, kvzip_attention)
ALL_MASK_ATTENTION_FUNCTIONS.register(ATTENTION, sdpa_mask)


class KvzipLayer(DynamicLayer):
    """One layer: the file's rows padded per head to the longest (NaN keys), then appended rows."""

    def __init__(self, keys, values, logical_length):
        super().__init__()
        self.keys, self.values = keys, values
        self.device = keys.device
        self.is_initialized = True
        self.base_rows = keys.shape[-2]
        self.logical_length = logical_length

    def get_seq_length(self):
        return self.keys.shape[-2] - self.base_rows + self.logical_length

    def get_mask_sizes(self, query_length):
        return self.keys.shape[-2] + query_length, self.logical_length - self.base_rows

    def rollback(self):
        self.keys = self.keys[..., :self.base_rows, :]
        self.values = self.values[..., :self.base_rows, :]


class KvzipCache(Cache):
    """A transformers Cache holding a .kvz file's rows (see the module's notes). `positions[l]`
    is (Hkv, R_max) int64, -1 for padding; `source` the kvzip.Cache it came from."""

    def __init__(self, layers, positions, source):
        super().__init__(layers=layers)
        self.positions = positions
        self.source = source

    def rollback(self):
        """Drops every appended row: back to the state of the file."""
        for layer in self.layers:
            layer.rollback()


def _config(model):
    c = model.config
    c = getattr(c, "get_text_config", lambda: c)()
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    theta = getattr(c, "rope_theta", None)
    if theta is None:
        theta = (getattr(c, "rope_parameters", None) or {}).get("rope_theta")
    return c.num_hidden_layers, c.num_key_value_heads, head_dim, theta


def check_model(cache, model, source=None, force=False):
    """ModelMismatchError when the cache's shape (L, Hkv, D, RoPE base) differs from the model's,
    or, with `source` (the GGUF file or Hugging Face folder the model was loaded from), when its
    fingerprint differs (unless force)."""
    L, H, D, theta = _config(model)
    m = cache.model
    if (m["n_layers"], m["n_kv_heads"], m["head_dim"]) != (L, H, D) or (
            theta is not None and abs(float(theta) - m["rope_base"]) > 1e-3 * abs(float(theta))):
        raise ModelMismatchError(
            f"{cache.path}: cache of {m['name'] or m['arch']} with L={m['n_layers']} Hkv={m['n_kv_heads']} "
            f"D={m['head_dim']} rope_base={m['rope_base']}; the model has L={L} Hkv={H} D={D} rope_base={theta}")
    if source is not None:
        from ._engine import model_description
        return cache.check_model(model_description(source), force)
    return True


def _open(cache):
    return cache if isinstance(cache, _cache.Cache) else _cache.open(cache)


def load(cache, model, *, source=None, force=False, device=None, dtype=None):
    """A KvzipCache of the file (kvzip.Cache or path) for `model`; switches the model to the
    "kvzip" attention function (eager attention for caches without padding rows). Rows are placed on
    the model's device and dtype unless given."""
    cache = _open(cache)
    check_model(cache, model, source, force)
    p = next(model.parameters())
    device = device or p.device
    dtype = dtype or p.dtype
    layers, positions = [], []
    T = cache.logical_length
    for l in range(cache.n_layers):
        lay = cache.layer(l)
        rows = np.asarray(lay.head_rows, dtype=np.int64)
        r_max = int(rows.max()) if rows.size else 0
        H, D = cache.n_kv_heads, cache.head_dim
        k = torch.full((1, H, r_max, D), float("nan"), dtype=torch.float32)
        v = torch.zeros((1, H, r_max, D), dtype=torch.float32)
        pos = torch.full((H, r_max), -1, dtype=torch.int64)
        for h in range(H):
            ph, kh, vh = lay.head(h)
            n = len(ph)
            k[0, h, :n] = torch.from_numpy(np.array(kh, dtype=np.float32))
            v[0, h, :n] = torch.from_numpy(np.array(vh, dtype=np.float32))
            pos[h, :n] = torch.from_numpy(np.asarray(ph, dtype=np.int64))
        layers.append(KvzipLayer(k.to(device=device, dtype=dtype), v.to(device=device, dtype=dtype), T))
        positions.append(pos)
    model.set_attn_implementation(ATTENTION)
    return KvzipCache(layers, positions, cache)


def _cache_kwarg(model):
    """generate's name for the cache: `cache` in newer transformers, `past_key_values` before."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def question_ids(tokenizer, cache, question):
    """Token ids after the document for `question`: the query template's text, then the suffix."""
    tail = cache.query_template.replace("{question}", question)
    ids = tokenizer.encode(tail, add_special_tokens=False)
    return list(ids) + [int(t) for t in cache.suffix_tokens]


def generate(model, tokenizer, cache, question, *, past_key_values=None, return_dict=False, **generate_kwargs):
    """Answers `question` from a .kvz (kvzip.Cache or path) with model.generate: the prompt is the
    cache's prefix and document (already in the cache), then the query template and suffix.
    Greedy with max_new_tokens=128 unless generate_kwargs say otherwise. past_key_values: a
    KvzipCache from load() to reuse (rolled back before and after). return_dict: also the ids
    and the first token's logits (a dict with text, tokens, first_logits)."""
    cache = _open(cache)
    past = past_key_values if past_key_values is not None else load(cache, model)
    past.rollback()
    if model.config._attn_implementation != ATTENTION:
        model.set_attn_implementation(ATTENTION)
    p = next(model.parameters())
    ids = [int(t) for t in cache.prefix_tokens] + [int(t) for t in cache.document_tokens]
    ids += question_ids(tokenizer, cache, question)
    input_ids = torch.tensor([ids], dtype=torch.long, device=p.device)
    kw = {"max_new_tokens": 128, "do_sample": False}
    kw.update(generate_kwargs)
    if return_dict:
        kw.update(return_dict_in_generate=True, output_logits=True)
    try:
        kw[_cache_kwarg(model)] = past
        out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), **kw)
    finally:
        past.rollback()
    seq = out.sequences if return_dict else out
    new = seq[0, input_ids.shape[1]:].tolist()
    stops = kw.get("eos_token_id", model.generation_config.eos_token_id)
    stops = set([stops] if isinstance(stops, int) else (stops or []))
    while new and new[-1] in stops:
        new.pop()
    text = tokenizer.decode(new, skip_special_tokens=True)
    if not return_dict:
        return text
    return {"text": text, "tokens": new, "first_logits": out.logits[0][0].float().cpu().numpy()}


def _layer_part(x, l, n_layers):
    """Layer l of per-layer values: x[l] of a list of L arrays or an (L, ...) 3-D array, else x."""
    if isinstance(x, (list, tuple)) and len(x) == n_layers and np.ndim(np.asarray(x[0])) >= 1:
        return np.asarray(x[l])
    a = np.asarray(x)
    return a[l] if a.ndim == 3 else a


def save(path, model, past_key_values, positions, *, prefix_tokens, document_tokens, suffix_tokens=(),
         source=None, description=None, document_text="", query_template=DEFAULT_QUERY_TEMPLATE,
         method="external", params=None, scores=None, **write_kwargs):
    """Writes a .kvz from a transformers cache (e.g. one pruned by kvpress).

    past_key_values: a Cache (or a list of (keys, values) per layer), keys (1, Hkv, R, D) post-RoPE.
    positions: the original position of every row — (L, Hkv, R), (Hkv, R) or (R,) broadcast over
      the missing axes; rows with position -1 are left out (padding of ragged heads).
    source / description: the model's GGUF or Hugging Face folder (its fingerprint is recorded), or
      a description dict (kvzip.model_description, Cache.model). Other arguments as kvzip.write.
    """
    if description is None:
        if source is None:
            raise InvalidArgumentError("save: give source= (the model file or folder) or description=")
        from ._engine import model_description
        description = model_description(source)
    L, H, D, _ = _config(model)
    if hasattr(past_key_values, "layers"):
        kv = [(layer.keys, layer.values) for layer in past_key_values.layers]
    else:
        kv = list(past_key_values)
    if len(kv) != L:
        raise InvalidArgumentError(f"save: the cache has {len(kv)} layers, the model {L}")
    keys, values, pos_out, score_out = [], [], [], []
    for l, (k, v) in enumerate(kv):
        k = k.detach().float().cpu().numpy()[0]
        v = v.detach().float().cpu().numpy()[0]
        if isinstance(past_key_values, KvzipCache):  # only the file's rows, not appended ones
            k, v = k[:, :past_key_values.layers[l].base_rows], v[:, :past_key_values.layers[l].base_rows]
        p = np.broadcast_to(_layer_part(positions, l, L), (H, k.shape[1]))
        keep = p >= 0
        keys.append([k[h][keep[h]] for h in range(H)])
        values.append([v[h][keep[h]] for h in range(H)])
        pos_out.append([p[h][keep[h]] for h in range(H)])
        if scores is not None:
            s = np.broadcast_to(_layer_part(scores, l, L), (H, k.shape[1]))
            score_out.append([s[h][keep[h]] for h in range(H)])
    write(path, model=description, keys=keys, values=values, positions=pos_out, prefix_tokens=prefix_tokens,
          document_tokens=document_tokens, suffix_tokens=suffix_tokens, document_text=document_text,
          query_template=query_template, method=method, params=params,
          scores=score_out if scores is not None else None, **write_kwargs)
