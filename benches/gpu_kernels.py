"""ferrax's CUDA kernels (issue #4) against stock jax on the local GPU, in one process.

Every time is the median over repeated runs of one jitted function that applies the op to
``R`` distinct inputs back to back (so launch gaps and host dispatch stay out of the per-op
time), divided by ``R``. Bandwidths count the fewest bytes each op must move (inputs read once,
outputs written once) and are compared with a device-to-device copy timed the same way.
Prints a table; writes ``gpu_kernels.json`` to ``--out``.

    python benches/gpu_kernels.py [--out DIR] [--quick]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import pathlib
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import config as jax_config
from jax._src.random import threefry2x32 as jax_threefry

import ferrax

REPEATS = 7


def median_ms(run, repeats=REPEATS):
    """Median wall time of ``run()`` to completion, in ms, after one warm-up call."""
    jax.block_until_ready(run())
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(run())
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def per_call_ms(fn, inputs):
    """Median ms per application of ``fn`` over the input tuples in ``inputs``."""
    batch = jax.jit(lambda sets: [fn(*s) for s in sets])
    return median_ms(lambda: batch(inputs)) / len(inputs)


def chained_ms(update, factor, vectors):
    """Median ms per update when the updates run back to back on one factor in one jit: the
    op aliases its result to its input, so apart from the first, XLA updates in place instead
    of copying a non-donated input before each call."""
    chain = jax.jit(lambda r, ws: functools.reduce(update, ws, r))
    return median_ms(lambda: chain(factor, vectors)) / len(vectors)


def stock_and_ferrax(fn, *inputs, timer=per_call_ms):
    """``fn`` timed with jax's own lowerings, then after ``ferrax.install()``."""
    ferrax.uninstall()
    stock = timer(fn, *inputs)
    ferrax.install()
    try:
        ours = timer(fn, *inputs)
    finally:
        ferrax.uninstall()
    return stock, ours


def u32(rng, shape):
    return jnp.asarray(rng.integers(0, 2**32, shape, dtype=np.uint32))


def pivots(rng, batch, k):
    """LAPACK-like 0-based swaps: pivots[..., i] in [i, k)."""
    return jnp.asarray(np.stack([rng.integers(i, k, batch) for i in range(k)], -1).astype(np.int32))


def factor(rng, batch, n, dtype):
    """An upper Cholesky factor of a well-conditioned matrix."""
    x = rng.standard_normal((*batch, n, n)).astype(dtype) / np.sqrt(n)
    a = x @ np.swapaxes(x, -1, -2) + np.eye(n, dtype=dtype)
    return jnp.asarray(np.swapaxes(np.linalg.cholesky(a), -1, -2).astype(dtype))


