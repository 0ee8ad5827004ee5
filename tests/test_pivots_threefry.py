"""ferrax.linalg.lu_pivots_to_permutation and ferrax.random threefry against stock jax."""

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax._src.random import threefry2x32 as jax_threefry

import ferrax
from helpers import permutation_of_pivots


def _random_pivots(rng, batch, k, p):
    """Valid 0-based LAPACK row swaps: pivots[..., i] in [i, p)."""
    return np.stack([rng.integers(i, p, size=batch) for i in range(k)], axis=-1).astype(np.int32) \
        if k else np.zeros(batch + (0,), np.int32)


@pytest.mark.parametrize("batch", [(), (3,), (2, 3), (0,)], ids=str)
@pytest.mark.parametrize("k, p", [(6, 6), (3, 7), (1, 5), (0, 4), (0, 0), (5, 40)],
                         ids=lambda v: str(v))
def test_pivots_match_stock(batch, k, p, rng):
    pivots = _random_pivots(rng, batch, k, p)
    stock = np.asarray(jax.lax.linalg.lu_pivots_to_permutation(pivots, p))
    got = np.asarray(ferrax.linalg.lu_pivots_to_permutation(pivots, p))
    assert got.shape == batch + (p,) and got.dtype == np.int32
    np.testing.assert_array_equal(got, stock)
    np.testing.assert_array_equal(got, permutation_of_pivots(pivots, p))
    # A permutation of 0..p-1 per batch element.
    np.testing.assert_array_equal(np.sort(got, axis=-1), np.broadcast_to(np.arange(p), got.shape))


def test_pivots_not_identity(rng):
    """The inputs above do swap rows (an identity-returning kernel would fail)."""
    pivots = np.array([2, 2, 3, 3], np.int32)
    np.testing.assert_array_equal(ferrax.linalg.lu_pivots_to_permutation(pivots, 5), [2, 0, 3, 1, 4])


def test_pivots_jit_matches_stock(rng):
    pivots = _random_pivots(rng, (4,), 5, 9)
    f = jax.jit(ferrax.linalg.lu_pivots_to_permutation, static_argnums=1)
    stock = jax.jit(jax.lax.linalg.lu_pivots_to_permutation, static_argnums=1)(pivots, 9)
    np.testing.assert_array_equal(f(pivots, 9), stock)
    assert "ferrax_lu_pivots_to_permutation" in f.lower(pivots, 9).as_text()


def test_pivots_vmap_matches_stock(rng):
    pivots = _random_pivots(rng, (3, 4), 4, 6)  # vmap over axis 1
    f = jax.vmap(lambda x: ferrax.linalg.lu_pivots_to_permutation(x, 6), in_axes=1)
    g = jax.vmap(lambda x: jax.lax.linalg.lu_pivots_to_permutation(x, 6), in_axes=1)
    np.testing.assert_array_equal(f(pivots), g(pivots))


# ---------------------------------------------------------------------------------- threefry

