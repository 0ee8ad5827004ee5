"""CPU BCOO products: ``M @ x`` for a ``jax.experimental.sparse.BCOO`` matrix ``M`` in stock jax
(XLA's gather, multiply and scatter-add) against the same code after ``ferrax.install()``
(``ferrax_coo_sparse_dense``), jitted, interleaved call by call in one process.

Matrices of about 10^6 entries: the 2-D Laplacian (5-point stencil, sorted as jax sorts) on a
448×448 grid, and random entries (sorted, and unsorted) in a 10^5 × 10^5 matrix; right-hand
sides a vector, or 8 columns; ``x @ M`` (the transpose) too; float32 and float64. Prints a table
with the ratios (calls interleaved, and each side's calls back to back), writes ``benches/results/bcoo.json`` and ``bcoo.png``.

    python benches/bcoo.py [--quick] [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

import jax
import numpy as np
import scipy.sparse as sps
from jax.experimental import sparse

import ferrax

jax.config.update("jax_enable_x64", True)
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from cpu_linalg import interleaved_ms, ratio_bars  # noqa: E402

# (matrix, right-hand side columns (None: a vector), product, dtype)
CASES = [(m, cols, p, d) for d in ("float64", "float32") for m in ("laplacian", "random")
         for cols in (None, 8) for p in ("M@x", "x@M")] + [
    ("random-unsorted", None, "M@x", "float64"), ("random-unsorted", 8, "M@x", "float64")]
QUICK = [("laplacian", None, "M@x", "float64"), ("random", None, "M@x", "float64"),
         ("laplacian", 8, "M@x", "float32")]
PRODUCTS = {"M@x": lambda m, x: m @ x, "x@M": lambda m, x: (x.T @ m).T}


def matrix(kind, rng):
    if kind == "laplacian":
        one = sps.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(448, 448))
        return sparse.BCOO.from_scipy_sparse(sps.kronsum(one, one).tocoo()).sort_indices()
    n, nnz = 100_000, 1_000_000
    a = sps.coo_matrix((rng.standard_normal(nnz), (rng.integers(0, n, nnz),
                                                   rng.integers(0, n, nnz))), shape=(n, n))
    m = sparse.BCOO.from_scipy_sparse(a)
    return m if kind == "random-unsorted" else m.sort_indices()


def measure(case, repeats, rng):
    kind, cols, product, dtype = case
    m = matrix(kind, rng)
    m = sparse.BCOO((m.data.astype(dtype), m.indices), shape=m.shape,
                    indices_sorted=m.indices_sorted)
    k = m.shape[0] if product == "x@M" else m.shape[1]
    x = rng.standard_normal((k,) if cols is None else (k, cols)).astype(dtype)
    arg = (m, x)
    fn = lambda args: PRODUCTS[product](*args)
    stock = jax.jit(fn).lower(arg).compile()
    ferrax.install()
    try:
        lowered = jax.jit(fn).lower(arg)
        assert "ferrax_coo_sparse_dense" in lowered.as_text()
        ours = lowered.compile()
    finally:
        ferrax.uninstall()
    expected, got = np.asarray(stock(arg)), np.asarray(ours(arg))
    assert np.allclose(got, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())
    stock_ms, ferrax_ms = interleaved_ms([stock, ours], arg, repeats)
    # Back to back as well: each side's calls in a run, as in an iterative solver's loop (the
    # interleaved calls evict each other's entries from the caches).
    stock_run_ms, = interleaved_ms([stock], arg, repeats)
    ferrax_run_ms, = interleaved_ms([ours], arg, repeats)
    return {"matrix": kind, "nnz": int(m.nse), "cols": cols, "product": product, "dtype": dtype,
            "stock_ms": stock_ms, "ferrax_ms": ferrax_ms, "stock_run_ms": stock_run_ms,
            "ferrax_run_ms": ferrax_run_ms}


def label(r):
    rhs = "vector" if r["cols"] is None else f"{r['cols']} cols"
    return f"{r['matrix']} {r['product']} {rhs} {r['dtype']}"


def plot(results, path):
    ratio_bars(path, [label(r) for r in results],
               [r["stock_ms"] / r["ferrax_ms"] for r in results],
               "BCOO @ dense (~10^6 entries): stock jax time / installed time", figsize=(8, 4))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="three cases, 5 repeats")
    parser.add_argument("--repeats", type=int, default=21)
    args = parser.parse_args(argv)
    cases, repeats = (QUICK, 5) if args.quick else (CASES, args.repeats)
    rng = np.random.default_rng()
    results = [measure(case, repeats, rng) for case in cases]
    print(f"CPU, {len(os.sched_getaffinity(0))} cores, jax {jax.__version__}, median of "
          f"{repeats} interleaved calls (ms)")
    header = (f"{'case':<40} {'nnz':>8} {'stock jax':>10} {'ferrax':>8} {'ratio':>6} "
              f"{'back to back':>13}")
    print(header + "\n" + "-" * len(header))
    for r in results:
        print(f"{label(r):<40} {r['nnz']:>8} {r['stock_ms']:>10.2f} {r['ferrax_ms']:>8.2f} "
              f"{r['stock_ms'] / r['ferrax_ms']:>5.2f}x {r['stock_run_ms'] / r['ferrax_run_ms']:>12.2f}x")
    directory = pathlib.Path(__file__).resolve().parent / "results"
    directory.mkdir(exist_ok=True)
    (directory / "bcoo.json").write_text(json.dumps(results, indent=1))
    plot(results, directory / "bcoo.png")
    print(f"wrote {directory}/bcoo.json and bcoo.png")


if __name__ == "__main__":
    main()
