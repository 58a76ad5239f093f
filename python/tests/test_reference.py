"""The float64 reference's hand-derived backward against central finite
differences of its own forward, so the gradient tests compare weft with a
reference that is itself checked."""

import numpy as np
import pytest

from conftest import Reference, ref_and, ref_causal, ref_sliding_window, ref_softcap


def loss(q, k, v, weights_out, weights_lse, **kwargs):
    ref = Reference(q, k, v, **kwargs)
    return np.sum(ref.out * weights_out) + np.sum(ref.lse * weights_lse)


@pytest.mark.parametrize("with_score_mod", [False, True])
def test_reference_backward_matches_finite_differences(with_score_mod):
    rng = np.random.default_rng(200)
    B, Hq, Hkv, Sq, Skv, D, Dv = 1, 2, 1, 3, 5, 3, 2  # GQA, Sq != Skv
    q = rng.standard_normal((B, Hq, Sq, D))
    k = rng.standard_normal((B, Hkv, Skv, D))
    v = rng.standard_normal((B, Hkv, Skv, Dv))
    dout = rng.standard_normal((B, Hq, Sq, Dv))
    dlse = rng.standard_normal((B, Hq, Sq))
    # Every row keeps at least one key, so the loss is finite.
    kwargs = dict(mask_fn=ref_and(ref_causal(1), ref_sliding_window(2, 5)), scale=0.7)
    if with_score_mod:
        kwargs["score_fn"] = ref_softcap(0.8)  # small cap: tanh far from linear
    analytic = Reference(q, k, v, **kwargs).backward(dout, dlse)
    eps = 1e-6
    inputs = [q, k, v]
    for which, grad in enumerate(analytic):
        numeric = np.zeros_like(grad)
        for index in np.ndindex(*grad.shape):
            plus = [x.copy() for x in inputs]
            minus = [x.copy() for x in inputs]
            plus[which][index] += eps
            minus[which][index] -= eps
            numeric[index] = (loss(*plus, dout, dlse, **kwargs) - loss(*minus, dout, dlse, **kwargs)) / (2 * eps)
        np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-8, err_msg=f"gradient {which}")


def test_reference_fully_masked_rows():
    rng = np.random.default_rng(201)
    q, k, v = (rng.standard_normal((1, 1, 4, 3)) for _ in range(3))
    ref = Reference(q, k, v, mask_fn=ref_causal(-2))
    assert np.all(ref.out[0, 0, :2] == 0) and np.all(np.isneginf(ref.lse[0, 0, :2]))
    assert np.all(np.isfinite(ref.lse[0, 0, 2:]))
    grads = ref.backward(rng.standard_normal((1, 1, 4, 3)), rng.standard_normal((1, 1, 4)))
    assert np.all(grads[0][0, 0, :2] == 0)
    assert all(np.all(np.isfinite(g)) for g in grads)
