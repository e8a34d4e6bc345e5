"""studylib: the library behind the few-shot embedding study.

Layout: ``data`` (embedded and real data sets, samplers, batched augmentation), ``models`` (backbones, heads),
``methods`` (one module per paper's method), ``training`` (the loop and the run store), ``evaluation``
(batched few-shot evaluation), ``experiments`` (what each notebook runs), ``plots``.
"""

__version__ = "0.1.0"

import time as _time

# when the library was first imported in this process: a notebook's claims table records the seconds since
# (studylib.experiments.claims.provenance), the cost the power analysis scales by seeds
STARTED = _time.monotonic()
