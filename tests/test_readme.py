"""The README's set-up commands: exactly two, first, and CI (.ci/run) runs the test one verbatim."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEMO_COMMAND = 'python -m pip install -e ".[demo]" && python -m fusedrnn demo'
TEST_COMMAND = 'python -m pip install -e ".[test]" && python -m pytest -q'


def code_blocks(markdown: str) -> list[tuple[str, str]]:
    """``(language, body)`` of every fenced code block, in order."""
    return [(lang, body.strip()) for lang, body in re.findall(r"^```(\w*)\n(.*?)^```", markdown, re.M | re.S)]


def test_readme_starts_with_the_two_setup_commands():
    readme = (REPO / "README.md").read_text()
    blocks = code_blocks(readme)
    assert blocks[:2] == [("bash", DEMO_COMMAND), ("bash", TEST_COMMAND)], blocks[:2]
    # nothing but prose before them: no heading other than the title
    before = readme[:readme.index("```bash\n" + TEST_COMMAND)]
    assert [line for line in before.splitlines() if line.startswith("#")] == ["# fusedrnn"]


def test_ci_runs_the_readme_test_command():
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    commands = [line.strip() for line in ci if line.strip() and not line.lstrip().startswith("#")]
    assert TEST_COMMAND in commands, commands


def test_readme_shows_the_demo_loss_curve():
    readme = (REPO / "README.md").read_text()
    assert "![" in readme and "(docs/demo_loss.png)" in readme
    assert (REPO / "docs" / "demo_loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
