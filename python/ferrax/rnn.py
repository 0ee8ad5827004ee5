"""Recurrent networks on ferrax's targets: ``lstm``, ``gru``, ``rnn_tanh`` and ``rnn_relu``,
multi-layer and optionally bidirectional, with ``jax.experimental.rnn``'s conventions.

- Batch-major inputs ``x`` ``(B, T, input_size)``, states ``(num_layers·D, B, hidden_size)``
  (D = 2 when bidirectional), ``seq_lengths`` ``(B,)`` int32 in ``[0, T]``; outputs
  ``y`` ``(B, T, D·hidden_size)``, zero past each row's length, and the final states (zero for
  a row of length 0, as cuDNN's).
- One flat weight vector in cuDNN's packed layout, as ``jax.experimental.rnn`` documents it
  for the LSTM: every pseudo-layer's ``W_ih`` and ``W_hh``, then every pseudo-layer's ``b_ih``
  and ``b_hh``; gate blocks stacked on the leading axis (LSTM i, f, g, o; GRU r, z, n, whose
  ``b_hn`` sits inside ``r⊙(W_hn h + b_hn)`` as in cuDNN and PyTorch). ``num_params``,
  ``init_weights`` and ``unpack_weights`` work on it for every cell.
- Differentiable (a custom VJP on ferrax's backward target), ``vmap`` folds the mapped axis into
  the batch (per-instance weight gradients kept apart), and f32, f64, bf16 and f16 inputs: half
  precision is computed with f32 accumulation, each result in its operand's dtype.

On the CPU these run ferrax's Rust kernels (jaxlib has no CPU RNN). ``ferrax.install()`` also
gives ``jax.experimental.rnn.lstm`` its CPU lowering on the same targets.
"""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import core, dispatch, dtypes
from jax._src.interpreters import batching, mlir
from jax._src.lax import lax
from jax.experimental import rnn as jax_rnn

from ferrax import _library, _targets
from ferrax._registry import register

__all__ = ["MODES", "lstm", "gru", "rnn_tanh", "rnn_relu", "num_params", "init_weights",
           "unpack_weights", "reserve_size"]

#: Cell name -> cuDNN's ``cudnnRNNMode_t`` (the targets' ``mode`` attribute).
MODES = {"relu": 0, "tanh": 1, "lstm": 2, "gru": 3}
_LSTM = MODES["lstm"]
_GATES = {0: 1, 1: 1, 2: 4, 3: 3}
_FLOATS = tuple(map(np.dtype, (np.float32, np.float64, np.dtype(jnp.bfloat16),
                               np.float16)))


def _mode(mode) -> int:
    if isinstance(mode, str):
        if mode not in MODES:
            raise ValueError(f"ferrax.rnn: mode must be one of {sorted(MODES)}, got {mode!r}")
        return MODES[mode]
    return int(mode)


def num_params(mode, input_size: int, hidden_size: int, num_layers: int,
               bidirectional: bool) -> int:
    """The length of the packed weight vector (for the LSTM,
    ``jax.experimental.rnn.get_num_params_in_lstm``)."""
    return _library.rnn_sizes(_mode(mode), input_size, hidden_size, num_layers, bidirectional,
                              0, 0)[0]


def _reserve_per_row_step(mode: int, input_size, hidden_size, num_layers, bidirectional):
    return _library.rnn_sizes(mode, input_size, hidden_size, num_layers, bidirectional, 1, 1)[1]


def reserve_size(mode, input_size: int, hidden_size: int, num_layers: int, bidirectional: bool,
                 batch, steps, dtype=np.float32):
    """The f32 elements of the reserve at which the forward pass keeps what the backward
    pass reads (with less, the backward pass runs the forward pass again). Linear in
    ``batch·steps``, so symbolic dimensions give a symbolic size."""
    per = _reserve_per_row_step(_mode(mode), input_size, hidden_size, num_layers, bidirectional)
    scalars = 2 if np.dtype(dtype) == np.float64 else 1
    return batch * steps * (per * scalars)


def _param_shapes(mode: int, input_size, hidden_size, num_layers, bidirectional):
    directions = 2 if bidirectional else 1
    rows = _GATES[mode] * hidden_size
    matrices, biases = [], []
    for p in range(num_layers * directions):
        width = input_size if p < directions else directions * hidden_size
        matrices += [(rows, width), (rows, hidden_size)]
        biases += [(rows,), (rows,)]
    return matrices + biases


