"""Bad input raises ValueError with a message that names the problem and the fix."""

import numpy as np
import pytest

import weft
from conftest import random_qkv


@pytest.fixture
def qkv():
    return random_qkv(300, B=2, Hq=4, Hkv=4, Sq=12, Skv=20, D=8)


def raises(match):
    return pytest.raises(ValueError, match=match)


# Arrays: dtype, contiguity, type, rank.
@pytest.mark.parametrize("which", [0, 1, 2])
def test_float64_input(qkv, which):
    args = list(qkv)
    name = "qkv"[which]
    args[which] = args[which].astype(np.float64)
    with raises(rf"{name} has dtype float64; pass float32 arrays, e.g. {name}\.astype\(np\.float32\)"):
        weft.flex_attention(*args)


def test_integer_and_half_inputs(qkv):
    q, k, v = qkv
    with raises("k has dtype int32.*float32"):
        weft.flex_attention(q, k.astype(np.int32), v)
    with raises("v has dtype float16.*astype"):
        weft.flex_attention(q, k, v.astype(np.float16))


def test_non_contiguous_input(qkv):
    q, k, v = qkv
    q_t = np.swapaxes(np.swapaxes(q, 2, 3).copy(), 2, 3)  # right shape, Fortran-ish strides
    with raises(r"q is not C-contiguous.*np\.ascontiguousarray\(q\)"):
        weft.flex_attention(q_t, k, v)
    with raises(r"v is not C-contiguous.*ascontiguousarray"):
        weft.flex_attention(q, k, np.concatenate([v, v], axis=3)[..., ::2])


def test_not_an_array(qkv):
    q, k, v = qkv
    with raises(r"q must be a numpy float32 array.*got an object of type list"):
        weft.flex_attention(q.tolist(), k, v)
    with raises("k must be a numpy float32 array.*NoneType"):
        weft.flex_attention(q, None, v)


def test_wrong_rank(qkv):
    q, k, v = qkv
    with raises(r"q must have 4 dimensions \[B, Hq, Sq, D\], got shape \(4, 12, 8\)"):
        weft.flex_attention(q[0], k, v)
    with raises(r"v must have 4 dimensions"):
        weft.flex_attention(q, k, v[None])


def test_mismatched_batch(qkv):
    q, k, v = qkv
    with raises("same batch size B"):
        weft.flex_attention(q, k[:1].copy(), v[:1].copy())
    with raises("same batch size B"):
        weft.flex_attention(q, k, v[:1].copy())


def test_mismatched_head_dim(qkv):
    q, k, v = qkv
    with raises(r"q and k must have the same head dim D"):
        weft.flex_attention(q, k[..., :4].copy(), v)


def test_mismatched_kv_length_or_heads(qkv):
    q, k, v = qkv
    with raises(r"k and v must have the same heads and length"):
        weft.flex_attention(q, k, v[:, :, :10].copy())
    with raises(r"k and v must have the same heads and length"):
        weft.flex_attention(q, k, v[:, :2].copy())


def test_gqa_needs_enable_gqa(qkv):
    q, k, v = qkv
    k2, v2 = k[:, :2].copy(), v[:, :2].copy()
    with raises(r"q has 4 heads but k/v have 2; pass enable_gqa=True"):
        weft.flex_attention(q, k2, v2)


def test_gqa_heads_not_a_multiple(qkv):
    q, k, v = qkv
    k3, v3 = np.concatenate([k, k[:, :2]], axis=1), np.concatenate([v, v[:, :2]], axis=1)
    q3 = q[:, :3].copy()
    with raises(r"3 query heads to be a multiple of the 2 kv heads"):
        weft.flex_attention(q3, k[:, :2].copy(), v[:, :2].copy(), enable_gqa=True)
    with raises(r"multiple"):
        weft.flex_attention(q, k3, v3, enable_gqa=True)  # 4 q heads, 6 kv heads


def test_head_dim_too_large():
    q, k, v = random_qkv(301, B=1, Hq=1, Hkv=1, Sq=2, Skv=2, D=257)
    with raises("at most 256"):
        weft.flex_attention(q, k, v)


def test_bad_scale(qkv):
    with raises("scale must be a finite number"):
        weft.flex_attention(*qkv, scale=float("nan"))


