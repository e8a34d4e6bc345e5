"""Runs: a run specification (data, backbone, method, training, evaluation) trained through the run store and
evaluated, and sweeps of them, locally or on a Ray cluster.

* :mod:`~studylib.runs.runner` -- :class:`~studylib.runs.runner.RunSpec`, :func:`~studylib.runs.runner.run_spec`
  (train or resume, then evaluate; finished runs are loaded), untrained baselines, trained models back.
* :mod:`~studylib.runs.sweeps` -- :func:`~studylib.runs.sweeps.run_sweep`: every spec of a sweep, one after
  another or one Ray task per unfinished run.

Layer: above training and evaluation, below the claims and the experiments (the notebooks' glue).
"""
