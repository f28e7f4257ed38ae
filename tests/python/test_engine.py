"""kvzip.compress and kvzip.query (the C++ engine from Python) against the `kvzip` command, with
the progress callback and the GIL released while the engine works."""
import threading
import time

import numpy as np
import pytest

import kvzip
from conftest import cli_answers, normans

pytestmark = pytest.mark.realmodel


@pytest.fixture(scope="module")
def paragraph(tmp_path_factory):
    text, questions = normans(slice(0, 1))
    d = tmp_path_factory.mktemp("engine")
    doc = d / "doc.txt"
    doc.write_text(text)
    return doc, questions[:3]


def test_compress_and_query_agree_with_the_cli(paragraph, cli, model_path, tmp_path):
    doc, questions = paragraph
    seen = []
    c = kvzip.compress(doc, tmp_path / "py.kvz", model=model_path, ratio=0.3,
                       progress=lambda done, total: seen.append((done, total)))
    assert isinstance(c, kvzip.Cache) and c.method == "kvzip" and c.achieved_ratio == pytest.approx(0.3, abs=0.01)
    assert seen and seen[-1][0] == seen[-1][1] == c.logical_length
    cli("compress", doc, "-o", tmp_path / "cli.kvz", "-m", model_path, "--ratio", "0.3", "-q")
    ref = kvzip.open(tmp_path / "cli.kvz")
    for l in range(c.n_layers):  # the same compression: the same rows
        np.testing.assert_array_equal(c.positions(l), ref.positions(l))
        np.testing.assert_array_equal(c.keys(l), ref.keys(l))
    answers = kvzip.query(c, questions, model=model_path, max_tokens=24)
    assert [a.text for a in answers] == cli_answers(cli, c.path, questions, "-m", model_path, "-n", "24")
    assert all(a.first_logits.ndim == 1 and a.first_logits.size > 1000 for a in answers)
    streamed = []
    one = kvzip.query(c.path, questions[0], model=model_path, max_tokens=24, on_text=streamed.append)
    assert "".join(streamed) == one.text == answers[0].text


def test_compress_text_needs_an_output(model_path):
    with pytest.raises(kvzip.InvalidArgumentError, match="output"):
        kvzip.compress("Some text.\nMore text.", model=model_path)


def test_bad_options_raise_before_model_work(paragraph, model_path, tmp_path):
    doc, _ = paragraph
    with pytest.raises(kvzip.InvalidArgumentError):
        kvzip.compress(doc, tmp_path / "x.kvz", model=model_path, ratio=1.5)
    with pytest.raises(kvzip.InvalidArgumentError):
        kvzip.compress(doc, tmp_path / "x.kvz", model=model_path, kv_dtype="q3")
    assert not (tmp_path / "x.kvz").exists()


def test_the_gil_is_released_while_compressing(paragraph, model_path, tmp_path):
    doc, _ = paragraph
    kvzip.model(model_path)  # loaded before the measurement
    ticks = [0]
    done = threading.Event()

    def count():
        while not done.is_set():
            ticks[0] += 1
            time.sleep(0.001)
    t = threading.Thread(target=count)
    t.start()
    t0 = time.perf_counter()
    kvzip.compress(doc, tmp_path / "g.kvz", model=model_path, ratio=0.5)
    elapsed = time.perf_counter() - t0
    done.set()
    t.join()
    # with the GIL held for the whole call the counter could not advance at all
    assert ticks[0] > 10, f"{ticks[0]} ticks in {elapsed:.2f} s"
