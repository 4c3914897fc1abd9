"""Doctests see the whole public API of moye, as a user's session would."""
import numpy as np
import pytest

import moye


@pytest.fixture(autouse=True)
def _moye_doctest_namespace(doctest_namespace):
    import builtins
    doctest_namespace.update({n: getattr(moye, n) for n in dir(moye)
                              if not n.startswith("_") and not hasattr(builtins, n)})
    doctest_namespace["np"] = np

collect_ignore = ["moye/__main__.py"]
