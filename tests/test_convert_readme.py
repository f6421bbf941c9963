"""The README's "Port a cuDNN checkpoint" example runs as written (extracted by its heading)."""

import os
import re

import pytest

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


def _section_code(heading: str) -> str:
    with open(README, encoding="utf-8") as handle:
        text = handle.read()
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_port_a_cudnn_checkpoint_example(capsys):
    for module, why in (("tensorflow", "writes the example checkpoint"), ("torch", "the PyTorch step"),
                        ("onnxruntime", "the ONNX step"), ("onnx", "the ONNX step")):
        pytest.importorskip(module, reason=f"the README example needs {module}: {why}")
    exec(compile(_section_code("Port a cuDNN checkpoint"), "README.md", "exec"), {})
    assert "CudnnWeights(lstm, 1 layer(s)" in capsys.readouterr().out
