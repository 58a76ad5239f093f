#!/usr/bin/env bash
# pip_install_check.sh SOURCE SCRATCH VERSION
# `pip install SOURCE` into a fresh virtual environment, as a Python user
# installs weft (pyproject.toml: scikit-build-core from PyPI builds the module
# with the project's CMake); then, from a directory outside every tree, the
# module imports, reports the project's version (weft.__version__ and the
# installed distribution's metadata) and computes flex attention.
set -euo pipefail
source_dir=$1 scratch=$2 version=$3
rm -rf "$scratch"
mkdir -p "$scratch/elsewhere"
/usr/bin/python3 -m venv --system-site-packages "$scratch/venv"
"$scratch/venv/bin/pip" install --quiet --disable-pip-version-check "$source_dir"
cd "$scratch/elsewhere"
"$scratch/venv/bin/python" - "$version" "$scratch/venv" <<'PY'
import importlib.metadata, os, sys
import numpy as np
import weft

expected, venv = sys.argv[1], os.path.realpath(sys.argv[2])
assert weft.__version__ == expected, (weft.__version__, expected)
assert importlib.metadata.version("weft") == expected
assert os.path.realpath(weft.__file__).startswith(venv), weft.__file__

# A causal attention against a float64 numpy reference on fresh inputs.
rng = np.random.default_rng()
q, k, v = (rng.standard_normal((1, 2, 64, 32)).astype(np.float32) for _ in range(3))
out = weft.flex_attention(q, k, v, block_mask=weft.create_block_mask(weft.causal_mask(), 1, 1, 64, 64))
s = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k.astype(np.float64)) / np.sqrt(32)
s = np.where(np.tril(np.ones((64, 64), bool)), s, -np.inf)
p = np.exp(s - s.max(-1, keepdims=True))
ref = np.einsum("bhqk,bhkd->bhqd", p / p.sum(-1, keepdims=True), v.astype(np.float64))
err = np.max(np.abs(out - ref)) / np.max(np.abs(ref))
assert err < 1e-5, err
print(f"pip install: weft {weft.__version__} from {weft.__file__}, attention rel. error {err:.1e}")
PY