# Block masks.
def test_block_mask_length_mismatch(qkv):
    block_mask = weft.create_block_mask(weft.causal_mask(), 2, 4, 12, 21)
    with raises(r"block_mask was built for Q_LEN=12, KV_LEN=21 but q has Sq=12 and k/v have Skv=20"):
        weft.flex_attention(*qkv, block_mask=block_mask)
    block_mask = weft.create_block_mask(weft.causal_mask(), 2, 4, 20, 20)
    with raises(r"Q_LEN=20"):
        weft.flex_attention(*qkv, block_mask=block_mask)


def test_block_mask_batch_or_heads_mismatch(qkv):
    with raises(r"block_mask has B=3 but q has batch 2; build it with B=1 \(broadcast\) or B=2"):
        weft.flex_attention(*qkv, block_mask=weft.create_block_mask(weft.causal_mask(), 3, 1, 12, 20))
    with raises(r"block_mask has H=2 but q has 4 heads"):
        weft.flex_attention(*qkv, block_mask=weft.create_block_mask(weft.causal_mask(), 1, 2, 12, 20))


def test_block_mask_given_a_mask(qkv):
    with raises(r"block_mask is a mask .* not a BlockMask; build one with weft\.create_block_mask\(mask, B, H, 12, 20\)"):
        weft.flex_attention(*qkv, block_mask=weft.causal_mask())
    with raises(r"block_mask must be a weft\.BlockMask"):
        weft.flex_attention(*qkv, block_mask=np.ones((12, 20), dtype=bool))


def test_score_mod_wrong_kind(qkv):
    with raises(r"score_mod is a mask .*masks go in block_mask="):
        weft.flex_attention(*qkv, score_mod=weft.causal_mask())
    with raises(r"score_mod is a Python callable.*weft\.score_expr"):
        weft.flex_attention(*qkv, score_mod=lambda score, b, h, q, kv: score)
    with raises(r"score_mod must be a weft score mod"):
        weft.flex_attention(*qkv, score_mod=3.0)


def test_create_block_mask_bad_arguments():
    with raises(r"mask_mod is a Python callable.*mask_expr"):
        weft.create_block_mask(lambda b, h, q, kv: q >= kv, 1, 1, 8, 8)
    with raises(r"mask_mod is a score mod"):
        weft.create_block_mask(weft.softcap(1.0), 1, 1, 8, 8)
    with raises(r"positive sizes.*B=0"):
        weft.create_block_mask(weft.causal_mask(), 0, 1, 8, 8)
    with raises(r"positive sizes.*KV_LEN=-1"):
        weft.create_block_mask(weft.causal_mask(), 1, 1, 8, -1)
    with raises(r"BLOCK_SIZE must be an int or a \(Q_BLOCK_SIZE, KV_BLOCK_SIZE\) pair"):
        weft.create_block_mask(weft.causal_mask(), 1, 1, 8, 8, BLOCK_SIZE=(16, 16, 16))
    with raises(r"BLOCK_SIZE must be an int"):
        weft.create_block_mask(weft.causal_mask(), 1, 1, 8, 8, BLOCK_SIZE="64")
    with raises(r"BLOCK_SIZE must be positive"):
        weft.create_block_mask(weft.causal_mask(), 1, 1, 8, 8, BLOCK_SIZE=0)


def test_huge_sizes_are_value_errors_naming_the_argument():
    # batch x heads overflowed to 0 (SIGFPE); q_block x kv_block to a small
    # tile written past its end (SIGSEGV); ints past 64 bits were pybind11's
    # "Unable to cast Python instance to C++ type" without the argument.
    with raises(r"block_mask: batch 4294967296 x heads 4294967296 .* is too many"):
        weft.create_block_mask(weft.causal_mask(), 2**32, 2**32, 128, 128)
    with raises(r"create_block_mask: B = 1180591620717411303424 does not fit in 64 bits"):
        weft.create_block_mask(weft.causal_mask(), 2**70, 1, 128, 128)
    with raises(r"BLOCK_SIZE\[1\] = 1180591620717411303424 does not fit in 64 bits"):
        weft.create_block_mask(weft.causal_mask(), 1, 1, 128, 128, BLOCK_SIZE=(16, 2**70))
    with raises(r"create_mask: H must be an int"):
        weft.create_mask(weft.causal_mask(), 1, "4", 8, 8)
    with raises(r"create_mask: B=1048576 x H=1048576 x Q_LEN=128 x KV_LEN=128 .* use create_block_mask"):
        weft.create_mask(weft.causal_mask(), 2**20, 2**20, 128, 128)
    q = np.zeros((1, 1, 8, 8), np.float32)
    with raises(r'kernel_options\["BLOCK_M"\] = 1180591620717411303424 does not fit in 64 bits'):
        weft.flex_attention(q, q, q, kernel_options={"BLOCK_M": 2**70})


