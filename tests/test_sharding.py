"""ferrax targets under SPMD partitioning: 8 host devices (in a subprocess, since the device
count is fixed at backend start), a batch of 16 matrices sharded on the batch axis."""

import json
import os
import re

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax._src.random import threefry2x32 as jax_threefry

from helpers import assert_valid_lu, lapack_pivots, permutation_of_pivots

_CHILD = """
    import json, sys, pathlib
    import numpy as np
    import jax, jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P
    import ferrax

    folder = pathlib.Path(sys.argv[1])
    assert jax.device_count() == 8, jax.devices()
    mesh = jax.make_mesh((8,), ("b",))
    batch = NamedSharding(mesh, P("b"))
    a = np.load(folder / "a.npy")
    x = jax.device_put(a, batch)
    report = {"x_spec": list(x.sharding.spec)}

    def run(name, f, *args, **jit_kwargs):
        jitted = jax.jit(f, **jit_kwargs)
        out = jitted(*args)
        leaves = jax.tree.leaves(out)
        compiled = jitted.lower(*args).compile().as_text()
        report[name] = {
            "specs": [list(o.sharding.spec) for o in leaves],
            "num_shards": [len(o.addressable_shards) for o in leaves],
            "shard_shapes": [list(o.addressable_shards[0].data.shape) for o in leaves],
            "custom_calls": [l.strip() for l in compiled.splitlines() if "custom_call_target" in l],
            "all_gather": "all-gather" in compiled,
            "all_reduce": "all-reduce" in compiled,
        }
        np.savez(folder / f"{name}.npz", *[np.asarray(o) for o in leaves])

    run("lu", ferrax.linalg.lu, x)
    ferrax.install()
    run("det", jnp.linalg.det, x)
    key = jax.random.key(int(np.load(folder / "seed.npy")))
    run("bits", lambda k: jax.random.bits(k, (16, 1024)), key, out_shardings=batch)
    counters = jax.device_put(np.load(folder / "counters.npy"), batch)
    run("threefry", lambda c: ferrax.random.threefry2x32(np.uint32(3), np.uint32(4), c, c + 1),
        counters)
    spd = jax.device_put(np.load(folder / "spd.npy"), batch)
    run("cholesky", jnp.linalg.cholesky, spd)
    run("triangular_solve",
        lambda l, b: jax.scipy.linalg.solve_triangular(l, b, lower=True), spd, x)
    run("qr", jnp.linalg.qr, x)
    run("eigh", jnp.linalg.eigh, spd)
    run("svd", lambda a: jnp.linalg.svd(a, compute_uv=False), x)
    run("solve", jnp.linalg.solve, spd, x)
    print("REPORT" + json.dumps(report))
"""

# Installed jax functions run in the child, and the ferrax target each must call per device.
LINALG = {"cholesky": "ferrax_cholesky", "triangular_solve": "ferrax_trsm", "qr": "ferrax_qr",
          "eigh": "ferrax_syevd", "svd": "ferrax_gesdd", "solve": "ferrax_lu_solve"}


@pytest.fixture(scope="module")
def sharded(tmp_path_factory, run_python_session):
    folder = tmp_path_factory.mktemp("sharding")
    rng = np.random.default_rng(1234)
    a = rng.standard_normal((16, 8, 8))
    seed = int(rng.integers(0, 2**31))
    counters = rng.integers(0, 2**32, size=(16, 1024), dtype=np.uint32)
    np.save(folder / "a.npy", a)
    np.save(folder / "spd.npy", a @ np.swapaxes(a, -1, -2) + 8 * np.eye(8))
    np.save(folder / "seed.npy", seed)
    np.save(folder / "counters.npy", counters)
    flags = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
    proc = run_python_session(_CHILD, str(folder), env={"XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu"})
    line = next(l for l in proc.stdout.splitlines() if l.startswith("REPORT"))
    report = json.loads(line[len("REPORT"):])
    results = {name: [np.load(folder / f"{name}.npz")[f"arr_{i}"]
                      for i in range(len(report[name]["specs"]))]
               for name in ("lu", "det", "bits", "threefry", *LINALG)}
    return report, results, {"a": a, "seed": seed, "counters": counters}


def _calls(report, target):
    return [c for c in report["custom_calls"] if f'custom_call_target="{target}"' in c]


def _assert_batch_sharded(entry):
    assert entry["specs"], entry
    for spec in entry["specs"]:
        assert spec[:1] == ["b"] and all(s is None for s in spec[1:]), spec
    assert all(n == 8 for n in entry["num_shards"])
    assert all(shape[0] == 2 for shape in entry["shard_shapes"]), entry["shard_shapes"]


def test_input_is_sharded(sharded):
    report, _, _ = sharded
    assert report["x_spec"] == ["b"]


