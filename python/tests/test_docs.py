"""Runs the Python snippets of the docs that claim to run (docs/python.md,
docs/models.md, docs/dropout.md)."""
import os
import re

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


@pytest.mark.parametrize("page", ["python.md", "models.md", "dropout.md"])
def test_docs_python_snippets_run(page):
    text = open(os.path.join(ROOT, "docs", page)).read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "docs/%s has no python snippet" % page
    cwd = os.getcwd()
    os.chdir(ROOT)  # the snippets use paths from the repository root
    try:
        for code in blocks:
            exec(compile(code, "docs/" + page, "exec"), {})
    finally:
        os.chdir(cwd)