def init_weights(key, mode, input_size: int, hidden_size: int, num_layers: int,
                 bidirectional: bool, dtype=jnp.float32):
    """Weights drawn from U(-k, k), k = 1/√hidden_size (``jax.experimental.rnn``'s and
    PyTorch's initialization)."""
    count = num_params(mode, input_size, hidden_size, num_layers, bidirectional)
    k = 1.0 / math.sqrt(hidden_size)
    return jax.random.uniform(key, (count,), dtype=dtype, minval=-k, maxval=k)


def unpack_weights(weights, mode, input_size: int, hidden_size: int, num_layers: int,
                   bidirectional: bool):
    """``(W_ih, W_hh, b_ih, b_hh)``, each a dict pseudo-layer -> array (``W_ih[p]``
    ``(gates·hidden, input)``), as ``jax.experimental.rnn.unpack_lstm_weights``."""
    mode = _mode(mode)
    shapes = _param_shapes(mode, input_size, hidden_size, num_layers, bidirectional)
    pieces, offset = [], 0
    for shape in shapes:
        size = math.prod(shape)
        pieces.append(weights[offset:offset + size].reshape(shape))
        offset += size
    pseudo = len(shapes) // 4
    matrices, biases = pieces[:2 * pseudo], pieces[2 * pseudo:]
    split = lambda items, k: {p: items[2 * p + k] for p in range(pseudo)}
    return split(matrices, 0), split(matrices, 1), split(biases, 0), split(biases, 1)


# ---- The primitives. ----

def _check(where, x, h_0, c_0, w, seq_lengths, *, mode, input_size, hidden_size, num_layers,
           bidirectional):
    directions = 2 if bidirectional else 1
    if x.ndim != 3 or x.shape[2] != input_size:
        raise TypeError(f"{where}: x must be (batch, steps, {input_size}), got {x.shape}")
    batch = x.shape[0]
    cell = hidden_size if mode == _LSTM else 0
    expected = {"h_0": (num_layers * directions, batch, hidden_size),
                "c_0": (num_layers * directions, batch, cell),
                "weights": (num_params(mode, input_size, hidden_size, num_layers, bidirectional),),
                "seq_lengths": (batch,)}
    for name, aval in zip(expected, (h_0, c_0, w, seq_lengths)):
        if tuple(aval.shape) != expected[name]:
            raise TypeError(f"{where}: {name} must have shape {expected[name]}, got {aval.shape}")
    if dtypes.dtype(seq_lengths.dtype) != np.int32:
        raise TypeError(f"{where}: seq_lengths must be int32, got {seq_lengths.dtype}")
    wide = dtypes.dtype(x.dtype) == np.float64
    for name, aval in (("x", x), ("h_0", h_0), ("c_0", c_0), ("weights", w)):
        dtype = dtypes.dtype(aval.dtype)
        if dtype not in _FLOATS or (dtype == np.float64) != wide:
            raise TypeError(f"{where}: {name} must be float32, bfloat16 or float16 (or all "
                            f"float64), got {aval.dtype}")


def _cudnn_reserve(x, input_size, hidden_size, num_layers, dropout, bidirectional,
                   allow_tf32):
    """The reserve jaxlib's cuDNN LSTM asks for, where a GPU can tell (else 0)."""
    size = getattr(jax_rnn.gpu_rnn, "compute_rnn_workspace_reserve_space_sizes", None)
    if size is None or not core.is_constant_shape(x.shape):
        return 0
    try:
        return size(input_size, hidden_size, num_layers, x.shape[0], x.shape[1], dropout,
                    bidirectional, allow_tf32)[1]
    except Exception:  # a CUDA plugin without a GPU to ask
        return 0


