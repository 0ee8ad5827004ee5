"""Crossover sweep: stock jaxlib against ferrax for batched LU, Cholesky, QR and multiplication
by Q (ormqr) on the local device, every n in ``SIZES`` and dtype, each batch about ``--mb`` MB
of matrices.

For each op and dtype the crossover is the largest n up to which ferrax wins at every swept n.
Prints the table and the crossovers, writes ``linalg_sweep.json`` and one PNG per op (time
against n) to ``--out``. On a GPU, ferrax's targets are forced for every size (its PTX kernels
for small matrices, its cuSOLVER/cuBLAS choices past them), and ``--write-thresholds`` stores
the crossovers in ``python/ferrax/gpu_thresholds.json``, the table ``ferrax.install()`` routes by.

    python benches/linalg_sweep.py [--quick] [--mb 16] [--out DIR] [--write-thresholds]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib

import jax
import jax.numpy as jnp
import numpy as np

import ferrax
from ferrax import _install
from cpu_linalg import interleaved_ms, operand

jax.config.update("jax_enable_x64", True)

# op -> (the jax function, the operand kind cpu_linalg.operand makes, the keys of
# gpu_thresholds.json it decides).
OPS = {
    "lu": (jax.lax.linalg.lu, "lu", ("getrf",)),
    "cholesky": (lambda a: jax.lax.linalg.cholesky(a, symmetrize_input=False), "cholesky",
                 ("potrf",)),
    "qr": (jnp.linalg.qr, "qr", ("geqrf", "orgqr")),
    # c <- Q c with a's reflectors and a's first row for taus (any values time the same).
    "ormqr": (lambda a: jax.lax.linalg.ormqr(a, a[..., 0, :], a), "qr", ("ormqr",)),
}
# Up to 128 ferrax's PTX kernels (shared memory allowing), past it its cuSOLVER/cuBLAS path.
SIZES = (2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256, 512)
DTYPES = (np.float32, np.float64, np.complex64, np.complex128)
THRESHOLDS = pathlib.Path(ferrax.__file__).parent / "gpu_thresholds.json"


def measure(name, dtype, n, batch_bytes, repeats, rng):
    fn, kind, _ = OPS[name]
    batch = max(1, batch_bytes // (n * n * np.dtype(dtype).itemsize))
    a = jax.device_put(operand(rng, kind, dtype, batch, n))
    row = {"op": name, "dtype": np.dtype(dtype).name, "n": n, "batch": batch}
    ferrax.uninstall()
    stock = jax.jit(fn).lower(a).compile()
    try:
        with _install.ferrax_on_gpu_everywhere():
            ferrax.install()
            ours = jax.jit(fn).lower(a).compile()
        jax.block_until_ready(ours(a))
    except jax.errors.JaxRuntimeError as error:  # reported in the table, not fatal
        row.update(jaxlib_ms=interleaved_ms([stock], a, repeats)[0], ferrax_ms=None,
                   note=str(error).splitlines()[0][:80])
        return row
    finally:
        ferrax.uninstall()
    row["jaxlib_ms"], row["ferrax_ms"] = interleaved_ms([stock, ours], a, repeats)
    return row


def crossovers(rows):
    """{op: {dtype: largest n up to which ferrax is faster at every swept n (0: never)}}."""
    best, lost = {}, set()
    for r in sorted(rows, key=lambda r: r["n"]):
        key = (r["op"], r["dtype"])
        best.setdefault(key, 0)
        if key in lost:
            continue
        if r["ferrax_ms"] is not None and r["ferrax_ms"] < r["jaxlib_ms"]:
            best[key] = r["n"]
        else:
            lost.add(key)
    out = {}
    for (op, dtype), n in best.items():
        out.setdefault(op, {})[dtype] = n
    return out


def plot(rows, directory, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for name in OPS:
        fig, ax = plt.subplots(figsize=(6, 4))
        swept = [np.dtype(d).name for d in DTYPES if any(r["dtype"] == np.dtype(d).name for r in rows)]
        for i, dtype in enumerate(swept):
            sel = [r for r in rows if r["op"] == name and r["dtype"] == dtype]
            color = f"C{i}"
            ax.plot([r["n"] for r in sel], [r["jaxlib_ms"] for r in sel], "--", color=color,
                    label=f"{dtype} jaxlib")
            ours = [r for r in sel if r["ferrax_ms"] is not None]
            ax.plot([r["n"] for r in ours], [r["ferrax_ms"] for r in ours], "-o", color=color,
                    label=f"{dtype} ferrax")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("n (batch sized to a fixed number of bytes)")
        ax.set_ylabel("ms per batch")
        ax.set_title(f"{name}: {title}", fontsize=9)
        ax.legend(fontsize=6, ncol=2)
        fig.tight_layout()
        fig.savefig(directory / f"sweep_{name}.png", dpi=100)
        plt.close(fig)


def write_thresholds(found, device, batch_mb):
    table = json.loads(THRESHOLDS.read_text())
    for name, per_dtype in found.items():
        for key in OPS[name][2]:
            table.setdefault(key, {}).update(per_dtype)  # dtypes not swept keep their entry
    table["device"] = device
    table["about"] = (
        "Largest n (max of m, n) for which ferrax's GPU targets (PTX kernels up to 128, "
        "cuSOLVER/cuBLAS past them) beat jaxlib end to end at every smaller swept n; above it "
        "ferrax.install() keeps jaxlib's "
        f"lowering. benches/linalg_sweep.py on {device}, jax {jax.__version__}, "
        f"{datetime.date.today()}, batches of {batch_mb} MB.")
    THRESHOLDS.write_text(json.dumps(table, indent=2) + "\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n in {4, 16}, f32 and c128")
    parser.add_argument("--mb", type=float, default=16.0, help="bytes of matrices per batch")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--out", default=os.environ.get(
        "OUT", pathlib.Path(__file__).resolve().parent / "results"))
    parser.add_argument("--write-thresholds", action="store_true",
                        help=f"store the GPU crossovers in {THRESHOLDS}")
    args = parser.parse_args(argv)
    sizes, dtypes = SIZES, DTYPES
    if args.quick:
        sizes, dtypes = (4, 16), (np.float32, np.complex128)
    device = jax.devices()[0]
    rng = np.random.default_rng()
    rows = [measure(name, dtype, n, int(args.mb * 2**20), args.repeats, rng)
            for name in OPS for dtype in dtypes for n in sizes]

    title = f"{device.device_kind} ({device.platform}), jax {jax.__version__}, {args.mb:g} MB"
    print(title + ", median ms of interleaved calls")
    header = f"{'op':<9} {'dtype':<10} {'n':>3} {'batch':>8} {'jaxlib':>9} {'ferrax':>9} {'speedup':>8}"
    print(header + "\n" + "-" * len(header))
    for r in rows:
        ours = "—" if r["ferrax_ms"] is None else f"{r['ferrax_ms']:.3f}"
        ratio = "" if r["ferrax_ms"] is None else f"{r['jaxlib_ms'] / r['ferrax_ms']:.2f}x"
        print(f"{r['op']:<9} {r['dtype']:<10} {r['n']:>3} {r['batch']:>8} {r['jaxlib_ms']:>9.3f} "
              f"{ours:>9} {ratio:>8} {r.get('note', '')}")
    found = crossovers(rows)
    print("crossovers (largest n where ferrax wins at every swept n up to it):")
    print(json.dumps(found, indent=1))
    directory = pathlib.Path(args.out)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "linalg_sweep.json").write_text(
        json.dumps({"device": title, "rows": rows, "crossovers": found}, indent=1))
    plot(rows, directory, title)
    print(f"wrote {directory}/linalg_sweep.json and sweep_<op>.png")
    if args.write_thresholds:
        if device.platform != "gpu":
            parser.error("--write-thresholds needs a GPU: the file holds GPU crossovers")
        write_thresholds(found, device.device_kind, args.mb)
        print(f"wrote {THRESHOLDS}")


if __name__ == "__main__":
    main()
