"""studylib: the library behind the few-shot embedding study.

Layers, lowest first (``pyproject.toml``'s import contract): the helpers (``paths``, ``utils``, ``config``,
``registry``, ...), ``data``, ``models`` and ``numerics``, ``methods``, ``training``, ``evaluation``, ``runs``,
``claims``, ``experiments`` (what each notebook runs), then the commands (``preflight``, ``notebooks``) and
``api``. README.md, "Layout", draws the tree.
"""

__version__ = "0.1.0"

import time as _time

# when the library was first imported in this process: a notebook's claims table records the seconds since
# (studylib.claims.table.provenance), the cost the power analysis scales by seeds
STARTED = _time.monotonic()

import sys as _sys

if _sys.argv[:1] in (["-m"], ["-c"]):  # `python -m studylib.X` or `python -c ...`, as ./study runs its commands
    # (argv[0] is "-m" while the module is found): a Ctrl-C while the command still imports its modules, before
    # studylib.utils.run_command takes over, prints one line instead of a traceback (the process still ends by
    # SIGINT: status 130)
    def _interrupted_hook(kind, value, tb, _default=_sys.excepthook):
        if issubclass(kind, KeyboardInterrupt):
            print("study: interrupted", file=_sys.stderr)
            return
        _default(kind, value, tb)

    _sys.excepthook = _interrupted_hook
