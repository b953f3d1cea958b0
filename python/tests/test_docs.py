"""Runs the Python snippets of docs/python.md that claim to run."""
import os
import re

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def test_docs_python_snippets_run():
    text = open(os.path.join(ROOT, "docs", "python.md")).read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "docs/python.md has no python snippet"
    cwd = os.getcwd()
    os.chdir(ROOT)  # the snippets use paths from the repository root
    try:
        for code in blocks:
            exec(compile(code, "docs/python.md", "exec"), {})
    finally:
        os.chdir(cwd)