def test_a_block_larger_than_the_sequence_is_one_block_of_the_sequence():
    # 2^33 x 2^33 blocks: one block, kept as the sequence rounded up to 256
    # (its memory follows the sequence, not the block size).
    block_mask = weft.create_block_mask(weft.causal_mask(), 1, 1, 128, 128, BLOCK_SIZE=2**33)
    assert block_mask.BLOCK_SIZE == (256, 256)
    assert block_mask.to_dense().tolist() == [[[[1]]]]
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((1, 2, 128, 16)).astype(np.float32) for _ in range(3))
    reference = weft.create_block_mask(weft.causal_mask(), 1, 1, 128, 128, BLOCK_SIZE=16)
    out = weft.flex_attention(q, k, v, block_mask=block_mask)
    np.testing.assert_allclose(out, weft.flex_attention(q, k, v, block_mask=reference), rtol=1e-5, atol=1e-6)


# Masks and their tensors.
def test_document_mask_shapes():
    ids = np.zeros((2, 12), dtype=np.int64)
    with raises(r"q_segment_ids must have shape \[B, Q_LEN\], got shape \(12,\)"):
        weft.document_mask(ids[0])
    with raises(r"kv_segment_ids must have shape \[B, KV_LEN\]"):
        weft.document_mask(ids, np.zeros((2, 3, 4), dtype=np.int64))
    with raises(r"q_segment_ids has 2 batch rows but kv_segment_ids has 3"):
        weft.document_mask(ids, np.zeros((3, 12), dtype=np.int64))
    with raises(r"q_segment_ids has dtype float64; pass integers"):
        weft.document_mask(ids.astype(np.float64))


def test_segment_ids_that_do_not_fit_the_attention():
    mask = weft.document_mask(np.zeros((2, 12), dtype=np.int64), np.zeros((2, 20), dtype=np.int64))
    with raises("segment"):
        weft.create_block_mask(mask, 2, 1, 12, 24)  # kv ids have 20 entries
    with raises("segment"):
        weft.create_block_mask(mask, 3, 1, 12, 20)  # ids for 2 batch rows, not 3
    with raises("segment"):
        weft.create_mask(mask, 2, 1, 13, 20)


def test_prefix_lengths_that_do_not_fit():
    with raises("prefix_lengths"):
        weft.create_block_mask(weft.prefix_lm_mask([3, 4, 5]), 2, 1, 8, 8)
    with raises(r"prefix_lengths has dtype float64; pass integers"):
        weft.prefix_lm_mask([1.5, 2.0])
    with raises(r"prefix_lengths must be a 1-D list or array"):
        weft.prefix_lm_mask([[1, 2]])


def test_combinators_need_masks():
    with raises(r"and_masks\(\) needs at least one mask"):
        weft.and_masks()
    with raises(r"or_masks\(\) needs at least one mask"):
        weft.or_masks()
    with raises(r"and_masks\(\) argument 2 must be a weft mask"):
        weft.and_masks(weft.causal_mask(), "q_idx >= kv_idx")
    with raises(r"or_masks\(\) argument 1 is a score mod"):
        weft.or_masks(weft.softcap(2.0))
    with raises(r"right operand of & is a Python callable"):
        weft.causal_mask() & (lambda b, h, q, kv: True)


def test_mask_expr_syntax_error_reports_the_column():
    with pytest.raises(ValueError, match="column") as info:
        weft.mask_expr("q_idx >= kv_idx &&& b")
    assert "q_idx >= kv_idx &&& b" in str(info.value)
    with raises("column"):
        weft.mask_expr("q_idx >=")


