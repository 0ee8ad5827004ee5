"""CPU recurrent networks: ferrax against jitted ``jax.experimental.rnn.lstm_ref`` (stock jax's
only CPU LSTM: jaxlib lowers ``jax.experimental.rnn.lstm`` on GPUs only), side by side in one
process.

For each case (batch B, sequence length T, input and hidden size, layers, bidirectional) the
forward pass and forward+backward (the gradient of a sum of the outputs with respect to every
input) are timed, interleaved call by call, for ``lstm_ref`` (the reference) and for
``jax.experimental.rnn.lstm`` after ``ferrax.install()`` (which makes it ``ferrax.rnn.lstm``);
``ferrax.rnn.gru`` is timed alone (jax has no GRU). Prints a table with the ratios, writes
``benches/results/rnn.json`` and ``rnn.png``.

    python benches/rnn.py [--quick] [--repeats N]

OpenBLAS's kernels (``OPENBLAS_CORETYPE``, which this workplace sets to Haswell) bound the
GEMMs that make most of ferrax's time; the table's header says which ones ran.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import rnn as jax_rnn

import ferrax

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from cpu_linalg import interleaved_ms  # noqa: E402

# (B, T, input, hidden, layers, bidirectional); the first is the issue's goal case.
CASES = [(32, 100, 128, 128, 2, True), (32, 100, 128, 128, 1, False), (1, 100, 128, 128, 2, True),
         (8, 50, 64, 64, 1, True), (64, 50, 256, 256, 1, False), (32, 200, 32, 32, 3, True)]
QUICK = CASES[:2]


def openblas_core() -> str:
    import scipy

    libs = pathlib.Path(scipy.__file__).resolve().parent.parent / "scipy.libs"
    for path in libs.glob("libscipy_openblas*.so"):
        name = getattr(ctypes.CDLL(str(path)), "scipy_openblas_get_corename", None)
        if name is not None:
            name.restype = ctypes.c_char_p
            return name().decode()
    return "unknown"


def inputs(case, rng):
    batch, steps, input_size, hidden, layers, bidirectional = case
    directions = 2 if bidirectional else 1
    normal = lambda *shape: jnp.asarray(rng.standard_normal(shape), jnp.float32)
    weights = jax_rnn.init_lstm_weight(jax.random.key(0), input_size, hidden, layers,
                                       bidirectional)
    gru_weights = ferrax.rnn.init_weights(jax.random.key(1), "gru", input_size, hidden, layers,
                                          bidirectional)
    lengths = jnp.full((batch,), steps, jnp.int32)
    return (weights, gru_weights, normal(batch, steps, input_size),
            normal(layers * directions, batch, hidden), normal(layers * directions, batch, hidden),
            lengths)


def functions(case):
    """name -> (forward, forward+backward), each taking the tuple from `inputs`."""
    _, _, input_size, hidden, layers, bidirectional = case
    sizes = (input_size, hidden, layers, 0.0, bidirectional)

    def reference(w, x, h0, c0, lengths):
        w_ih, w_hh, b_ih, b_hh = jax_rnn.unpack_lstm_weights(w, input_size, hidden, layers,
                                                             bidirectional)
        return jax_rnn.lstm_ref(x, h0, c0, w_ih, w_hh, b_ih, b_hh, lengths, *sizes)

    cells = {
        "lstm_ref": reference,
        # Looked up at call time: install() puts ferrax.rnn.lstm there.
        "jax.experimental.rnn.lstm": lambda w, x, h0, c0, n: jax_rnn.lstm(x, h0, c0, w, n, *sizes),
        "ferrax.rnn.gru": lambda w, x, h0, c0, n: ferrax.rnn.gru(x, h0, w, n, *sizes),
    }
    made = {}
    for name, cell in cells.items():
        weights = 1 if name.endswith("gru") else 0

        def forward(a, cell=cell, weights=weights):
            return cell(a[weights], *a[2:])

        def loss(w, x, h0, c0, lengths, cell=cell):
            return sum(jnp.sum(o) for o in cell(w, x, h0, c0, lengths))

        def both(a, loss=loss, weights=weights):
            return jax.grad(loss, (0, 1, 2, 3))(a[weights], *a[2:])

        made[name] = (jax.jit(forward), jax.jit(both))
    return made


def measure(case, repeats, rng):
    args = inputs(case, rng)
    ferrax.install()
    try:
        made = functions(case)
        compiled = {name: [f.lower(args).compile() for f in pair] for name, pair in made.items()}
    finally:
        ferrax.uninstall()
    row = {"case": list(case)}
    for k, part in enumerate(("forward", "forward+backward")):
        names = list(compiled)
        times = interleaved_ms([compiled[n][k] for n in names], args, repeats)
        row[part] = dict(zip(names, times))
    return row


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    labels = ["B{}·T{}·I{}·H{}·L{}{}".format(*r["case"][:5], "·bi" if r["case"][5] else "")
              for r in results]
    for ax, part in zip(axes, ("forward", "forward+backward")):
        ratios = [r[part]["lstm_ref"] / r[part]["jax.experimental.rnn.lstm"] for r in results]
        ax.bar(range(len(results)), ratios, width=0.6)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xticks(range(len(results)), labels, rotation=45, ha="right", fontsize=7)
        ax.set_title(f"{part}: lstm_ref time / installed jax LSTM time")
    fig.suptitle(f"CPU LSTM, {len(os.sched_getaffinity(0))} cores, OpenBLAS {openblas_core()}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the first two cases, 5 repeats")
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)
    cases, repeats = (QUICK, 5) if args.quick else (CASES, args.repeats)
    rng = np.random.default_rng()
    results = [measure(case, repeats, rng) for case in cases]
    print(f"CPU, {len(os.sched_getaffinity(0))} cores, jax {jax.__version__}, OpenBLAS kernels "
          f"{openblas_core()}, median of {repeats} interleaved calls (ms), float32")
    header = (f"{'B·T·I·H·L·dirs':<22} {'pass':<17} {'lstm_ref':>9} {'ferrax':>9} {'ratio':>6} "
              f"{'ferrax gru':>10}")
    print(header + "\n" + "-" * len(header))
    for r in results:
        b, t, i, h, l, bi = r["case"]
        label = f"{b}·{t}·{i}·{h}·{l}·{2 if bi else 1}"
        for part in ("forward", "forward+backward"):
            m = r[part]
            ref, ours = m["lstm_ref"], m["jax.experimental.rnn.lstm"]
            print(f"{label:<22} {part:<17} {ref:>9.2f} {ours:>9.2f} {ref / ours:>5.2f}x "
                  f"{m['ferrax.rnn.gru']:>10.2f}")
    directory = pathlib.Path(__file__).resolve().parent / "results"
    directory.mkdir(exist_ok=True)
    (directory / "rnn.json").write_text(json.dumps(results, indent=1))
    plot(results, directory / "rnn.png")
    print(f"wrote {directory}/rnn.json and rnn.png")


if __name__ == "__main__":
    main()
