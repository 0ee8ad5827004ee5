"""ferrax's CUDA RNN targets (cuBLAS products and ferrax's step kernels) on a GPU: every cell
against the float64 loop and ferrax's CPU targets, gradients against the CPU's, jax's LSTM
after install() against jaxlib's cuDNN target on the same GPU, vmap, half precision, and rows
of invalid length. Every test skips where jax has no CUDA device."""

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax.experimental import rnn as jax_rnn

import ferrax
from ferrax import rnn
from test_cpu_rnn import JAX_LSTM, MODES, call, problem, reference

SHAPES = [(4, 7, 3, 8, 1, False), (6, 5, 4, 6, 2, True), (33, 20, 16, 32, 3, True)]


def on(device, fn, *args):
    """``jit(fn)`` on ``device``, results as NumPy, and its lowered module's text."""
    args = [jax.device_put(a, device) for a in args]
    f = jax.jit(fn)
    return jax.tree.map(np.asarray, f(*args)), f.lower(*args).as_text()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}T{}I{}H{}L{}{}".format(
    *s[:5], "bi" if s[5] else ""))
def test_cells_and_gradients_match_the_cpu(gpu, mode, dtype, shape, rng):
    args = problem(rng, mode, *shape, dtype)
    lengths = args[4]
    tol = 1e-4 if dtype == np.float32 else 1e-11
    with jax.default_matmul_precision("highest"):  # no TF32 in cuBLAS's products
        got, text = on(gpu, lambda *a: call(mode, *a, lengths, *shape[2:]), *args[:4])
    assert "ferrax_rnn" in text and "cudnn" not in text
    want = reference(mode, *args, *shape[2:])
    for ours, theirs in zip(got, want[:3 if mode == "lstm" else 2]):
        np.testing.assert_allclose(ours, theirs, rtol=tol, atol=tol)

    def loss(x, h0, c0, w):
        y, h_n, c_n = call(mode, x, h0, c0 if mode == "lstm" else c0[..., :0], w, lengths,
                           *shape[2:])
        extra = 0 if c_n is None else jnp.sum(c_n ** 2)
        return jnp.sum(jnp.sin(y)) + jnp.sum(h_n ** 2) + extra

    grad = jax.grad(loss, (0, 1, 2, 3))
    with jax.default_matmul_precision("highest"):
        got, _ = on(gpu, grad, *args[:4])
    want = on(jax.devices("cpu")[0], grad, *args[:4])[0]
    for ours, theirs in zip(got, want):
        np.testing.assert_allclose(ours, theirs, rtol=10 * tol, atol=10 * tol)


@pytest.mark.parametrize("bidirectional", [False, True], ids=["uni", "bi"])
def test_installed_jax_lstm_matches_jaxlib_cudnn(gpu, bidirectional, rng):
    """jax.experimental.rnn.lstm and its gradient, stock (jaxlib's cuDNN target) against
    install() (ferrax's), on the same GPU and inputs, full f32 precision."""
    shape = (8, 12, 5, 16, 2, bidirectional)
    x, h0, c0, w, lengths = problem(rng, "lstm", *shape, np.float32,
                                    lengths=rng.integers(1, 13, 8))

    def f(x, h0, c0, w):
        y, h_n, c_n = jax_rnn.lstm(x, h0, c0, w, lengths, *shape[2:5], 0.0, bidirectional,
                                   precision=jax.lax.Precision.HIGHEST)
        return jnp.sum(y ** 2) + jnp.sum(h_n * c_n), (y, h_n, c_n)

    both = jax.value_and_grad(f, (0, 1, 2, 3), has_aux=True)
    stock, stock_text = on(gpu, both, x, h0, c0, w)
    assert "cudnn_rnn" in stock_text
    ferrax.install()
    try:
        ours, text = on(gpu, both, x, h0, c0, w)
    finally:
        ferrax.uninstall()
    assert "ferrax_rnn" in text and "cudnn_rnn" not in text
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(stock)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_vmap_of_gradients_keeps_instances_apart(gpu, rng):
    shape = (5, 6, 3, 8, 2, True)
    x, h0, c0, w, lengths = problem(rng, "gru", *shape, np.float32)
    xs = rng.standard_normal((4, *x.shape)).astype(np.float32)

    def loss(x, w):
        y, h_n = rnn.gru(x, h0, w, lengths, *shape[2:5], 0.0, True,
                         precision=jax.lax.Precision.HIGHEST)
        return jnp.sum(y ** 2) + jnp.sum(h_n)

    grad = jax.grad(loss, (0, 1))
    got, _ = on(gpu, jax.vmap(grad, (0, None)), xs, w)
    for i in range(4):
        want = on(jax.devices("cpu")[0], grad, xs[i], w)[0]
        for a, b in zip(got, want):
            np.testing.assert_allclose(a[i], b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("half", [jnp.bfloat16, jnp.float16], ids=["bfloat16", "float16"])
def test_half_precision_on_the_gpu_computes_in_float32(gpu, half, rng):
    shape = (4, 5, 3, 8, 2, True)
    args = [np.asarray(jnp.asarray(a, half)) for a in problem(rng, "lstm", *shape, np.float32)[:4]]
    lengths = problem(rng, "lstm", *shape, np.float32)[4]
    got, _ = on(gpu, lambda *a: call("lstm", *a, lengths, *shape[2:]), *args)
    want = call("lstm", *(a.astype(np.float32) for a in args), lengths, *shape[2:])
    eps = float(jnp.finfo(half).eps)
    for ours, f32 in zip(got, want):
        assert ours.dtype == half
        np.testing.assert_allclose(ours.astype(np.float32), f32, rtol=2 * eps, atol=2 * eps)


def test_invalid_lengths_make_their_rows_nan(gpu, rng):
    """The host never sees the lengths on the GPU: a length outside 0..=T cannot be an
    error, its row's results are NaN, and the other rows are the CPU's."""
    shape = (4, 5, 3, 6, 1, True)
    x, h0, c0, w, lengths = problem(rng, "lstm", *shape, np.float32, lengths=[5, 9, 2, -1])
    (y, h_n, c_n), _ = on(gpu, lambda *a: call("lstm", *a, lengths, *shape[2:]), x, h0, c0, w)
    assert np.isnan(y[[1, 3]]).all() and np.isnan(h_n[:, [1, 3]]).all()
    fixed = np.where((lengths < 0) | (lengths > 5), 0, lengths).astype(np.int32)
    want = reference("lstm", x, h0, c0, w, fixed, *shape[2:])
    np.testing.assert_allclose(y[[0, 2]], want[0][[0, 2]], rtol=1e-4, atol=1e-4)


def test_jax_s_own_lstm_routed_on_the_gpu(gpu, rng):
    """Code holding jax's own lstm (jax's primitives) after install(): ferrax's targets."""
    shape = (3, 4, 2, 5, 1, False)
    x, h0, c0, w, lengths = problem(rng, "lstm", *shape, np.float32)
    ferrax.install()
    try:
        got, text = on(gpu, lambda *a: JAX_LSTM(*a, lengths, *shape[2:5], 0.0, False,
                                                 precision=jax.lax.Precision.HIGHEST),
                       x, h0, c0, w)
    finally:
        ferrax.uninstall()
    assert "ferrax_rnn" in text
    np.testing.assert_allclose(got[0], reference("lstm", x, h0, c0, w, lengths, *shape[2:])[0],
                               rtol=1e-4, atol=1e-4)