def test_mask_expr_type_and_name_errors():
    with raises("mask must be boolean"):
        weft.mask_expr("q_idx + kv_idx")
    with raises("unknown|column"):
        weft.mask_expr("seg[b, q_idx] == 0")  # no tensor named seg
    with raises("column"):
        weft.mask_expr("seg[q_idx] == 0", seg=np.zeros((2, 3), dtype=np.int64))  # wrong rank
    with raises(r"mask_expr tensor 'seg' has dtype float64; pass integers"):
        weft.mask_expr("seg[q_idx] == 0", seg=np.zeros(3))


def test_mask_expr_index_out_of_range():
    mask = weft.mask_expr("seg[q_idx] == seg[kv_idx]", seg=np.arange(4))
    with raises("seg"):
        weft.create_mask(mask, 1, 1, 8, 8)
    with raises("seg"):
        mask(0, 0, 5, 1)


def test_score_expr_errors():
    with raises("column"):
        weft.score_expr("score * (2 + ")
    with raises("must be a number.*boolean"):
        weft.score_expr("score > 0")
    with raises(r"score_expr tensor 'bias' has dtype <U1; pass real numbers"):
        weft.score_expr("score + bias[h]", bias=np.array(["a"]))


def test_score_mods_that_do_not_fit_the_attention(qkv):
    with raises("slopes"):
        weft.flex_attention(*qkv, score_mod=weft.alibi([0.5, 0.25]))  # 4 heads, 2 slopes
    with raises("table"):
        weft.flex_attention(*qkv, score_mod=weft.relative_bias(np.zeros(12 + 20), kv_len=20))  # needs 31
    with raises("kv_len"):
        weft.flex_attention(*qkv, score_mod=weft.relative_bias(np.zeros(31), kv_len=19))
    with raises(r"relative_bias: a table of 30 entries.*weft\.relative_bias\(table, kv_len=KV_LEN\)"):
        weft.relative_bias(np.zeros(30))
    with raises(r"slopes must be a 1-D list or array"):
        weft.alibi(np.zeros((2, 2)))


def test_bad_softcap():
    with raises("cap"):
        weft.softcap(0.0)
    with raises("cap"):
        weft.softcap(-1.0)


# Backward inputs.
def test_backward_shapes(qkv):
    q, k, v = qkv
    out, lse = weft.flex_attention(q, k, v, return_lse=True)
    dout = np.ones_like(out)
    with raises(r"out has shape \(2, 4, 12, 7\) but must be \[B, Hq, Sq, Dv\] = \(2, 4, 12, 8\)"):
        weft.flex_attention_backward(q, k, v, out[..., :7].copy(), lse, dout)
    with raises(r"lse has shape"):
        weft.flex_attention_backward(q, k, v, out, lse[:, :2].copy(), dout)
    with raises(r"dout must have 4 dimensions"):
        weft.flex_attention_backward(q, k, v, out, lse, dout[0])
    with raises(r"dlse has dtype float64; pass float32"):
        weft.flex_attention_backward(q, k, v, out, lse, dout, dlse=lse.astype(np.float64))
    with raises(r"dlse has shape"):
        weft.flex_attention_backward(q, k, v, out, lse, dout, dlse=lse[:1].copy())
    with raises(r"q has 4 heads but k/v have 2; pass enable_gqa=True"):
        weft.flex_attention_backward(q, k[:, :2].copy(), v[:, :2].copy(), out, lse, dout)


def test_errors_raised_inside_the_kernels_become_value_errors():
    q, k, v = random_qkv(302, B=1, Hq=2, Hkv=2, Sq=20, Skv=20, D=8)
    score_mod = weft.score_expr("score + q_idx / (kv_idx - 7)")
    with raises(r"division by zero.*kv_idx=7"):
        weft.flex_attention(q, k, v, score_mod=score_mod)
    out, lse = weft.flex_attention(q, k, v, return_lse=True)
    with raises(r"division by zero"):
        weft.flex_attention_backward(q, k, v, out, lse, np.ones_like(out), score_mod=score_mod)
    with raises(r"index \[20\] is out of range for tensor 't'"):
        weft.flex_attention(q, k, v, score_mod=weft.score_expr("score + t[q_idx + 1]", t=np.zeros(20)))
    # The module still works afterwards.
    np.testing.assert_array_equal(weft.flex_attention(q, k, v), out)
