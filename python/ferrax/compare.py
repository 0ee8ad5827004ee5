"""Side by side: jax programs run on stock jaxlib, then on ferrax (``ferrax.install()``), on
the local default device. Prints a table of results and timings.

    python -m ferrax.compare [--repeats N]
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import ferrax

jax.config.update("jax_enable_x64", True)


def _matrices(rng, dtype, shape):
    a = rng.standard_normal(shape)
    if np.issubdtype(dtype, np.complexfloating):
        a = a + 1j * rng.standard_normal(shape)
    return jnp.asarray(a.astype(dtype))


def _pivots(rng, batch, k, n):
    # Valid LAPACK pivots (0-based): row i swaps with some row in [i, n).
    return jnp.asarray(rng.integers(np.arange(k), n, size=(batch, k)).astype(np.int32))


def _cases(rng):
    """(operation, dtype label, shape label, function, arguments)."""
    key = jax.random.key(int(rng.integers(2**31)))
    cases = []
    for dtype in (np.float32, np.float64, np.complex64, np.complex128):
        for shape in ((4096, 8, 8), (128, 64, 64)):
            cases.append(("lax.linalg.lu", dtype, shape,
                          jax.lax.linalg.lu, (_matrices(rng, dtype, shape),)))
        cases.append(("jax.scipy.linalg.lu", dtype, (512, 512),
                      jax.scipy.linalg.lu, (_matrices(rng, dtype, (512, 512)),)))
    spd = lambda dtype, shape: (lambda a: a @ jnp.conj(jnp.swapaxes(a, -1, -2))
                                + shape[-1] * jnp.eye(shape[-1], dtype=dtype))(
        _matrices(rng, dtype, shape))
    cases += [
        ("jnp.linalg.cholesky", np.float64, (512, 32, 32), jnp.linalg.cholesky,
         (spd(np.float64, (512, 32, 32)),)),
        ("jax.scipy.linalg.solve_triangular", np.complex64, (256, 32, 32),
         lambda a, b: jax.scipy.linalg.solve_triangular(a, b, lower=True),
         (spd(np.complex64, (256, 32, 32)), _matrices(rng, np.complex64, (256, 32, 4)))),
        ("jnp.linalg.qr", np.float32, (512, 32, 32), jnp.linalg.qr,
         (_matrices(rng, np.float32, (512, 32, 32)),)),
        ("jnp.linalg.eigh", np.complex128, (128, 32, 32), jnp.linalg.eigh,
         (spd(np.complex128, (128, 32, 32)),)),
        ("jnp.linalg.svd", np.float64, (128, 32, 32), jnp.linalg.svd,
         (_matrices(rng, np.float64, (128, 32, 32)),)),
        ("jnp.linalg.solve", np.float64, (256, 32, 32), jnp.linalg.solve,
         (_matrices(rng, np.float64, (256, 32, 32)), _matrices(rng, np.float64, (256, 32, 1)))),
        ("jnp.linalg.det", np.complex128, (1024, 16, 16), jnp.linalg.det,
         (_matrices(rng, np.complex128, (1024, 16, 16)),)),
        ("jnp.linalg.inv", np.float32, (1, 1024, 1024), jnp.linalg.inv,
         (_matrices(rng, np.float32, (1, 1024, 1024)),)),
        ("lax.linalg.lu_pivots_to_permutation", np.int32, (16384, 32),
         lambda p: jax.lax.linalg.lu_pivots_to_permutation(p, 32), (_pivots(rng, 16384, 32, 32),)),
        ("jax.random.bits", np.uint32, (1 << 22,),
         lambda k: jax.random.bits(k, (1 << 22,)), (key,)),
        ("jax.random.normal", np.float32, (1 << 20,),
         lambda k: jax.random.normal(k, (1 << 20,), np.float32), (key,)),
        ("jax.random.split", np.uint32, (1 << 16,),
         lambda k: jax.random.key_data(jax.random.split(k, 1 << 16)), (key,)),
    ]
    return cases


def _time(fn, args, repeats):
    jax.block_until_ready(fn(*args))  # compile and warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def _difference(stock, ours):
    """'exact' when every output is bit-identical, else the largest relative difference."""
    worst = 0.0
    for s, o in zip(jax.tree.leaves(stock), jax.tree.leaves(ours)):
        s, o = np.asarray(s), np.asarray(o)
        if s.shape != o.shape or s.dtype != o.dtype:
            return f"MISMATCH {s.dtype}{s.shape} vs {o.dtype}{o.shape}"
        if np.array_equal(s, o, equal_nan=np.issubdtype(s.dtype, np.inexact)):
            continue
        if not np.issubdtype(s.dtype, np.inexact):
            return "MISMATCH"
        scale = max(float(np.nanmax(np.abs(s))), np.finfo(s.dtype).tiny)
        worst = max(worst, float(np.nanmax(np.abs(s - o))) / scale)
    return "exact" if worst == 0 else f"{worst:.1e}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20, help="timed calls per case")
    args = parser.parse_args(argv)

    rng = np.random.default_rng()
    device = jax.devices()[0]
    print(f"ferrax {ferrax.__version__} | jax {jax.__version__} | device {device.platform}:"
          f" {device.device_kind} | median of {args.repeats} calls, jitted, ms")
    header = ("operation", "dtype", "shape", "jaxlib", "ferrax", "speedup", "difference",
              "ferrax target in HLO")
    rows = []
    for name, dtype, shape, fn, fn_args in _cases(rng):
        ferrax.uninstall()
        stock_fn = jax.jit(fn)
        stock = stock_fn(*fn_args)
        stock_ms = _time(stock_fn, fn_args, args.repeats)
        ferrax.install()
        ours_fn = jax.jit(fn)
        hlo = ours_fn.lower(*fn_args).as_text()
        targets = sorted({t for t in ferrax.target_names() if t in hlo})
        ours = ours_fn(*fn_args)
        ours_ms = _time(ours_fn, fn_args, args.repeats)
        rows.append((name, np.dtype(dtype).name, "x".join(map(str, shape)), f"{stock_ms:.3f}",
                     f"{ours_ms:.3f}", f"{stock_ms / ours_ms:.2f}x", _difference(stock, ours),
                     ", ".join(targets) or "NONE"))
    ferrax.uninstall()
    widths = [max(len(str(r[i])) for r in (header, *rows)) for i in range(len(header))]
    for row in (header, tuple("-" * w for w in widths), *rows):
        print(" | ".join(str(c).ljust(w) for c, w in zip(row, widths)))
    failures = [r for r in rows if r[-1] == "NONE" or r[-2].startswith("MISMATCH")]
    if failures:
        raise SystemExit(f"{len(failures)} case(s) did not run on ferrax or disagree with jaxlib")


if __name__ == "__main__":
    main()