# Random123's known answers for threefry2x32 with 20 rounds (also in jax's own tests).
KNOWN_ANSWERS = [
    ((0x00000000, 0x00000000), (0x00000000, 0x00000000), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
]


@pytest.mark.parametrize("key, x, expected", KNOWN_ANSWERS, ids=["zeros", "ones", "pi"])
def test_threefry_known_answer(key, x, expected):
    u32 = lambda v: np.uint32(v)
    got = ferrax.random.threefry2x32(*map(u32, key), *map(u32, x))
    assert [int(v) for v in got] == list(expected)
    got = ferrax.random.threefry_2x32(np.array(key, np.uint32), np.array(x, np.uint32))
    assert [int(v) for v in got] == list(expected)
    stock = jax_threefry.threefry_2x32(np.array(key, np.uint32), np.array(x, np.uint32))
    assert [int(v) for v in stock] == list(expected)


def _random_u32(rng, shape):
    return rng.integers(0, 2**32, size=shape, dtype=np.uint32)


@pytest.mark.parametrize("shape", [(0,), (1,), (2,), (7,), (1001,), (3, 5), (2, 0, 3),
                                   (3 * 2**17 + 1,)],
                         ids=["0", "1", "2", "7", "1001", "3x5", "2x0x3", "pool"])
def test_threefry_2x32_matches_stock(shape, rng):
    key = _random_u32(rng, (2,))
    count = _random_u32(rng, shape)
    stock = np.asarray(jax_threefry.threefry_2x32(key, count))
    got = np.asarray(ferrax.random.threefry_2x32(key, count))
    assert got.shape == shape and got.dtype == np.uint32
    np.testing.assert_array_equal(got, stock)
    if count.size > 8:
        assert len(np.unique(got)) > count.size // 2


def test_threefry_2x32_jit_and_iota_counters(rng):
    """The large case with jax's own iota counters, under jit (the pool path at > 2^17)."""
    key = _random_u32(rng, (2,))
    n = 2**18 + 5
    f = jax.jit(lambda k: ferrax.random.threefry_2x32(k, jnp.arange(n, dtype=jnp.uint32)))
    g = jax.jit(lambda k: jax_threefry.threefry_2x32(k, jnp.arange(n, dtype=jnp.uint32)))
    np.testing.assert_array_equal(f(key), g(key))
    assert "ferrax_threefry2x32" in f.lower(key).as_text()


@pytest.mark.parametrize("shape", [(), (1,), (5,), (4, 9), (2**17 + 3,)], ids=str)
def test_threefry2x32_elementwise_matches_stock_primitive(shape, rng):
    args = [_random_u32(rng, shape) for _ in range(4)]
    stock = jax_threefry.threefry2x32_p.bind(*map(jnp.asarray, args))
    got = ferrax.random.threefry2x32(*args)
    for x, y in zip(got, stock):
        assert x.shape == shape and x.dtype == np.uint32
        np.testing.assert_array_equal(x, y)


def test_threefry2x32_broadcasts_scalar_keys(rng):
    k0, k1 = (int(v) for v in _random_u32(rng, (2,)))
    x0, x1 = _random_u32(rng, (3, 4)), _random_u32(rng, (3, 4))
    full = lambda v: jnp.full((3, 4), v, jnp.uint32)
    stock = jax_threefry.threefry2x32_p.bind(full(k0), full(k1), jnp.asarray(x0), jnp.asarray(x1))
    for keys in [(k0, k1), (np.uint32(k0), np.uint32(k1)), (np.array([k0], np.uint32), k1)]:
        got = ferrax.random.threefry2x32(*keys, x0, x1)
        for x, y in zip(got, stock):
            assert x.shape == (3, 4)
            np.testing.assert_array_equal(x, y)
    # Counters broadcast too: a row of x0 against a column of x1.
    row, col = _random_u32(rng, (1, 4)), _random_u32(rng, (3, 1))
    got = ferrax.random.threefry2x32(k0, k1, row, col)
    stock = jax_threefry.threefry2x32_p.bind(full(k0), full(k1), jnp.broadcast_to(row, (3, 4)),
                                             jnp.broadcast_to(col, (3, 4)))
    for x, y in zip(got, stock):
        np.testing.assert_array_equal(x, y)


def test_threefry2x32_per_element_keys_differ(rng):
    x = _random_u32(rng, (64,))
    a = ferrax.random.threefry2x32(1, 2, x, x)
    b = ferrax.random.threefry2x32(1, 3, x, x)
    assert not np.array_equal(a[0], b[0]) and not np.array_equal(a[1], b[1])


def test_threefry2x32_vmap(rng):
    keys = _random_u32(rng, (5, 2))
    count = _random_u32(rng, (9,))
    got = jax.vmap(ferrax.random.threefry_2x32, in_axes=(0, None))(keys, count)
    for i in range(5):
        np.testing.assert_array_equal(got[i], jax_threefry.threefry_2x32(keys[i], count))
