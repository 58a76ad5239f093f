"""Shared helpers for the weft Python tests: random inputs and a float64
numpy reference of flex attention (forward and hand-derived backward).

Masks and score mods in the reference are numpy functions of broadcastable
index arrays b [B,1,1,1], h [1,H,1,1], q [1,1,Sq,1], kv [1,1,1,Skv].
"""

import numpy as np
import pytest

try:
    import weft
except ImportError as error:  # pragma: no cover - a setup problem, not a test failure
    pytest.exit(
        f"cannot import weft ({error}); build the weft_python target and run with "
        "PYTHONPATH=<build>/python /usr/bin/python3 -m pytest",
        returncode=2,
    )

FORWARD_TOL = 1e-5
GRAD_TOL = 1e-4


def rel_err(actual, expected):
    """max |actual - expected| / max |expected| (finite entries only)."""
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    scale = np.max(np.abs(expected))
    assert scale > 0, "the reference is all zeros: the test would not test anything"
    return float(np.max(np.abs(actual - expected)) / scale)


def random_qkv(seed, B, Hq, Hkv, Sq, Skv, D, Dv=None):
    rng = np.random.default_rng(seed)
    Dv = D if Dv is None else Dv
    q = rng.standard_normal((B, Hq, Sq, D)).astype(np.float32)
    k = rng.standard_normal((B, Hkv, Skv, D)).astype(np.float32)
    v = rng.standard_normal((B, Hkv, Skv, Dv)).astype(np.float32)
    return q, k, v


def index_grids(B, H, Sq, Skv):
    b = np.arange(B).reshape(B, 1, 1, 1)
    h = np.arange(H).reshape(1, H, 1, 1)
    q = np.arange(Sq).reshape(1, 1, Sq, 1)
    kv = np.arange(Skv).reshape(1, 1, 1, Skv)
    return b, h, q, kv


def dense_mask(mask_fn, B, H, Sq, Skv):
    """bool [B, H, Sq, Skv] from a reference mask function."""
    if mask_fn is None:
        return np.ones((B, H, Sq, Skv), dtype=bool)
    return np.broadcast_to(mask_fn(*index_grids(B, H, Sq, Skv)), (B, H, Sq, Skv))


