"""kvzip.transformers against the C++ engine, on the CPU in fp32 with the default model loaded by
transformers from its GGUF (gguf_file=, dequantized): answers from a ratio-0.3 cache equal
`kvzip query --matmul exact` and first-token logits agree within 1e-3 of the largest; a ratio-1.0
cache answers as transformers with the document prefilled the ordinary way; save() round-trips.
The test uses the first 6 answerable Normans questions (paragraphs 1-2) to stay fast;
python/tools/compare_transformers.py runs the whole article."""
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
    torch.set_num_threads(max(1, torch.get_num_threads()))
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


def test_ratio_one_answers_as_an_ordinary_prefill(hf, doc, model_path):
    model, tok = hf
    _, c10, questions = doc
    assert c10.achieved_ratio == 1.0
    for q in questions[:3]:
        ours = kt.generate(model, tok, c10, q, max_new_tokens=MAX_TOKENS, eos_token_id=stops(model_path))
        ids = [int(t) for t in c10.prefix_tokens] + [int(t) for t in c10.document_tokens] + kt.question_ids(tok, c10, q)
        x = torch.tensor([ids])
        model.set_attn_implementation("sdpa")
        plain = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=MAX_TOKENS, do_sample=False,
                               eos_token_id=stops(model_path))
        text = tok.decode([t for t in plain[0, x.shape[1]:].tolist() if t not in stops(model_path)],
                          skip_special_tokens=True)
        assert ours == text


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
    model.set_attn_implementation("sdpa")
    with torch.no_grad():
        out = model(torch.tensor([ids]), use_cache=True)
    kt.save(tmp_path / "p.kvz", model, out.past_key_values, np.arange(len(ids)), prefix_tokens=c10.prefix_tokens,
            document_tokens=c10.document_tokens, suffix_tokens=c10.suffix_tokens, source=model_path)
    p = kvzip.open(tmp_path / "p.kvz")
    # transformers' prefill and kvzip's agree on every row to float rounding
    np.testing.assert_allclose(p.keys(5), c10.keys(5), atol=2e-3 * float(np.abs(c10.keys(5)).max()))
    a = kvzip.query(p, questions[0], model=model_path, max_tokens=MAX_TOKENS)
    b = kvzip.query(c10, questions[0], model=model_path, max_tokens=MAX_TOKENS)
    assert a.text == b.text


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
