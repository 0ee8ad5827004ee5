"""Recurrent networks on the CPU (``ferrax_rnn``, ``ferrax_rnn_bwd``): ``ferrax.rnn``'s four
cells and, after ``install()``, ``jax.experimental.rnn.lstm`` (which stock jax lowers on GPUs
only), against independent references: jax's own ``lstm_ref`` (a ``lax.scan``) for the LSTM,
a float64 NumPy loop for every cell (its own reading of the packed weights), numerical
differentiation for the gradients, and the computation in f32 for half-precision inputs.
"""

import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import rnn as jax_rnn
from jax.test_util import check_grads

import ferrax
from ferrax import rnn

MODES = ["relu", "tanh", "lstm", "gru"]
#: jax's own lstm, which binds jax's primitives (install() puts ferrax.rnn.lstm in its place).
JAX_LSTM = jax_rnn.lstm
GATES = {"relu": 1, "tanh": 1, "lstm": 4, "gru": 3}
_TOL = {np.dtype(np.float32): 2e-5, np.dtype(np.float64): 1e-12}


def unpack(w, mode, input_size, hidden, layers, bidirectional):
    """The packed weights read as cuDNN lays them out (jax.experimental.rnn's docstring): every
    pseudo-layer's W_ih, W_hh, then every pseudo-layer's b_ih, b_hh."""
    directions = 2 if bidirectional else 1
    rows = GATES[mode] * hidden
    w = np.asarray(w, np.float64)
    shapes = []
    for p in range(layers * directions):
        shapes += [(rows, input_size if p < directions else directions * hidden), (rows, hidden)]
    shapes += [(rows,)] * (2 * layers * directions)
    assert w.shape == (sum(math.prod(s) for s in shapes),)
    pieces = np.split(w, np.cumsum([math.prod(s) for s in shapes])[:-1])
    pieces = [p.reshape(s) for p, s in zip(pieces, shapes)]
    pseudo = layers * directions
    return pieces[0:2 * pseudo:2], pieces[1:2 * pseudo:2], pieces[2 * pseudo::2], pieces[2 * pseudo + 1::2]


def reference(mode, x, h0, c0, w, lengths, input_size, hidden, layers, bidirectional):
    """float64, one row and one step at a time, cuDNN's equations: (y, h_n, c_n)."""
    directions = 2 if bidirectional else 1
    w_ih, w_hh, b_ih, b_hh = unpack(w, mode, input_size, hidden, layers, bidirectional)
    x = np.asarray(x, np.float64)
    batch, steps, _ = x.shape
    sigmoid = lambda a: 1 / (1 + np.exp(-a))
    h_n = np.zeros((layers * directions, batch, hidden))
    c_n = np.zeros_like(h_n)
    for layer in range(layers):
        out = np.zeros((batch, steps, directions * hidden))
        for d in range(directions):
            p = layer * directions + d
            for b in range(batch):
                n = int(lengths[b])
                h = np.asarray(h0[p, b], np.float64)
                c = np.asarray(c0[p, b], np.float64) if mode == "lstm" else None
                for s in range(n):
                    t = s if d == 0 else n - 1 - s
                    gi, gh = w_ih[p] @ x[b, t] + b_ih[p], w_hh[p] @ h + b_hh[p]
                    if mode == "lstm":
                        i, f, g, o = np.split(gi + gh, 4)
                        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
                        h = sigmoid(o) * np.tanh(c)
                    elif mode == "gru":
                        (xr, xz, xn), (hr, hz, hn) = np.split(gi, 3), np.split(gh, 3)
                        r, z = sigmoid(xr + hr), sigmoid(xz + hz)
                        candidate = np.tanh(xn + r * hn)
                        h = (1 - z) * candidate + z * h
                    else:
                        a = gi + gh
                        h = np.tanh(a) if mode == "tanh" else np.maximum(a, 0)
                    out[b, t, d * hidden:(d + 1) * hidden] = h
                if n:  # a row of length 0 keeps zero final states
                    h_n[p, b] = h
                    if mode == "lstm":
                        c_n[p, b] = c
        x = out
    return x, h_n, c_n