class Reference:
    """float64 flex attention. score_fn(score, b, h, q, kv) -> (modified, d modified/d score)."""

    def __init__(self, q, k, v, mask_fn=None, score_fn=None, scale=None):
        q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
        B, Hq, Sq, D = q.shape
        Hkv, Skv = k.shape[1], k.shape[2]
        self.group = Hq // Hkv
        self.q = q
        self.k = np.repeat(k, self.group, axis=1)
        self.v = np.repeat(v, self.group, axis=1)
        self.scale = 1.0 / np.sqrt(D) if scale is None else scale
        raw = np.einsum("bhqd,bhkd->bhqk", q, self.k) * self.scale
        if score_fn is None:
            scores, self.dmod = raw, np.ones_like(raw)
        else:
            scores, dmod = score_fn(raw, *index_grids(B, Hq, Sq, Skv))
            scores = np.broadcast_to(scores, raw.shape)
            self.dmod = np.broadcast_to(dmod, raw.shape)
        self.keep = dense_mask(mask_fn, B, Hq, Sq, Skv)
        masked = np.where(self.keep, scores, -np.inf)
        row_max = masked.max(axis=-1, keepdims=True)
        empty = ~self.keep.any(axis=-1, keepdims=True)
        row_max = np.where(empty, 0.0, row_max)
        e = np.exp(masked - row_max)  # exp(-inf) = 0
        total = e.sum(axis=-1, keepdims=True)
        self.p = np.where(empty, 0.0, e / np.where(empty, 1.0, total))
        self.out = np.einsum("bhqk,bhkd->bhqd", self.p, self.v)
        with np.errstate(divide="ignore"):
            self.lse = np.where(empty, -np.inf, row_max + np.log(np.where(empty, 1.0, total)))[..., 0]
        self.empty_rows = empty[..., 0]

    def backward(self, dout, dlse=None):
        dout = np.asarray(dout, dtype=np.float64)
        dp = np.einsum("bhqd,bhkd->bhqk", dout, self.v)
        delta = np.sum(dout * self.out, axis=-1, keepdims=True)
        ds = self.p * (dp - delta)
        if dlse is not None:
            ds = ds + self.p * np.asarray(dlse, dtype=np.float64)[..., None]
        draw = ds * self.dmod
        dq = np.einsum("bhqk,bhkd->bhqd", draw, self.k) * self.scale
        dk = np.einsum("bhqk,bhqd->bhkd", draw, self.q) * self.scale
        dv = np.einsum("bhqk,bhqd->bhkd", self.p, dout)
        B, Hq, Skv = dk.shape[0], dk.shape[1], dk.shape[2]
        dk = dk.reshape(B, Hq // self.group, self.group, Skv, -1).sum(axis=2)
        dv = dv.reshape(B, Hq // self.group, self.group, Skv, -1).sum(axis=2)
        return dq, dk, dv


# Reference masks (numpy mirrors of weft's built-ins).
def ref_causal(offset=0):
    return lambda b, h, q, kv: q + offset >= kv


def ref_sliding_window(left, right):
    return lambda b, h, q, kv: (q - left <= kv) & (kv <= q + right)


def ref_prefix_lm(prefix_lengths):
    lengths = np.asarray(prefix_lengths)
    return lambda b, h, q, kv: (kv < lengths[b]) | (q >= kv)


def ref_document(q_ids, kv_ids):
    return lambda b, h, q, kv: q_ids[b, q] == kv_ids[b, kv]


def ref_chunked_causal(chunk):
    return lambda b, h, q, kv: (q // chunk == kv // chunk) & (q >= kv)


def ref_and(*fns):
    def fn(b, h, q, kv):
        result = fns[0](b, h, q, kv)
        for other in fns[1:]:
            result = result & other(b, h, q, kv)
        return result

    return fn


def ref_or(*fns):
    def fn(b, h, q, kv):
        result = fns[0](b, h, q, kv)
        for other in fns[1:]:
            result = result | other(b, h, q, kv)
        return result

    return fn


# Reference score mods: (modified score, derivative).
def ref_softcap(cap):
    def fn(s, b, h, q, kv):
        t = np.tanh(s / cap)
        return cap * t, 1.0 - t * t

    return fn


def ref_alibi(slopes):
    slopes = np.asarray(slopes, dtype=np.float64)
    return lambda s, b, h, q, kv: (s + slopes[h] * (kv - q), 1.0)


def ref_relative_bias(table, Skv):
    table = np.asarray(table, dtype=np.float64)
    return lambda s, b, h, q, kv: (s + table[q - kv + Skv - 1], 1.0)


def segment_ids(rng, B, S, num_docs):
    """Sorted random segment ids [B, S] (packed documents of random lengths)."""
    ids = np.sort(rng.integers(0, num_docs, size=(B, S)), axis=1)
    return ids.astype(np.int64)


# Each mask case: (weft mask, reference mask function) for batch B and
# lengths Sq, Skv; built at test time so that tensors match the sizes.
def mask_cases():
    def document(B, Sq, Skv, rng):
        q_ids = segment_ids(rng, B, Sq, 4)
        kv_ids = segment_ids(rng, B, Skv, 4)
        return weft.document_mask(q_ids, kv_ids), ref_document(q_ids, kv_ids)

    def document_causal(B, Sq, Skv, rng):
        q_ids = segment_ids(rng, B, Sq, 3)
        if Sq == Skv:  # kv_segment_ids defaults to q_segment_ids
            kv_ids, document = q_ids, weft.document_mask(q_ids)
        else:
            kv_ids = segment_ids(rng, B, Skv, 3)
            document = weft.document_mask(q_ids, kv_ids)
        mask = weft.and_masks(document, weft.causal_mask())
        return mask, ref_and(ref_document(q_ids, kv_ids), ref_causal())

    def prefix_lm(B, Sq, Skv, rng):
        lengths = rng.integers(0, Skv + 1, size=B)
        return weft.prefix_lm_mask(lengths), ref_prefix_lm(lengths)

    def expr_with_tensor(B, Sq, Skv, rng):
        q_ids = segment_ids(rng, B, Sq, 3)
        kv_ids = segment_ids(rng, B, Skv, 3)
        mask = weft.mask_expr("q_idx >= kv_idx && qs[b, q_idx] == ks[b, kv_idx]", qs=q_ids, ks=kv_ids)
        return mask, ref_and(ref_causal(), ref_document(q_ids, kv_ids))

    return {
        "causal": lambda B, Sq, Skv, rng: (weft.causal_mask(), ref_causal()),
        "causal_offset": lambda B, Sq, Skv, rng: (weft.causal_mask(Skv - Sq), ref_causal(Skv - Sq)),
        "sliding_window": lambda B, Sq, Skv, rng: (weft.sliding_window_mask(9, 3), ref_sliding_window(9, 3)),
        "sliding_window_causal": lambda B, Sq, Skv, rng: (
            weft.sliding_window_mask(20, 0),
            ref_sliding_window(20, 0),
        ),
        "prefix_lm": prefix_lm,
        "document": document,
        "document_causal": document_causal,
        "chunked_causal": lambda B, Sq, Skv, rng: (weft.chunked_causal_mask(16), ref_chunked_causal(16)),
        "and_masks": lambda B, Sq, Skv, rng: (
            weft.and_masks(weft.causal_mask(), weft.sliding_window_mask(12, 12), weft.chunked_causal_mask(24)),
            ref_and(ref_causal(), ref_sliding_window(12, 12), ref_chunked_causal(24)),
        ),
        "or_masks": lambda B, Sq, Skv, rng: (
            weft.or_masks(weft.sliding_window_mask(2, 2), weft.causal_mask(-30)),
            ref_or(ref_sliding_window(2, 2), ref_causal(-30)),
        ),
        "operators": lambda B, Sq, Skv, rng: (
            (weft.causal_mask() & weft.sliding_window_mask(7, 0)) | weft.chunked_causal_mask(5),
            ref_or(ref_and(ref_causal(), ref_sliding_window(7, 0)), ref_chunked_causal(5)),
        ),
        "mask_expr": lambda B, Sq, Skv, rng: (
            weft.mask_expr("q_idx >= kv_idx || kv_idx < 5"),
            lambda b, h, q, kv: (q >= kv) | (kv < 5),
        ),
        "mask_expr_tensor": expr_with_tensor,
        "head_dependent": lambda B, Sq, Skv, rng: (
            weft.mask_expr("kv_idx <= q_idx + h * 4"),
            lambda b, h, q, kv: kv <= q + h * 4,
        ),
    }


MASKS = mask_cases()
