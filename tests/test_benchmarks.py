"""Smoke test of the benchmark suite: ``python -m benchmarks`` on two tiny problems, one round,
checked for well-formed JSON, Markdown and PNG.  No timing is asserted."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytest.importorskip("matplotlib", reason="the suite draws its chart with matplotlib")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    command = [sys.executable, "-m", "benchmarks", "--filter", "^(lstm-H128-B1-T25|rnn_tanh-H512-B16-T50)$",
               "--threads", "1", "--repeat", "1", "--budget", "0", "--peers", "torch,onnxruntime",
               "--out", str(out)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return out, done


def test_json_schema(run):
    out, _ = run
    result = json.loads((out / "benchmark.json").read_text())
    assert result["schema"] == "fusedrnn-benchmarks/1"
    for key in ("command", "started_utc", "duration_s", "machine", "settings", "problems", "workers", "memory",
                "rows", "notes"):
        assert key in result, key
    for key in ("cpu", "usable_cpus", "versions", "blas", "loadavg"):
        assert key in result["machine"], key
    assert set(result["problems"]) == {"lstm-H128-B1-T25", "rnn_tanh-H512-B16-T50"}
    (worker,) = result["workers"]
    assert worker["threads"] == 1 and worker["peak"]["peak_gflops"] > 0
    assert len(worker["peak"]["measurements"]) == 2  # before and after the problems
    assert "threads" in worker["peers"]["fusedrnn"]
    assert len(result["rows"]) == 4  # 2 problems x forward/training
    for row in result["rows"]:
        entry = next(r for r in worker["results"] if r["problem"] == row["problem"] and r["mode"] == row["mode"])
        ours = entry["entries"]["fusedrnn"]
        assert len(ours["samples_s"]) == 1 and ours["median_s"] > 0 and ours["first_call_s"] > 0
        assert row["gflops"]["fusedrnn"] > 0 and row["flops"] > 0
        assert row["check"] == "ok", row["check"]
    training = [r for r in result["rows"] if r["mode"] == "training"]
    assert all(r["skipped"].get("onnxruntime") == "inference only" for r in training)
    memory = result["memory"]["results"]
    assert {m["problem"] for m in memory} == set(result["problems"])
    assert all(m["entries"]["fusedrnn"]["reserve_space_bytes"] > 0 for m in memory)


def test_torch_rows_are_checked_and_dispatch_named(run):
    pytest.importorskip("torch", reason="PyTorch is one of the suite's peers")
    out, _ = run
    rows = json.loads((out / "benchmark.json").read_text())["rows"]
    forward = {r["problem"]: r for r in rows if r["mode"] == "forward"}
    assert "torch" in forward["lstm-H128-B1-T25"]["checked"]
    assert forward["rnn_tanh-H512-B16-T50"]["torch_dispatch"] == "native"  # no oneDNN path for RNN
    assert forward["lstm-H128-B1-T25"]["torch_dispatch"] in ("oneDNN", "native")


def test_markdown_table(run):
    out, done = run
    text = (out / "benchmark.md").read_text()
    assert text == done.stdout
    header = next(line for line in text.splitlines() if line.startswith("| problem | mode |"))
    columns = header.count("|")
    rows = [line for line in text.splitlines() if line.startswith(("| lstm-H128-B1-T25 | forward |",
                                                                      "| lstm-H128-B1-T25 | training |"))]
    assert len(rows) == 2 and all(line.count("|") == columns for line in rows)
    assert header.split("|")[6:9] == [" torch ", " onnxruntime ", " torch path "]  # the chosen peers only
    assert "## Peak memory of one training step" in text and "## Notes" in text


def test_png_loads(run):
    out, _ = run
    import matplotlib.image

    image = matplotlib.image.imread(str(out / "benchmark.png"))
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    assert np.ptp(image) > 0  # not blank


def test_unknown_peer_is_an_error_and_missing_filter_match_exits_2(tmp_path):
    bad = subprocess.run([sys.executable, "-m", "benchmarks", "--peers", "nosuch", "--out", str(tmp_path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "unknown peer 'nosuch'" in bad.stderr
    empty = subprocess.run([sys.executable, "-m", "benchmarks", "--filter", "no-such-problem", "--out", str(tmp_path)],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert empty.returncode == 2 and "no problem matches" in empty.stderr


def test_a_missing_peer_is_a_note_not_an_error(tmp_path):
    """A peer whose framework cannot be imported is skipped and listed in the notes."""
    fake = tmp_path / "site" / "onnxruntime"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('onnxruntime hidden by the test')\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "site"))
    done = subprocess.run([sys.executable, "-m", "benchmarks", "--filter", "^lstm-H128-B1-T25$", "--threads", "1",
                           "--repeat", "1", "--budget", "0", "--modes", "forward", "--peers", "onnxruntime",
                           "--out", str(tmp_path / "out")], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "out" / "benchmark.json").read_text())
    assert "onnxruntime hidden by the test" in result["workers"][0]["peers"]["onnxruntime"]["missing"]
    assert any("peer onnxruntime skipped" in note for note in result["notes"])
    (row,) = result["rows"]
    assert list(row["median_s"]) == ["fusedrnn"]
