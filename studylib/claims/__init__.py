"""The claims machinery: each notebook's claims table, its judgement and provenance, the study's page, the claim
registry, the power analysis and the smoke reference check.

* :mod:`~studylib.claims.table` -- :class:`~studylib.claims.table.ClaimsTable`, the claims one notebook tests at
  one scale with its regime checks, judged as one family; saved with its provenance.
* :mod:`~studylib.claims.store` -- the saved and committed tables, their parameter files and code versions, and
  every notebook's static listing.
* :mod:`~studylib.claims.registry` -- what each claim is evidence of, aliases, and where quoted numbers come from.
* :mod:`~studylib.claims.page` -- ``./study claims``: ``figures/claims.md``, the README's summary, the key figures.
* :mod:`~studylib.claims.power` -- ``./study power``: the seeds each claim needs.
* :mod:`~studylib.claims.reference` -- trained numbers against ``params/<nb>/smoke.reference.json``.

Layer: above evaluation (the verdict rules) and the runs, below the experiments, which build their tables here;
the claims reach an experiment module only by notebook name (:func:`studylib.paths.experiment_module`). None of
these modules makes a number, so none is in a notebook's code version (:data:`studylib.provenance.NOT_NUMBERS`).
"""
