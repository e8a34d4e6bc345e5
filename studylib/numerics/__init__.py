"""Numerical primitives shared by several methods (below :mod:`studylib.methods`)."""

from studylib.numerics.ot import sinkhorn_log

__all__ = ["sinkhorn_log"]
