"""Numerical primitives shared by several methods (densities, mixture fitting)."""
