"""create_block_mask / BlockMask and the mask objects themselves: block kinds
against a brute-force classification, sparsity, shapes, printing, create_mask,
evaluating a mask at one position, round-tripping through the expression text."""

import numpy as np
import pytest

import weft
from conftest import MASKS, dense_mask, ref_causal, ref_document, segment_ids


def brute_force_kinds(keep, q_block, kv_block):
    """Block kinds from a dense bool mask [B, H, Sq, Skv]: 0 empty, 1 partial, 2 full."""
    B, H, Sq, Skv = keep.shape
    nq, nkv = -(-Sq // q_block), -(-Skv // kv_block)
    kinds = np.zeros((B, H, nq, nkv), dtype=np.int64)
    for i in range(nq):
        for j in range(nkv):
            tile = keep[:, :, i * q_block:(i + 1) * q_block, j * kv_block:(j + 1) * kv_block]
            any_, all_ = tile.any(axis=(2, 3)), tile.all(axis=(2, 3))
            kinds[:, :, i, j] = np.where(all_, 2, np.where(any_, 1, 0))
    return kinds


@pytest.mark.parametrize("name", sorted(MASKS))
@pytest.mark.parametrize("block", [(16, 16), (8, 32), (64, 64)])
def test_kinds_match_brute_force(name, block):
    B, H, Sq, Skv = 2, 3, 37, 70
    mask, mask_fn = MASKS[name](B, Sq, Skv, np.random.default_rng(5))
    block_mask = weft.create_block_mask(mask, B, H, Sq, Skv, BLOCK_SIZE=block)
    kinds = block_mask.to_dense()
    expected = brute_force_kinds(dense_mask(mask_fn, B, H, Sq, Skv), *block)
    assert kinds.shape == expected.shape
    np.testing.assert_array_equal(kinds, expected)
    counts = [int(np.sum(expected == kind)) for kind in (0, 1, 2)]
    assert (block_mask.num_empty, block_mask.num_partial, block_mask.num_full) == tuple(counts)
    assert block_mask.sparsity() == pytest.approx(100.0 * counts[0] / expected.size)
    assert block_mask.density() == pytest.approx(1.0 - counts[0] / expected.size)


def test_shape_block_size_and_broadcast():
    block_mask = weft.create_block_mask(weft.causal_mask(), 1, 4, 100, 130, BLOCK_SIZE=(16, 32))
    assert block_mask.shape == (1, 4, 100, 130)
    assert block_mask.BLOCK_SIZE == (16, 32)
    assert block_mask.to_dense().shape == (1, 4, 7, 5)
    assert block_mask.to_dense().dtype.kind == "i"
    default = weft.create_block_mask(weft.causal_mask(), 2, 1, 100, 100)
    assert default.BLOCK_SIZE == (weft.DEFAULT_BLOCK_SIZE, weft.DEFAULT_BLOCK_SIZE)
    assert default.shape == (2, 1, 100, 100)
    square = weft.create_block_mask(weft.causal_mask(), 1, 1, 100, 100, BLOCK_SIZE=20)
    assert square.BLOCK_SIZE == (20, 20)
    assert square.to_dense().shape == (1, 1, 5, 5)
    numpy_ints = weft.create_block_mask(weft.causal_mask(), np.int64(1), 1, 100, 100, BLOCK_SIZE=np.int64(20))
    assert numpy_ints.BLOCK_SIZE == (20, 20)
    numpy_pair = weft.create_block_mask(weft.causal_mask(), 1, 1, 100, 100, BLOCK_SIZE=[np.int32(16), 32])
    assert numpy_pair.BLOCK_SIZE == (16, 32)


def test_causal_kinds_by_hand():
    # 4 x 4 blocks of 16: diagonal partial, below full, above empty.
    kinds = weft.create_block_mask(weft.causal_mask(), 1, 1, 64, 64, BLOCK_SIZE=16).to_dense()[0, 0]
    expected = np.array([[1, 0, 0, 0], [2, 1, 0, 0], [2, 2, 1, 0], [2, 2, 2, 1]])
    np.testing.assert_array_equal(kinds, expected)


def test_dense_block_mask():
    dense = weft.create_block_mask(None, 1, 1, 50, 70, BLOCK_SIZE=16)
    assert dense.sparsity() == 0.0
    assert np.all(dense.to_dense() == 2)


def test_repr_is_the_summary():
    block_mask = weft.create_block_mask(weft.causal_mask(), 1, 1, 64, 64, BLOCK_SIZE=16)
    text = repr(block_mask)
    assert text == str(block_mask) and len(text) > 0
    assert "64" in text
    assert repr(block_mask.mask_mod) == repr(weft.causal_mask())


def test_create_mask_matches_reference():
    B, H, Sq, Skv = 2, 3, 37, 70
    for name in sorted(MASKS):
        mask, mask_fn = MASKS[name](B, Sq, Skv, np.random.default_rng(6))
        dense = weft.create_mask(mask, B, H, Sq, Skv)
        assert dense.dtype == np.bool_ and dense.shape == (B, H, Sq, Skv)
        np.testing.assert_array_equal(dense, dense_mask(mask_fn, B, H, Sq, Skv), err_msg=name)


def test_mask_call_evaluates_one_position():
    causal = weft.causal_mask()
    assert causal(0, 0, 5, 5) is True
    assert causal(0, 0, 5, 6) is False
    ids = np.array([[0, 0, 1, 1]])
    document = weft.document_mask(ids)
    assert document(0, 0, 0, 1) and not document(0, 0, 1, 2)
    with pytest.raises(ValueError, match="non-negative"):
        causal(0, 0, -1, 0)


def test_masks_print_and_round_trip_through_text():
    rng = np.random.default_rng(7)
    q_ids = segment_ids(rng, 2, 37, 4)
    kv_ids = segment_ids(rng, 2, 70, 4)
    masks = [
        weft.causal_mask(3),
        weft.sliding_window_mask(5, 2),
        weft.prefix_lm_mask([4, 9]),
        weft.document_mask(q_ids, kv_ids),
        weft.chunked_causal_mask(8),
        weft.and_masks(weft.causal_mask(), weft.document_mask(q_ids, kv_ids)),
        weft.or_masks(weft.sliding_window_mask(1, 1), weft.causal_mask(-10)),
        # Two masks with tensors of the same name: the combination renames them.
        weft.and_masks(weft.document_mask(q_ids, kv_ids), weft.document_mask(q_ids % 2, kv_ids % 2)),
        weft.prefix_lm_mask([4, 9]) | weft.prefix_lm_mask([30, 2]),
    ]
    for mask in masks:
        text = repr(mask)
        assert isinstance(text, str) and text
        rebuilt = weft.mask_expr(text, **mask.tensors)
        np.testing.assert_array_equal(weft.create_mask(rebuilt, 2, 2, 37, 70),
                                      weft.create_mask(mask, 2, 2, 37, 70), err_msg=text)


def test_document_mask_tensors_are_exposed():
    ids = np.array([[0, 0, 1], [2, 2, 2]], dtype=np.int32)
    tensors = weft.document_mask(ids).tensors
    assert len(tensors) >= 1
    for value in tensors.values():
        np.testing.assert_array_equal(value, ids)


def test_score_mods_print_and_round_trip_through_text():
    rng = np.random.default_rng(8)
    Sq, Skv, H = 5, 7, 2
    table = rng.standard_normal(Sq + Skv - 1)
    mods = [
        weft.softcap(3.0),
        weft.alibi([0.5, 0.25]),
        weft.relative_bias(table, kv_len=Skv),
        weft.score_expr("score * 0.5 + bias[h]", bias=np.array([1.0, -1.0])),
    ]
    q = rng.standard_normal((1, H, Sq, 4)).astype(np.float32)
    k = rng.standard_normal((1, H, Skv, 4)).astype(np.float32)
    v = rng.standard_normal((1, H, Skv, 4)).astype(np.float32)
    for mod in mods:
        text = repr(mod)
        assert isinstance(text, str) and text
        rebuilt = weft.score_expr(text, **mod.tensors)
        np.testing.assert_allclose(weft.flex_attention(q, k, v, score_mod=rebuilt),
                                   weft.flex_attention(q, k, v, score_mod=mod), rtol=0, atol=1e-6,
                                   err_msg=text)


def test_integer_tensor_dtypes_are_accepted():
    for dtype in (np.int32, np.int64, np.uint8, np.int16):
        ids = np.array([[0, 0, 1, 1, 1]], dtype=dtype)
        dense = weft.create_mask(weft.document_mask(ids), 1, 1, 5, 5)
        np.testing.assert_array_equal(dense, dense_mask(ref_document(ids, ids), 1, 1, 5, 5))
    # Lists work too.
    dense = weft.create_mask(weft.document_mask([[0, 1, 1]]), 1, 1, 3, 3)
    assert dense[0, 0, 1, 2] and not dense[0, 0, 0, 1]
    dense = weft.create_mask(weft.prefix_lm_mask(np.array([2], dtype=np.int32)), 1, 1, 4, 4)
    np.testing.assert_array_equal(dense[0, 0], dense_mask(ref_causal(), 1, 1, 4, 4)[0, 0] | (np.arange(4) < 2))


def test_expression_tensors_may_be_called_text():
    # The expression text is positional-only, so any tensor name works.
    mask = weft.mask_expr("text[q_idx] == text[kv_idx]", text=np.array([0, 0, 1]))
    assert mask(0, 0, 0, 1) and not mask(0, 0, 1, 2)
    weft.score_expr("score + text[h]", text=np.array([1.0]))