def test_lu_sharded_matches_stock(sharded, assert_close):
    report, results, inputs = sharded
    stock = [np.asarray(x) for x in jax.lax.linalg.lu(inputs["a"])]
    lu, pivots, perm = results["lu"]
    assert_close(lu, stock[0], np.float64)
    np.testing.assert_array_equal(pivots, lapack_pivots(inputs["a"])[0])  # SciPy's LAPACK
    np.testing.assert_array_equal(perm, permutation_of_pivots(pivots, perm.shape[-1]))
    assert_valid_lu(inputs["a"], lu, perm)
    _assert_batch_sharded(report["lu"])


def test_lu_partitioned_per_device(sharded):
    entry = sharded[0]["lu"]
    getrf = _calls(entry, "ferrax_getrf")
    assert len(getrf) == 1, entry["custom_calls"]
    assert re.search(r"\(f64\[2,8,8\]\{[0-9,]*\}, s32\[2,8\]\{[0-9,]*\}, s32\[2\]\{[0-9,]*\}\) "
                     r"custom-call\(", getrf[0]), getrf[0]
    pivots = _calls(entry, "ferrax_lu_pivots_to_permutation")
    assert len(pivots) == 1 and "s32[2,8]" in pivots[0].split("custom-call(")[0], pivots
    assert not entry["all_gather"] and not entry["all_reduce"]


def test_installed_det_sharded_matches_stock(sharded, assert_close):
    report, results, inputs = sharded
    (det,) = results["det"]
    assert_close(det, np.asarray(jnp.linalg.det(inputs["a"])), np.float64)
    assert_close(det, np.linalg.det(inputs["a"]), np.float64, kind="reconstruct")
    _assert_batch_sharded(report["det"])
    # jax's lu lowers to the row-major getrf under install().
    getrf = _calls(report["det"], "ferrax_getrf_row_major")
    assert len(getrf) == 1 and "f64[2,8,8]" in getrf[0].split("custom-call(")[0], getrf
    assert not report["det"]["all_gather"]


def test_installed_bits_sharded_bit_exact(sharded):
    report, results, inputs = sharded
    (bits,) = results["bits"]
    stock = np.asarray(jax.random.bits(jax.random.key(inputs["seed"]), (16, 1024)))
    np.testing.assert_array_equal(bits, stock)
    _assert_batch_sharded(report["bits"])
    assert _calls(report["bits"], "ferrax_threefry2x32")


def test_explicit_threefry_sharded_bit_exact(sharded):
    report, results, inputs = sharded
    c = jnp.asarray(inputs["counters"])
    full = lambda v: jnp.full(c.shape, v, jnp.uint32)
    stock = jax_threefry.threefry2x32_p.bind(full(3), full(4), c, c + 1)  # jax's own hash
    for got, want in zip(results["threefry"], stock):
        np.testing.assert_array_equal(got, want)
    _assert_batch_sharded(report["threefry"])


@pytest.mark.parametrize("name", ["bits", "threefry"])
def test_threefry_partitioned_per_device(name, sharded):
    entry = sharded[0][name]
    calls = _calls(entry, "ferrax_threefry2x32")
    assert len(calls) == 1, entry["custom_calls"]
    # Per device: 2 of the 16 rows (a fix may add unit dims, e.g. u32[2,1024,1]).
    dims = [int(d) for d in re.search(r"u32\[([0-9,]+)\]", calls[0]).group(1).split(",")]
    assert dims[0] == 2 and np.prod(dims) == 2 * 1024, calls[0]
    assert not entry["all_gather"]


@pytest.mark.parametrize("name", LINALG)
def test_installed_linalg_partitioned_per_device(name, sharded):
    entry = sharded[0][name]
    _assert_batch_sharded(entry)
    calls = _calls(entry, LINALG[name])
    assert len(calls) == 1, entry["custom_calls"]
    assert "f64[2,8,8]" in calls[0].split("custom-call(")[0], calls[0]  # 2 of 16 per device
    assert not entry["all_gather"] and not entry["all_reduce"]


def test_installed_linalg_sharded_results_are_right(sharded, assert_close):
    _, results, inputs = sharded
    a = inputs["a"]
    spd = a @ np.swapaxes(a, -1, -2) + 8 * np.eye(8)
    (l,) = results["cholesky"]
    assert_close(l @ np.swapaxes(l, -1, -2), spd, np.float64, kind="reconstruct")
    (x,) = results["triangular_solve"]
    assert_close(np.tril(spd) @ x, a, np.float64, kind="reconstruct")
    q, r = results["qr"]
    assert_close(q @ r, a, np.float64, kind="reconstruct")
    w, v = results["eigh"]
    assert_close(w, np.linalg.eigvalsh(spd), np.float64, kind="reconstruct")
    assert_close(v @ (w[..., None] * np.swapaxes(v, -1, -2)), spd, np.float64, kind="reconstruct")
    (s,) = results["svd"]
    assert_close(s, np.linalg.svd(a, compute_uv=False), np.float64, kind="reconstruct")
    (x,) = results["solve"]
    assert_close(spd @ x, a, np.float64, kind="reconstruct")
