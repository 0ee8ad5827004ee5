"""scripts/install-c and the README's C example: install under a prefix, build examples/lu.c
with `pkg-config --cflags --libs ferrax`, run it, and check its output against SciPy."""

import os
import pathlib
import re
import subprocess

import numpy as np
import scipy.linalg
import scipy_openblas32

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_installed_library_builds_and_runs_the_example(tmp_path):
    prefix = tmp_path / "prefix"
    subprocess.run(["bash", str(ROOT / "scripts/install-c"), str(prefix)], check=True,
                   capture_output=True)
    env = dict(os.environ, PKG_CONFIG_PATH=str(prefix / "lib/pkgconfig"))
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "ferrax"], env=env, check=True,
                           capture_output=True, text=True).stdout.split()
    assert f"-I{prefix}/include" in flags and "-lferrax" in flags
    exe = tmp_path / "lu"
    subprocess.run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", str(ROOT / "examples/lu.c"),
                    *flags, "-o", str(exe)], check=True, capture_output=True)
    openblas = os.path.join(scipy_openblas32.get_lib_dir(), "libscipy_openblas.so")
    out = subprocess.run([str(exe), openblas], check=True, capture_output=True, text=True).stdout
    matrices = [[[2, 1, 1], [4, -6, 0], [-2, 7, 2]], [[1, 2, 3], [4, 5, 6], [7, 8, 10]]]
    lines = out.splitlines()
    assert len(lines) == 2
    for line, a in zip(lines, matrices):
        numbers = [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", line.split(":", 1)[1])]
        info, pivots, diagonal = numbers[0], numbers[1:4], numbers[4:7]
        lu, piv = scipy.linalg.lu_factor(np.array(a, float))
        assert info == 0
        assert pivots == list(piv + 1)
        np.testing.assert_allclose(diagonal, np.diag(lu), rtol=1e-5)
