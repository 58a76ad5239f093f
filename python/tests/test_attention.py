"""flex_attention and flex_attention_backward against the float64 reference:
every mask and score mod, combinations, odd sizes, GQA, dlse, fully masked
rows."""

import threading

import numpy as np
import pytest

import weft
from conftest import (
    FORWARD_TOL,
    MASKS,
    GRAD_TOL,
    Reference,
    random_qkv,
    ref_alibi,
    ref_and,
    ref_causal,
    ref_document,
    ref_or,
    ref_relative_bias,
    ref_sliding_window,
    ref_softcap,
    rel_err,
    segment_ids,
)




def score_cases(Hq, Sq, Skv, rng):
    slopes = rng.uniform(0.05, 0.5, size=Hq)
    table = rng.standard_normal(Sq + Skv - 1)
    bias = rng.standard_normal((Hq, Sq)).astype(np.float32)
    return {
        "softcap": (weft.softcap(2.5), ref_softcap(2.5)),
        "alibi": (weft.alibi(slopes), ref_alibi(slopes.astype(np.float32))),
        "relative_bias": (weft.relative_bias(table, kv_len=Skv), ref_relative_bias(table.astype(np.float32), Skv)),
        "score_expr": (
            weft.score_expr("score + bias[h, q_idx]", bias=bias),
            lambda s, b, h, q, kv: (s + bias.astype(np.float64)[h, q], 1.0),
        ),
    }


SCORE_NAMES = ["softcap", "alibi", "relative_bias", "score_expr"]


def run_and_check(q, k, v, mask_fn=None, score_fn=None, scale=None, gqa=False, block_mask=None,
                  score_mod=None, dlse_seed=None, check_grads=True):
    """Runs forward and backward through weft and the reference; asserts tolerances."""
    out, lse = weft.flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale,
                                   enable_gqa=gqa, return_lse=True)
    ref = Reference(q, k, v, mask_fn=mask_fn, score_fn=score_fn, scale=scale)
    assert out.dtype == np.float32 and lse.dtype == np.float32
    assert out.shape == ref.out.shape and lse.shape == ref.lse.shape
    assert rel_err(out, ref.out) <= FORWARD_TOL
    # Fully masked rows: lse exactly -inf, out exactly 0.
    assert np.array_equal(np.isneginf(lse), ref.empty_rows)
    assert np.all(out[ref.empty_rows] == 0)
    live = ~ref.empty_rows
    assert np.max(np.abs(lse[live] - ref.lse[live])) / np.max(np.abs(ref.lse[live])) <= FORWARD_TOL
    if not check_grads:
        return out, lse
    rng = np.random.default_rng(1234)
    dout = rng.standard_normal(out.shape).astype(np.float32)
    dlse = None
    if dlse_seed is not None:
        dlse = np.random.default_rng(dlse_seed).standard_normal(lse.shape).astype(np.float32)
    grads = weft.flex_attention_backward(q, k, v, out, lse, dout, score_mod=score_mod, block_mask=block_mask,
                                         scale=scale, enable_gqa=gqa, dlse=dlse)
    expected = ref.backward(dout, dlse)
    for name, actual, want in zip(("dq", "dk", "dv"), grads, expected):
        assert actual.dtype == np.float32 and actual.shape == want.shape, name
        assert np.all(np.isfinite(actual)), name
        if np.max(np.abs(want)) <= 1e-12:  # e.g. a single key: the softmax has no gradient
            assert np.max(np.abs(actual)) <= 1e-5, name
        else:
            assert rel_err(actual, want) <= GRAD_TOL, name
    # Rows with no keys get no gradient.
    assert np.all(grads[0][ref.empty_rows] == 0)
    return out, lse


def test_dense_matches_reference():
    q, k, v = random_qkv(0, B=2, Hq=3, Hkv=3, Sq=37, Skv=70, D=16)
    run_and_check(q, k, v)


def test_returns_out_only_by_default():
    q, k, v = random_qkv(1, B=1, Hq=2, Hkv=2, Sq=5, Skv=9, D=8)
    out = weft.flex_attention(q, k, v)
    assert isinstance(out, np.ndarray) and out.shape == (1, 2, 5, 8)
    out2, lse = weft.flex_attention(q, k, v, return_lse=True)
    np.testing.assert_array_equal(out, out2)


def test_value_dim_differs_from_head_dim():
    q, k, v = random_qkv(2, B=1, Hq=2, Hkv=2, Sq=19, Skv=23, D=12, Dv=20)
    run_and_check(q, k, v)


@pytest.mark.parametrize("scale", [0.05, 1.0, -0.3])
def test_explicit_scale(scale):
    q, k, v = random_qkv(3, B=1, Hq=2, Hkv=1, Sq=21, Skv=33, D=8)
    run_and_check(q, k, v, scale=scale, gqa=True)