def call(mode, x, h0, c0, w, lengths, input_size, hidden, layers, bidirectional):
    """The cell's ferrax.rnn function, with (y, h_n, c_n) for every cell (c_n empty but for
    the LSTM)."""
    if mode == "lstm":
        return rnn.lstm(x, h0, c0, w, lengths, input_size, hidden, layers, 0.0, bidirectional)
    fn = {"gru": rnn.gru, "tanh": rnn.rnn_tanh, "relu": rnn.rnn_relu}[mode]
    y, h_n = fn(x, h0, w, lengths, input_size, hidden, layers, 0.0, bidirectional)
    return y, h_n, None


def problem(rng, mode, batch, steps, input_size, hidden, layers, bidirectional, dtype,
            lengths=None):
    directions = 2 if bidirectional else 1
    normal = lambda *shape: rng.standard_normal(shape).astype(dtype)
    x = normal(batch, steps, input_size)
    h0 = normal(layers * directions, batch, hidden)
    c0 = normal(layers * directions, batch, hidden)
    count = rnn.num_params(mode, input_size, hidden, layers, bidirectional)
    k = 1 / math.sqrt(hidden)
    w = rng.uniform(-k, k, count).astype(dtype)
    if lengths is None:
        lengths = rng.integers(0, steps + 1, batch)
    return x, h0, c0, w, np.asarray(lengths, np.int32)


def test_packed_weights_are_jax_s_layout_and_size(rng):
    for input_size, hidden, layers, bidirectional in [(3, 5, 2, True), (1, 1, 1, False),
                                                      (7, 4, 3, False)]:
        assert rnn.num_params("lstm", input_size, hidden, layers, bidirectional) == \
            jax_rnn.get_num_params_in_lstm(input_size, hidden, layers, bidirectional)
        w = rng.standard_normal(jax_rnn.get_num_params_in_lstm(input_size, hidden, layers,
                                                               bidirectional)).astype(np.float32)
        ours = rnn.unpack_weights(w, "lstm", input_size, hidden, layers, bidirectional)
        jax_s = jax_rnn.unpack_lstm_weights(w, input_size, hidden, layers, bidirectional)
        for mine, theirs in zip(ours, jax_s):
            assert mine.keys() == theirs.keys()
            for p in mine:
                np.testing.assert_array_equal(mine[p], theirs[p])
        for mode in MODES:
            count = rnn.num_params(mode, input_size, hidden, layers, bidirectional)
            w = rng.standard_normal(count)
            ours = rnn.unpack_weights(w, mode, input_size, hidden, layers, bidirectional)
            for mine, theirs in zip(ours, unpack(w, mode, input_size, hidden, layers,
                                                 bidirectional)):
                for p, array in mine.items():
                    np.testing.assert_array_equal(array, theirs[p])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("shape", [(3, 5, 4, 6, 2, True), (4, 3, 2, 3, 1, False),
                                   (2, 7, 3, 4, 3, True), (9, 2, 5, 1, 1, True)],
                         ids=lambda s: "B{}T{}I{}H{}L{}{}".format(*s[:5], "bi" if s[5] else ""))
