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


def run_section(heading: str, capsys) -> None:
    for code in section_code(heading):
        exec(compile(code, f"README.md: {heading}", "exec"), {"__name__": "__readme__"})
    assert capsys.readouterr().out.strip(), "the example prints its result"


def test_readme_pytorch_example_runs(capsys):
    pytest.importorskip("torch", reason="the README section 'Use it from PyTorch' needs PyTorch")
    run_section("Use it from PyTorch", capsys)


def test_readme_jax_example_runs(capsys):
    jax = pytest.importorskip("jax", reason="the README section 'Use it from JAX' needs JAX")
    previous = jax.config.read("jax_disable_most_optimizations")
    jax.config.update("jax_disable_most_optimizations", True)  # faster XLA compiles, same code
    try:
        run_section("Use it from JAX", capsys)
    finally:
        jax.config.update("jax_disable_most_optimizations", previous)
