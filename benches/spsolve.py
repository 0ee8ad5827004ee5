"""CPU sparse direct solves: ``jax.experimental.sparse.linalg.spsolve`` in stock jax (a Python
callback into scipy's SuperLU) against the same code after ``ferrax.install()``
(``ferrax_spsolve``: faer's sparse LU), jitted, interleaved call by call in one process.

Matrices: the 2-D Laplacian (5-point stencil) on a k×k grid, n = k², float64, with one
right-hand side (symmetric positive definite: ferrax factors it by Cholesky), and the same with
a convection term (not symmetric: LU); then batches that stock jax can only loop over in Python (its spsolve has no
batching rule): 16 right-hand sides for one matrix, and 16 matrices of one pattern (vmap over
the values), each against a jitted ``lax.map`` of stock jax's spsolve. Prints a table with
the ratios, writes ``benches/results/spsolve.json`` and ``spsolve.png``.

    python benches/spsolve.py [--quick] [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sps
from jax import lax
from jax.experimental.sparse import linalg as jax_sparse_linalg

import ferrax

jax.config.update("jax_enable_x64", True)
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from cpu_linalg import interleaved_ms, ratio_bars  # noqa: E402

# (grid side k, systems, what varies across the systems)
CASES = [(100, 1, "-"), (316, 1, "-"), (100, 1, "convection"), (316, 1, "convection"),
         (100, 16, "rhs"), (100, 16, "values"), (30, 64, "values")]
QUICK = CASES[:1] + CASES[2:3] + CASES[4:6]


def laplacian(k, convection=False):
    one = sps.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(k, k))
    a = sps.kronsum(one, one)
    if convection:  # an upwind first difference along one axis
        a = a + sps.kron(sps.eye(k), sps.diags([-0.5, 0.5], [-1, 0], shape=(k, k)))
    a = a.tocsr()
    a.sort_indices()
    return a


def measure(case, repeats, rng):
    k, systems, varies = case
    a = laplacian(k, varies == "convection")
    n = a.shape[0]
    indices, indptr = jnp.asarray(a.indices, jnp.int32), jnp.asarray(a.indptr, jnp.int32)
    if varies == "values":
        data = a.data * rng.uniform(1, 2, (systems, 1))
        b = rng.standard_normal((systems, n))
    else:
        data = a.data
        b = rng.standard_normal((systems, n)) if systems > 1 else rng.standard_normal(n)
    one = lambda d, b: jax_sparse_linalg.spsolve(d, indices, indptr, b)
    if systems == 1:
        fn = one
    elif varies == "rhs":
        fn = lambda d, b: lax.map(lambda b: one(d, b), b)
    else:
        fn = lambda d, b: lax.map(lambda args: one(*args), (d, b))
    batched = (lambda d, b: jax.vmap(one, (0 if varies == "values" else None, 0))(d, b)
               if systems > 1 else one(d, b))
    arg = (jnp.asarray(data), jnp.asarray(b))
    stock = jax.jit(lambda args: fn(*args)).lower(arg).compile()
    ferrax.install()
    try:
        loop = jax.jit(lambda args: fn(*args)).lower(arg)
        vmapped = jax.jit(lambda args: batched(*args)).lower(arg)
        assert "ferrax_spsolve" in vmapped.as_text()
        loop, vmapped = loop.compile(), vmapped.compile()
    finally:
        ferrax.uninstall()
    x_stock, x_ours = np.asarray(stock(arg)), np.asarray(vmapped(arg))
    assert np.allclose(x_stock, x_ours, rtol=1e-8, atol=1e-8 * np.abs(x_stock).max())
    fns = [stock, vmapped] if systems == 1 else [stock, loop, vmapped]
    times = interleaved_ms(fns, arg, repeats)
    return {"k": k, "n": n, "nnz": int(a.nnz), "systems": systems, "varies": varies,
            "stock_ms": times[0], "ferrax_ms": times[-1],
            "ferrax_loop_ms": times[1] if systems > 1 else times[-1]}


def label(r):
    what = {"-": "", "convection": " convection", "rhs": f" · {r['systems']} rhs", "values": f" · {r['systems']} matrices"}
    return f"n={r['n']}{what[r['varies']]}"


def plot(results, path):
    ratio_bars(path, [label(r) for r in results],
               [r["stock_ms"] / r["ferrax_ms"] for r in results],
               "spsolve (2-D Laplacian, f64): stock jax time / installed time")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="three cases, 5 repeats")
    parser.add_argument("--repeats", type=int, default=11)
    args = parser.parse_args(argv)
    cases, repeats = (QUICK, 5) if args.quick else (CASES, args.repeats)
    rng = np.random.default_rng()
    results = [measure(case, repeats, rng) for case in cases]
    print(f"CPU, {len(os.sched_getaffinity(0))} cores, jax {jax.__version__}, median of "
          f"{repeats} interleaved calls (ms), float64, 2-D Laplacian")
    header = (f"{'case':<26} {'nnz':>8} {'stock jax':>10} {'ferrax loop':>12} "
              f"{'ferrax vmap':>12} {'ratio':>6}")
    print(header + "\n" + "-" * len(header))
    for r in results:
        print(f"{label(r):<26} {r['nnz']:>8} {r['stock_ms']:>10.2f} {r['ferrax_loop_ms']:>12.2f} "
              f"{r['ferrax_ms']:>12.2f} {r['stock_ms'] / r['ferrax_ms']:>5.2f}x")
    directory = pathlib.Path(__file__).resolve().parent / "results"
    directory.mkdir(exist_ok=True)
    (directory / "spsolve.json").write_text(json.dumps(results, indent=1))
    plot(results, directory / "spsolve.png")
    print(f"wrote {directory}/spsolve.json and spsolve.png")


if __name__ == "__main__":
    main()