@pytest.mark.parametrize("name", sorted(MASKS))
@pytest.mark.parametrize("block", [(16, 32), None])
def test_masks(name, block):
    B, Hq, Hkv, Sq, Skv = 2, 4, 2, 37, 70
    rng = np.random.default_rng(10)
    mask, mask_fn = MASKS[name](B, Sq, Skv, rng)
    block_mask = weft.create_block_mask(mask, B, Hq, Sq, Skv, BLOCK_SIZE=block)
    q, k, v = random_qkv(11, B, Hq, Hkv, Sq, Skv, D=16)
    run_and_check(q, k, v, mask_fn=mask_fn, block_mask=block_mask, gqa=True)


@pytest.mark.parametrize("name", ["causal", "document_causal", "sliding_window", "prefix_lm"])
def test_masks_square_multi_block(name):
    # Sq == Skv with several default-sized blocks, and a ragged last block.
    B, Hq, Sq = 1, 2, 150
    rng = np.random.default_rng(20)
    mask, mask_fn = MASKS[name](B, Sq, Sq, rng)
    block_mask = weft.create_block_mask(mask, B, 1, Sq, Sq)
    q, k, v = random_qkv(21, B, Hq, Hq, Sq, Sq, D=32)
    run_and_check(q, k, v, mask_fn=mask_fn, block_mask=block_mask)


@pytest.mark.parametrize("name", SCORE_NAMES)
def test_score_mods(name):
    B, Hq, Hkv, Sq, Skv = 2, 4, 2, 37, 70
    mod, score_fn = score_cases(Hq, Sq, Skv, np.random.default_rng(30))[name]
    q, k, v = random_qkv(31, B, Hq, Hkv, Sq, Skv, D=16)
    run_and_check(q, k, v, score_fn=score_fn, score_mod=mod, gqa=True)


@pytest.mark.parametrize("name", SCORE_NAMES)
@pytest.mark.parametrize("mask_name", ["causal_offset", "document", "or_masks"])
def test_score_mods_with_masks(name, mask_name):
    B, Hq, Hkv, Sq, Skv = 2, 2, 1, 37, 70
    rng = np.random.default_rng(40)
    mod, score_fn = score_cases(Hq, Sq, Skv, rng)[name]
    mask, mask_fn = MASKS[mask_name](B, Sq, Skv, rng)
    block_mask = weft.create_block_mask(mask, B, Hq, Sq, Skv, BLOCK_SIZE=16)
    q, k, v = random_qkv(41, B, Hq, Hkv, Sq, Skv, D=8)
    run_and_check(q, k, v, mask_fn=mask_fn, score_fn=score_fn, score_mod=mod, block_mask=block_mask,
                  gqa=True, scale=0.4)


def test_relative_bias_square_default_kv_len():
    S = 45
    table = np.random.default_rng(45).standard_normal(2 * S - 1)
    block_mask = weft.create_block_mask(weft.causal_mask(), 1, 1, S, S, BLOCK_SIZE=16)
    q, k, v = random_qkv(46, B=1, Hq=2, Hkv=2, Sq=S, Skv=S, D=8)
    run_and_check(q, k, v, mask_fn=ref_causal(), block_mask=block_mask, score_mod=weft.relative_bias(table),
                  score_fn=ref_relative_bias(table.astype(np.float32), S))


@pytest.mark.parametrize("Sq,Skv", [(37, 70), (70, 37), (1, 13), (13, 1)])
def test_odd_sizes_causal_alibi(Sq, Skv):
    B, Hq = 1, 3
    slopes = np.random.default_rng(50).uniform(0.1, 1.0, size=Hq)
    block_mask = weft.create_block_mask(weft.causal_mask(Skv - Sq), 1, 1, Sq, Skv, BLOCK_SIZE=(8, 16))
    q, k, v = random_qkv(51, B, Hq, Hq, Sq, Skv, D=5, Dv=7)
    run_and_check(q, k, v, mask_fn=ref_causal(Skv - Sq), score_fn=ref_alibi(slopes.astype(np.float32)),
                  score_mod=weft.alibi(slopes), block_mask=block_mask)


@pytest.mark.parametrize("Hq,Hkv", [(4, 1), (6, 2), (8, 4)])
def test_gqa(Hq, Hkv):
    q, k, v = random_qkv(60, B=2, Hq=Hq, Hkv=Hkv, Sq=29, Skv=41, D=16)
    block_mask = weft.create_block_mask(weft.sliding_window_mask(10, 10), 1, Hq, 29, 41, BLOCK_SIZE=8)
    run_and_check(q, k, v, mask_fn=ref_sliding_window(10, 10), block_mask=block_mask, gqa=True)


