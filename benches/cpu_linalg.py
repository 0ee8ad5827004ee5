"""CPU linear algebra, stock jaxlib vs ferrax (and numpy, torch), each in its own process.

For each op, dtype and n, a batch of n×n matrices sized to about 4 MB is timed through jax
(jitted; the median of the calls in a window of ``--seconds``, at least ``--repeats`` of them)
with jaxlib's own lowering in one child process and after ``ferrax.install()`` in another.
Prints a table of times and ratios, writes the numbers to ``benches/results/cpu_linalg.json``
and one PNG plot of the speedup per op.

    python benches/cpu_linalg.py [--quick] [--ops lu,cholesky,...] [--sizes 4,8] [--dtypes float64]

What a CPU user would pick instead of jax, numpy and torch (when installed), is timed on the
same inputs the same way (``--peers``, default ``numpy,torch``; ``--peers ''`` for none), and
the table gives ferrax's speedup over the best of stock jax and them.

Each library runs alone in its process, as it does in a user's: in one process the threads one
library leaves spinning after a call (OpenBLAS's, OpenMP's) take cores from the next one's. The
processes run in rounds (``--rounds``), the libraries in a rotated order each round so that the
host's drifting load falls on all of them, and a case's time is the median over the rounds.

``--scaling`` also times every case on one core (all of it again, pinned to the first CPU, so
XLA's thread pool has one thread) and reports how much each jax side gains from all the cores.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
import zlib

import jax
import jax.numpy as jnp
import jax.scipy.linalg  # noqa: F401  (jax.scipy.linalg.schur, hessenberg, qr)
import numpy as np

import ferrax

jax.config.update("jax_enable_x64", True)

OPS = {
    "lu": lambda a: jax.lax.linalg.lu(a),
    "cholesky": lambda a: jnp.linalg.cholesky(a),
    "triangular_solve": lambda a: jax.lax.linalg.triangular_solve(a, a, left_side=True, lower=True),
    "qr": lambda a: jnp.linalg.qr(a),
    "eigh": lambda a: jnp.linalg.eigh(a),
    "svd": lambda a: jnp.linalg.svd(a),
    "eig": lambda a: jnp.linalg.eig(a),
    "schur": lambda a: jax.scipy.linalg.schur(a),
    "hessenberg": lambda a: jax.scipy.linalg.hessenberg(a, calc_q=True),
    "tridiagonal": lambda a: jax.lax.linalg.tridiagonal(a),
    "qr_pivoting": lambda a: jax.scipy.linalg.qr(a, pivoting=True),
    "qr_multiply": lambda a: jax.scipy.linalg.qr_multiply(a, a),
    "svd_qr": lambda a: jax.lax.linalg.svd(a, algorithm=jax.lax.linalg.SvdAlgorithm.QR),
    "tridiagonal_solve": lambda a: jax.lax.linalg.tridiagonal_solve(
        a[..., 0] * 0.1, a[..., 1] + 4, a[..., 2] * 0.1, a),
    # Not a primitive: what most users call, lu plus two triangular solves.
    "solve": lambda a: jnp.linalg.solve(a, a[..., :1]),
}
SIZES = (4, 8, 16, 32, 64, 128, 512)
DTYPES = (np.float32, np.float64, np.complex128)
BATCH_BYTES = 4 << 20


def host_operand(rng, op, dtype, batch, n):
    """The batch of matrices `op` is timed on, as a numpy array."""
    a = rng.standard_normal((batch, n, n))
    if np.issubdtype(dtype, np.complexfloating):
        a = a + 1j * rng.standard_normal((batch, n, n))
    if op in ("cholesky", "eigh", "tridiagonal"):  # Hermitian positive definite
        # A·Aᴴ by einsum's own loops, not BLAS: numpy's OpenBLAS threads spin for tens of ms
        # after a product, taking a core from whatever is timed next in the process (ferrax's
        # Cholesky c128 16×128 read 1.5 ms in that window, 0.8 ms after it).
        a = np.einsum("bij,bkj->bik", a, np.conj(a), optimize=False) + n * np.eye(n)
    if op == "triangular_solve":  # well conditioned lower triangle
        a = a + 2 * n * np.eye(n)
    return a.astype(dtype)


def operand(rng, op, dtype, batch, n):
    return jnp.asarray(host_operand(rng, op, dtype, batch, n))


def batch_size(dtype, n):
    return max(1, BATCH_BYTES // (n * n * np.dtype(dtype).itemsize))


def case_rng(seed, op, dtype, n):
    """The generator of one case's operand: the same in the peers' processes as in jax's."""
    return np.random.default_rng([seed, zlib.crc32(f"{op}/{np.dtype(dtype).name}/{n}".encode())])


