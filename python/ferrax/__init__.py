"""ferrax: JAX's custom-call kernels as typed XLA FFI handlers written in Rust.

``import ferrax`` registers the handlers with XLA. ``ferrax.install()`` then routes jax's own
primitives (LU, pivots to permutation, Threefry) to ferrax, so unmodified ``jnp.linalg``,
``jax.scipy.linalg`` and ``jax.random`` code runs on ferrax; ``ferrax.uninstall()`` undoes it.
``ferrax.linalg`` and ``ferrax.random`` call the kernels explicitly. ``jax.export.export``
lowers installed code as stock jax does (an artifact that needs no ferrax);
``ferrax.export`` exports with ferrax's targets. ``ferrax.kernel_call`` calls a kernel of
one's own PTX (written in Rust, CUDA C or anything that makes PTX) from JAX;
``ferrax.describe_triton_call`` reads and checks a jax-triton kernel call's payload on the host.
"""

from ferrax._install import install, installed, uninstall
from ferrax._registry import export_disabled_checks, register, target_names
from ferrax._export import NeedsFerrax, export
from ferrax._kernel_call import describe_triton_call, kernel_call
from ferrax import linalg, random, rnn, sparse

__version__ = "0.1.0"
__all__ = ["register", "install", "uninstall", "installed", "target_names",
           "export_disabled_checks", "export", "NeedsFerrax", "describe_triton_call", "kernel_call",
           "linalg",
           "random", "rnn", "sparse"]

register()
