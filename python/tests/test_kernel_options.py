"""kernel_options: forced tiles are honoured (same results as the reference),
and configurations that do not fit raise ValueError naming the working set,
the limit and the largest configuration that fits."""

import os
import subprocess
import sys

import numpy as np
import pytest

import weft
from conftest import Reference, random_qkv, ref_causal, rel_err, FORWARD_TOL, GRAD_TOL


@pytest.mark.parametrize("opts", [
    {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_M_BWD": 32, "BLOCK_N_BWD": 16},
    {"BLOCK_M": 64, "BLOCK_N": 16, "BACKWARD_SPLIT": "split"},
    {"BLOCK_M_BWD": 16, "BACKWARD_SPLIT": "fused"},
])
def test_forced_tiles_give_reference_results(opts):
    q, k, v = random_qkv(21, 1, 2, 2, 150, 150, 32)
    rng = np.random.default_rng(22)
    dout = rng.standard_normal(q.shape).astype(np.float32)
    bm = weft.create_block_mask(weft.causal_mask(), 1, 1, 150, 150)
    out, lse = weft.flex_attention(q, k, v, block_mask=bm, return_lse=True, kernel_options=opts)
    ref = Reference(q, k, v, mask_fn=ref_causal())
    assert rel_err(out, ref.out) <= FORWARD_TOL
    grads = weft.flex_attention_backward(q, k, v, out, lse, dout, block_mask=bm,
                                         kernel_options=opts)
    for got, want in zip(grads, ref.backward(dout)):
        assert rel_err(got, want) <= GRAD_TOL


def test_tile_that_does_not_divide_the_mask_block():
    q, k, v = random_qkv(23, 1, 1, 1, 128, 128, 16)
    bm = weft.create_block_mask(weft.causal_mask(), 1, 1, 128, 128)
    with pytest.raises(ValueError, match="must divide"):
        weft.flex_attention(q, k, v, block_mask=bm, kernel_options={"BLOCK_M": 48})


def test_bad_kernel_options():
    q, k, v = random_qkv(24, 1, 1, 1, 8, 8, 8)
    with pytest.raises(ValueError, match="unknown key"):
        weft.flex_attention(q, k, v, kernel_options={"BLOCK_K": 16})
    with pytest.raises(ValueError, match="positive int"):
        weft.flex_attention(q, k, v, kernel_options={"BLOCK_M": -16})
    with pytest.raises(ValueError, match="must be a dict"):
        weft.flex_attention(q, k, v, kernel_options=[16, 16])


# WEFT_CACHE_LIMIT is read per call, but run in a child process so this
# test's environment cannot leak into others.
CHILD = r"""
import numpy as np, weft
q = np.random.default_rng(25).standard_normal((1, 1, 256, 128)).astype(np.float32)
try:
    weft.flex_attention(q, q, q, kernel_options={"BLOCK_M": 128, "BLOCK_N": 128})
    print("no error")
except ValueError as e:
    print(e)
"""


def test_config_over_the_limit_names_working_set_limit_and_largest_fit():
    env = dict(os.environ, WEFT_CACHE_LIMIT="64K")
    msg = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                         check=True).stdout
    assert "BLOCK_M=128, BLOCK_N=128" in msg
    assert "64.0 KiB" in msg
    assert "largest configuration that fits is BLOCK_M=" in msg


CHILD_TINY = r"""
import numpy as np, weft
rng = np.random.default_rng(26)
q, k, v = (rng.standard_normal((1, 2, 80, 256)).astype(np.float32) for _ in range(3))
bm = weft.create_block_mask(weft.causal_mask(), 1, 1, 80, 80)
out = weft.flex_attention(q, k, v, block_mask=bm)
np.save(__import__("sys").argv[1], out)
"""


def test_tiny_cache_limit_still_runs_correctly(tmp_path):
    path = tmp_path / "out.npy"
    env = dict(os.environ, WEFT_CACHE_LIMIT="8K")
    subprocess.run([sys.executable, "-c", CHILD_TINY, str(path)], env=env, check=True)
    rng = np.random.default_rng(26)
    q, k, v = (rng.standard_normal((1, 2, 80, 256)).astype(np.float32) for _ in range(3))
    ref = Reference(q, k, v, mask_fn=ref_causal())
    assert rel_err(np.load(path), ref.out) <= FORWARD_TOL
