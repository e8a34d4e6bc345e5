"""``python -m studylib.training.adopt [--trust] RUN_FOLDER...``: sign a run written before checksums.

A run folder written by studylib before checksums (no ``.<file>.sha256`` sidecar and no ``.run-format``
anywhere in it) is never loaded until someone vouches for it. Without ``--trust`` this command checks each
folder (its ``config.json`` hashes to the folder's name, every file loads as its format does) and reports what
it found, writing nothing; with ``--trust`` it then writes the checksums and the format record
(:func:`studylib.training.runstore.adopt`). A run of a later format is refused: a file there without a valid
checksum is damaged, not old.

(A module of its own, not ``runstore``'s ``__main__``: ``studylib.training`` imports ``runstore``, and
``python -m`` of a module already imported prints a ``RuntimeWarning``.)
"""

from __future__ import annotations

import sys
from pathlib import Path

from studylib.training.runstore import CONFIG, RunFileError, adopt

USAGE = "usage: python -m studylib.training.adopt [--trust] RUN_FOLDER..."


def main(argv: list[str]) -> int:
    """Exit status: 0 every folder adopted (or checked, without ``--trust``, and found consistent), 1 otherwise,
    2 for a usage error."""
    trust = "--trust" in argv
    folders = [a for a in argv if a != "--trust"]
    unknown = [a for a in folders if a.startswith("-")]
    if not folders or unknown:
        print(USAGE + (f" (unknown option {unknown[0]})" if unknown else ""), file=sys.stderr)
        return 2
    failed = 0
    for folder in folders:
        if not (Path(folder) / CONFIG).is_file():
            print(f"error: {folder} is not a run folder (no {CONFIG}); ./study results lists the runs", file=sys.stderr)
            failed = 1
            continue
        try:
            done = adopt(folder, trust=trust)
            print(f"{folder}: adopted on your word: checksums written for {len(done)} file(s)")
        except RunFileError as e:
            print(f"{'note' if e.kind == 'unverified' and not trust else 'error'}: {e}", file=sys.stderr)
            failed = 1
    return failed


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