def _fwd_abstract_eval(x, h_0, c_0, w, seq_lengths, *, mode, input_size, hidden_size,
                       num_layers, dropout, bidirectional, allow_tf32, training):
    _check("ferrax.rnn", x, h_0, c_0, w, seq_lengths, mode=mode, input_size=input_size,
           hidden_size=hidden_size, num_layers=num_layers, bidirectional=bidirectional)
    directions = 2 if bidirectional else 1
    batch, steps = x.shape[:2]
    # Outside a gradient nothing reads the reserve: an empty one spares writing it. Sized
    # without a GPU; the LSTM's at least as jaxlib's cuDNN target asks, so that the rule of a
    # plain export (jax's own, ``stock_fwd_lowering``) can hand it jaxlib's.
    reserve = 0
    if training:
        reserve = reserve_size(mode, input_size, hidden_size, num_layers, bidirectional, batch,
                               steps, x.dtype)
        if mode == _LSTM:
            reserve = core.max_dim(reserve, _cudnn_reserve(
                x, input_size, hidden_size, num_layers, dropout, bidirectional, allow_tf32))
    return (core.ShapedArray((batch, steps, directions * hidden_size), x.dtype),
            core.ShapedArray(h_0.shape, h_0.dtype), core.ShapedArray(c_0.shape, c_0.dtype),
            core.ShapedArray((reserve,), np.dtype(np.float32)))


def _bwd_abstract_eval(dy, dh_n, dc_n, x, h_0, c_0, w, y, reserve, seq_lengths, *, groups,
                       **params):
    return (core.ShapedArray(x.shape, x.dtype), core.ShapedArray(h_0.shape, h_0.dtype),
            core.ShapedArray(c_0.shape, c_0.dtype),
            core.ShapedArray((groups, *w.shape), w.dtype))


def _attributes(*, mode, input_size, hidden_size, num_layers, dropout, bidirectional,
                allow_tf32):
    return dict(mode=np.int32(mode), input_size=np.int64(input_size),
                hidden_size=np.int64(hidden_size), num_layers=np.int64(num_layers),
                bidirectional=bool(bidirectional), dropout=np.float32(dropout),
                allow_tf32=bool(allow_tf32))


def _cpu_dropout(dropout):
    if float(dropout) != 0.0:
        raise NotImplementedError(
            f"ferrax.rnn on the CPU takes dropout=0 only (cuDNN's dropout masks cannot be "
            f"reproduced), got {dropout}")


def fwd_lowering(ctx, x, h_0, c_0, w, seq_lengths, *, training=True, **params):
    """The forward primitive as one ``ferrax_rnn`` call (which keeps the backward pass's
    values where its reserve result has room: ``training`` sized it)."""
    if "cpu" in ctx.module_context.platforms:
        _cpu_dropout(params["dropout"])
    return jax.ffi.ffi_lowering(_targets.RNN)(ctx, x, h_0, c_0, w, seq_lengths,
                                               **_attributes(**params))


def bwd_lowering(ctx, *args, groups, **params):
    """The backward primitive as one ``ferrax_rnn_bwd`` call."""
    if "cpu" in ctx.module_context.platforms:
        _cpu_dropout(params["dropout"])
    return jax.ffi.ffi_lowering(_targets.RNN_BWD)(ctx, *args, groups=np.int64(groups),
                                                   **_attributes(**params))


def _compute_dtype(avals):
    """What the GPU computes in: f64 if the floating operands are, else f32."""
    return np.dtype(np.float64 if dtypes.dtype(avals[0].dtype) == np.float64 else np.float32)


def _in_compute_dtype(primitive, rule, floats, results_like):
    """``rule`` for the GPU, whose targets take one dtype for every floating operand, f32 or
    f64: half-precision operands (``floats``: their positions) are converted to f32 around
    the call, and each result (``results_like``: result -> operand position, or None) back to
    its operand's dtype."""

    def lowering(ctx, *args, **params):
        compute = _compute_dtype([ctx.avals_in[i] for i in floats])
        if all(dtypes.dtype(ctx.avals_in[i].dtype) == compute for i in floats):
            return rule(ctx, *args, **params)

        def converted(*args):
            args = [a.astype(compute) if i in floats else a for i, a in enumerate(args)]
            outs = primitive.bind(*args, **params)
            return [o if like is None else o.astype(ctx.avals_in[like].dtype)
                    for o, like in zip(outs, results_like)]

        return mlir.lower_fun(converted, multiple_results=True)(ctx, *args)

    return lowering