#: What a CPU user would pick instead of jax.
PEERS = ("numpy", "torch")


def peer_ops(peer):
    """The peer's function for each op it has (same matrices in, the same factorization out as
    the jax function of OPS)."""
    if peer == "numpy":
        return {
            "cholesky": np.linalg.cholesky,
            "qr": np.linalg.qr,
            "eigh": np.linalg.eigh,
            "svd": np.linalg.svd,
            "eig": np.linalg.eig,
            "solve": lambda a: np.linalg.solve(a, a[..., :1]),
        }
    if peer == "torch":
        import torch

        L = torch.linalg
        return {
            "lu": L.lu_factor,
            "cholesky": L.cholesky,
            "triangular_solve": lambda a: L.solve_triangular(a, a, upper=False, left=True),
            "qr": L.qr,
            "eigh": L.eigh,
            "svd": L.svd,
            "eig": L.eig,
            "solve": lambda a: L.solve(a, a[..., :1]),
        }
    raise AssertionError(peer)


#: The two sides of the comparison: jax with jaxlib's lowering, and after ferrax.install().
JAX_SIDES = ("jaxlib", "ferrax")


def case_key(op, dtype, n):
    return f"{op}/{np.dtype(dtype).name}/{n}"


#: Warm-up before timing: at least this many calls and this long (s), at most WARM_MAX calls.
#: The time, not the count, matters for fast calls: in a process's first 0.1-0.2 s of calls
#: OpenBLAS's threads spin (numpy's and SciPy's OpenBLAS both show in `perf`; with
#: OPENBLAS_NUM_THREADS=1 the slow calls are gone after ~10) and take a core on this 2-core
#: machine. 30 calls of a 1 ms LU ended inside that window: ferrax's lu f64 8192×8 read
#: 1.0 ms, 0.6 after it.
WARM_CALLS, WARM_SECONDS, WARM_MAX = 3, 0.25, 2000


def median_ms(call, repeats, seconds):
    """The median of timed calls of `call()`, at least `repeats` of them and as many more as fit
    in `seconds`, in ms, after a warm-up to steady state.

    A process's first calls on a new array size take fresh pages for their multi-MB buffers
    (the allocator gives freed ones back to the system until its thresholds adapt: six calls
    of a 4 MB LU here), about 1 ms per 4 MB on this machine, a third of a 2 ms call; a user's
    loop pays that once. After one warm-up call, most of the timed calls still paid it.

    The window, not a count, because this host's load comes in bursts of a second or so: the
    median of 9 calls of a 1 ms op fell inside one, and one table read a case 30 % off the
    next one's."""
    start, calls = time.perf_counter(), 0
    while calls < WARM_MAX and (calls < WARM_CALLS or time.perf_counter() - start < WARM_SECONDS):
        call()
        calls += 1
    samples, end = [], time.perf_counter() + seconds
    while len(samples) < repeats or time.perf_counter() < end:
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3


def jax_results(side, cases, seed, repeats, seconds):
    """One jax side's median time (ms) of each case, and whether jax's lowering reached a
    ferrax target: {case: {"ms": ..., "routed": ...}}."""
    if side == "ferrax":
        ferrax.install()
    results = {}
    for op, dtype, n in cases:
        a = operand(case_rng(seed, op, dtype, n), op, dtype, batch_size(dtype, n), n)
        lowered = jax.jit(OPS[op]).lower(a)
        routed = any(t in lowered.as_text() for t in ferrax.target_names())
        compiled = lowered.compile()
        ms = median_ms(lambda: jax.block_until_ready(compiled(a)), repeats, seconds)
        results[case_key(op, dtype, n)] = {"ms": ms, "routed": routed}
    return results


def peer_results(peer, cases, seed, repeats, seconds):
    """The peer's median time (ms) of each case it has: {case: {"ms": ...}}."""
    ops = peer_ops(peer)
    convert = (lambda a: a) if peer == "numpy" else __import__("torch").from_numpy
    results = {}
    for op, dtype, n in cases:
        if op not in ops:
            continue
        a = convert(host_operand(case_rng(seed, op, dtype, n), op, dtype, batch_size(dtype, n), n))
        results[case_key(op, dtype, n)] = {"ms": median_ms(lambda: ops[op](a), repeats, seconds)}
    return results


