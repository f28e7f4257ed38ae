"""kvzip.transformers against the C++ engine, on the CPU in fp32 with the default model loaded by
transformers from its GGUF (gguf_file=, dequantized): answers from a ratio-0.3 cache equal
`kvzip query --matmul exact` and first-token logits agree within 1e-3 of the largest; a ratio-1.0
cache answers as transformers with the document prefilled the ordinary way; save() round-trips.
The test uses the first 6 answerable Normans questions (paragraphs 1-2) to stay fast;
python/tools/compare_transformers.py runs the whole article."""
import os

import numpy as np
import pytest

import kvzip
from conftest import normans

torch = pytest.importorskip("torch", reason="kvzip.transformers needs torch (scripts/test-python.sh installs it)")
pytest.importorskip("transformers", reason="kvzip.transformers needs transformers")
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

import kvzip.transformers as kt  # noqa: E402

pytestmark = pytest.mark.realmodel
MAX_TOKENS = 24


@pytest.fixture(scope="module")
def hf(model_path):
    # one thread: on a busy machine torch's spinning OpenMP threads slow decoding tenfold
    torch.set_num_threads(int(os.environ.get("KVZIP_TEST_TORCH_THREADS", "1")))
    kw = dict(gguf_file=model_path.name)
    tok = AutoTokenizer.from_pretrained(model_path.parent, **kw)
    model = AutoModelForCausalLM.from_pretrained(model_path.parent, dtype=torch.float32, **kw).eval()
    return model, tok


@pytest.fixture(scope="module")
def doc(tmp_path_factory, model_path):
    text, questions = normans(slice(0, 2))
    d = tmp_path_factory.mktemp("hf")
    c03 = kvzip.compress(text, d / "r03.kvz", model=model_path, ratio=0.3)
    c10 = kvzip.compress(text, d / "r10.kvz", model=model_path, method="full")
    return c03, c10, questions[:6]


def stops(model_path):
    return list(kvzip.model(model_path)._m.stop_tokens())


def test_load_pads_ragged_heads_and_continues_positions(hf, doc):
    model, _ = hf
    c03, _, _ = doc
    past = kt.load(c03, model)
    assert past.get_seq_length() == c03.logical_length
    for l in (0, c03.n_layers - 1):
        rows = c03.head_rows(l)
        k = past.layers[l].keys
        assert k.shape[2] == rows.max() and k.shape[1] == c03.n_kv_heads
        for h in range(c03.n_kv_heads):
            assert torch.isnan(k[0, h, rows[h]:, 0]).all() and not torch.isnan(k[0, h, :rows[h]]).any()
            np.testing.assert_array_equal(past.positions[l][h, :rows[h]].numpy(), c03.positions(l, h))


def test_answers_and_logits_match_kvzip_query_exact(hf, doc, model_path):
    model, tok = hf
    c03, _, questions = doc
    ref = kvzip.query(c03, questions, model=model_path, matmul="exact", max_tokens=MAX_TOKENS)
    past = kt.load(c03, model, source=model_path)
    same, worst = 0, 0.0
    for q, r in zip(questions, ref):
        out = kt.generate(model, tok, c03, q, past_key_values=past, max_new_tokens=MAX_TOKENS,
                          eos_token_id=stops(model_path), return_dict=True)
        same += out["tokens"] == r.tokens
        worst = max(worst, float(np.abs(out["first_logits"] - r.first_logits).max() / np.abs(r.first_logits).max()))
    assert same >= 0.95 * len(questions), f"{same}/{len(questions)} answers equal"
    assert worst <= 1e-3, f"first-token logits differ by {worst:.2e} of the largest"


def plain_generate(model, ids, model_path):
    """transformers alone: the whole prompt prefilled the ordinary way (eager attention), greedy."""
    model.set_attn_implementation("eager")
    x = torch.tensor([ids])
    out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=MAX_TOKENS, do_sample=False,
                         eos_token_id=stops(model_path), output_logits=True, return_dict_in_generate=True)
    return [t for t in out.sequences[0, x.shape[1]:].tolist() if t not in stops(model_path)], out.logits[0][0]


