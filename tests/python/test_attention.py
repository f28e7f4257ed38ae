"""The "kvzip" attention function on synthetic tensors (no model): rows padded with NaN keys are
skipped per KV head, so a padded head attends exactly as its unpadded rows alone would; the
causal rule over the new tokens and the right-aligned mask of shorter layers hold."""
import pytest

torch = pytest.importorskip("torch", reason="kvzip.transformers needs torch (scripts/test-python.sh installs it)")
pytest.importorskip("transformers", reason="kvzip.transformers needs transformers")

import kvzip.transformers as kt  # noqa: E402


class Module(torch.nn.Module):
    pass


def reference(q, k, v, visible):
    """Plain softmax attention of one query head over the visible key rows."""
    s = (q @ k[visible].T) / k.shape[-1] ** 0.5
    return torch.softmax(s, -1) @ v[visible]


def test_nan_rows_are_skipped_per_head_and_new_tokens_are_causal():
    torch.manual_seed(0)
    hkv, g, d, base, new = 2, 3, 8, 6, 3
    rows = [6, 4]  # head 1 keeps 4 file rows: 2 padding rows
    k = torch.randn(1, hkv, base + new, d)
    v = torch.randn(1, hkv, base + new, d)
    k[0, 1, rows[1]:base] = float("nan")
    q = torch.randn(1, hkv * g, new, d)
    out, _ = kt.kvzip_attention(Module(), q, k, v, None, scaling=d ** -0.5)
    assert out.shape == (1, new, hkv * g, d) and not torch.isnan(out).any()
    for hq in range(hkv * g):
        h = hq // g
        for i in range(new):
            visible = torch.zeros(base + new, dtype=torch.bool)
            visible[:rows[h]] = True
            visible[base:base + i + 1] = True
            torch.testing.assert_close(out[0, i, hq], reference(q[0, hq, i], k[0, h], v[0, h], visible))


def test_a_mask_made_for_a_longer_layer_is_aligned_on_the_right():
    torch.manual_seed(1)
    d, kv = 4, 5
    q, k, v = torch.randn(1, 1, 2, d), torch.randn(1, 1, kv, d), torch.randn(1, 1, kv, d)
    mask = torch.ones(1, 1, 2, kv + 3, dtype=torch.bool)
    mask[0, 0, 0, -1] = False  # the first new token does not see the second
    out, _ = kt.kvzip_attention(Module(), q, k, v, mask, scaling=d ** -0.5)
    causal, _ = kt.kvzip_attention(Module(), q, k, v, None, scaling=d ** -0.5)
    torch.testing.assert_close(out, causal)