def interleaved_ms(fns, arg, repeats):
    """Times each compiled function in `fns` on `arg`, alternating between them call by call
    so that both see the same machine state (this host's load drifts), and returns each one's
    median in ms. (For the benches that compare functions within one process: rnn, bcoo,
    spsolve, linalg_sweep.)"""
    for fn in fns:
        jax.block_until_ready(fn(arg))
    times = [[] for _ in fns]
    for _ in range(repeats):
        for fn, samples in zip(fns, times):
            start = time.perf_counter()
            jax.block_until_ready(fn(arg))
            samples.append(time.perf_counter() - start)
    return [statistics.median(samples) * 1e3 for samples in times]


def ratio_bars(path, labels, ratios, title, figsize=(7, 4)):
    """A bar per case of stock time / installed time (the line at 1: as fast), saved to
    ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=figsize)
    ax.bar(range(len(ratios)), ratios, width=0.6)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(range(len(ratios)), labels, rotation=35, ha="right", fontsize=7)
    ax.set_title(title)
    fig.suptitle(f"CPU, {len(os.sched_getaffinity(0))} cores, jax {jax.__version__}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def rounds_results(argv, libraries, rounds):
    """Every library's results from a child process each, `rounds` times over, the libraries
    rotated round by round: {library: {case: {"ms": median over the rounds, ...}}}."""
    runs = {library: [] for library in libraries}
    for r in range(rounds):
        for library in libraries[r % len(libraries):] + libraries[:r % len(libraries)]:
            print(f"round {r + 1}/{rounds}: {library}", flush=True)
            runs[library].append(child_results(argv, library))
    return {library: {case: {**results[0][case],
                             "ms": statistics.median(run[case]["ms"] for run in results)}
                      for case in results[0]}
            for library, results in runs.items()}


def child_results(argv, library):
    """One library's results from a child process: {case: {"ms": ..., ...}}."""
    argv = [a for a in (sys.argv[1:] if argv is None else argv) if a != "--scaling"]
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / f"{library}.json"
        subprocess.run([sys.executable, __file__, *argv, "--library", library,
                        "--json", str(path)], check=True)
        return json.loads(path.read_text())