def test_ratio_one_answers_as_an_ordinary_prefill(hf, doc, model_path, tmp_path):
    """A ratio-1.0 cache of transformers' own rows (saved from an ordinary prefill) answers exactly
    as transformers does with the document prefilled; kvzip's own ratio-1.0 cache, whose rows
    come from kvzip's forward pass, gives the same first-token logits within 1e-2 of the largest."""
    model, tok = hf
    _, c10, questions = doc
    assert c10.achieved_ratio == 1.0
    ctx = [int(t) for t in c10.prefix_tokens] + [int(t) for t in c10.document_tokens]
    model.set_attn_implementation("eager")
    with torch.no_grad():
        out = model(torch.tensor([ctx]), use_cache=True)
    kt.save(tmp_path / "hf10.kvz", model, getattr(out, "past_key_values", None) or out.cache, np.arange(len(ctx)),
            prefix_tokens=c10.prefix_tokens, document_tokens=c10.document_tokens, suffix_tokens=c10.suffix_tokens,
            source=model_path, method="full")
    hf10 = kvzip.open(tmp_path / "hf10.kvz")
    for q in questions[:3]:
        ref_tokens, ref_logits = plain_generate(model, ctx + kt.question_ids(tok, c10, q), model_path)
        ours = kt.generate(model, tok, hf10, q, max_new_tokens=MAX_TOKENS, eos_token_id=stops(model_path),
                           return_dict=True)
        assert ours["tokens"] == ref_tokens
        kv = kt.generate(model, tok, c10, q, max_new_tokens=1, eos_token_id=stops(model_path), return_dict=True)
        rel = float((torch.from_numpy(kv["first_logits"]) - ref_logits).abs().max() / ref_logits.abs().max())
        assert rel < 1e-2


def test_save_round_trips_a_kvzip_cache(hf, doc, model_path, tmp_path):
    model, _ = hf
    c03, _, _ = doc
    past = kt.load(c03, model)
    kt.save(tmp_path / "s.kvz", model, past, past.positions, prefix_tokens=c03.prefix_tokens,
            document_tokens=c03.document_tokens, suffix_tokens=c03.suffix_tokens, source=model_path)
    s = kvzip.open(tmp_path / "s.kvz")
    assert s.achieved_ratio == pytest.approx(c03.achieved_ratio)
    for l in range(c03.n_layers):
        np.testing.assert_array_equal(s.positions(l), c03.positions(l))
        np.testing.assert_array_equal(s.keys(l), c03.keys(l))
        np.testing.assert_array_equal(s.values(l), c03.values(l))


def test_save_from_an_ordinary_prefill_is_answered_by_kvzip(hf, doc, model_path, tmp_path, cli):
    model, tok = hf
    _, c10, questions = doc
    ids = [int(t) for t in c10.prefix_tokens] + [int(t) for t in c10.document_tokens]
    model.set_attn_implementation("eager")
    with torch.no_grad():
        out = model(torch.tensor([ids]), use_cache=True)
    past = getattr(out, "past_key_values", None) or out.cache
    kt.save(tmp_path / "p.kvz", model, past, np.arange(len(ids)), prefix_tokens=c10.prefix_tokens,
            document_tokens=c10.document_tokens, suffix_tokens=c10.suffix_tokens, source=model_path)
    p = kvzip.open(tmp_path / "p.kvz")
    # transformers' fp32 rows and those of kvzip's forward pass (int8-rounded activations in its
    # matrix products) differ by rounding only; a wrong RoPE order or position would be ~100% off
    for l in range(p.n_layers):
        err = np.linalg.norm(p.keys(l) - c10.keys(l)) / np.linalg.norm(c10.keys(l))
        assert err < 0.05  # measured: at most 0.020 over the 30 layers
        assert np.linalg.norm(p.values(l) - c10.values(l)) < 0.08 * np.linalg.norm(c10.values(l))  # 0.041
    a = kvzip.query(p, questions[0], model=model_path, max_tokens=MAX_TOKENS)
    b = kvzip.query(c10, questions[0], model=model_path, max_tokens=MAX_TOKENS)
    assert a.tokens[0] == b.tokens[0]


def test_another_models_cache_is_refused(hf, doc, model_path, tmp_path):
    model, _ = hf
    c03, _, _ = doc
    m = dict(c03.model, weights_hash=c03.model["weights_hash"] ^ 1)
    past = kt.load(c03, model)
    kt.save(tmp_path / "o.kvz", model, past, past.positions, prefix_tokens=c03.prefix_tokens,
            document_tokens=c03.document_tokens, description=m)
    with pytest.raises(kvzip.ModelMismatchError):
        kt.load(tmp_path / "o.kvz", model, source=model_path)
    kt.load(tmp_path / "o.kvz", model, source=model_path, force=True)
    with pytest.raises(kvzip.ModelMismatchError):
        kt.load(kvzip.open(tmp_path / "o.kvz"), type("M", (), {"config": type("C", (), dict(
            num_hidden_layers=3, num_key_value_heads=3, head_dim=64, rope_theta=1e5))()})(), source=None)
