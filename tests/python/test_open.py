"""kvzip.open against the HDF5 export of every golden file, zero-copy views, q8/q4 stored forms,
and the exception classes against the exit statuses of `kvzip inspect` on the damaged files."""
import pathlib

import numpy as np
import pytest

import kvzip
from conftest import GOLDEN

GOLDEN_FILES = sorted((GOLDEN / "kvz").glob("*.kvz"))
BAD_FILES = sorted((GOLDEN / "bad").glob("*.kvz"))


def test_the_golden_folder_is_found():
    assert len(GOLDEN_FILES) >= 5 and len(BAD_FILES) >= 40


@pytest.mark.parametrize("path", GOLDEN_FILES, ids=lambda p: p.name)
def test_open_equals_the_hdf5_export(path, tmp_path, cli):
    h5py = pytest.importorskip("h5py", reason="h5py reads the HDF5 export (scripts/test-python.sh installs it)")
    out = tmp_path / "x.h5"
    cli("export", path, "--hdf5", out)
    c = kvzip.open(path)
    with h5py.File(out, "r") as f:
        assert f.attrs["model.arch"] == c.model["arch"].encode() or f.attrs["model.arch"] == c.model["arch"]
        assert int(f.attrs["model.weights_hash"]) == c.model["weights_hash"]
        names = sorted(f["layers"])
        assert len(names) == c.n_layers
        for l, name in enumerate(names):
            g = f["layers"][name]
            np.testing.assert_array_equal(c.head_rows(l), g["head_rows"][()])
            np.testing.assert_array_equal(c.positions(l), g["positions"][()])
            np.testing.assert_array_equal(c.keys(l), g["k"][()].reshape(-1, c.head_dim))
            np.testing.assert_array_equal(c.values(l), g["v"][()].reshape(-1, c.head_dim))
            if c.has_scores:
                np.testing.assert_array_equal(c.scores(l), g["scores"][()])
    c.verify()


def test_metadata_of_a_golden_file(cli):
    c = kvzip.open(GOLDEN / "kvz" / "tiny_v1_f32.kvz")
    text = cli("inspect", c.path).stdout
    assert c.method in text and c.kv_dtype == "f32"
    assert c.logical_length == len(c.prefix_tokens) + len(c.document_tokens)
    assert "{question}" in c.query_template
    assert set(c.model) >= {"arch", "tokenizer_hash", "weights_hash", "n_layers", "n_kv_heads", "head_dim"}
    assert c.describe() == text.rstrip("\n") or c.describe().rstrip("\n") == text.rstrip("\n")
    for l in range(c.n_layers):
        assert int(c.head_rows(l).sum()) == len(c.positions(l)) == c.keys(l).shape[0]
        for h in range(c.n_kv_heads):
            p = c.positions(l, h)
            assert np.all(np.diff(p.astype(np.int64)) > 0)  # increasing within a head
            assert c.keys(l, h).shape == (len(p), c.head_dim)


def test_raw_f32_rows_are_zero_copy_views_of_the_mapping():
    c = kvzip.open(GOLDEN / "kvz" / "tiny_v1_f32.kvz")
    k = c.keys(0)
    assert not k.flags.owndata and not k.flags.writeable
    assert c.keys(0, 1).base is not None
    with pytest.raises(ValueError):
        k[0, 0] = 1.0


@pytest.mark.parametrize("name", ["tiny_v1_q4.kvz", "tiny_v1_q8_zstd.kvz"])
def test_quantized_files_give_their_stored_codes(name):
    c = kvzip.open(GOLDEN / "kvz" / name)
    qk, qv = c.quantized(0)
    assert qk["channel_scale"].shape == (c.n_kv_heads, c.head_dim)
    rows = c.keys(0).shape[0]
    assert qk["codes"].shape[0] + qk["dense"].shape[0] == rows
    assert qk["codes"].dtype == np.uint8 and qv["codes"].shape == qk["codes"].shape
    bits = 4 if "q4" in name else 8
    assert qk["codes"].shape[1] == c.head_dim * bits // 8


def test_f32_files_have_no_quantized_form():
    with pytest.raises(kvzip.InvalidArgumentError):
        kvzip.open(GOLDEN / "kvz" / "tiny_v1_f32.kvz").quantized(0)


@pytest.mark.parametrize("path", BAD_FILES, ids=lambda p: p.name)
def test_each_damaged_file_raises_the_class_of_the_cli_exit_status(path, cli):
    status = cli("inspect", "--verify", path, check=False).returncode
    if status == 0:  # damage only a model check finds (model_mismatch files)
        kvzip.open(path, verify="full")
        return
    with pytest.raises(kvzip.KvzipError) as e:
        kvzip.open(path, verify="full")
    assert e.value.exit_status == status, f"{type(e.value).__name__}: {e.value}"


def test_missing_file_is_not_found():
    with pytest.raises(kvzip.NotFoundError) as e:
        kvzip.open("/nonexistent/x.kvz")
    assert isinstance(e.value, FileNotFoundError) and e.value.exit_status == 3
