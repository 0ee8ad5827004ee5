"""The benchmark scripts still import: they share helpers through ``benches/cpu_linalg.py``,
and a helper renamed or removed there breaks them silently (no test runs a bench)."""

import importlib
import pathlib
import sys

import pytest

BENCHES = pathlib.Path(__file__).resolve().parent.parent / "benches"


@pytest.mark.parametrize("module", sorted(p.stem for p in BENCHES.glob("*.py")))
def test_bench_imports(module, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHES))
    monkeypatch.setattr(sys, "argv", [module])
    importlib.import_module(module)
