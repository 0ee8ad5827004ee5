"""Lowering helpers that reproduce jaxlib's linalg custom-call contract for ferrax targets:
column-major batched matrices, ``num_batch_dims`` and a Shardy rule so XLA can partition
the batch, and operand/result aliasing."""

from __future__ import annotations

import string

from jax import ffi
from jax._src import config
from jax._src.core import is_constant_shape
from jax._src.custom_partitioning_sharding_rule import (
    sdy_sharding_rule_to_mlir, str_to_sdy_sharding_rule)
from jax._src.interpreters import mlir


def column_major_layout(rank: int) -> tuple[int, ...]:
    """Minor-to-major layout of a batch of Fortran-ordered matrices."""
    return (rank - 2, rank - 1) + tuple(range(rank - 3, -1, -1))


def _sdy_rule(module_context, num_batch_dims, avals_in, avals_out):
    letters = iter(string.ascii_letters)

    def factors(aval):
        own = len(aval.shape) - num_batch_dims
        prefix = "... " if num_batch_dims and own >= 0 else ""
        return prefix + " ".join(next(letters) for _ in range(own))

    rule = str_to_sdy_sharding_rule(
        ", ".join(map(factors, avals_in)) + " -> " + ", ".join(map(factors, avals_out)))
    types = lambda avals: [t for a in avals for t in mlir.aval_to_ir_types(module_context, a)]
    return sdy_sharding_rule_to_mlir(rule, types(avals_in), types(avals_out))


def batched_ffi_lowering(target: str, *, num_non_batch_dims: int, column_major: bool,
                         operand_output_aliases=None):
    """An ``ffi_lowering`` whose leading ``rank - num_non_batch_dims`` dims are a batch that
    XLA may split across devices (the target is registered batch-partitionable)."""

    def rule(ctx, *args, **attrs):
        avals = (*ctx.avals_in, *ctx.avals_out)
        max_rank = max(len(a.shape) for a in ctx.avals_in)
        static = all(is_constant_shape(a.shape) for a in avals)
        # An empty array has no data to lay out, and XLA's CPU compiler crashes on the
        # zero-sized layout-changing copy a column-major request would add around it.
        empty = static and any(0 in a.shape for a in avals)
        layout = lambda a: (column_major_layout(len(a.shape))
                            if column_major and not empty and len(a.shape) == max_rank else None)
        lowering = ffi.ffi_lowering(
            target,
            operand_layouts=[layout(a) for a in ctx.avals_in],
            result_layouts=[layout(a) for a in ctx.avals_out],
            operand_output_aliases=operand_output_aliases,
            extra_attributes=batch_partitioning(ctx, max_rank - num_non_batch_dims))
        return lowering(ctx, *args, **attrs)

    return rule


def batch_partitioning(ctx, num_batch_dims: int):
    """The custom call's attributes that let XLA split its ``num_batch_dims`` leading dims (of
    every operand and result) across devices, or None where it is not split: as in jaxlib,
    symbolic shapes are not partitioned, nor is a call without a batch."""
    avals = (*ctx.avals_in, *ctx.avals_out)
    if num_batch_dims <= 0 or not all(is_constant_shape(a.shape) for a in avals):
        return None
    extra = {"mhlo.frontend_attributes":
             mlir.ir_attribute({"num_batch_dims": str(num_batch_dims)})}
    if config.use_shardy_partitioner.value:
        extra["sdy.sharding_rule"] = _sdy_rule(
            ctx.module_context, num_batch_dims, ctx.avals_in, ctx.avals_out)
    return extra
