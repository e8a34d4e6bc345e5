"""Numerical primitives shared by several methods (below :mod:`studylib.methods`): entropic optimal transport
(:mod:`~studylib.numerics.ot`), Gaussian densities and mixture fitting (:mod:`~studylib.numerics.gaussian`)."""

from studylib.numerics.ot import sinkhorn_log

__all__ = ["sinkhorn_log"]
