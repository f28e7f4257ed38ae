#!/usr/bin/env python3
"""Writes the Gemma 3 and Qwen 3 members of tests/golden/hf/: tiny random Hugging Face checkpoints,
their GGUF conversions and transformers' logits, the truth for tests/model/test_hf_golden.cc.
Same layout, cases and logit-file format as scripts/golden/make_hf_fixtures.py, whose helpers this
imports (byte-level BPE tokenizers trained with `tokenizers`, weights randomised, logits from
transformers' eager forward in float64). Python: torch, transformers 5, tokenizers, safetensors, gguf, numpy.

Families:
  gemma3  Gemma3ForCausalLM, f32, 6 layers with transformers' default layer types for a sliding
          window pattern of 6 (layers 0-4 sliding, 5 full), sliding_window 8 (every case is longer,
          so both kinds of layer are exercised), global rope_theta 1e6 and local 1e4 (llama.cpp's
          fixed local base), query_pre_attn_scalar = head_dim (llama.cpp's scale for these sizes),
          QK-norm, post-norms, GeGLU, tied embeddings; norm weights drawn around 0 (Gemma adds 1).
          GGUF as llama.cpp's Gemma 3 converter writes it: norms stored as 1 + w, no Q/K
          interleave, attention.sliding_window, the <start_of_turn> chat template.
  qwen3   Qwen3ForCausalLM, bf16, QK-norm, no biases, untied, `qwen2` tokenizer, ChatML.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import sys

import numpy as np
import torch
from gguf import GGMLQuantizationType, GGUFWriter
from transformers import AutoTokenizer, Gemma3ForCausalLM, Gemma3TextConfig, Qwen3Config, Qwen3ForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_hf_fixtures as base  # noqa: E402

GEMMA_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ '<start_of_turn>' + message['role'] + '\\n' + "
    "message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}")

FAMILIES = {
    "gemma3": dict(
        cls=Gemma3ForCausalLM, dtype=torch.float32, seed=41, shard=None, gguf_arch="gemma3", pre="gpt2",
        specials=["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"], plain_added=[], vocab_extra=0,
        vocab_size=320, regex=None, ignore_merges=False, nfc=False, merges_as_strings=False, bos="<bos>",
        eos="<eos>", add_bos=True, pad="<pad>", template_file=False, template=GEMMA_TEMPLATE,
        config=lambda v: Gemma3TextConfig(
            vocab_size=v, hidden_size=64, intermediate_size=96, num_hidden_layers=6, num_attention_heads=4,
            num_key_value_heads=2, head_dim=32, sliding_window=8, max_position_embeddings=512, rms_norm_eps=1e-6,
            query_pre_attn_scalar=32, tie_word_embeddings=True,
            rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                             "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
        chat="<bos><start_of_turn>user\nWhich river flows through Paris?<end_of_turn>\n<start_of_turn>model\n"),
    "qwen3": dict(
        cls=Qwen3ForCausalLM, dtype=torch.bfloat16, seed=42, shard=None, gguf_arch="qwen3", pre="qwen2",
        specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"], plain_added=[], vocab_extra=0, vocab_size=320,
        regex=base.QWEN2_REGEX, ignore_merges=False, nfc=True, merges_as_strings=False, bos=None, eos="<|im_end|>",
        add_bos=False, pad="<|endoftext|>", template_file=False, template=base.CHATML_TEMPLATE,
        config=lambda v: Qwen3Config(
            vocab_size=v, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=32, max_position_embeddings=2048, rms_norm_eps=1e-6,
            tie_word_embeddings=False, rope_theta=1000000.0),
        chat="<|im_start|>user\nWhich river flows through Paris?<|im_end|>\n<|im_start|>assistant\n"),
}


def write_gguf(name: str, fam: dict, d: str, tok, out_path: str) -> None:
    from safetensors.torch import load_file
    cfg = json.load(open(os.path.join(d, "config.json")))
    tensors = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            tensors.update(load_file(os.path.join(d, f)))
    arch = fam["gguf_arch"]
    gemma = arch == "gemma3"
    w = GGUFWriter(out_path, arch)
    hq, hkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    w.add_name(name)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(hq)
    w.add_head_count_kv(hkv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    rp = cfg.get("rope_parameters") or {}
    theta = rp["full_attention"]["rope_theta"] if gemma else (rp.get("rope_theta") or cfg.get("rope_theta"))
    w.add_rope_freq_base(float(theta))
    if gemma:
        w.add_sliding_window(cfg["sliding_window"])
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    rev = {i: t for t, i in vocab.items()}
    added = {a["id"]: a for a in spec["added_tokens"]}
    tokens, types = [], []
    for i in range(cfg["vocab_size"]):
        if i in added:
            tokens.append(added[i]["content"])
            types.append(3 if added[i]["special"] else 4)
        else:
            tokens.append(rev[i])
            types.append(1)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(fam["pre"])
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in spec["model"]["merges"]])
    ids = {t: i for i, t in enumerate(tokens)}
    if fam["bos"]:
        w.add_bos_token_id(ids[fam["bos"]])
    w.add_eos_token_id(ids[fam["eos"]])
    w.add_pad_token_id(ids[fam["pad"]])
    w.add_add_bos_token(bool(fam["add_bos"]))
    w.add_chat_template(fam["template"])

    def put(gname: str, t: torch.Tensor, norm: bool = False) -> None:
        if t.ndim == 1:  # llama.cpp keeps norms in F32, Gemma's as 1 + w
            a = t.float().numpy() + (1.0 if gemma and norm else 0.0)
            w.add_tensor(gname, np.ascontiguousarray(a.astype(np.float32)), raw_dtype=GGMLQuantizationType.F32)
            return
        a, ty = base.to_numpy(t)
        w.add_tensor(gname, np.ascontiguousarray(a), raw_dtype=ty)

    put("token_embd.weight", tensors["model.embed_tokens.weight"])
    put("output_norm.weight", tensors["model.norm.weight"], norm=True)
    if not cfg.get("tie_word_embeddings", False):
        put("output.weight", tensors["lm_head.weight"])
    for l in range(cfg["num_hidden_layers"]):
        p, b = f"model.layers.{l}.", f"blk.{l}."
        put(b + "attn_norm.weight", tensors[p + "input_layernorm.weight"], norm=True)
        put(b + "attn_q.weight", tensors[p + "self_attn.q_proj.weight"])
        put(b + "attn_k.weight", tensors[p + "self_attn.k_proj.weight"])
        put(b + "attn_v.weight", tensors[p + "self_attn.v_proj.weight"])
        put(b + "attn_q_norm.weight", tensors[p + "self_attn.q_norm.weight"], norm=True)
        put(b + "attn_k_norm.weight", tensors[p + "self_attn.k_norm.weight"], norm=True)
        put(b + "attn_output.weight", tensors[p + "self_attn.o_proj.weight"])
        if gemma:
            put(b + "post_attention_norm.weight", tensors[p + "post_attention_layernorm.weight"], norm=True)
            put(b + "ffn_norm.weight", tensors[p + "pre_feedforward_layernorm.weight"], norm=True)
            put(b + "post_ffw_norm.weight", tensors[p + "post_feedforward_layernorm.weight"], norm=True)
        else:
            put(b + "ffn_norm.weight", tensors[p + "post_attention_layernorm.weight"])
        put(b + "ffn_gate.weight", tensors[p + "mlp.gate_proj.weight"])
        put(b + "ffn_up.weight", tensors[p + "mlp.up_proj.weight"])
        put(b + "ffn_down.weight", tensors[p + "mlp.down_proj.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def make(name: str, fam: dict, report: list[str]) -> None:
    d = os.path.join(base.OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    tok = base.build_tokenizer(fam)
    vocab = tok.get_vocab_size(with_added_tokens=True) + fam["vocab_extra"]
    cfg = fam["config"](vocab)
    tok_ids = {t: tok.token_to_id(t) for t in fam["specials"]}
    cfg.bos_token_id = tok_ids.get(fam["bos"]) if fam["bos"] else None
    cfg.eos_token_id = tok_ids[fam["eos"]]
    cfg.pad_token_id = tok_ids[fam["pad"]]
    torch.manual_seed(fam["seed"])
    model = fam["cls"](cfg)
    base.randomize(model, fam["seed"])
    if name == "gemma3":  # Gemma computes with 1 + w: draw w around 0, as trained checkpoints have it
        with torch.no_grad():
            for n, p in model.named_parameters():
                if n.endswith("norm.weight"):
                    p.sub_(1.0)
    model = model.to(fam["dtype"])
    model.save_pretrained(d)
    for f in ("generation_config.json",):
        if os.path.exists(os.path.join(d, f)):
            os.remove(os.path.join(d, f))
    base.write_tokenizer(fam, tok, d)
    if name == "gemma3":
        c = json.load(open(os.path.join(d, "config.json")))
        assert c["layer_types"] == ["sliding_attention"] * 5 + ["full_attention"], c["layer_types"]

    hf_tok = AutoTokenizer.from_pretrained(d)
    recs = []
    worst32 = 0.0
    for text, special in base.cases(fam):
        ids = hf_tok(text, add_special_tokens=special)["input_ids"]
        assert ids == tok.encode(text, add_special_tokens=special).ids, (name, text)
        if name == "gemma3":
            assert len(ids) > cfg.sliding_window, (len(ids), text)
        ref = base.logits(d, ids, torch.float64)
        f32 = base.logits(d, ids, torch.float32)
        worst32 = max(worst32, float(np.abs(f32 - ref).max() / np.abs(ref).max()))
        recs.append((text, special, ids, ref))
    V = cfg.vocab_size
    with open(os.path.join(base.OUT, f"{name}.logits.bin"), "wb") as f:
        f.write(base.MAGIC + struct.pack("<III", base.VERSION, V, len(recs)))
        for text, special, ids, ref in recs:
            b = text.encode("utf-8")
            f.write(struct.pack("<I", len(b)) + b + struct.pack("<II", int(special), len(ids)))
            f.write(np.asarray(ids, "<i4").tobytes())
            f.write(ref.astype("<f4").tobytes())
    write_gguf(name, fam, d, tok, os.path.join(base.OUT, f"{name}.gguf"))
    report.append(f"{name}: vocab {V}, tokens/case {[len(r[2]) for r in recs]}, "
                  f"max|logit| {max(float(np.abs(r[3]).max()) for r in recs):.2f}, HF fp32 vs fp64 max rel {worst32:.2e}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*", default=list(FAMILIES))
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    report: list[str] = []
    for name in args.names:
        make(name, FAMILIES[name], report)
    print("\n".join(report))


if __name__ == "__main__":
    main()
