"""The name registries (:mod:`studylib.registry`): filled by the defining modules, found from a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys

import pytest

from studylib.registry import Registry


def _fresh(code: str) -> list[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()


def test_a_fresh_interpreter_finds_every_method_by_name_from_the_registry_alone():
    """Nothing imports the method modules to fill the table: the first lookup imports the package's modules."""
    out = _fresh("import sys\nfrom studylib.methods.registry import METHODS\n"
                 "print('before', 'studylib.methods.beclr' in sys.modules)\n"
                 "print(type(METHODS['beclr']).__name__, ' '.join(METHODS))")
    assert out[:2] == ["before", "False"]
    assert {"nca", "pn", "mn", "ce", "beclr", "spe", "pn_deterministic", "set2model", "infopatch",
            "simclr"} <= set(out[3:])


def test_a_fresh_interpreter_finds_every_classifier_by_name_without_importing_the_methods_package_for_it():
    out = _fresh("import sys\nfrom studylib.evaluation.classifiers import CLASSIFIERS, get_classifier\n"
                 "print('methods', 'studylib.methods' in sys.modules)\n"
                 "print(get_classifier('opta')[1].__name__, ' '.join(CLASSIFIERS))")
    assert out[:2] == ["methods", "False"]  # importing the evaluation package does not pull the methods in
    assert out[2] == "opta_classifier"
    assert {"nearest_centroid", "soft_assignment", "knn", "cosine_prototype", "cosine_nearest_sample", "logreg",
            "opta", "opta_nearest", "s2m_gauss", "s2m_gmm2", "s2m_avg"} <= set(out[3:])


def test_registry_refuses_a_second_object_under_a_taken_name_and_names_the_allowed_ones():
    reg: Registry[object] = Registry("thing", "studylib.numerics")
    a, b = object(), object()
    assert reg.register("a", a) is a
    assert reg.register("a", a) is a  # the same object again: a no-op
    with pytest.raises(ValueError, match="thing name 'a' is already registered"):
        reg.register("a", b)
    assert reg.register("a", b, replace=True) is b
    with pytest.raises(KeyError, match="unknown thing 'zz'; allowed things: a"):
        reg["zz"]
    with pytest.raises(ValueError, match="non-empty string"):
        reg.register("", a)
    assert reg.unregister("a") is b and "a" not in reg


def test_registry_decorator_returns_the_object_and_discovery_runs_once():
    reg: Registry[type] = Registry("kind", "studylib.numerics")

    @reg.register("k")
    class K:
        pass

    assert reg["k"] is K
    assert reg.names() == ["k"]  # studylib.numerics registers nothing into this registry
    assert reg._discovered
