"""./study test's order (tests/conftest.py): the notebooks' nbval first, then the check scale, then the JupyterLab
browser test (whose notebooks then load the runs nbval left in the session's cache), then the unit-test files;
a stable sort, so a notebook's cells keep their order."""

from __future__ import annotations

from types import SimpleNamespace

import conftest


def test_the_browser_test_runs_after_the_nbval_of_its_notebooks_and_the_check_scale():
    paths = ["tests/test_api.py", "tests/test_jupyterlab_browser.py", "notebooks/00_quickstart.ipynb",
             "tests/test_check_scale.py", "notebooks/90_use_your_data.ipynb", "tests/test_jupyterlab_browser.py",
             "notebooks/00_quickstart.ipynb", "tests/test_results.py"]
    items = [SimpleNamespace(fspath=p, n=i) for i, p in enumerate(paths)]
    conftest.pytest_collection_modifyitems(None, items)
    assert [(i.fspath, i.n) for i in items] == [
        ("notebooks/00_quickstart.ipynb", 2), ("notebooks/90_use_your_data.ipynb", 4),
        ("notebooks/00_quickstart.ipynb", 6), ("tests/test_check_scale.py", 3),
        ("tests/test_jupyterlab_browser.py", 1), ("tests/test_jupyterlab_browser.py", 5),
        ("tests/test_api.py", 0), ("tests/test_results.py", 7)]
