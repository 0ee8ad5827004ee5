"""Registering libferrax's handlers with XLA."""

from __future__ import annotations

import threading

import jax

from ferrax import _library

_lock = threading.Lock()
_registered: list[str] = []


def register() -> list[str]:
    """Registers every ferrax FFI target with XLA (CPU now, CUDA targets for the CUDA plugin)
    and fills the LAPACK table from SciPy. Idempotent; returns the registered target names."""
    with _lock:
        if _registered:
            return list(_registered)
        if _library.lapack_missing_count():
            try:
                _library.fill_lapack_from_scipy()
            except ImportError:
                pass  # LAPACK-backed targets then fail with an error that says how to fix it.
        for name, platform, handler in _library.targets():
            jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(handler), platform=platform)
            jax.ffi.register_ffi_target_as_batch_partitionable(name)
            _registered.append(name)
        return list(_registered)


def target_names() -> list[str]:
    """Every target name the library defines (registered or not)."""
    return sorted({name for name, _, _ in _library.targets()})


def export_disabled_checks() -> list:
    """``disabled_checks`` for :func:`jax.export.export` that allow ferrax's targets, which
    are not in jax's list of export-stable custom calls: for explicit ``ferrax.linalg`` /
    ``ferrax.random`` calls (installed routes export as jax's whatever the checks). The
    module then needs ``import ferrax`` where it runs, and without it fails only when
    compiled (XLA: no FFI handler registered); :func:`ferrax.export` needs no checks and
    marks its artifacts, which then fail to deserialize without ferrax, saying so."""
    from jax import export

    return [export.DisabledSafetyCheck.custom_call(name) for name in target_names()]