def test_gqa_equals_repeated_kv():
    q, k, v = random_qkv(61, B=1, Hq=6, Hkv=2, Sq=17, Skv=17, D=8)
    grouped = weft.flex_attention(q, k, v, enable_gqa=True)
    repeated = weft.flex_attention(q, np.repeat(k, 3, axis=1), np.repeat(v, 3, axis=1))
    np.testing.assert_allclose(grouped, repeated, rtol=0, atol=1e-6)


@pytest.mark.parametrize("with_mask", [False, True])
def test_dlse(with_mask):
    B, Hq, Hkv, Sq, Skv = 2, 2, 2, 37, 70
    block_mask, mask_fn = None, None
    if with_mask:
        block_mask = weft.create_block_mask(weft.causal_mask(10), B, 1, Sq, Skv, BLOCK_SIZE=16)
        mask_fn = ref_causal(10)
    q, k, v = random_qkv(70, B, Hq, Hkv, Sq, Skv, D=16)
    run_and_check(q, k, v, mask_fn=mask_fn, block_mask=block_mask, score_mod=weft.softcap(3.0),
                  score_fn=ref_softcap(3.0), dlse_seed=71)


def test_dlse_alone_gives_the_softmax_gradient():
    # With dout = 0, d lse / d score = softmax: dv must be 0, dq nonzero.
    q, k, v = random_qkv(72, B=1, Hq=2, Hkv=2, Sq=9, Skv=11, D=4)
    out, lse = weft.flex_attention(q, k, v, return_lse=True)
    dlse = np.random.default_rng(73).standard_normal(lse.shape).astype(np.float32)
    dq, dk, dv = weft.flex_attention_backward(q, k, v, out, lse, np.zeros_like(out), dlse=dlse)
    ref_dq, ref_dk, _ = Reference(q, k, v).backward(np.zeros(out.shape), dlse)
    assert np.all(dv == 0)
    assert rel_err(dq, ref_dq) <= GRAD_TOL
    assert rel_err(dk, ref_dk) <= GRAD_TOL


def test_fully_masked_rows():
    # causal with offset -5: query rows 0..4 see no key; so do rows whose
    # document has no keys (segment 7 appears only in the queries).
    B, Hq, Sq, Skv = 2, 2, 37, 70
    rng = np.random.default_rng(80)
    q_ids = segment_ids(rng, B, Sq, 3)
    q_ids[:, -6:] = 7
    kv_ids = segment_ids(rng, B, Skv, 3)
    mask = weft.or_masks(weft.and_masks(weft.causal_mask(-5), weft.document_mask(q_ids, kv_ids)),
                         weft.mask_expr("b == 1 && q_idx == 3"))
    mask_fn = ref_or(ref_and(ref_causal(-5), ref_document(q_ids, kv_ids)),
                     lambda b, h, q, kv: (b == 1) & (q == 3))
    block_mask = weft.create_block_mask(mask, B, 1, Sq, Skv, BLOCK_SIZE=(8, 16))
    q, k, v = random_qkv(81, B, Hq, Hq, Sq, Skv, D=16)
    out, lse = run_and_check(q, k, v, mask_fn=mask_fn, block_mask=block_mask, score_mod=weft.softcap(4.0),
                             score_fn=ref_softcap(4.0), dlse_seed=82)
    assert np.isneginf(lse[0, :, :5]).all() and np.isneginf(lse[:, :, -6:]).all()
    assert np.isfinite(lse[1, :, 3]).all()


def test_everything_masked_gives_zero_gradients():
    Sq, Skv = 20, 30
    block_mask = weft.create_block_mask(weft.mask_expr("q_idx < 0"), 1, 1, Sq, Skv, BLOCK_SIZE=8)
    assert block_mask.sparsity() == 100.0
    q, k, v = random_qkv(90, B=1, Hq=2, Hkv=2, Sq=Sq, Skv=Skv, D=8)
    out, lse = weft.flex_attention(q, k, v, block_mask=block_mask, return_lse=True)
    assert np.all(out == 0) and np.all(np.isneginf(lse))
    dout = np.ones_like(out)
    dlse = np.ones_like(lse)
    for grad in weft.flex_attention_backward(q, k, v, out, lse, dout, block_mask=block_mask, dlse=dlse):
        assert np.all(grad == 0)


def test_dense_block_mask_equals_no_mask():
    q, k, v = random_qkv(100, B=1, Hq=2, Hkv=2, Sq=37, Skv=70, D=16)
    dense = weft.create_block_mask(None, 1, 1, 37, 70, BLOCK_SIZE=16)
    assert dense.mask_mod is None
    np.testing.assert_allclose(weft.flex_attention(q, k, v, block_mask=dense), weft.flex_attention(q, k, v),
                               rtol=0, atol=1e-6)


