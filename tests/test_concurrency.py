"""Eight threads run eight different ferrax targets at once under real XLA, each executable
many times over, all sharing XLA's CPU thread pool that the handlers split their batches on:
every result must be bit-identical to the same executable run alone. (The C ABI's side of the
same check is test_capi.py's test_concurrent_calls_match_calls_alone.)"""

import threading

import numpy as np

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
from jax import lax

ROUNDS = 40


def _spd(a):
    return a @ jnp.swapaxes(a, -1, -2).conj() + a.shape[-1] * jnp.eye(a.shape[-1], dtype=a.dtype)


# name: (function, input shapes, dtype); batches large enough for the handlers to split them.
OPS = {
    "lu": (lambda a: lax.linalg.lu(a), [(32, 24, 24)], np.float64),
    "qr": (lambda a: jnp.linalg.qr(a), [(16, 30, 20)], np.complex128),
    "cholesky": (lambda a: jnp.linalg.cholesky(_spd(a)), [(32, 32, 32)], np.float32),
    "eigh": (lambda a: jnp.linalg.eigh(a), [(8, 24, 24)], np.complex64),
    "svd": (lambda a: jnp.linalg.svd(a, full_matrices=False), [(8, 24, 16)], np.float64),
    "eig": (lambda a: jnp.linalg.eig(a), [(8, 16, 16)], np.float64),
    "schur": (lambda a: jax.vmap(jsl.schur)(a), [(8, 16, 16)], np.complex128),
    "triangular_solve": (
        lambda a, b: jsl.solve_triangular(jnp.tril(a) + 24 * jnp.eye(24), b, lower=True),
        [(16, 24, 24), (16, 24, 8)], np.float64),
}


def _inputs(rng, shapes, dtype):
    def one(shape):
        x = rng.standard_normal(shape)
        if np.dtype(dtype).kind == "c":
            x = x + 1j * rng.standard_normal(shape)
        return x.astype(dtype)

    return [one(shape) for shape in shapes]


def _bits(tree):
    return [np.asarray(leaf).tobytes() for leaf in jax.tree.leaves(tree)]


def test_eight_threads_running_different_targets_match_each_run_alone(rng, installed):
    compiled, inputs, alone = {}, {}, {}
    for name, (fn, shapes, dtype) in OPS.items():
        inputs[name] = _inputs(rng, shapes, dtype)
        lowered = jax.jit(fn).lower(*inputs[name])
        text = lowered.as_text()
        assert "ferrax_" in text and "lapack_" not in text, f"{name} does not run on ferrax"
        compiled[name] = lowered.compile()
        alone[name] = _bits(compiled[name](*inputs[name]))

    start = threading.Barrier(len(OPS))
    failures, calls = [], []

    def hammer(name):
        try:
            start.wait()
            for round_ in range(ROUNDS):
                got = _bits(compiled[name](*inputs[name]))
                differ = [i for i, (g, e) in enumerate(zip(got, alone[name])) if g != e]
                assert not differ, f"{name} round {round_}: outputs {differ} differ from alone"
                calls.append(name)
        except BaseException as error:  # reported by the main thread
            failures.append(f"{name}: {error!r}")
            start.abort()

    threads = [threading.Thread(target=hammer, args=(name,)) for name in OPS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
        assert not thread.is_alive(), "a thread is stuck (deadlock on XLA's pool?)"
    assert not failures, failures
    assert len(calls) == len(OPS) * ROUNDS
