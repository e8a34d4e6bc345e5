"""The torchrun entry point for whole notebooks: it imports, and refuses bad names before starting a kernel."""

import pytest

from studylib import launch
from studylib.config import ParamError


def test_unknown_notebook_is_refused_with_its_path(capsys):
    assert launch.main(["99_no_such_notebook"]) == 2
    err = capsys.readouterr().err
    assert "no notebook" in err and "notebooks/99_no_such_notebook.ipynb" in err


def test_unknown_scale_names_the_missing_parameter_file():
    with pytest.raises(ParamError, match=r"params/<notebook>/<scale>\.yaml"):
        launch.main(["00_quickstart", "--scale", "huge"])
