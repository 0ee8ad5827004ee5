"""Shared fixtures for ferrax's Python tests.

Every helper is a fixture (no test module imports this file): ``rng`` (seeded per test),
``dtype`` (the four LAPACK dtypes), ``random_matrix``, ``assert_close`` (tolerances per
dtype), ``run_python`` (a fresh interpreter with this process's environment) and
``installed``, and ``gpu`` (skips without a CUDA device).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zlib

import numpy as np
import pytest

import jax

jax.config.update("jax_enable_x64", True)

import ferrax  # noqa: E402  (x64 must be on before anything traces)

DTYPES = (np.float32, np.float64, np.complex64, np.complex128)

# (rtol, atol) for comparing ferrax against stock jax, and for reconstructing P·A = L·U.
_COMPARE = {np.dtype(np.float32): (2e-5, 2e-5), np.dtype(np.float64): (1e-12, 1e-12)}
_RECONSTRUCT = {np.dtype(np.float32): (1e-4, 1e-4), np.dtype(np.float64): (1e-11, 1e-11)}


def _real(dtype) -> np.dtype:
    return np.dtype(np.finfo(np.dtype(dtype)).dtype)


def _tol(dtype, kind: str = "compare") -> dict:
    rtol, atol = (_COMPARE if kind == "compare" else _RECONSTRUCT)[_real(dtype)]
    return {"rtol": rtol, "atol": atol}


def pytest_collection_modifyitems(config, items):
    """``FERRAX_TEST_SHARD=i/n`` keeps every n-th collected test from the i-th (0-based):
    scripts/gpu-check runs the GPU tests as n processes sharing one device, whose jit
    compilations would otherwise run one at a time."""
    shard = os.environ.get("FERRAX_TEST_SHARD")
    if not shard:
        return
    index, count = (int(part) for part in shard.split("/"))
    if not 0 <= index < count:
        raise pytest.UsageError(f"FERRAX_TEST_SHARD={shard}: expected i/n with 0 <= i < n")
    config.hook.pytest_deselected(items=[t for k, t in enumerate(items) if k % count != index])
    items[:] = [t for k, t in enumerate(items) if k % count == index]


@pytest.fixture
def rng(request) -> np.random.Generator:
    """A generator seeded from the test's id: reproducible, different for every test."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture(params=DTYPES, ids=lambda d: np.dtype(d).name)
def dtype(request):
    return request.param


@pytest.fixture
def random_matrix(rng):
    """``random_matrix(shape, dtype)``: standard normal entries (complex: both parts), never
    zero and almost surely well conditioned with unambiguous pivots."""

    def make(shape, dtype):
        dtype = np.dtype(dtype)
        a = rng.standard_normal(shape)
        if dtype.kind == "c":
            a = a + 1j * rng.standard_normal(shape)
        return a.astype(dtype)

    return make


@pytest.fixture
def assert_close():
    """``assert_close(actual, expected, dtype, kind="compare")``: same shape and dtype, values
    within the dtype's tolerance, NaN where the expectation has NaN."""

    def check(actual, expected, dtype, kind="compare", err_msg=""):
        actual, expected = np.asarray(actual), np.asarray(expected)
        assert actual.shape == expected.shape, (actual.shape, expected.shape, err_msg)
        assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype, err_msg)
        np.testing.assert_allclose(actual, expected, err_msg=err_msg, **_tol(dtype, kind))

    return check


def _run_python(code: str, *args: str, env: dict | None = None, timeout: float = 180,
                check: bool = True, cwd=None) -> subprocess.CompletedProcess:
    full_env = dict(os.environ)
    full_env.setdefault("JAX_PLATFORMS", "cpu")
    full_env["JAX_ENABLE_X64"] = "1"
    full_env.update(env or {})
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], env=full_env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)
    if check:
        assert proc.returncode == 0, (
            f"subprocess exited with {proc.returncode}\n--- stdout ---\n{proc.stdout[-4000:]}"
            f"\n--- stderr ---\n{proc.stderr[-4000:]}")
    return proc


@pytest.fixture
def run_python():
    """``run_python(code, *args, env=None, timeout=180, check=True, cwd=None)``: runs ``code``
    (with ``sys.argv[1:] == args``) in a fresh ``sys.executable`` with this process's environment (PYTHONPATH included), CPU only
    and x64 on; with ``check`` asserts a zero exit status."""
    return _run_python


@pytest.fixture(scope="session")
def run_python_session():
    return _run_python


@pytest.fixture(autouse=True)
def _stock_jax_around_every_test():
    """Every test starts and ends with jax's own lowerings, whatever happened in between."""
    ferrax.uninstall()
    yield
    ferrax.uninstall()


@pytest.fixture
def installed():
    """ferrax installed for the test's body; always uninstalled at teardown."""
    ferrax.install()
    assert ferrax.installed()
    yield
    ferrax.uninstall()


@pytest.fixture(scope="session")
def gpu():
    """jax's first CUDA device; the test is skipped where there is none (CI, laptops)."""
    try:
        return jax.devices("cuda")[0]
    except RuntimeError:
        pytest.skip("no CUDA device")


@pytest.fixture
def stock_per_output():
    """``stock_per_output(fn, *args)``: ``fn``'s outputs with stock jax, each output computed by
    its own jitted function. jaxlib 0.10.2's LAPACK handlers wait on XLA's thread pool for their
    batch chunks, so two of them running at once on a 2-thread pool can deadlock each other;
    one custom call per executable cannot. (ferrax's handlers do their own chunks while they
    wait, so the ferrax side may run everything in one executable.)"""

    def run(fn, *args):
        assert not ferrax.installed()
        structure = jax.tree.structure(jax.eval_shape(fn, *args))
        leaves = [np.asarray(jax.jit(lambda *a, i=i: jax.tree.leaves(fn(*a))[i])(*args))
                  for i in range(structure.num_leaves)]
        return jax.tree.unflatten(structure, leaves)

    return run
