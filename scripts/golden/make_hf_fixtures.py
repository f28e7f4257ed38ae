#!/usr/bin/env python3
"""Writes tests/golden/hf/: tiny random Hugging Face checkpoints, their GGUF conversions and
transformers' logits, the truth for kvzip's safetensors loader (tests/model/test_hf_golden.cc).

Python: the pyenv `python3` (3.11) with torch, transformers, safetensors, tokenizers, numpy and gguf
(see scripts/golden/README.md for the install, including the torch --no-deps route). Nothing of
kvzip runs here: tokenizers are trained with Hugging Face `tokenizers`, checkpoints are saved and
reloaded by `transformers`, logits come from transformers' own forward in float64, and the GGUFs are
written with the `gguf` package following llama.cpp's conventions (Q/K rows of llama-type archs
interleaved per head, norms in F32, tokens/merges/types as its converter writes them).

Families (each: hidden 64, 4 query / 2 KV heads, vocab of a few hundred):
  llama3   LlamaForCausalLM,   bf16, llama3 rope scaling, untied LM head, `llama-bpe` tokenizer
           (ignore_merges, merges as [a, b] lists), config.json in the classic rope_theta/rope_scaling
           form, bos added by the post-processor, chat template in chat_template.jinja
  qwen2    Qwen2ForCausalLM,   f32, q/k/v biases, 4 shards + index, `qwen2` tokenizer (NFC, merges
           as "a b" strings), config.vocab_size > tokenizer size (padding), transformers 5 config form
  mistral  MistralForCausalLM, f16, head_dim 32 != hidden/heads, tied embeddings, sliding_window
           1024 (< max_position_embeddings 2048), GPT-2 byte-level tokenizer with a non-special added token

Logit files (<name>.logits.bin, little-endian, no padding):
  magic "KVZHFLOG", u32 version (1), u32 vocab V, u32 n_cases, then per case:
  u32 text bytes, text (UTF-8), u32 add_special (1: HF added special tokens, e.g. bos),
  u32 n_tokens T, i32 ids[T], f32 logits[T * V] (every position; float64 compute, rounded).
Deterministic: fixed seeds; rerun after changing the cases and commit all outputs.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import struct
import sys

import numpy as np
import torch
from gguf import GGMLQuantizationType, GGUFWriter
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from tokenizers import processors, trainers
from transformers import (AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM, MistralConfig,
                          MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(REPO, "tests", "golden", "hf")
MAGIC = b"KVZHFLOG"
VERSION = 1

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")

CORPUS = [
    "The Normans were the people who in the 10th and 11th centuries gave their name to Normandy, "
    "a region in France. They were descended from Norse raiders and pirates from Denmark, Iceland and Norway.",
    "The capital of France is Paris. The river that flows through Paris is the Seine; it is 777 km long.",
    "In 2024 there were 366 days, and 12 months; 3.14159 is pi and 2.71828 is e.",
    "def area(r):\n    return 3.14159 * r ** 2\n\nprint(area(12), 2024 - 1066)  # 452.389\n",
    "Café, déjà vu, naïve, façade: résumé of the über-cool Zürich trip. 東京 と 大阪. Привет, мир!",
    "She said: \"I'll go, we're done, they've left, I'm here, you'd see, it's fine.\"\n\n\tTabs\tand  spaces   too.",
    "Questions and answers: what is the answer? It is 42. Who wrote it? Nobody knows.",
] * 3

LLAMA3_TEMPLATE = (
    "{{- bos_token }}{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}")
CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

FAMILIES = {
    "llama3": dict(
        cls=LlamaForCausalLM, dtype=torch.bfloat16, seed=31, shard=None, gguf_arch="llama", pre="llama-bpe",
        specials=["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
        plain_added=[], vocab_extra=0, vocab_size=320, regex=LLAMA3_REGEX, ignore_merges=True, nfc=False,
        merges_as_strings=False, bos="<|begin_of_text|>", eos="<|eot_id|>", add_bos=None, pad=None,
        template_file=True, template=LLAMA3_TEMPLATE,
        config=lambda v: LlamaConfig(
            vocab_size=v, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=2048, rms_norm_eps=1e-5, tie_word_embeddings=False,
            rope_theta=10000.0, rope_scaling={"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                                              "high_freq_factor": 8.0, "original_max_position_embeddings": 100}),
        chat="<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nWhich river flows through Paris?"
             "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"),
    "qwen2": dict(
        cls=Qwen2ForCausalLM, dtype=torch.float32, seed=32, shard="120KB", gguf_arch="qwen2", pre="qwen2",
        specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"], plain_added=[], vocab_extra=16, vocab_size=320,
        regex=QWEN2_REGEX, ignore_merges=False, nfc=True, merges_as_strings=True, bos=None, eos="<|im_end|>",
        add_bos=False, pad="<|endoftext|>", template_file=False, template=CHATML_TEMPLATE,
        config=lambda v: Qwen2Config(
            vocab_size=v, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=2048, rms_norm_eps=1e-6, tie_word_embeddings=False,
            rope_theta=1000000.0, use_sliding_window=False),
        chat="<|im_start|>user\nWhich river flows through Paris?<|im_end|>\n<|im_start|>assistant\n"),
    "mistral": dict(
        cls=MistralForCausalLM, dtype=torch.float16, seed=33, shard=None, gguf_arch="mistral", pre="gpt2",
        specials=["<s>", "</s>", "<|im_start|>", "<|im_end|>"], plain_added=["<tool>"], vocab_extra=0,
        vocab_size=320, regex=None, ignore_merges=False, nfc=False, merges_as_strings=False, bos="<s>",
        eos="</s>", add_bos=True, pad=None, template_file=False, template=CHATML_TEMPLATE,
        config=lambda v: MistralConfig(
            vocab_size=v, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, head_dim=32, max_position_embeddings=2048, rms_norm_eps=1e-5,
            tie_word_embeddings=True, rope_theta=1000000.0, sliding_window=1024),
        chat="<|im_start|>user\nWhich river flows through Paris? <tool><|im_end|>\n<|im_start|>assistant\n"),
}

# (text, add_special): add_special=True lets the HF tokenizer add what it adds (llama3: bos).
def cases(fam: dict) -> list[tuple[str, bool]]:
    return [
        ("The capital of France is Paris, and 2024 had 366 days.", True),
        ("Café déjà vu: naïve Zürich, 東京 and 🙂 zebra zebras!", True),
        (fam["chat"], False),
        ("def f(x):\n    return x  *  2\n\n\n  # done 12345", True),
    ]


def build_tokenizer(fam: dict) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    if fam["nfc"]:
        tok.normalizer = normalizers.NFC()
    if fam["regex"]:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(fam["regex"]), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=fam["vocab_size"], special_tokens=fam["specials"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer=trainer)
    spec = json.loads(tok.to_str())
    spec["model"]["ignore_merges"] = fam["ignore_merges"]
    if fam["ignore_merges"]:
        # Whole words present in the vocabulary without a merge path: only ignore_merges makes them one token.
        for word in ["Ġzebra", "zebras"]:
            ids = list(spec["model"]["vocab"].values()) + [a["id"] for a in spec["added_tokens"]]
            spec["model"]["vocab"][word] = max(ids) + 1
    if fam["bos"] and fam["add_bos"] is not False:  # the post-processor adds bos (as Llama 3's does)
        bos_id = spec["model"]["vocab"].get(fam["bos"])
        spec["post_processor"] = {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": fam["bos"], "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": fam["bos"], "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": fam["bos"], "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {fam["bos"]: {"id": fam["bos"], "ids": [bos_id], "tokens": [fam["bos"]]}}}
    tok = Tokenizer.from_str(json.dumps(spec))
    if fam["plain_added"]:
        tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in fam["plain_added"]])
    return tok


def write_tokenizer(fam: dict, tok: Tokenizer, d: str) -> None:
    path = os.path.join(d, "tokenizer.json")
    tok.save(path)
    if fam["merges_as_strings"]:  # the older "left right" form (tokenizers < 0.20 wrote it)
        spec = json.load(open(path))
        spec["model"]["merges"] = [" ".join(m) for m in spec["model"]["merges"]]
        json.dump(spec, open(path, "w"), indent=2, ensure_ascii=False)
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 256,
           "bos_token": fam["bos"], "eos_token": fam["eos"], "clean_up_tokenization_spaces": False}
    if fam["pad"]:
        cfg["pad_token"] = fam["pad"]
    if fam["add_bos"] is not None:
        cfg["add_bos_token"] = fam["add_bos"]
    if fam["template_file"]:
        with open(os.path.join(d, "chat_template.jinja"), "w") as f:
            f.write(fam["template"])
    else:
        cfg["chat_template"] = fam["template"]
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)


def randomize(model: torch.nn.Module, seed: int) -> None:
    """Weights large enough that attention is far from uniform and logits spread over O(1-10)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(1.0 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / np.sqrt(p.shape[1]) * 1.5)


