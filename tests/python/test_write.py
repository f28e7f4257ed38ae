"""kvzip.write: round trips through kvzip.open for every dtype, refusals that leave no file, and
the real-model round trip: rows the CLI wrote, rewritten from numpy, give the same answers."""
import os

import numpy as np
import pytest

import kvzip
from conftest import GOLDEN, cli_answers, normans


def rows_of(c):
    """keys, values, positions, scores per layer and head of an opened cache."""
    out = {"keys": [], "values": [], "positions": [], "scores": [] if c.has_scores else None}
    for l in range(c.n_layers):
        lay = c.layer(l)
        heads = [lay.head(h) for h in range(c.n_kv_heads)]
        out["positions"].append([p for p, _, _ in heads])
        out["keys"].append([k for _, k, _ in heads])
        out["values"].append([v for _, _, v in heads])
        if c.has_scores:
            out["scores"].append([lay.head_scores(h) for h in range(c.n_kv_heads)])
    return out


def rewrite(c, path, **kw):
    args = dict(model=c.model, prefix_tokens=c.prefix_tokens, document_tokens=c.document_tokens,
                suffix_tokens=c.suffix_tokens, document_text=c.document_text, query_template=c.query_template,
                method=c.method, params={k: v for k, v in c.params.items() if k != "query_template"},
                requested_ratio=c.requested_ratio, **rows_of(c))
    args.update(kw)
    kvzip.write(path, **args)
    return kvzip.open(path)


GOLDEN_F32 = GOLDEN / "kvz" / "tiny_v1_f32.kvz"


@pytest.mark.parametrize("dtype,tol", [("f32", 0), ("f16", 1e-3), ("bf16", 1e-2), ("q8", 0.05), ("q4", 0.5)])
def test_round_trip_through_open(tmp_path, dtype, tol):
    a = kvzip.open(GOLDEN_F32)
    b = rewrite(a, tmp_path / "b.kvz", kv_dtype=dtype, zstd=3 if dtype == "f16" else 0)
    b.verify()
    assert b.kv_dtype == dtype
    for f in ("prefix_tokens", "document_tokens", "suffix_tokens"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
    assert (b.method, b.query_template, b.document_text) == (a.method, a.query_template, a.document_text)
    assert b.achieved_ratio == pytest.approx(a.achieved_ratio)
    assert b.model["weights_hash"] == a.model["weights_hash"]
    for l in range(a.n_layers):
        np.testing.assert_array_equal(a.positions(l), b.positions(l))
        np.testing.assert_array_equal(a.head_rows(l), b.head_rows(l))
        scale = float(np.abs(a.keys(l)).max())
        np.testing.assert_allclose(b.keys(l), a.keys(l), atol=tol * scale, rtol=0)
        if a.has_scores:
            np.testing.assert_array_equal(a.scores(l), b.scores(l))


def test_f32_round_trip_is_byte_exact_in_rows(tmp_path):
    a = kvzip.open(GOLDEN_F32)
    b = rewrite(a, tmp_path / "b.kvz")
    for l in range(a.n_layers):
        assert a.keys(l).tobytes() == b.keys(l).tobytes() and a.values(l).tobytes() == b.values(l).tobytes()


def test_rows_in_any_order_are_sorted_by_position(tmp_path):
    a = kvzip.open(GOLDEN_F32)
    r = rows_of(a)
    for key in ("keys", "values", "positions") + (("scores",) if a.has_scores else ()):
        r[key] = [[x[::-1] for x in layer] for layer in r[key]]
    b = rewrite(a, tmp_path / "b.kvz", **r)
    np.testing.assert_array_equal(a.keys(0), b.keys(0))


def test_refusals_leave_no_file(tmp_path):
    a = kvzip.open(GOLDEN_F32)
    out = tmp_path / "bad.kvz"
    r = rows_of(a)
    r["positions"][0][0] = np.zeros_like(r["positions"][0][0])  # duplicate positions in a head
    with pytest.raises(kvzip.InvalidArgumentError, match="position"):
        rewrite(a, out, **r)
    with pytest.raises(kvzip.InvalidArgumentError, match="layers"):
        rewrite(a, out, keys=rows_of(a)["keys"][:-1])
    with pytest.raises(kvzip.InvalidArgumentError, match="kv_dtype"):
        rewrite(a, out, kv_dtype="q3")
    assert os.listdir(tmp_path) == []
    rewrite(a, out)
    with pytest.raises(kvzip.InvalidArgumentError):  # no silent overwrite
        rewrite(a, out)
    rewrite(a, out, force=True)


@pytest.mark.realmodel
def test_numpy_rewrite_answers_as_the_cli_cache(tmp_path, cli, model_path):
    text, questions = normans(slice(0, 1))
    doc = tmp_path / "doc.txt"
    doc.write_text(text)
    orig = tmp_path / "orig.kvz"
    cli("compress", doc, "-o", orig, "-m", model_path, "--ratio", "0.3", "-q")
    c = kvzip.open(orig)
    again = rewrite(c, tmp_path / "numpy.kvz", zstd=5)
    a = cli_answers(cli, orig, questions, "-m", model_path, "-n", "24")
    b = cli_answers(cli, again.path, questions, "-m", model_path, "-n", "24")
    assert len(a) == len(questions) and a == b