def vector(rng, batch, n, dtype):
    """A small update vector (chained updates keep the factor well conditioned)."""
    return jnp.asarray((rng.standard_normal((*batch, n)) / 8).astype(dtype))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "benches/results"))
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    scale = 4 if args.quick else 1
    rows = []

    def row(op, size, bytes_moved, stock_ms, ferrax_ms, goal):
        rows.append(dict(op=op, size=size, bytes=bytes_moved, stock_ms=stock_ms,
                         ferrax_ms=ferrax_ms, goal=goal))
        print(f"  {op:<28} {size:<16} stock {stock_ms if stock_ms is None else round(stock_ms, 4)}"
              f" ferrax {ferrax_ms:.4f} ms", flush=True)

    # The first ferrax call on a device loads (and the driver JIT-compiles) the PTX module.
    start = time.perf_counter()
    jax.block_until_ready(ferrax.linalg.lu_pivots_to_permutation(jnp.zeros((1, 1), jnp.int32), 1))
    print(f"first ferrax GPU call (PTX module load + JIT): {time.perf_counter() - start:.2f} s")

    n = 2**28 // scale
    copy_ms = per_call_ms(lambda x: x + jnp.uint32(1), [(u32(rng, n),) for _ in range(4)])
    copy_bw = 8 * n / copy_ms / 1e6  # GB/s: read + write
    print(f"copy bandwidth {copy_bw:.0f} GB/s", flush=True)

    # threefry2x32, the element-wise contract: jaxlib's kernel vs ferrax's (both asked for with
    # jax_threefry_gpu_kernel_lowering) and XLA's fused arithmetic as stock.
    n = 2**26 // scale
    sets = [tuple(u32(rng, n) for _ in range(4)) for _ in range(4)]
    hash_ = lambda *w: jax_threefry.threefry2x32_p.bind(*w)
    fused = per_call_ms(hash_, sets)
    with jax_config.threefry_gpu_kernel_lowering(True):
        stock, ours = stock_and_ferrax(hash_, sets)
    row("threefry2x32 (jaxlib kernel)", f"2^{n.bit_length() - 1}", 24 * n, stock, ours, "≥90% copy BW")
    row("threefry2x32 (XLA fused)", f"2^{n.bit_length() - 1}", 24 * n, fused, ours, "")

    # random bits: XLA's fused threefry vs ferrax's kernel with in-kernel counters.
    n = 2**28 // scale
    keys = [(jax.random.key(i),) for i in range(4)]
    stock, ours = stock_and_ferrax(lambda k: jax.random.bits(k, (n,), jnp.uint32), keys)
    row("random.bits u32", f"2^{n.bit_length() - 1}", 4 * n, stock, ours, "≥2x stock")
    stock, ours = stock_and_ferrax(lambda k: jax.random.normal(k, (n // 2,), jnp.float32), keys)
    row("random.normal f32", f"2^{n.bit_length() - 2}", 2 * n, stock, ours, "")

    for batch, k, goal in [(2**20 // scale, 32, "≤0.1 ms"), (2**16 // scale, 128, ""),
                           (1, 16384, "≤0.05 ms"), (1, 1024, "")]:
        sets = [(pivots(rng, (batch,), k),) for _ in range(8 if batch > 1 else 32)]
        stock, ours = stock_and_ferrax(
            lambda p: jax.lax.linalg.lu_pivots_to_permutation(p, k), sets)
        row("lu_pivots_to_permutation", f"{batch}x{k}", 8 * batch * k, stock, ours, goal)

    for n, goal in [(256, ""), (1024, ""), (4096, "≤0.1 ms")]:
        r = factor(rng, (), n, np.float64)
        ws = [vector(rng, (), n, np.float64) for _ in range(8)]
        stock, ours = stock_and_ferrax(jax.lax.linalg.cholesky_update, r, ws, timer=chained_ms)
        row("cholesky_update f64", f"{n}", 8 * n * (n + 1) + 16 * n, stock, ours, goal)

    # Batched: jax's own primitive cannot vmap on GPU, so ferrax alone, against the roofline.
    for batch, n, dtype in [(16384, 32, np.float32), (1024, 128, np.float64), (65536, 8, np.float32)]:
        batch //= scale
        r = factor(rng, (batch,), n, dtype)
        ws = [vector(rng, (batch,), n, dtype) for _ in range(8)]
        ours = chained_ms(ferrax.linalg.cholesky_update, r, ws)
        size = np.dtype(dtype).itemsize
        row(f"cholesky_update {np.dtype(dtype).name} batched", f"{batch}x{n}",
            2 * size * batch * (n * n + n), None, ours, "≥50% copy BW")

    # Tridiagonal solves (issue #23): cuSPARSE's gtsv2 (stock) against ferrax's kernel, a
    # thread per system, ferrax forced at every size so that the table shows where
    # GPU_TRIDIAGONAL_MIN_BATCH belongs; and both perturbed kernels (a thread per system each).
    for batch, m, nrhs in [(65536, 64, 1), (1024, 256, 1), (64, 1024, 1), (256, 128, 8),
                           (1, 2**18, 1)]:
        batch = max(1, batch // scale)
        draw = lambda *shape: jnp.asarray(rng.standard_normal(shape), jnp.float32)
        sets = [(draw(batch, m), draw(batch, m) + 3, draw(batch, m), draw(batch, m, nrhs))
                for _ in range(4)]
        moved = 4 * batch * m * (3 + 2 * nrhs)
        with ferrax._install.ferrax_on_gpu_everywhere():
            stock, ours = stock_and_ferrax(jax.lax.linalg.tridiagonal_solve, sets)
            row("tridiagonal_solve f32", f"{batch}x{m}x{nrhs}", moved, stock, ours, "≥1x")
            if nrhs == 1 and batch > 1:
                stock, ours = stock_and_ferrax(functools.partial(
                    jax.lax.linalg.tridiagonal_solve, perturb_singular=True), sets)
                row("tridiagonal_solve perturbed", f"{batch}x{m}x{nrhs}", moved, stock, ours, "≥1x")

    # Sparse products (issue #23), f32: a 2-D Laplacian (5 entries a row) and rows of 64
    # random columns. BCSR under jax_bcoo_cusparse_lowering: jaxlib's cuSPARSE SpMV/SpMM
    # (stock) against ferrax's CSR kernel; BCOO: jax's default on GPUs, XLA's gather and
    # scatter-add (stock), against ferrax's COO kernel (forced: GPU_EVERYWHERE).
    import scipy.sparse
    from jax.experimental import sparse
    side = 1000 // int(np.sqrt(scale))
    laplacian = scipy.sparse.kronsum(*[scipy.sparse.diags(
        [-1, 2, -1], [-1, 0, 1], (side, side))] * 2, format="csr").astype(np.float32)
    rows_64 = 100_000 // scale
    random_rows = scipy.sparse.csr_matrix((
        rng.standard_normal(64 * rows_64).astype(np.float32),
        rng.integers(0, rows_64, 64 * rows_64), np.arange(0, 64 * rows_64 + 1, 64)),
        (rows_64, rows_64))
    for label, a in ((f"laplacian {side}^2", laplacian), (f"{rows_64}x64 random", random_rows)):
        a.sort_indices()
        coo = a.tocoo()
        csr_arrays = (jnp.asarray(a.data), jnp.asarray(a.indices.astype(np.int32)),
                      jnp.asarray(a.indptr.astype(np.int32)))
        coo_arrays = (jnp.asarray(coo.data),
                      jnp.asarray(np.stack([coo.row, coo.col], 1).astype(np.int32)))
        for n in (None, 8):
            tail = () if n is None else (n,)
            vectors = [jnp.asarray(rng.standard_normal(a.shape[1:] + tail), jnp.float32)
                       for _ in range(4)]
            moved = 8 * a.nnz + 4 * a.shape[0] + 8 * a.shape[0] * (n or 1)
            size = f"{label}, n={n or 'vec'}"
            # The matrix passed in, not closed over (jit would embed it as a constant).
            bcsr = lambda d, i, p, v, shape=a.shape: sparse.BCSR((d, i, p), shape=shape) @ v
            bcoo = lambda d, i, v, shape=a.shape: sparse.BCOO((d, i), shape=shape) @ v
            with jax_config.bcoo_cusparse_lowering(True):
                stock, ours = stock_and_ferrax(bcsr, [(*csr_arrays, v) for v in vectors])
            row("BCSR @ dense (cuSPARSE)", size, moved, stock, ours, "≥1x")
            with ferrax._install.ferrax_on_gpu_everywhere():
                stock, ours = stock_and_ferrax(bcoo, [(*coo_arrays, v) for v in vectors])
            row("BCOO @ dense (XLA scatter)", size, moved + 4 * a.nnz, stock, ours, "≥1x")

    # Sparse solves (issue #23): jax's spsolve on a 2-D Laplacian, f32: jaxlib's csrlsvqr
    # (cuSOLVER's sparse QR on the GPU) against ferrax_spsolve (faer on the host, copies both
    # ways); two right-hand sides, one call each.
    from jax.experimental.sparse import linalg as jax_sparse_linalg
    for side in (100, 250 // int(np.sqrt(scale))):
        a = scipy.sparse.kronsum(*[scipy.sparse.diags([-1, 4, -1], [-1, 0, 1], (side, side))] * 2,
                                 format="csr")
        a.sort_indices()
        operands = (jnp.asarray(a.data, jnp.float32), jnp.asarray(a.indices.astype(np.int32)),
                    jnp.asarray(a.indptr.astype(np.int32)))
        sets = [(*operands, jnp.asarray(rng.standard_normal(side * side), jnp.float32))
                for _ in range(2)]
        moved = 8 * a.nnz + 12 * side * side
        stock, ours = stock_and_ferrax(jax_sparse_linalg.spsolve, sets)
        row("spsolve f32 (Laplacian)", f"n={side * side}", moved, stock, ours, "≥1x csrlsvqr")

    # Batched factorizations (issue #5) at its goal sizes: jax's functions, stock vs installed
    # with ferrax's targets forced at every size (its kernels up to 128, its cuSOLVER/cuBLAS
    # choices past them), whatever gpu_thresholds.json routes today.
    for name, fn, n, batch, dtype, goal in [
            ("lu", jax.lax.linalg.lu, 8, 65536, np.float32, "≥5x"),
            ("lu", jax.lax.linalg.lu, 32, 16384, np.float32, "≥5x"),
            ("cholesky", jnp.linalg.cholesky, 8, 65536, np.float32, "≥5x"),
            ("cholesky", jnp.linalg.cholesky, 32, 16384, np.float32, "≥5x"),
            ("qr", jnp.linalg.qr, 8, 65536, np.float32, "≥20x"),
            ("qr", jnp.linalg.qr, 32, 16384, np.float32, "≥20x"),
            ("qr", jnp.linalg.qr, 32, 16384, np.float64, "≥20x"),
            ("lu", jax.lax.linalg.lu, 128, 1024, np.float32, "≥3x"),
            ("qr", jnp.linalg.qr, 128, 1024, np.float32, "≥10x"),
            ("cholesky", jnp.linalg.cholesky, 128, 1024, np.float32, ""),
            ("lu", jax.lax.linalg.lu, 512, 16, np.float32, "≥0.95x"),
            ("qr", jnp.linalg.qr, 512, 16, np.float32, "≥0.95x (torch 29.7 ms)"),
            ("cholesky", jnp.linalg.cholesky, 512, 16, np.float32, "≥0.95x")]:
        batch = max(1, batch // scale)
        a = rng.standard_normal((batch, n, n)).astype(dtype)
        if name == "cholesky":
            a = a @ np.swapaxes(a, -1, -2) + n * np.eye(n, dtype=dtype)
        sets = [(jnp.asarray(a * (1 + i / 8)),) for i in range(4)]
        with ferrax._install.ferrax_on_gpu_everywhere():
            stock, ours = stock_and_ferrax(fn, sets)
        size = np.dtype(dtype).itemsize
        moved = (2 if name != "qr" else 3) * size * batch * n * n  # read A; write factor(s)
        row(f"{name} {np.dtype(dtype).name}", f"{batch}x{n}x{n}", moved, stock, ours, goal)

    # The RNN (issue #22): jax.experimental.rnn.lstm and its gradient, jaxlib's cuDNN target
    # (which copies the lengths to the host and synchronizes every call) against ferrax's;
    # the bytes are the inputs and outputs (the recurrence is bound by its steps).
    from jax.experimental import rnn as jax_rnn
    for batch, steps, size, layers, bidirectional in [(32, 100, 128, 2, True), (64, 256, 512, 1, False),
                                                    (256, 50, 256, 2, True)]:
        batch = max(1, batch // scale)
        directions = 2 if bidirectional else 1
        w = jax_rnn.init_lstm_weight(jax.random.key(0), size, size, layers, bidirectional)
        normal = lambda *shape: jnp.asarray(rng.standard_normal(shape), jnp.float32)
        sets = [(normal(batch, steps, size), normal(layers * directions, batch, size),
                 normal(layers * directions, batch, size)) for _ in range(2)]
        lengths = jnp.full((batch,), steps, jnp.int32)
        lstm = lambda x, h0, c0: jax_rnn.lstm(x, h0, c0, w, lengths, size, size, layers, 0.0,
                                              bidirectional)
        grad = jax.grad(lambda x, h0, c0: sum(jnp.sum(o) for o in lstm(x, h0, c0)), (0, 1, 2))
        label = f"{batch}x{steps}x{size}, L{layers}{'bi' if bidirectional else ''}"
        moved = 4 * (2 * batch * steps * size * (1 + directions) + w.size)
        for name, fn in (("lstm forward", lstm), ("lstm forward+backward", grad)):
            stock, ours = stock_and_ferrax(fn, sets)
            row(name, label, moved, stock, ours, "≥1x (no host sync)")

    print()
    print(f"GPU: {jax.devices()[0].device_kind}; jax {jax.__version__}; copy bandwidth "
          f"{copy_bw:.0f} GB/s (read + write)")
    header = f"{'op':<32} {'size':<12} {'stock ms':>10} {'ferrax ms':>10} {'speedup':>8} " \
             f"{'ferrax GB/s':>11} {'% copy':>7}  goal"
    print(header)
    print("-" * len(header))
    for r in rows:
        bw = r["bytes"] / r["ferrax_ms"] / 1e6
        stock = f"{r['stock_ms']:10.4f}" if r["stock_ms"] is not None else f"{'-':>10}"
        speedup = f"{r['stock_ms'] / r['ferrax_ms']:7.2f}x" if r["stock_ms"] is not None else f"{'-':>8}"
        print(f"{r['op']:<32} {r['size']:<12} {stock} {r['ferrax_ms']:10.4f} {speedup} "
              f"{bw:11.0f} {100 * bw / copy_bw:6.1f}%  {r['goal']}")
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_kernels.json").write_text(json.dumps(
        dict(device=jax.devices()[0].device_kind, jax=jax.__version__, copy_gb_s=copy_bw,
             rows=rows), indent=1))


if __name__ == "__main__":
    main()
