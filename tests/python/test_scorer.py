"""kvzip.calibrate and kvzip.compress(scorer=) (the learned scorer, method kvzap) on the real model:
calibrated on a free licence text in about four windows, the summary against the file `kvzip inspect`
reads, a document compressed with the scorer (the same rows as `kvzip compress --scorer`, and a
header that names the scorer and its checksum), and the refusals: a scorer with another method,
an existing output, a scorer of another model."""
import json
import pathlib

import numpy as np
import pytest

import kvzip
from conftest import normans

pytestmark = pytest.mark.realmodel

MPL = pathlib.Path("/usr/share/common-licenses/MPL-2.0")
GEMMA = pathlib.Path.home() / ".cache" / "kvzip" / "models" / "gemma-3-270m-q4_k_m.gguf"


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory, model_path):
    if not MPL.exists():
        pytest.skip("no /usr/share/common-licenses/MPL-2.0")
    d = tmp_path_factory.mktemp("scorer")
    seen = []
    cal = kvzip.calibrate(MPL, d / "mpl.kvp", model=model_path, window=1000, heldout_every=3,
                          progress=lambda done, total: seen.append((done, total)))
    return cal, seen, d


def test_calibrate_writes_the_scorer_and_reports_its_fit(calibrated, cli):
    cal, seen, d = calibrated
    assert isinstance(cal, kvzip.Calibration) and cal.path == str(d / "mpl.kvp")
    assert cal.target == "kvzip+" and cal.window == 1000
    n = cal.train_tokens + cal.heldout_tokens  # windows of 1000, a last piece under 250 joins
    windows = n // 1000 + (n % 1000 >= 250)
    assert 3 <= windows <= 5 and cal.heldout_windows == windows // 3
    assert cal.train_windows == windows - cal.heldout_windows and cal.heldout_tokens == 1000 * cal.heldout_windows
    assert seen and seen[-1][0] == seen[-1][1] == cal.train_tokens + cal.heldout_tokens
    assert cal.seconds > 0
    info = json.loads(cli("inspect", cal.path, "--json").stdout)
    assert info["checksum"] == cal.checksum and info["target"] == "kvzip+"
    assert info["train_windows"] == cal.train_windows and info["source"] == "MPL-2.0"
    for target in ("kvzip", "kvzip+"):
        r2, rho = cal.r2[target], cal.spearman[target]
        assert r2.shape == rho.shape == (30,)  # SmolLM2-135M's layers, each scored
        assert np.all(np.isfinite(r2)) and np.all(np.isfinite(rho))
        assert 0.2 < float(rho.mean()) < 1.0  # a fit, held out: better than no ranking at all
    # the file keeps the chosen target's held-out figures
    np.testing.assert_allclose([l["r2"] for l in info["layers"]], cal.r2["kvzip+"], atol=1e-4)
    np.testing.assert_allclose([l["spearman"] for l in info["layers"]], cal.spearman["kvzip+"], atol=1e-4)


def test_compress_with_the_scorer_names_it_and_matches_the_cli(calibrated, cli, model_path, tmp_path):
    cal, _, _ = calibrated
    text, _ = normans(slice(0, 1))
    doc = tmp_path / "doc.txt"
    doc.write_text(text)
    c = kvzip.compress(doc, tmp_path / "py.kvz", model=model_path, scorer=cal.path, ratio=0.3)
    assert c.method == "kvzap"
    assert c.params["scorer"] == "mpl.kvp" and c.params["scorer_xxh64"] == cal.checksum
    assert c.params["scorer_target"] == "kvzip+"
    cli("compress", doc, "-o", tmp_path / "cli.kvz", "-m", model_path, "--scorer", cal.path,
        "--ratio", "0.3", "-q")
    ref = kvzip.open(tmp_path / "cli.kvz")
    assert ref.method == "kvzap"
    for layer in range(c.n_layers):  # the same scorer through the same library: the same rows
        np.testing.assert_array_equal(c.positions(layer), ref.positions(layer))
        np.testing.assert_array_equal(c.head_rows(layer), ref.head_rows(layer))
    # Evicting while reading, as `kvzip compress --stream`: the same rows as the command's.
    s = kvzip.compress(doc, tmp_path / "py-stream.kvz", model=model_path, scorer=cal.path, ratio=0.3,
                       stream=True)
    assert s.params["stream"] == "on"
    cli("compress", doc, "-o", tmp_path / "cli-stream.kvz", "-m", model_path, "--scorer", cal.path,
        "--ratio", "0.3", "--stream", "-q")
    ref = kvzip.open(tmp_path / "cli-stream.kvz")
    for layer in range(s.n_layers):
        np.testing.assert_array_equal(s.positions(layer), ref.positions(layer))
    with pytest.raises(kvzip.InvalidArgumentError, match="method kvzap"):
        kvzip.compress(doc, tmp_path / "no.kvz", model=model_path, method="snapkv", stream=True)


def test_scorer_refusals(calibrated, model_path, tmp_path):
    cal, _, d = calibrated
    with pytest.raises(kvzip.InvalidArgumentError, match="method snapkv cannot use it"):
        kvzip.compress("One line.\nTwo lines.", tmp_path / "x.kvz", model=model_path, method="snapkv",
                       scorer=cal.path)
    with pytest.raises(kvzip.InvalidArgumentError, match="needs option scorer"):
        kvzip.compress("One line.\nTwo lines.", tmp_path / "x.kvz", model=model_path, method="kvzap")
    with pytest.raises(kvzip.NotFoundError):
        kvzip.compress("One line.\nTwo lines.", tmp_path / "x.kvz", model=model_path,
                       scorer=tmp_path / "none.kvp")
    assert not (tmp_path / "x.kvz").exists()
    before = pathlib.Path(cal.path).read_bytes()
    with pytest.raises(kvzip.InvalidArgumentError, match="exists"):
        kvzip.calibrate(MPL, cal.path, model=model_path,
                        progress=lambda done, total: pytest.fail("trained onto an existing file"))
    with pytest.raises(kvzip.InvalidArgumentError, match="expected kvzip or kvzip"):
        kvzip.calibrate(MPL, d / "y.kvp", model=model_path, target="logits")
    assert pathlib.Path(cal.path).read_bytes() == before and not (d / "y.kvp").exists()


def test_a_scorer_of_another_model_is_refused(calibrated, tmp_path):
    cal, _, _ = calibrated
    if not GEMMA.exists():
        pytest.skip("Gemma 3 270M is not downloaded (scripts/fetch-model.sh gemma3-270m)")
    with pytest.raises(kvzip.ModelMismatchError):
        kvzip.compress("One line.\nTwo lines.", tmp_path / "g.kvz", model=GEMMA, scorer=cal.path)
    assert not (tmp_path / "g.kvz").exists()
