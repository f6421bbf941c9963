"""The README's "Use it from PyTorch" and "Use it from JAX" examples run as written."""

import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def section_code(heading: str) -> list:
    """The ```python blocks of the README section headed ``## <heading>``."""
    text = README.read_text(encoding="utf-8")
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, flags=re.S | re.M)
    assert match, f"README has no section '## {heading}'"
    blocks = re.findall(r"^```python\n(.*?)^```", match.group(1), flags=re.S | re.M)
    assert blocks, f"README section '## {heading}' has no python code block"
    return blocks


@pytest.mark.parametrize("heading,framework", [("Use it from PyTorch", "torch"), ("Use it from JAX", "jax")])
def test_readme_framework_example_runs(heading, framework, capsys):
    pytest.importorskip(framework, reason=f"the README section '{heading}' needs {framework}")
    for code in section_code(heading):
        exec(compile(code, f"README.md: {heading}", "exec"), {"__name__": "__readme__"})
    assert capsys.readouterr().out.strip(), "the example prints its result"