def stock_fwd_lowering(ctx, *args, mode, training, allow_tf32, **params):
    """The forward primitive as stock jax lowers what ``install()`` puts this module's
    ``lstm`` in place of (a plain ``jax.export``): the LSTM by jax's own primitive (jaxlib's
    cuDNN target on GPUs; jax has no CPU rule), its reserve padded to this primitive's; the
    other cells have no stock equivalent and keep ferrax's target."""
    if mode != _LSTM:
        return fwd_lowering(ctx, *args, mode=mode, training=training, allow_tf32=allow_tf32,
                            **params)
    size = ctx.avals_out[3].shape[0]

    def stock(*args):
        y, h_n, c_n, reserve = jax_rnn.rnn_fwd_p.bind(*args, cudnn_allow_tf32=allow_tf32,
                                                      **params)
        reserve = jnp.pad(reserve, (0, size - reserve.shape[0])) if training else reserve[:0]
        return y, h_n, c_n, reserve

    return mlir.lower_fun(stock, multiple_results=True)(ctx, *args)


def stock_bwd_lowering(ctx, *args, groups, mode, allow_tf32, **params):
    """The backward primitive as stock jax lowers it (see ``stock_fwd_lowering``): jaxlib's
    cuDNN target takes the reserve whole (it is at least what cuDNN asked for)."""
    if mode != _LSTM or groups != 1:  # the other cells, and vmap: stock jax has neither
        return bwd_lowering(ctx, *args, groups=groups, mode=mode, allow_tf32=allow_tf32,
                            **params)

    def stock(*args):
        *grads, dw = jax_rnn.rnn_bwd_p.bind(*args, cudnn_allow_tf32=allow_tf32, **params)
        return (*grads, dw[None])

    return mlir.lower_fun(stock, multiple_results=True)(ctx, *args)


def _fold_rows(x, d, size):
    """A batch-major operand ``(B, ...)`` mapped at ``d``: ``(size·B, ...)``."""
    x = batching.bdim_at_front(x, d, size)
    return x.reshape(size * x.shape[1], *x.shape[2:])


def _fold_state(x, d, size):
    """A state ``(L·D, B, H)`` mapped at ``d``: ``(L·D, size·B, H)``."""
    x = batching.bdim_at_front(x, d, size)
    x = jnp.moveaxis(x, 0, 1)
    return x.reshape(x.shape[0], size * x.shape[2], *x.shape[3:])


