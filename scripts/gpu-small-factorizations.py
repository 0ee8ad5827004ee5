#!/usr/bin/env python3
"""GPU check of kernels-ptx's batched small getrf/potrf entries (src/small.rs), run on a CUDA
machine with CuPy (and optionally JAX/SciPy for baselines):

    python3 scripts/gpu-small-factorizations.py path/to/kernels.ptx

Loads the PTX with CuPy, checks results against NumPy/SciPy (P·A = L·U, pivots, info, L·Lᴴ = A,
the untouched triangle) and times the kernels against the memory roofline (read + write each
matrix once) and, where JAX is present, against jax.lax.linalg (cuSOLVER/cuBLAS). The launch
shapes mirror small::getrf_launch / small::potrf_launch (keep them in sync)."""
import os
import sys
import time
import traceback

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # share the GPU with CuPy

import cupy as cp
import numpy as np

PTX = sys.argv[1]
MOD = cp.RawModule(path=PTX)
PEAK_BW = 4.13e12  # H200 bytes/s
NAMES = {np.float32: "f32", np.float64: "f64", np.complex64: "c64", np.complex128: "c128"}
REAL_BYTES = {np.float32: 4, np.float64: 8, np.complex64: 4, np.complex128: 8}


def staged(mats, m, n, size):
    return -(-(mats * n * (m + 1) * size) // 16) * 16


def plan(dtype, m, n, batch):
    """small::plan with the default block (None when too large)."""
    size = np.dtype(dtype).itemsize
    s = max(m, n)
    if s > 64:
        return None
    if s > 32:
        keys = staged(1, m, n, size)
        tags = keys + -(-(64 * REAL_BYTES[dtype]) // 16) * 16
        shared, threads, per = tags + 64 * 4, 64, 1
        variant = "block"
        grid = min(batch, 1 << 20)
    else:
        w = 4 if s <= 4 else 8 if s <= 8 else 16 if s <= 16 else 32
        threads = 128
        while threads > 32 and staged(threads // w, m, n, size) > 48 << 10:
            threads //= 2
        per = threads // w
        shared = staged(per, m, n, size)
        variant = f"w{w}"
        grid = -(-batch // per)
    if shared > 48 << 10:
        return None
    return variant, grid, threads, shared


def col_major(a):
    """(batch, m, n) -> device buffer with each matrix column-major."""
    return cp.asarray(np.ascontiguousarray(a.transpose(0, 2, 1)))


def from_col_major(buf, m, n):
    return cp.asnumpy(buf).reshape(-1, n, m).transpose(0, 2, 1)


def random(dtype, shape, rng):
    x = rng.uniform(-1, 1, shape)
    if np.issubdtype(dtype, np.complexfloating):
        x = x + 1j * rng.uniform(-1, 1, shape)
    return x.astype(dtype)


def getrf(dtype, a, m, n):
    batch = a.shape[0]
    variant, grid, block, shared = plan(dtype, m, n, batch)
    fn = MOD.get_function(f"ferrax_getrf_small_{NAMES[dtype]}_{variant}")
    buf = col_major(a)
    k = min(m, n)
    ipiv = cp.full(batch * k, -7, dtype=np.int32)
    info = cp.full(batch, -7, dtype=np.int32)
    args = (buf, ipiv, info, np.uint32(m), np.uint32(n), np.uint64(batch))
    launch = lambda: fn((grid,), (block,), args, shared_mem=shared)
    return buf, ipiv, info, launch


def potrf(dtype, a, n, lower):
    batch = a.shape[0]
    variant, grid, block, shared = plan(dtype, n, n, batch)
    fn = MOD.get_function(f"ferrax_potrf_small_{NAMES[dtype]}_{variant}")
    buf = col_major(a)
    info = cp.full(batch, -7, dtype=np.int32)
    args = (buf, info, np.uint32(n), np.uint64(batch), np.uint32(lower))
    launch = lambda: fn((grid,), (block,), args, shared_mem=shared)
    return buf, info, launch


def check_getrf(dtype, m, n, batch, rng):
    a = random(dtype, (batch, m, n), rng)
    a[1, :, min(2, n - 1)] = 0  # singular: info = 3 (or n)
    if batch > 2:
        a[2, m // 2, 0] = np.nan
    buf, ipiv, info, launch = getrf(dtype, a, m, n)
    launch()
    cp.cuda.Device().synchronize()
    lu = from_col_major(buf, m, n)
    ipiv = cp.asnumpy(ipiv).reshape(batch, -1)
    info = cp.asnumpy(info)
    k = min(m, n)
    eps = np.finfo(dtype).eps
    worst, bad_piv = 0.0, 0
    try:
        import scipy.linalg as sl
    except ImportError:
        sl = None
    for b in range(batch):
        if b == 2:
            assert np.isnan(lu[b]).any(), "NaN input gave no NaN"
            continue
        pa = a[b].astype(np.complex128)
        for j, p in enumerate(ipiv[b]):
            pa[[j, p - 1]] = pa[[p - 1, j]]
        l = np.tril(lu[b], -1)[:, :k] + np.eye(m, k)
        u = np.triu(lu[b])[:k, :]
        err = np.abs(l @ u - pa).max() / max(np.abs(a[b]).max(), 1e-30)
        worst = max(worst, err)
        if sl is not None and m == n and b != 1:
            bad_piv += int((sl.lu_factor(a[b])[1] + 1 != ipiv[b]).any())
    assert worst < 100 * eps * max(m, n), f"P·A != L·U: {worst}"
    assert info[0] == 0 and (info[3:] == 0).all(), f"info {info[:8]}"
    assert info[1] == min(3, n), f"singular info {info[1]}"
    return f"PA=LU rel err {worst:.1e}, pivots != scipy in {bad_piv}/{batch}"


def spd(dtype, batch, n, rng):
    b = random(dtype, (batch, n, n), rng).astype(np.complex128 if np.iscomplexobj(np.zeros(1, dtype)) else np.float64)
    a = b @ np.conj(b.transpose(0, 2, 1)) + n * np.eye(n)
    return a.astype(dtype)


def check_potrf(dtype, n, batch, lower, rng):
    a = spd(dtype, batch, n, rng)
    marker = np.triu(np.full((n, n), 77.0), 1) if lower else np.tril(np.full((n, n), 77.0), -1)
    a_in = np.where(marker != 0, marker.astype(dtype), a)
    bad = 1 if batch > 1 else None
    if bad is not None:
        a_in[bad, n // 2, n // 2] = -1.0
    buf, info, launch = potrf(dtype, a_in, n, int(lower))
    launch()
    cp.cuda.Device().synchronize()
    f = from_col_major(buf, n, n)
    info = cp.asnumpy(info)
    eps = np.finfo(dtype).eps
    worst = 0.0
    for b in range(batch):
        other = (marker != 0)
        assert (f[b][other] == a_in[b][other]).all(), "other triangle touched"
        if b == bad:
            assert info[b] == n // 2 + 1, f"info {info[b]}"
            continue
        assert info[b] == 0, f"info {info[b]}"
        l = np.tril(f[b]) if lower else np.conj(np.triu(f[b])).T
        err = np.abs(l @ np.conj(l).T - a[b]).max() / np.abs(a[b]).max()
        worst = max(worst, err)
    assert worst < 100 * eps * n, f"L·Lᴴ != A: {worst}"
    return f"LLᴴ=A rel err {worst:.1e}"


def time_launch(launch, fresh, reps=20):
    """Median kernel time (s) over reps, restoring the input before each run."""
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(reps + 3):
        fresh()
        start.record()
        launch()
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop) * 1e-3)
    return float(np.median(times[3:]))


def jax_time(fn, x, reps=20):
    import jax

    jax.config.update("jax_enable_x64", True)

    f = jax.jit(fn)
    f(x)[0].block_until_ready()
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(f(x))
        t.append(time.perf_counter() - t0)
    return float(np.median(t))


def bench_getrf(dtype, n, batch, rng):
    a = random(dtype, (batch, n, n), rng)
    buf, ipiv, info, launch = getrf(dtype, a, n, n)
    orig = buf.copy()
    t = time_launch(launch, lambda: buf.__setitem__(slice(None), orig))
    roof = 2 * a.nbytes / PEAK_BW
    line = f"getrf {NAMES[dtype]:4s} n={n:2d} batch={batch}: {t * 1e3:.4f} ms, roofline {roof * 1e3:.4f} ms ({100 * roof / t:.0f}%)"
    try:
        import jax

        jax.config.update("jax_enable_x64", True)
        x = jax.numpy.asarray(a)
        tj = jax_time(lambda x: jax.lax.linalg.lu(x), x)
        line += f", jax {tj * 1e3:.3f} ms (x{tj / t:.1f})"
    except Exception as e:  # noqa: BLE001
        line += f", jax n/a ({type(e).__name__})"
    return line


def bench_potrf(dtype, n, batch, rng):
    a = spd(dtype, batch, n, rng)
    buf, info, launch = potrf(dtype, a, n, 1)
    orig = buf.copy()
    t = time_launch(launch, lambda: buf.__setitem__(slice(None), orig))
    roof = 2 * a.nbytes / PEAK_BW
    line = f"potrf {NAMES[dtype]:4s} n={n:2d} batch={batch}: {t * 1e3:.4f} ms, roofline {roof * 1e3:.4f} ms ({100 * roof / t:.0f}%)"
    assert (cp.asnumpy(info) == 0).all()
    try:
        import jax

        jax.config.update("jax_enable_x64", True)
        x = jax.numpy.asarray(a)
        tj = jax_time(lambda x: (jax.lax.linalg.cholesky(x),), x)
        line += f", jax {tj * 1e3:.3f} ms (x{tj / t:.1f})"
    except Exception as e:  # noqa: BLE001
        line += f", jax n/a ({type(e).__name__})"
    return line


def run(what, f, *args):
    try:
        print(f"ok   {what}: {f(*args)}", flush=True)
    except Exception:  # noqa: BLE001
        print(f"FAIL {what}:\n{traceback.format_exc()}", flush=True)


def main():
    rng = np.random.default_rng(1)
    for dtype in NAMES:
        for m, n in [(1, 1), (3, 3), (4, 4), (7, 5), (8, 8), (13, 13), (16, 16), (32, 32), (32, 20), (20, 32), (48, 48), (64, 64)]:
            if plan(dtype, m, n, 300) is not None:
                run(f"getrf {NAMES[dtype]} {m}x{n}", check_getrf, dtype, m, n, 300, rng)
        for n in [1, 3, 4, 8, 16, 31, 32, 40, 64]:
            if plan(dtype, n, n, 300) is not None:
                for lower in (True, False):
                    run(f"potrf {NAMES[dtype]} n={n} lower={lower}", check_potrf, dtype, n, 300, lower, rng)
    for dtype in NAMES:
        for n, batch in [(4, 262144), (8, 65536), (16, 16384), (32, 16384), (64, 4096)]:
            if plan(dtype, n, n, batch) is not None:
                run("bench", bench_getrf, dtype, n, batch, rng)
    for dtype in NAMES:
        for n, batch in [(4, 262144), (8, 65536), (16, 16384), (32, 16384), (64, 4096)]:
            if plan(dtype, n, n, batch) is not None:
                run("bench", bench_potrf, dtype, n, batch, rng)


main()