@pytest.mark.parametrize("mask_batch,mask_heads", [(1, 1), (2, 1), (1, 6), (2, 6)])
def test_broadcast_block_mask_with_gqa(mask_batch, mask_heads):
    B, Hq, Hkv, Sq, Skv = 2, 6, 2, 37, 70
    block_mask = weft.create_block_mask(weft.causal_mask(33), mask_batch, mask_heads, Sq, Skv, BLOCK_SIZE=16)
    q, k, v = random_qkv(110, B, Hq, Hkv, Sq, Skv, D=16)
    run_and_check(q, k, v, mask_fn=ref_causal(33), block_mask=block_mask, gqa=True, dlse_seed=111)


def test_document_ids_broadcast_over_batch():
    # Segment ids of shape [1, S] serve every batch row.
    B, Hq, S = 3, 2, 45
    ids = segment_ids(np.random.default_rng(112), 1, S, 4)
    block_mask = weft.create_block_mask(weft.document_mask(ids), B, 1, S, S, BLOCK_SIZE=16)
    q, k, v = random_qkv(113, B, Hq, Hq, S, S, D=8)
    run_and_check(q, k, v, mask_fn=ref_document(np.repeat(ids, B, axis=0), np.repeat(ids, B, axis=0)),
                  block_mask=block_mask)


@pytest.mark.parametrize("D,Dv", [(1, 1), (256, 256), (255, 3)])
def test_head_dim_extremes(D, Dv):
    q, k, v = random_qkv(114, B=1, Hq=2, Hkv=1, Sq=19, Skv=33, D=D, Dv=Dv)
    block_mask = weft.create_block_mask(weft.causal_mask(14), 1, 1, 19, 33, BLOCK_SIZE=8)
    run_and_check(q, k, v, mask_fn=ref_causal(14), block_mask=block_mask, gqa=True)


def test_large_scores_stay_finite():
    # Logits in the hundreds: the online softmax must not overflow.
    q, k, v = random_qkv(115, B=1, Hq=2, Hkv=2, Sq=37, Skv=70, D=16)
    out, lse = weft.flex_attention(q * 40, k, v, return_lse=True)
    ref = Reference(q * 40, k, v)
    assert np.all(np.isfinite(out)) and np.all(np.isfinite(lse))
    assert rel_err(out, ref.out) <= 1e-3
    assert rel_err(lse, ref.lse) <= 1e-5


def test_inputs_untouched_outputs_fresh_and_deterministic():
    q, k, v = random_qkv(120, B=1, Hq=2, Hkv=2, Sq=37, Skv=70, D=16)
    copies = [x.copy() for x in (q, k, v)]
    block_mask = weft.create_block_mask(weft.causal_mask(33), 1, 1, 37, 70, BLOCK_SIZE=16)
    out1, lse1 = weft.flex_attention(q, k, v, block_mask=block_mask, return_lse=True)
    out2, lse2 = weft.flex_attention(q, k, v, block_mask=block_mask, return_lse=True)
    for x, c in zip((q, k, v), copies):
        np.testing.assert_array_equal(x, c)
    assert not np.shares_memory(out1, out2) and out1.flags.writeable
    np.testing.assert_array_equal(out1, out2)
    np.testing.assert_array_equal(lse1, lse2)
    dout = np.random.default_rng(121).standard_normal(out1.shape).astype(np.float32)
    g1 = weft.flex_attention_backward(q, k, v, out1, lse1, dout, block_mask=block_mask)
    g2 = weft.flex_attention_backward(q, k, v, out1, lse1, dout, block_mask=block_mask)
    for a, b in zip(g1, g2):
        np.testing.assert_array_equal(a, b)


def test_read_only_inputs_are_accepted():
    q, k, v = random_qkv(130, B=1, Hq=1, Hkv=1, Sq=8, Skv=8, D=4)
    for x in (q, k, v):
        x.flags.writeable = False
    run_and_check(q, k, v)


def test_concurrent_calls_from_threads():
    # The kernels run without the GIL; calls from several threads agree.
    q, k, v = random_qkv(140, B=2, Hq=2, Hkv=2, Sq=64, Skv=64, D=16)
    block_mask = weft.create_block_mask(weft.causal_mask(), 1, 1, 64, 64, BLOCK_SIZE=16)
    expected = weft.flex_attention(q, k, v, block_mask=block_mask)
    results = [None] * 4
    errors = []

    def work(i):
        try:
            results[i] = weft.flex_attention(q, k, v, block_mask=block_mask)
        except Exception as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for result in results:
        np.testing.assert_array_equal(result, expected)
