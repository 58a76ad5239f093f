"""precision="bf16": inputs rounded to bfloat16, float32 accumulation, checked
against the float64 reference on the same rounded inputs (rel. error <= 1e-2)."""

import numpy as np
import pytest

import weft
from conftest import Reference, random_qkv, ref_causal, ref_sliding_window, rel_err

BF16_TOL = 1e-2


def round_bf16(x):
    """Round-to-nearest-even float32 -> bfloat16 -> float32, in numpy."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32)


CASES = [
    # (B, Hq, Hkv, Sq, Skv, D, Dv, mask builder, reference mask, block size)
    (2, 2, 2, 37, 70, 24, 40, None, None, None),
    (1, 4, 2, 130, 130, 64, 64, weft.causal_mask(), ref_causal(), None),
    (1, 2, 1, 97, 97, 32, 32, weft.sliding_window_mask(20, 5), ref_sliding_window(20, 5), 32),
]


@pytest.mark.parametrize("case", CASES, ids=["dense", "causal_gqa", "window"])
def test_bf16_forward_and_backward_match_reference(case):
    B, Hq, Hkv, Sq, Skv, D, Dv, mask, ref_mask, block = case
    q, k, v = random_qkv(7, B, Hq, Hkv, Sq, Skv, D, Dv)
    rng = np.random.default_rng(8)
    dout = rng.standard_normal((B, Hq, Sq, Dv)).astype(np.float32)
    bm = None
    if mask is not None:
        bm = weft.create_block_mask(mask, 1, 1, Sq, Skv, BLOCK_SIZE=block)
    gqa = Hq != Hkv
    out, lse = weft.flex_attention(q, k, v, block_mask=bm, enable_gqa=gqa, return_lse=True,
                                   precision="bf16")
    qr, kr, vr = round_bf16(q), round_bf16(k), round_bf16(v)
    ref = Reference(qr, kr, vr, mask_fn=ref_mask)
    assert rel_err(out, ref.out) <= BF16_TOL
    assert rel_err(lse, ref.lse) <= BF16_TOL
    # Outputs are bf16 values.
    assert np.array_equal(out, round_bf16(out))
    dq, dk, dv = weft.flex_attention_backward(q, k, v, out, lse, dout, block_mask=bm,
                                              enable_gqa=gqa, precision="bf16")
    rdq, rdk, rdv = ref.backward(round_bf16(dout))
    assert rel_err(dq, rdq) <= BF16_TOL
    assert rel_err(dk, rdk) <= BF16_TOL
    assert rel_err(dv, rdv) <= BF16_TOL


def test_bf16_differs_from_f32_but_is_close():
    q, k, v = random_qkv(9, 1, 2, 2, 64, 64, 32)
    f32 = weft.flex_attention(q, k, v)
    bf = weft.flex_attention(q, k, v, precision="bf16")
    assert not np.array_equal(f32, bf)
    assert rel_err(bf, f32) <= BF16_TOL


def test_unknown_precision_is_a_value_error():
    q, k, v = random_qkv(10, 1, 1, 1, 8, 8, 8)
    with pytest.raises(ValueError, match='"f32" or "bf16"'):
        weft.flex_attention(q, k, v, precision="fp8")


@pytest.mark.parametrize("isa", ["avx512bf16", "avx512", "avx2", "portable"])
def test_bf16_on_each_instruction_set(isa):
    """Every bf16 path (vdpbf16ps on avx512bf16, float32 widening elsewhere)
    matches the reference; an ISA this CPU lacks is a ValueError naming it."""
    B, H, S, D = 1, 2, 70, 32
    q, k, v = random_qkv(11, B, H, H, S, S, D)
    dout = np.random.default_rng(12).standard_normal((B, H, S, D)).astype(np.float32)
    bm = weft.create_block_mask(weft.causal_mask(), 1, 1, S, S, BLOCK_SIZE=16)
    opts = {"ISA": isa}
    try:
        out, lse = weft.flex_attention(q, k, v, block_mask=bm, return_lse=True,
                                       precision="bf16", kernel_options=opts)
    except ValueError as e:
        assert isa != "portable", str(e)
        assert isa in str(e) and ("lacks" in str(e) or "not available" in str(e)), str(e)
        pytest.skip(f"this CPU has no {isa}")
    ref = Reference(round_bf16(q), round_bf16(k), round_bf16(v), mask_fn=ref_causal())
    assert rel_err(out, ref.out) <= BF16_TOL
    dq, dk, dv = weft.flex_attention_backward(q, k, v, out, lse, dout, block_mask=bm,
                                              precision="bf16", kernel_options=opts)
    rdq, rdk, rdv = ref.backward(round_bf16(dout))
    for got, want in ((dq, rdq), (dk, rdk), (dv, rdv)):
        assert rel_err(got, want) <= BF16_TOL


def test_amx_runs_where_usable_and_is_a_clear_error_elsewhere():
    q, k, v = random_qkv(13, 1, 2, 2, 48, 48, 32)
    try:
        out = weft.flex_attention(q, k, v, precision="bf16", kernel_options={"ISA": "amx"})
    except ValueError as e:
        assert "AMX cannot run here" in str(e), str(e)
        return
    ref = Reference(round_bf16(q), round_bf16(k), round_bf16(v))
    assert rel_err(out, ref.out) <= BF16_TOL
