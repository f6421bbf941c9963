"""``import fusedrnn`` imports no framework; the adapters import theirs lazily and, when it is
missing, raise an ImportError that names the pip extra."""

import subprocess
import sys
import textwrap


def test_lazy_imports_and_missing_framework_errors():
    code = textwrap.dedent("""
        import sys
        import fusedrnn
        heavy = [m for m in ("torch", "jax", "tensorflow", "onnx", "matplotlib") if m in sys.modules]
        print("imported:", heavy)
        sys.modules["torch"] = None  # what an environment without the framework looks like
        sys.modules["jax"] = None
        for name in ("torch", "jax"):
            for how in ("import", "attribute"):
                try:
                    __import__("fusedrnn." + name) if how == "import" else getattr(fusedrnn, name)
                except ImportError as exc:
                    print(name, how, exc)
                sys.modules.pop("fusedrnn." + name, None)
        try:
            fusedrnn.tensorflow
        except AttributeError as exc:
            print("other", exc)
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "imported: []", lines
    for name, extra in (("torch", "PyTorch"), ("jax", "JAX")):
        for how in ("import", "attribute"):
            assert f"{name} {how} fusedrnn.{name} needs {extra}: pip install 'fusedrnn[{name}]'" in lines, lines
    assert "other module 'fusedrnn' has no attribute 'tensorflow'" in lines, lines