def test_cells_match_the_float64_loop(mode, dtype, shape, rng):
    """Ragged lengths (0 to T, in both directions' orders), every cell and layout."""
    args = problem(rng, mode, *shape, dtype)
    y, h_n, c_n = call(mode, *args, *shape[2:])
    y_ref, h_ref, c_ref = reference(mode, *args, *shape[2:])
    tol = _TOL[np.dtype(dtype)]
    assert y.dtype == h_n.dtype == dtype
    np.testing.assert_allclose(y, y_ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(h_n, h_ref, rtol=tol, atol=tol)
    if mode == "lstm":
        np.testing.assert_allclose(c_n, c_ref, rtol=tol, atol=tol)
    lengths = args[4]
    for b, n in enumerate(lengths):
        assert (np.asarray(y)[b, n:] == 0).all()  # exact zeros past each length


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bidirectional", [False, True], ids=["uni", "bi"])
def test_gradients_match_numerical_differentiation(mode, bidirectional, rng):
    """float64, every input (x, h0, c0, weights) through two layers and ragged lengths."""
    input_size, hidden, layers = 3, 4, 2
    x, h0, c0, w, lengths = problem(rng, mode, 3, 4, input_size, hidden, layers, bidirectional,
                                    np.float64, lengths=[4, 2, 3])
    weights = rng.standard_normal(5)

    def f(x, h0, c0, w):
        y, h_n, c_n = call(mode, x, h0, c0, w, lengths, input_size, hidden, layers, bidirectional)
        loss = jnp.sum(jnp.sin(y)) + jnp.sum(h_n * weights[0]) + jnp.sum(h_n ** 2)
        return loss + (0 if c_n is None else jnp.sum(c_n * weights[1] + c_n ** 2))

    args = (x, h0, c0, w) if mode == "lstm" else (x, h0, c0[..., :0], w)
    if mode != "lstm":
        f_single = lambda x, h0, w: f(x, h0, None, w)
        check_grads(f_single, (x, h0, w), order=1, modes=["rev"], atol=1e-6, rtol=1e-6, eps=1e-6)
    else:
        check_grads(f, args, order=1, modes=["rev"], atol=1e-6, rtol=1e-6, eps=1e-6)


# jax's own RNN test (tests/experimental_rnn_test.py, run there on GPUs only): its cases,
# against its lstm_ref, with jax.experimental.rnn.lstm lowered by install().
@pytest.mark.parametrize("bidirectional", [True, False], ids=["bi", "uni"])
@pytest.mark.parametrize("num_layers", [1, 4])
@pytest.mark.parametrize("hidden_size", [1, 6])
@pytest.mark.parametrize("input_size", [1, 2])
@pytest.mark.parametrize("seq_len", [1, 4])
@pytest.mark.parametrize("batch_size", [1, 4])
def test_jax_rnn_test_cases(batch_size, seq_len, input_size, hidden_size, num_layers,
                            bidirectional, rng, installed):
    directions = 2 if bidirectional else 1
    seq_lengths = jnp.asarray(rng.integers(1, seq_len + 1, batch_size), jnp.int32)
    normal = lambda *s: jnp.asarray(rng.standard_normal(s), jnp.float32)
    x = normal(batch_size, seq_len, input_size)
    h_0 = normal(num_layers * directions, batch_size, hidden_size)
    c_0 = normal(num_layers * directions, batch_size, hidden_size)
    weights = jax_rnn.init_lstm_weight(jax.random.key(int(rng.integers(1 << 31))), input_size,
                                       hidden_size, num_layers, bidirectional)
    mask = jnp.arange(seq_len)[None] < seq_lengths[:, None]

    def f(weights, x, h_0, c_0):
        y, h, c = jax_rnn.lstm(x, h_0, c_0, weights, seq_lengths=seq_lengths,
                               input_size=input_size, hidden_size=hidden_size,
                               num_layers=num_layers, dropout=False, bidirectional=bidirectional)
        return jnp.sum(jnp.where(mask[..., None], y, 0.)), (y, h, c)

    def g(weights, x, h_0, c_0):
        W_ih, W_hh, b_ih, b_hh = jax_rnn.unpack_lstm_weights(weights, input_size, hidden_size,
                                                             num_layers, bidirectional)
        y, h, c = jax_rnn.lstm_ref(x, h_0, c_0, W_ih, W_hh, b_ih, b_hh,
                                   seq_lengths=seq_lengths, input_size=input_size,
                                   hidden_size=hidden_size, num_layers=num_layers,
                                   dropout=False, bidirectional=bidirectional)
        return jnp.sum(jnp.where(mask[..., None], y, 0.)), (y, h, c)

    args = (weights, x, h_0, c_0)
    (loss, outs), grads = jax.jit(jax.value_and_grad(f, (0, 1, 2, 3), has_aux=True))(*args)
    (loss_ref, outs_ref), grads_ref = jax.jit(
        jax.value_and_grad(g, (0, 1, 2, 3), has_aux=True))(*args)
    assert "ferrax_rnn" in jax.jit(f).lower(*args).as_text()
    for ours, ref in zip([loss, *outs, *grads], [loss_ref, *outs_ref, *grads_ref]):
        np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("half", [jnp.bfloat16, jnp.float16], ids=["bfloat16", "float16"])
def test_half_precision_inputs_compute_in_float32(mode, half, rng):
    """Each result in its operand's dtype, equal to the f32 computation on the same (rounded)
    inputs up to the result's own rounding; gradients too."""
    shape = (4, 5, 3, 8, 2, True)
    x, h0, c0, w, lengths = problem(rng, mode, *shape, np.float32)
    rounded = [np.asarray(jnp.asarray(a, half).astype(np.float32)) for a in (x, h0, c0, w)]
    halves = [jnp.asarray(a, half) for a in (x, h0, c0, w)]
    eps = float(jnp.finfo(half).eps)
    got = call(mode, *halves, lengths, *shape[2:])
    want = call(mode, *rounded, lengths, *shape[2:])
    for ours, f32 in zip(got, want):
        if ours is None:
            continue
        assert ours.dtype == half
        f32 = np.asarray(f32)
        np.testing.assert_allclose(np.asarray(ours, np.float32), f32, rtol=eps, atol=eps)

    def loss(*args):
        y, h_n, c_n = call(mode, *args, lengths, *shape[2:])
        return sum(jnp.sum(o.astype(jnp.float32) ** 2) for o in (y, h_n, c_n) if o is not None)

    argnums = (0, 1, 2, 3) if mode == "lstm" else (0, 1, 3)
    if mode != "lstm":
        halves[2], rounded[2] = halves[2][..., :0], rounded[2][..., :0]
    grads = jax.grad(loss, argnums)(*halves)
    grads_f32 = jax.grad(loss, argnums)(*rounded)
    for ours, f32 in zip(grads, grads_f32):
        assert ours.dtype == half
        scale = np.abs(np.asarray(f32)).max()
        np.testing.assert_allclose(np.asarray(ours, np.float32), f32, rtol=2 * eps,
                                   atol=2 * eps * scale)


def test_empty_batches_and_sequences():
    for batch, steps in [(0, 4), (3, 0), (0, 0)]:
        x = jnp.zeros((batch, steps, 2))
        h0 = c0 = jnp.ones((2, batch, 3))
        w = jnp.ones(rnn.num_params("lstm", 2, 3, 1, True))
        lengths = jnp.zeros(batch, jnp.int32)
        y, h_n, c_n = rnn.lstm(x, h0, c0, w, lengths, 2, 3, 1, 0.0, True)
        assert y.shape == (batch, steps, 6)
        assert not np.asarray(h_n).any() and not np.asarray(c_n).any()
        grads = jax.grad(lambda w, h0: jnp.sum(rnn.lstm(x, h0, c0, w, lengths, 2, 3, 1, 0.0,
                                                        True)[1]), (0, 1))(w, h0)
        assert not np.asarray(grads[0]).any() and not np.asarray(grads[1]).any()


def test_nan_stays_in_its_row(rng):
    x, h0, c0, w, lengths = problem(rng, "lstm", 4, 6, 3, 5, 2, True, np.float32,
                                    lengths=[6, 6, 3, 6])
    x[1, 2, 0] = np.nan
    x[3, 4, 1] = np.inf
    y, h_n, c_n = rnn.lstm(x, h0, c0, w, lengths, 3, 5, 2, 0.0, True)
    y, h_n = np.asarray(y), np.asarray(h_n)
    assert np.isnan(y[1]).any() and np.isnan(h_n[:, 1]).any()
    # The gates saturate at infinity: row 3 stays finite, as in the float64 loop.
    y_ref, h_ref, _ = reference("lstm", x, h0, c0, w, lengths, 3, 5, 2, True)
    for b in (0, 2, 3):
        assert np.isfinite(y[b]).all() and np.isfinite(h_n[:, b]).all()
        np.testing.assert_allclose(y[b], y_ref[b], rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_vmap_folds_into_the_batch_and_keeps_weight_gradients_apart(mode, rng):
    shape = (3, 4, 2, 5, 2, True)
    args = problem(rng, mode, *shape, np.float64)
    x, h0, c0, w, lengths = args
    if mode != "lstm":
        c0 = c0[..., :0]
    xs = rng.standard_normal((5, *x.shape))
    many_lengths = rng.integers(0, 5, (5, 3)).astype(np.int32)

    def loss(x, w, lengths):
        y, h_n, c_n = call(mode, x, h0, c0, w, lengths, *shape[2:])
        return jnp.sum(y ** 2) + jnp.sum(jnp.cos(h_n))

    grad = jax.grad(loss, (0, 1))
    batched = jax.jit(jax.vmap(grad, (0, None, 0)))(xs, w, many_lengths)
    one_by_one = [grad(xs[i], w, many_lengths[i]) for i in range(5)]
    for k in range(2):
        np.testing.assert_allclose(batched[k], np.stack([g[k] for g in one_by_one]),
                                   rtol=1e-12, atol=1e-12)
    # Mapped weights: one call per instance.
    ws = rng.standard_normal((3, *w.shape)) * 0.3
    batched = jax.vmap(grad, (None, 0, None))(x, ws, lengths)
    for i in range(3):
        for k in range(2):
            np.testing.assert_allclose(batched[k][i], grad(x, ws[i], lengths)[k],
                                       rtol=1e-12, atol=1e-12)
    # vmap over cotangents (jacrev) with unmapped forward results.
    jac = jax.jacrev(lambda w: call(mode, x, h0, c0, w, lengths, *shape[2:])[1][0, 0])(w)
    for unit in range(shape[3]):
        row = jax.grad(lambda w: call(mode, x, h0, c0, w, lengths, *shape[2:])[1][0, 0, unit])(w)
        np.testing.assert_allclose(jac[unit], row, rtol=1e-12, atol=1e-12)


def test_backward_runs_the_forward_pass_again_without_the_reserve(rng):
    """A reserve too short for what the backward pass reads (as a cut one after vmap) gives the
    same gradients: the backward target recomputes the forward pass."""
    shape = (3, 5, 2, 4, 2, True)
    x, h0, c0, w, lengths = problem(rng, "lstm", *shape, np.float64)
    params = dict(mode=rnn.MODES["lstm"], input_size=2, hidden_size=4, num_layers=2,
                  dropout=0.0, bidirectional=True, allow_tf32=False)
    y, h_n, c_n, reserve = rnn.rnn_fwd_p.bind(x, h0, c0, w, lengths, training=True, **params)
    assert reserve.shape == (rnn.reserve_size("lstm", 2, 4, 2, True, 3, 5, np.float64),)
    dy, dh, dc = (rng.standard_normal(a.shape) for a in (y, h_n, c_n))
    full = rnn.rnn_bwd_p.bind(dy, dh, dc, x, h0, c0, w, y, reserve, lengths, groups=1, **params)
    for cut in (reserve[:0], reserve[:-1]):
        again = rnn.rnn_bwd_p.bind(dy, dh, dc, x, h0, c0, w, y, cut, lengths, groups=1, **params)
        for a, b in zip(full, again):
            np.testing.assert_array_equal(a, b)


def test_install_routes_jax_s_lstm_and_uninstall_restores_stock(rng):
    x, h0, c0, w, lengths = problem(rng, "lstm", 2, 3, 2, 3, 1, False, np.float32)
    lstm = lambda x: jax_rnn.lstm(x, h0, c0, w, lengths, 2, 3, 1, 0.0, False)
    with pytest.raises(Exception):  # stock jax: no CPU lowering (nor a GPU to size the reserve)
        jax.jit(lstm)(x)
    ferrax.install()
    try:
        text = jax.jit(lstm).lower(x).as_text()
        assert "ferrax_rnn" in text
        np.testing.assert_allclose(jax.jit(lstm)(x)[0], reference("lstm", x, h0, c0, w, lengths,
                                                                  2, 3, 1, False)[0],
                                   rtol=2e-5, atol=2e-5)
        with pytest.raises(NotImplementedError, match="rnn_fwd"):
            # A plain export lowers as stock jax, which has no CPU rule.
            jax.export.export(jax.jit(lstm), platforms=["cpu"])(x)
    finally:
        ferrax.uninstall()
    with pytest.raises(Exception):
        jax.jit(lstm)(x)


def test_install_lowers_jax_s_primitives(rng):
    """Code holding jax's own lstm (taken before install()) binds jax's primitives: install()
    gives them ferrax's rules, a reserve size without a GPU, and batching rules."""
    shape = (3, 4, 2, 3, 2, True)
    x, h0, c0, w, lengths = problem(rng, "lstm", *shape, np.float32)

    def loss(x, w):
        y, h_n, c_n = JAX_LSTM(x, h0, c0, w, lengths, *shape[2:5], 0.0, shape[5])
        return jnp.sum(y ** 2) + jnp.sum(h_n * c_n)

    def loss_ref(x, w):
        w_ih, w_hh, b_ih, b_hh = jax_rnn.unpack_lstm_weights(w, *shape[2:5], shape[5])
        y, h_n, c_n = jax_rnn.lstm_ref(x, h0, c0, w_ih, w_hh, b_ih, b_hh, lengths,
                                       *shape[2:5], 0.0, shape[5])
        return jnp.sum(y ** 2) + jnp.sum(h_n * c_n)

    xs = rng.standard_normal((2, *x.shape)).astype(np.float32)
    ferrax.install()
    try:
        grad = jax.jit(jax.vmap(jax.grad(loss, (0, 1)), (0, None)))
        assert "ferrax_rnn_bwd" in grad.lower(xs, w).as_text()
        got = grad(xs, w)
    finally:
        ferrax.uninstall()
    want = jax.vmap(jax.grad(loss_ref, (0, 1)), (0, None))(xs, w)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5)


def test_ferrax_export_round_trip(rng):
    x, h0, c0, w, lengths = problem(rng, "gru", 3, 4, 2, 3, 2, True, np.float32)
    f = jax.jit(lambda x, h0, w: rnn.gru(x, h0, w, lengths, 2, 3, 2, 0.0, True))
    exported = ferrax.export(f)(x, h0, w)
    restored = jax.export.deserialize(exported.serialize())
    for a, b in zip(restored.call(x, h0, w), f(x, h0, w)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["float32", "bfloat16"])
def test_lowering_for_cuda_needs_no_gpu(dtype, rng):
    """The CUDA targets are sized and lowered without asking a GPU (jaxlib's need cuDNN at
    trace time): an export for CUDA from this machine calls ferrax's targets and nothing
    else, half precision converted to f32 around them."""
    x, h0, c0, w, lengths = (jnp.asarray(a, dtype) if a.dtype != np.int32 else a
                             for a in problem(rng, "gru", 3, 4, 2, 5, 2, True, np.float32))

    def loss(x, w):
        y, h_n = rnn.gru(x, h0, w, lengths, 2, 5, 2, 0.0, True)
        return jnp.sum(y.astype(jnp.float32) ** 2) + jnp.sum(h_n.astype(jnp.float32))

    exported = ferrax.export(jax.jit(jax.grad(loss, (0, 1))), platforms=["cuda"])(x, w)
    text = exported.mlir_module()
    calls = set(re.findall(r"custom_call @(\w+)", text))
    assert calls == {"ferrax_rnn", "ferrax_rnn_bwd"}, calls
    assert ("stablehlo.convert" in text) == (dtype != jnp.float32)
    x, h0, c0, w, lengths = problem(rng, "lstm", 3, 4, 2, 5, 2, True, np.float32)
    ferrax.install()
    try:
        # jax's own lstm binds jax's primitives, which install() routes.
        f = jax.jit(lambda x: JAX_LSTM(x, h0, c0, w, lengths, 2, 5, 2, 0.0, True)[0])
        text = ferrax.export(f, platforms=["cuda"])(x).mlir_module()
        assert set(re.findall(r"custom_call @(\w+)", text)) == {"ferrax_rnn"}
    finally:
        ferrax.uninstall()


def test_bad_inputs_are_clear_errors(rng):
    x, h0, c0, w, lengths = problem(rng, "lstm", 2, 3, 2, 3, 1, False, np.float32)
    with pytest.raises(TypeError, match="weights must have shape"):
        rnn.lstm(x, h0, c0, w[:-1], lengths, 2, 3, 1)
    with pytest.raises(TypeError, match="x must be"):
        rnn.lstm(x, h0, c0, w, lengths, 3, 3, 1)
    with pytest.raises(TypeError, match="float32, bfloat16 or float16"):
        rnn.lstm(x.astype(np.complex64), h0, c0, w, lengths, 2, 3, 1)
    with pytest.raises(TypeError, match="seq_lengths must be int32"):
        rnn.lstm(x, h0, c0, w, lengths.astype(np.int64), 2, 3, 1)
    with pytest.raises(NotImplementedError, match="dropout"):
        rnn.lstm(x, h0, c0, w, lengths, 2, 3, 1, dropout=0.5)
    with pytest.raises(ValueError, match="mode"):
        rnn.num_params("elman", 2, 3, 1, False)
    with pytest.raises(ValueError, match="hidden_size"):
        rnn.num_params("gru", 2, 0, 1, False)
    for bad in ([4, 1], [-1, 2]):
        with pytest.raises(Exception, match=r"seq_lengths.*0\.\.=3"):
            jax.block_until_ready(rnn.lstm(x, h0, c0, w, np.asarray(bad, np.int32), 2, 3, 1))


def _raw_forward(x, h0, c0, w, lengths, reserve=0, **attrs):
    attrs = dict(dict(mode=np.int32(2), input_size=np.int64(2), hidden_size=np.int64(3),
                      num_layers=np.int64(1), bidirectional=False, dropout=np.float32(0),
                      allow_tf32=False), **attrs)
    out = (jax.ShapeDtypeStruct((x.shape[0], x.shape[1], 3), x.dtype),
           jax.ShapeDtypeStruct(h0.shape, h0.dtype), jax.ShapeDtypeStruct(c0.shape, c0.dtype),
           jax.ShapeDtypeStruct((reserve,), np.float32))
    return jax.ffi.ffi_call("ferrax_rnn", out)(x, h0, c0, w, lengths, **attrs)


def test_malformed_calls_name_the_operand(rng):
    """Calls that skip ferrax.rnn's checks: the handler's errors name the target, the operand
    and what it expected."""
    x, h0, c0, w, lengths = problem(rng, "lstm", 2, 3, 2, 3, 1, False, np.float32)
    jax.block_until_ready(_raw_forward(x, h0, c0, w, lengths))
    cases = [
        ((x, h0, c0, w[:-1], lengths), {}, "operand 3 'w'"),
        ((x, h0[:, :1], c0, w, lengths), {}, "operand 1 'h0'"),
        ((x, h0, c0, w, lengths.astype(np.int64)), {}, "operand 4 'seq_lengths'"),
        ((x.astype(np.float64), h0, c0, w, lengths), {}, "dtype f64"),
        ((x, h0, c0, w, lengths), {"mode": np.int32(7)}, "attribute 'mode'"),
        ((x, h0, c0, w, lengths), {"num_layers": np.int64(0)}, "attribute 'num_layers'"),
        ((x, h0, c0, w, lengths), {"dropout": np.float32(0.3)}, "attribute 'dropout'"),
    ]
    for args, attrs, message in cases:
        with pytest.raises(Exception, match=message) as error:
            jax.block_until_ready(_raw_forward(*args, **attrs))
        assert "ferrax_rnn" in str(error.value)


def test_sharded_batch_on_eight_devices(run_python, tmp_path, rng):
    """The targets are not split by XLA's batch partitioner (their operands have no common
    leading batch dimension): a batch-sharded input runs them on gathered operands, and the
    results equal the unsharded call's."""
    args = problem(rng, "lstm", 16, 5, 3, 4, 2, True, np.float32)
    np.savez(tmp_path / "args.npz", *args)
    run_python("""
        import sys, numpy as np, jax, jax.numpy as jnp
        from jax.sharding import NamedSharding, PartitionSpec as P
        import ferrax
        x, h0, c0, w, lengths = np.load(sys.argv[1]).values()
        mesh = jax.make_mesh((8,), ("b",))
        rows = NamedSharding(mesh, P("b"))
        states = NamedSharding(mesh, P(None, "b"))
        def loss(x, h0, c0, w):
            y, h, c = ferrax.rnn.lstm(x, h0, c0, w, lengths, 3, 4, 2, 0.0, True)
            return jnp.sum(y ** 2) + jnp.sum(h) + jnp.sum(c)
        f = jax.jit(jax.value_and_grad(loss, (0, 1, 2, 3)))
        sharded = f(jax.device_put(x, rows), jax.device_put(h0, states),
                    jax.device_put(c0, states), w)
        plain = f(x, h0, c0, w)
        for a, b in zip(jax.tree.leaves(sharded), jax.tree.leaves(plain)):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    """, str(tmp_path / "args.npz"),
        env={"XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_ENABLE_X64": "0"})