def plot(results, directory):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for op in sorted({r["op"] for r in results}):
        fig, ax = plt.subplots(figsize=(6, 4))
        for dtype in sorted({r["dtype"] for r in results if r["op"] == op}):
            rows = [r for r in results if r["op"] == op and r["dtype"] == dtype]
            ax.plot([r["n"] for r in rows], [r["speedup"] for r in rows], marker="o", label=dtype)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("n (batch sized to ~4 MB)")
        ax.set_ylabel("jaxlib time / ferrax time")
        ax.set_title(f"CPU {op}: ferrax speedup over jaxlib ({os.cpu_count()} cores)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(directory / f"cpu_{op}.png", dpi=100)
        plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="n in {8, 64}, f64 only, 3 calls, no window, 1 round")
    parser.add_argument("--ops", default=",".join(OPS), help="comma-separated subset of " + ",".join(OPS))
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="comma-separated n")
    parser.add_argument("--dtypes", default=",".join(np.dtype(d).name for d in DTYPES),
                        help="comma-separated dtype names")
    parser.add_argument("--repeats", type=int, default=10,
                        help="timed calls per case and process, at least")
    parser.add_argument("--seconds", type=float, default=0.5,
                        help="each case timed for this long per process, at least")
    parser.add_argument("--rounds", type=int, default=3,
                        help="processes per library, one after the other round by round")
    parser.add_argument("--scaling", action="store_true",
                        help="also time each case on one core; report the speedup from all cores")
    parser.add_argument("--peers", default="numpy,torch",
                        help="libraries timed on the same inputs in child processes ('' for none)")
    parser.add_argument("--cores", type=int, help="run on the first CORES CPUs only")
    parser.add_argument("--json", help="where to write the results (default benches/results/)")
    parser.add_argument("--seed", type=int, help="the inputs' seed (default: a fresh one)")
    parser.add_argument("--library", help=argparse.SUPPRESS)  # one library's child process
    args = parser.parse_args(argv)
    if args.cores:  # before jax's CPU client exists, so that its thread pool has this size
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:args.cores])
    sizes = tuple(int(n) for n in args.sizes.split(","))
    dtypes = tuple(np.dtype(d).type for d in args.dtypes.split(","))
    repeats, rounds, seconds = args.repeats, args.rounds, args.seconds
    if args.quick:
        sizes, dtypes, repeats, rounds, seconds = (8, 64), (np.float64,), 3, 1, 0
    cases = [(op, dtype, n) for op in args.ops.split(",") for dtype in dtypes for n in sizes]
    if args.library:
        timed = jax_results if args.library in JAX_SIDES else peer_results
        results = timed(args.library, cases, args.seed, repeats, seconds)
        pathlib.Path(args.json).write_text(json.dumps(results))
        return
    # The children's inputs: one seed for all of them, fresh unless given.
    seed = np.random.SeedSequence().entropy if args.seed is None else args.seed
    argv = [a for a in (sys.argv[1:] if argv is None else argv)] + ["--seed", str(seed)]
    one_core = one_core_results(argv) if args.scaling else {}
    peers = []
    for peer in filter(None, args.peers.split(",")):
        if peer not in PEERS:
            raise SystemExit(f"cpu_linalg: unknown peer {peer!r} ({' or '.join(PEERS)})")
        if importlib.util.find_spec(peer) is None:
            print(f"{peer} is not installed: no {peer} column", flush=True)
        else:
            peers.append(peer)
    timed = rounds_results(argv, [*JAX_SIDES, *peers], rounds)
    results = []
    for op, dtype, n in cases:
        key = case_key(op, dtype, n)
        stock_ms, ferrax_ms = timed["jaxlib"][key]["ms"], timed["ferrax"][key]["ms"]
        r = {"op": op, "dtype": np.dtype(dtype).name, "n": n, "batch": batch_size(dtype, n),
             "jaxlib_ms": stock_ms, "ferrax_ms": ferrax_ms, "speedup": stock_ms / ferrax_ms,
             "routed": timed["ferrax"][key]["routed"]}
        if (case := (op, r["dtype"], n)) in one_core:
            r["jaxlib_scaling"] = one_core[case]["jaxlib_ms"] / stock_ms
            r["ferrax_scaling"] = one_core[case]["ferrax_ms"] / ferrax_ms
        for peer in peers:
            r[f"{peer}_ms"] = timed[peer].get(key, {}).get("ms")
        best = min(t for t in (stock_ms, *(r[f"{p}_ms"] for p in peers)) if t is not None)
        r["speedup_over_best"] = best / ferrax_ms
        results.append(r)

    cores = len(os.sched_getaffinity(0))
    print(f"CPU, {cores} cores, jax {jax.__version__}, jaxlib {jax.lib.__version__}"
          + "".join(f", {p} {peer_version(p)}" for p in peers)
          + f"; each library in its own process, median of ≥ {repeats} calls"
          + (f" over ≥ {seconds} s" if seconds else "")
          + f" per case, median of {rounds} rounds (ms)")
    scaling_header = f" {'jaxlib 1→' + str(cores):>11} {'ferrax 1→' + str(cores):>11}" if one_core else ""
    peer_header = "".join(f" {p:>9}" for p in peers) + (f" {'vs best':>8}" if peers else "")
    header = f"{'op':<17} {'dtype':<10} {'n':>4} {'batch':>7} {'jaxlib':>9} {'ferrax':>9} {'speedup':>8}"
    print(header + peer_header + scaling_header + "\n" + "-" * len(header + peer_header + scaling_header))
    for r in results:
        peer_cells = "".join(f" {'—' if r[f'{p}_ms'] is None else format(r[f'{p}_ms'], '.3f'):>9}"
                             for p in peers)
        if peers:
            peer_cells += f" {r['speedup_over_best']:>7.2f}x"
        scaling = (f" {r['jaxlib_scaling']:>10.2f}x {r['ferrax_scaling']:>10.2f}x"
                   if "ferrax_scaling" in r else "")
        note = "" if r["routed"] else "  (not routed to ferrax yet)"
        print(f"{r['op']:<17} {r['dtype']:<10} {r['n']:>4} {r['batch']:>7} {r['jaxlib_ms']:>9.3f} "
              f"{r['ferrax_ms']:>9.3f} {r['speedup']:>7.2f}x{peer_cells}{scaling}{note}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1))
        return
    directory = pathlib.Path(__file__).resolve().parent / "results"
    directory.mkdir(exist_ok=True)
    (directory / "cpu_linalg.json").write_text(json.dumps(results, indent=1))
    plot(results, directory)
    print(f"wrote {directory}/cpu_linalg.json and cpu_<op>.png")


def peer_version(peer):
    return __import__(peer).__version__


def one_core_results(argv):
    """The same cases timed on one core (a child process that runs the whole bench, without
    peers, pinned to the first CPU): {(op, dtype, n): result}."""
    argv = [a for a in argv if a != "--scaling"]
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "one_core.json"
        print("timing every case on one core first (child process)", flush=True)
        subprocess.run([sys.executable, __file__, *argv, "--cores", "1", "--peers", "",
                        "--json", str(path)],
                       check=True, stdout=subprocess.DEVNULL)
        return {(r["op"], r["dtype"], r["n"]): r for r in json.loads(path.read_text())}


if __name__ == "__main__":
    main()
