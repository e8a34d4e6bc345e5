"""``./study claims`` interrupted (issue 40, part B): the tracked page, README and key figures are written as one
change, so a Ctrl-C, an error or a kill at any point leaves each file whole, old or new, and no temporary file.

Before: ``savefig`` wrote straight onto the committed ``figures/key/*.png``; a Ctrl-C while a key figure was
written left it at 0 or 54 bytes (4 of 4 tries). The tests run in a throwaway checkout without notebooks (the
page of no claims takes a second), never on the repository's own files.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import sigint_default
from studylib import utils
from studylib.claims import page as P

REPO = Path(__file__).resolve().parents[2]
TRACKED = ("figures/claims.md", "README.md", "figures/key/verdicts_by_paper.png",
           "figures/key/directional_effects.png")


@pytest.fixture
def root(tmp_path, monkeypatch):
    """A checkout with the page's tracked files (old contents that the page never writes) and no notebooks."""
    root = tmp_path / "repo"
    for d in ("params", "notebooks", "figures/key"):
        (root / d).mkdir(parents=True)
    (root / "README.md").write_text(f"# x\n{P.SUMMARY_START}\nold summary\n{P.SUMMARY_END}\ntail\n")
    (root / "figures" / "claims.md").write_text("old page\n")
    for name in P.KEY_FIGURES:
        (root / "figures" / "key" / name).write_bytes(b"old figure " + name.encode())
    monkeypatch.chdir(root)
    monkeypatch.setenv("STUDYLIB_CACHE", str(tmp_path / "cache"))
    return root


def _contents(root: Path) -> dict[str, bytes]:
    return {f: (root / f).read_bytes() for f in TRACKED}


def _temps(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for d in (root, root / "figures", root / "figures" / "key")
                  for p in d.glob(".*.tmp"))


def test_a_savefig_interrupted_half_way_changes_no_tracked_file(root, monkeypatch):
    from matplotlib.figure import Figure
    before = _contents(root)

    def interrupted(self, target, **kw):  # writes part of a PNG wherever it draws, then Ctrl-C
        if hasattr(target, "write"):
            target.write(b"\x89PNG\r\n\x1a\n" + b"\0" * 46)
        else:
            Path(target).write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 46)
        raise KeyboardInterrupt

    monkeypatch.setattr(Figure, "savefig", interrupted)
    with pytest.raises(KeyboardInterrupt):
        P.write_summary()
    assert _contents(root) == before and _temps(root) == []


def test_a_file_interrupted_while_its_bytes_are_written_changes_no_tracked_file(root, monkeypatch):
    before = _contents(root)
    real = utils._write_all
    seen = []

    def interrupted(fh, data, target):  # the README (written after the page and the figures): half, then Ctrl-C
        seen.append(target.name)
        if target.name == "README.md":
            fh.write(data[: len(data) // 2])
            raise KeyboardInterrupt
        real(fh, data, target)

    monkeypatch.setattr(utils, "_write_all", interrupted)
    with pytest.raises(KeyboardInterrupt):
        P.write_summary()
    assert set(seen) == {Path(f).name for f in TRACKED}
    assert _contents(root) == before and _temps(root) == []


def test_a_ctrl_c_during_the_renames_is_held_until_every_file_is_new(root, monkeypatch):
    before = _contents(root)
    real = os.replace
    calls = []

    def replace(src, dst):
        calls.append(Path(dst).name)
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C between the first and the second rename
        real(src, dst)

    monkeypatch.setattr(utils.os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        P.write_summary()
    after = _contents(root)
    assert len(calls) == 4 and all(after[f] != before[f] for f in TRACKED)  # all four installed, then Ctrl-C
    assert after["figures/key/verdicts_by_paper.png"].startswith(b"\x89PNG")
    assert after["README.md"].startswith(b"# x\n") and b"old summary" not in after["README.md"]
    assert _temps(root) == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def _page(root: Path, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "studylib.claims.page"], cwd=root, capture_output=True, text=True,
                          timeout=120, preexec_fn=sigint_default,
                          env={**os.environ, "PYTHONPATH": str(REPO), "STUDYLIB_CACHE": str(tmp_path / "cache"),
                               **env})


def test_a_real_ctrl_c_in_the_middle_of_a_key_figure_leaves_every_file_and_says_one_line(root, tmp_path):
    """A SIGINT delivered to ``./study claims``'s process when half of ``verdicts_by_paper.png`` is written."""
    before = _contents(root)
    done = _page(root, tmp_path, STUDYLIB_KILL_AT="write.partial@verdicts_by_paper.png", STUDYLIB_KILL_SIGNAL="INT")
    assert done.returncode == -signal.SIGINT, done.stderr  # 130 to the shell
    assert done.stderr.strip().splitlines()[-1] == "claims: interrupted" and "Traceback" not in done.stderr
    assert _contents(root) == before and _temps(root) == []


def test_a_kill_leaves_the_old_files_and_the_next_run_clears_its_temporary_file(root, tmp_path):
    before = _contents(root)
    done = _page(root, tmp_path, STUDYLIB_KILL_AT="write.partial@verdicts_by_paper.png")
    assert done.returncode == -signal.SIGKILL
    assert _contents(root) == before
    # what SIGKILL leaves: the temporary files written so far (the page's, half the figure's)
    assert sorted(Path(t).name.split(".")[1] for t in _temps(root)) == ["claims", "verdicts_by_paper"]
    P.write_summary()
    assert _temps(root) == [] and all(_contents(root)[f] != before[f] for f in TRACKED)


def test_a_notebook_figure_is_written_atomically_too(root, monkeypatch):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure
    from studylib import plots
    fig, ax = plt.subplots()
    ax.plot([0, 1])
    [path] = plots.save(fig, "00_quickstart", "curve", "smoke")
    old = path.read_bytes()
    real = Figure.savefig

    def interrupted(self, target, **kw):
        real(self, target, **kw)
        raise KeyboardInterrupt

    monkeypatch.setattr(Figure, "savefig", interrupted)
    ax.plot([1, 0])
    with pytest.raises(KeyboardInterrupt):
        plots.save(fig, "00_quickstart", "curve", "smoke")
    plt.close(fig)
    assert path.read_bytes() == old and list(path.parent.glob(".*")) == []