def legacy_rope_config(d: str) -> None:
    """Rewrites config.json in the classic form real Llama 3.x checkpoints have."""
    path = os.path.join(d, "config.json")
    cfg = json.load(open(path))
    rp = cfg.pop("rope_parameters")
    cfg["rope_theta"] = rp.pop("rope_theta")
    cfg["rope_scaling"] = rp
    json.dump(cfg, open(path, "w"), indent=2, sort_keys=True)


def qk_to_gguf(w: np.ndarray, n_head: int) -> np.ndarray:
    """HF half-split rows -> llama.cpp's interleaved rows: GGUF row h*D+2i+p = HF row h*D+p*D/2+i."""
    rows = w.shape[0]
    d = rows // n_head
    out = np.empty_like(w)
    for h in range(n_head):
        for i in range(d // 2):
            for p in range(2):
                out[h * d + 2 * i + p] = w[h * d + p * (d // 2) + i]
    return out


def llama3_rope_divisors(rope: dict, theta: float, dim: int) -> np.ndarray:
    """llama.cpp's rope_freqs for rope_type llama3: per rotary pair, the divisor of its frequency."""
    old, lo, hi, factor = (rope["original_max_position_embeddings"], rope["low_freq_factor"],
                           rope["high_freq_factor"], rope["factor"])
    out = []
    for i in range(0, dim, 2):
        wavelen = 2 * math.pi * theta ** (i / dim)
        if wavelen < old / hi:
            out.append(1.0)
        elif wavelen > old / lo:
            out.append(factor)
        else:
            smooth = (old / wavelen - lo) / (hi - lo)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.asarray(out, dtype=np.float32)


def to_numpy(t: torch.Tensor) -> tuple[np.ndarray, GGMLQuantizationType]:
    if t.dtype == torch.bfloat16:
        return t.contiguous().view(torch.int16).numpy().view(np.uint16), GGMLQuantizationType.BF16
    if t.dtype == torch.float16:
        return t.numpy(), GGMLQuantizationType.F16
    return t.float().numpy(), GGMLQuantizationType.F32


def write_gguf(name: str, fam: dict, d: str, tok: Tokenizer, out_path: str) -> None:
    from safetensors.torch import load_file
    cfg = json.load(open(os.path.join(d, "config.json")))
    tensors = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            tensors.update(load_file(os.path.join(d, f)))
    arch = fam["gguf_arch"]
    w = GGUFWriter(out_path, arch)
    hq, hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or cfg["hidden_size"] // hq
    w.add_name(name)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(hq)
    w.add_head_count_kv(hkv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(hd)
    w.add_vocab_size(cfg["vocab_size"])
    rope = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    theta = float(cfg.get("rope_theta") or rope.get("rope_theta"))
    w.add_rope_freq_base(theta)
    if rope.get("rope_type") == "llama3":  # as llama.cpp: no metadata, a tensor of per-pair divisors
        w.add_tensor("rope_freqs.weight", llama3_rope_divisors(rope, theta, hd))
    # Tokenizer as llama.cpp's gpt2 converter writes it.
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    rev = {i: t for t, i in vocab.items()}
    added = {a["id"]: a for a in spec["added_tokens"]}
    tokens, types = [], []
    for i in range(cfg["vocab_size"]):
        if i in added:
            tokens.append(added[i]["content"])
            types.append(3 if added[i]["special"] else 4)
        elif i in rev:
            tokens.append(rev[i])
            types.append(1)
        else:
            tokens.append(f"[PAD{i}]")
            types.append(5)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(fam["pre"])
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in spec["model"]["merges"]])
    ids = {t: i for i, t in enumerate(tokens)}
    if fam["bos"]:
        w.add_bos_token_id(ids[fam["bos"]])
    w.add_eos_token_id(ids[fam["eos"]])
    if fam["pad"]:
        w.add_pad_token_id(ids[fam["pad"]])
    w.add_add_bos_token(bool(fam["add_bos"]) if fam["add_bos"] is not None else True)
    w.add_chat_template(fam["template"])

    def put(gname: str, t: torch.Tensor, permute_heads: int = 0) -> None:
        a, ty = to_numpy(t)
        if a.ndim == 1:  # llama.cpp keeps 1-D tensors (norms, biases) in F32
            a, ty = t.float().numpy(), GGMLQuantizationType.F32
        if permute_heads:
            a = qk_to_gguf(a, permute_heads)
        w.add_tensor(gname, np.ascontiguousarray(a), raw_dtype=ty)

    permute = arch in ("llama", "mistral")
    put("token_embd.weight", tensors["model.embed_tokens.weight"])
    put("output_norm.weight", tensors["model.norm.weight"])
    if not cfg.get("tie_word_embeddings", False):
        put("output.weight", tensors["lm_head.weight"])
    for l in range(cfg["num_hidden_layers"]):
        p, b = f"model.layers.{l}.", f"blk.{l}."
        put(b + "attn_norm.weight", tensors[p + "input_layernorm.weight"])
        put(b + "attn_q.weight", tensors[p + "self_attn.q_proj.weight"], hq if permute else 0)
        put(b + "attn_k.weight", tensors[p + "self_attn.k_proj.weight"], hkv if permute else 0)
        put(b + "attn_v.weight", tensors[p + "self_attn.v_proj.weight"])
        if p + "self_attn.q_proj.bias" in tensors:
            put(b + "attn_q.bias", tensors[p + "self_attn.q_proj.bias"], hq if permute else 0)
            put(b + "attn_k.bias", tensors[p + "self_attn.k_proj.bias"], hkv if permute else 0)
            put(b + "attn_v.bias", tensors[p + "self_attn.v_proj.bias"])
        put(b + "attn_output.weight", tensors[p + "self_attn.o_proj.weight"])
        put(b + "ffn_norm.weight", tensors[p + "post_attention_layernorm.weight"])
        put(b + "ffn_gate.weight", tensors[p + "mlp.gate_proj.weight"])
        put(b + "ffn_up.weight", tensors[p + "mlp.up_proj.weight"])
        put(b + "ffn_down.weight", tensors[p + "mlp.down_proj.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def logits(d: str, ids: list[int], dtype: torch.dtype) -> np.ndarray:
    m = AutoModelForCausalLM.from_pretrained(d, dtype=dtype, attn_implementation="eager")
    m.eval()
    with torch.no_grad():
        return m(torch.tensor([ids])).logits[0].double().numpy()


def make(name: str, fam: dict, report: list[str]) -> None:
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    tok = build_tokenizer(fam)
    vocab = tok.get_vocab_size(with_added_tokens=True) + fam["vocab_extra"]
    torch.manual_seed(fam["seed"])
    cfg = fam["config"](vocab)
    tok_ids = {t: tok.token_to_id(t) for t in fam["specials"]}
    cfg.bos_token_id = tok_ids.get(fam["bos"]) if fam["bos"] else None
    cfg.eos_token_id = tok_ids[fam["eos"]]
    model = fam["cls"](cfg)
    randomize(model, fam["seed"])
    model = model.to(fam["dtype"])
    kw = {"max_shard_size": fam["shard"]} if fam["shard"] else {}
    model.save_pretrained(d, **kw)
    for f in ("generation_config.json",):
        if os.path.exists(os.path.join(d, f)):
            os.remove(os.path.join(d, f))
    if name == "llama3":
        legacy_rope_config(d)
    write_tokenizer(fam, tok, d)

    # Everything below reads the folder back, so the truth is what the files say.
    hf_tok = AutoTokenizer.from_pretrained(d)
    recs = []
    worst32 = 0.0
    for text, special in cases(fam):
        ids = hf_tok(text, add_special_tokens=special)["input_ids"]
        assert ids == tok.encode(text, add_special_tokens=special).ids, (name, text)
        if special:  # kvzip decides from tokenizer_config.json / the post-processor; HF must agree
            assert (ids[0] == cfg.bos_token_id) == (fam["add_bos"] is not False), (name, ids[:3])
        ref = logits(d, ids, torch.float64)
        f32 = logits(d, ids, torch.float32)
        worst32 = max(worst32, float(np.abs(f32 - ref).max() / np.abs(ref).max()))
        recs.append((text, special, ids, ref))
    V = cfg.vocab_size
    with open(os.path.join(OUT, f"{name}.logits.bin"), "wb") as f:
        f.write(MAGIC + struct.pack("<III", VERSION, V, len(recs)))
        for text, special, ids, ref in recs:
            b = text.encode("utf-8")
            f.write(struct.pack("<I", len(b)) + b + struct.pack("<II", int(special), len(ids)))
            f.write(np.asarray(ids, "<i4").tobytes())
            assert ref.shape == (len(ids), V)
            f.write(ref.astype("<f4").tobytes())
    write_gguf(name, fam, d, tok, os.path.join(OUT, f"{name}.gguf"))
    sizes = sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d))
    report.append(f"{name}: vocab {V}, tokens/case {[len(r[2]) for r in recs]}, folder {sizes} B, "
                  f"max|logit| {max(float(np.abs(r[3]).max()) for r in recs):.2f}, "
                  f"HF fp32 vs fp64 max rel {worst32:.2e}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*", default=list(FAMILIES))
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    report: list[str] = []
    for name in args.names:
        make(name, FAMILIES[name], report)
    print("\n".join(report))


if __name__ == "__main__":
    sys.exit(main())
