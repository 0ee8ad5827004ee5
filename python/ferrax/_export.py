"""Exporting code that runs on ferrax.

``jax.export.export`` after ``install()`` lowers exactly as stock jax: every rule install()
places asks :func:`lowering` whether it is lowering for export, and then lowers by jax's own
rule, so the artifact holds jaxlib's export-stable targets only and runs on any jax, without
ferrax. ``jax.jit(f).lower()`` and compilation are not exports and keep ferrax's targets.

:func:`export` is the opt-in to ferrax's targets in an artifact. It tells the rules through the
lowering parameters (a marker among jax's ``override_lowering_rules``, so that jax's caches
keep its lowerings apart from a plain export's), allows ferrax's targets in jax's custom-call
check, and marks the artifact with the :class:`NeedsFerrax` effect: ``jax.export.deserialize``
looks up every effect of an artifact among the effect types of the process, and fails on one
that is not there with the effect's name, which says to install and import ferrax.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from typing import Callable

from jax import export as jax_export
from jax._src import core, effects
from jax._src.interpreters import mlir
from jax._src.lib.mlir import ir

from ferrax._registry import export_disabled_checks, register, target_names

# ---- Whether a lowering is an export without the opt-in. ----

#: Never bound: its presence among the lowering parameters' override rules is the opt-in.
_OPT_IN = core.Primitive("ferrax_export_opt_in")


def _never_lowered(ctx, *args, **params):
    raise AssertionError("ferrax_export_opt_in is a marker, never bound")


_OPT_IN_RULE = (_OPT_IN, _never_lowered)


def lowers_stock(ctx) -> bool:
    """Whether ``ctx`` lowers for ``jax.export`` (``for_export``, in jax 0.10 and 0.12)
    without :func:`export`'s opt-in: then install()'s rules lower as jax's own."""
    params = ctx.module_context.lowering_parameters
    overrides = params.override_lowering_rules or ()
    return bool(params.for_export) and not any(p is _OPT_IN for p, _ in overrides)


#: True while a rule of install()'s lowers for a plain export: jaxlib's LAPACK function names
#: then stay jaxlib's (install() redirects them in ``jaxlib.lapack.prepare_lapack_call``, which
#: jax's CPU rules call without their ``ctx``).
_stock = contextvars.ContextVar("ferrax_lowers_stock", default=False)


@contextlib.contextmanager
def lowering(ctx):
    """Around a rule of install()'s: yields :func:`lowers_stock` of ``ctx`` and makes
    :func:`lapack_names_stock` answer it for the rule's body."""
    stock = lowers_stock(ctx)
    token = _stock.set(stock)
    try:
        yield stock
    finally:
        _stock.reset(token)


def lapack_names_stock() -> bool:
    return _stock.get()


def stock_when_exporting(ferrax_rule: Callable, jax_rule: Callable) -> Callable:
    """A lowering rule: ``jax_rule`` for a plain export, else ``ferrax_rule``."""

    def rule(ctx, *args, **params):
        with lowering(ctx) as stock:
            return (jax_rule if stock else ferrax_rule)(ctx, *args, **params)

    return rule


# ---- The artifact's mark. ----

class _EffectName(type):
    # jax.export serializes an effect as str(its class) and deserializes it by comparing that
    # string with the str of each registered effect type: the name is what a process without
    # ferrax reports. It identifies the effect in artifacts: never change it.
    def __str__(cls):
        return ("ferrax.NeedsFerrax (this artifact calls ferrax's XLA FFI targets: install "
                "ferrax (pip install ferrax) and import ferrax before deserializing it)")


class NeedsFerrax(effects.Effect, metaclass=_EffectName):
    """The effect :func:`export` adds to an artifact that calls ferrax's targets; it stands for
    no operation, only for what the artifact needs from the process that loads it."""

    def __eq__(self, other):
        return type(other) is NeedsFerrax

    def __hash__(self):
        return hash(NeedsFerrax)

    def __repr__(self):
        return "NeedsFerrax"


# An unordered effect without tokens; allowed wherever an artifact can be called.
for _effect_types in (effects.lowerable_effects, effects.control_flow_allowed_effects,
                      effects.custom_derivatives_allowed_effects, effects.remat_allowed_effects):
    _effect_types.add_type(NeedsFerrax)
del _effect_types


def custom_call_targets(exported: jax_export.Exported) -> set[str]:
    """The targets of ``exported``'s custom calls."""
    targets = set()

    def walk(op):
        if op.name == "stablehlo.custom_call":
            targets.add(ir.StringAttr(op.attributes["call_target_name"]).value)
        for region in op.regions:
            for block in region:
                for inner in block:
                    walk(inner.operation)

    with mlir.make_ir_context():
        walk(ir.Module.parse(exported.mlir_module()).operation)
    return targets


def calls_ferrax(exported: jax_export.Exported) -> list[str]:
    """The ferrax targets ``exported``'s module calls (sorted)."""
    return sorted(custom_call_targets(exported) & set(target_names()))


def _mark(exported: jax_export.Exported) -> jax_export.Exported:
    get_vjp = exported._get_vjp
    changes = {}
    if get_vjp is not None:  # the derivative's artifact, exported on demand, is marked too
        changes["_get_vjp"] = lambda primal: _mark(get_vjp(primal))
    if calls_ferrax(exported) and NeedsFerrax() not in exported.unordered_effects:
        changes["unordered_effects"] = (*exported.unordered_effects, NeedsFerrax())
    return dataclasses.replace(exported, **changes) if changes else exported


# ---- The opt-in. ----

def export(fun_jit, *, platforms=None, disabled_checks=(), **kwargs):
    """:func:`jax.export.export` with ferrax's targets: ``ferrax.export(jax.jit(f))(*args)``.

    Lowers ``f`` as ``jax.jit(f).lower`` does (ferrax's targets where ``install()`` routes jax's
    primitives, and wherever ``ferrax.linalg`` / ``ferrax.random`` are called), allows
    ferrax's targets in jax's custom-call check (no ``disabled_checks`` needed for them), and
    marks an artifact that calls any with the :class:`NeedsFerrax` effect. Such an artifact
    runs only where ferrax is imported; ``jax.export.deserialize`` in a process without
    ferrax fails with a message that says to install and import ferrax.

    Without this, ``jax.export.export`` after ``install()`` lowers jax's primitives to jaxlib's
    export-stable targets (the artifact runs on any jax, without ferrax). Other arguments are
    :func:`jax.export.export`'s.
    """
    register()
    overrides = tuple(kwargs.pop("_override_lowering_rules", None) or ())
    exporter = jax_export.export(
        fun_jit, platforms=platforms,
        disabled_checks=(*disabled_checks, *export_disabled_checks()),
        _override_lowering_rules=(*overrides, _OPT_IN_RULE), **kwargs)

    def do_export(*args_specs, **kwargs_specs) -> jax_export.Exported:
        return _mark(exporter(*args_specs, **kwargs_specs))

    return do_export