def _unfold_rows(x, size):
    return x.reshape(size, x.shape[0] // size, *x.shape[1:])


def _unfold_state(x, size):
    return x.reshape(x.shape[0], size, x.shape[1] // size, *x.shape[2:])


def map_instances(prim, size, args, dims, params):
    """The primitive once per mapped instance (``lax.map``): where folding into the batch
    cannot keep the instances apart (mapped weights)."""
    mapped = [d is not None for d in dims]
    moved = [batching.bdim_at_front(x, d, size) if m else x for x, d, m in zip(args, dims, mapped)]

    def one(xs):
        xs = iter(xs)
        return prim.bind(*(next(xs) if m else x for x, m in zip(moved, mapped)), **params)

    out = jax.lax.map(one, [x for x, m in zip(moved, mapped) if m])
    return out, [0] * len(out)


def _reserve_for(prim, args, dims, params):
    """The reserve length ``prim``'s abstract evaluation gives one instance's operands."""
    def instance(x, d):
        shape = list(x.shape)
        if d is not None:
            del shape[d]
        return core.ShapedArray(tuple(shape), dtypes.dtype(x.dtype))

    avals = [instance(x, d) for x, d in zip(args, dims)]
    return prim.abstract_eval(*avals, **params)[0][3].shape[0]


def fwd_batcher(prim, axis_data, args, dims, **params):
    """vmap of a forward primitive: the mapped axis folded into the batch; the reserve cut or
    padded to whole instances (the backward pass runs the forward pass again where what it
    needs is not there, so this never costs correctness)."""
    x, h_0, c_0, w, seq_lengths = args
    dx, dh, dc, dw, dl = dims
    size = axis_data.size
    if dw is not None:
        return map_instances(prim, size, args, dims, params)
    per = _reserve_for(prim, args, dims, params)
    y, h_n, c_n, reserve = prim.bind(
        _fold_rows(x, dx, size), _fold_state(h_0, dh, size), _fold_state(c_0, dc, size), w,
        _fold_rows(seq_lengths, dl, size), **params)
    whole = size * per
    reserve = (jnp.pad(reserve, (0, whole - reserve.shape[0])) if reserve.shape[0] < whole
               else reserve[:whole])
    outs = (_unfold_rows(y, size), _unfold_state(h_n, size), _unfold_state(c_n, size),
            reserve.reshape(size, per))
    return outs, (0, 1, 1, 0)


def bwd_batcher(bwd, axis_data, args, dims, *, groups, **params):
    """vmap of ferrax's backward primitive: folded into the batch as the forward pass was,
    with ``groups`` multiplied so that each instance keeps its own weight gradient; one call
    per instance where the weights are mapped, or the reserve is not (its layout interleaves
    the batch rows)."""
    dy, dh_n, dc_n, x, h_0, c_0, w, y, reserve, seq_lengths = range(10)
    size = axis_data.size
    if dims[w] is not None or dims[reserve] is None:
        return map_instances(bwd, size, args, dims, dict(params, groups=groups))
    a = list(args)
    for i in (dy, x, y, seq_lengths):
        a[i] = _fold_rows(args[i], dims[i], size)
    for i in (dh_n, dc_n, h_0, c_0):
        a[i] = _fold_state(args[i], dims[i], size)
    a[reserve] = batching.bdim_at_front(args[reserve], dims[reserve], size).reshape(-1)
    d_x, d_h0, d_c0, d_w = bwd.bind(*a, groups=size * groups, **params)
    return ((_unfold_rows(d_x, size), _unfold_state(d_h0, size), _unfold_state(d_c0, size),
             d_w.reshape(size, groups, *d_w.shape[1:])), (0, 1, 1, 0))


def _primitive(name, abstract_eval, stock_lowering):
    """A primitive lowered by ``stock_lowering`` by default; ``_install``'s routing table puts
    ferrax's rules (``fwd_lowering``, ``bwd_lowering``) in place on ferrax's platforms from
    ``import ferrax`` on, and keeps this one for plain exports."""
    prim = core.Primitive(name)
    prim.multiple_results = True
    prim.def_impl(partial(dispatch.apply_primitive, prim))
    prim.def_abstract_eval(abstract_eval)
    mlir.register_lowering(prim, stock_lowering)
    return prim


#: ``(x, h_0, c_0, weights, seq_lengths) -> (y, h_n, c_n, reserve)``; the reserve is empty
#: unless ``training`` (the forward pass of a gradient).
rnn_fwd_p = _primitive("ferrax_rnn_fwd", _fwd_abstract_eval, stock_fwd_lowering)
#: ``(dy, dh_n, dc_n, x, h_0, c_0, weights, y, reserve, seq_lengths) -> (dx, dh_0, dc_0,
#: dweights[groups])``.
rnn_bwd_p = _primitive("ferrax_rnn_bwd", _bwd_abstract_eval, stock_bwd_lowering)
batching.fancy_primitive_batchers[rnn_fwd_p] = partial(fwd_batcher, rnn_fwd_p)
batching.fancy_primitive_batchers[rnn_bwd_p] = partial(bwd_batcher, rnn_bwd_p)

#: The GPU's rules: one dtype for the floating operands (x, h_0, c_0, weights; for the backward
#: pass also dy, dh_n, dc_n and y).
cuda_fwd_lowering = _in_compute_dtype(rnn_fwd_p, fwd_lowering, (0, 1, 2, 3), (0, 1, 2, None))
cuda_bwd_lowering = _in_compute_dtype(rnn_bwd_p, bwd_lowering, (0, 1, 2, 3, 4, 5, 6, 7),
                                      (3, 4, 5, 6))


def _bind_fwd(x, h_0, c_0, w, seq_lengths, mode, input_size, hidden_size, num_layers, dropout,
              bidirectional, allow_tf32, training):
    return rnn_fwd_p.bind(x, h_0, c_0, w, seq_lengths, mode=mode, input_size=input_size,
                          hidden_size=hidden_size, num_layers=num_layers, dropout=dropout,
                          bidirectional=bidirectional, allow_tf32=allow_tf32, training=training)


@partial(jax.custom_vjp, nondiff_argnums=(5, 6, 7, 8, 9, 10, 11))
def _rnn(*args):
    return tuple(_bind_fwd(*args, training=False)[:3])


def _rnn_fwd(*args):
    y, h_n, c_n, reserve = _bind_fwd(*args, training=True)
    x, h_0, c_0, w, seq_lengths = args[:5]
    return (y, h_n, c_n), (x, h_0, c_0, w, seq_lengths, y, reserve)


def _rnn_bwd(mode, input_size, hidden_size, num_layers, dropout, bidirectional, allow_tf32,
             residuals, gradients):
    x, h_0, c_0, w, seq_lengths, y, reserve = residuals
    dy, dh_n, dc_n = gradients
    d_x, d_h0, d_c0, d_w = rnn_bwd_p.bind(
        dy, dh_n, dc_n, x, h_0, c_0, w, y, reserve, seq_lengths, groups=1, mode=mode,
        input_size=input_size, hidden_size=hidden_size, num_layers=num_layers, dropout=dropout,
        bidirectional=bidirectional, allow_tf32=allow_tf32)
    zeros = np.zeros(seq_lengths.shape, jax.dtypes.float0)
    return d_x, d_h0, d_c0, d_w.reshape(w.shape), zeros


_rnn.defvjp(_rnn_fwd, _rnn_bwd)


def _allow_tf32(precision) -> bool:
    """As ``jax.experimental.rnn``: the GPU's products may use TF32 unless HIGHEST precision is
    asked for, here or by ``jax.default_matmul_precision``."""
    precision = lax.canonicalize_precision(precision)
    if isinstance(precision, tuple):
        precision = precision[0]
    return precision != jax.lax.Precision.HIGHEST


def _call(mode, x, h_0, c_0, weights, seq_lengths, input_size, hidden_size, num_layers,
          dropout, bidirectional, precision):
    register()
    x, h_0, weights = jnp.asarray(x), jnp.asarray(h_0), jnp.asarray(weights)
    seq_lengths = jnp.asarray(seq_lengths)
    if c_0 is None:  # the cells without a cell state: an empty one
        c_0 = jnp.zeros((*h_0.shape[:2], 0), h_0.dtype)
    return _rnn(x, h_0, jnp.asarray(c_0), weights, seq_lengths, mode,
                int(input_size), int(hidden_size), int(num_layers), float(dropout),
                bool(bidirectional), _allow_tf32(precision))


def lstm(x, h_0, c_0, weights, seq_lengths, input_size: int, hidden_size: int,
         num_layers: int, dropout: float = 0.0, bidirectional: bool = False, precision=None):
    """LSTM, as :func:`jax.experimental.rnn.lstm` (same arguments, weights and results
    ``(y, h_n, c_n)``), on every platform ferrax has, with f64 and half-precision inputs."""
    return _call(MODES["lstm"], x, h_0, c_0, weights, seq_lengths, input_size, hidden_size,
                 num_layers, dropout, bidirectional, precision)


def _single_state(mode):
    def cell(x, h_0, weights, seq_lengths, input_size: int, hidden_size: int, num_layers: int,
             dropout: float = 0.0, bidirectional: bool = False, precision=None):
        y, h_n, _ = _call(MODES[mode], x, h_0, None, weights, seq_lengths, input_size,
                          hidden_size, num_layers, dropout, bidirectional, precision)
        return y, h_n

    cell.__name__ = cell.__qualname__ = "gru" if mode == "gru" else f"rnn_{mode}"
    return cell


gru = _single_state("gru")
gru.__doc__ = """GRU with cuDNN's (and PyTorch's) equations: ``(y, h_n)`` from ``x``, ``h_0``,
the packed weights (gates r, z, n) and ``seq_lengths``; arguments as :func:`lstm`."""
rnn_tanh = _single_state("tanh")
rnn_tanh.__doc__ = """Elman RNN ``h' = tanh(W x + b_W + R h + b_R)``: ``(y, h_n)``; arguments as
:func:`gru`."""
rnn_relu = _single_state("relu")
rnn_relu.__doc__ = """Elman RNN ``h' = relu(W x + b_W + R h + b_R)``: ``(y, h_n)``; arguments as
:func:`gru`."""
