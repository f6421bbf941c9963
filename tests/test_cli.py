"""The command line (``python -m fusedrnn {demo,check,info}``), run as a user runs it: in a
subprocess, checking exit statuses, what is printed and the files written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fusedrnn
from fusedrnn.cli import check as check_command
from fusedrnn.cli import demo as demo_command
import fusedrnn.cli.main as cli_main
from fusedrnn.cli.gradcheck import TOLERANCE, CheckResult, fd_max_error

REPO = Path(__file__).resolve().parents[1]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def fusedrnn_cli(*args, timeout=300) -> subprocess.CompletedProcess:
    """``python -m fusedrnn ARGS`` with this checkout's fusedrnn first on the path."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "fusedrnn", *map(str, args)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def assert_one_line_error(result: subprocess.CompletedProcess, status: int, *fragments: str) -> None:
    assert result.returncode == status, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    error_lines = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(error_lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in error_lines[0], (fragment, error_lines[0])


# --------------------------------------------------------------------------------------
# Parser: help and bad arguments


@pytest.mark.parametrize("command", [[], ["demo"], ["check"], ["info"]],
                         ids=["top", "demo", "check", "info"])
def test_help(command):
    result = fusedrnn_cli(*command, "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: fusedrnn"), result.stdout
    for option in {"demo": ["--mode", "--bidirectional", "--resume", "--threads", "--out"],
                   "check": ["--quick", "--no-oracles"], "info": ["--json"]}.get(
                       command[0] if command else "", ["demo", "check", "info"]):
        assert option in result.stdout, option


@pytest.mark.parametrize("args,fragment", [
    ([], "required: COMMAND"),
    (["nosuch"], "invalid choice: 'nosuch'"),
    (["demo", "--mode", "lstm2"], "argument --mode: invalid choice: 'lstm2'"),
    (["demo", "--steps", "0"], "argument --steps: must be >= 1, got 0"),
    (["demo", "--layers", "two"], "argument --layers: invalid positive_int value: 'two'"),
    (["info", "--bogus"], "unrecognized arguments: --bogus"),
    (["check", "--seed", "x"], "argument --seed: invalid int value: 'x'"),
], ids=["no-command", "unknown-command", "bad-choice", "zero-steps", "not-int", "unknown-option", "bad-seed"])
def test_bad_arguments_give_usage_and_one_line_error(args, fragment):
    result = fusedrnn_cli(*args)
    assert_one_line_error(result, 2, fragment)
    assert result.stderr.startswith("usage: fusedrnn"), result.stderr
    assert result.stdout == ""


def test_runtime_error_is_one_line_and_debug_shows_the_traceback(tmp_path):
    missing = tmp_path / "missing.npz"
    result = fusedrnn_cli("demo", "--out", tmp_path, "--resume", missing)
    assert_one_line_error(result, 1, "fusedrnn demo: error: FileNotFoundError:", str(missing))
    debug = fusedrnn_cli("demo", "--out", tmp_path, "--resume", missing, "--debug")
    assert debug.returncode == 1 and "Traceback" in debug.stderr and "FileNotFoundError" in debug.stderr
    too_long = fusedrnn_cli("demo", "--seq-len", 5000, "--out", tmp_path / "never")
    assert_one_line_error(too_long, 1, "ValueError: --batch 32 x --seq-len 5000 does not fit the training text")
    assert not (tmp_path / "never").exists()


def test_optional_subcommand_modules_are_skipped_only_when_absent(monkeypatch, tmp_path):
    monkeypatch.setattr(cli_main, "OPTIONAL_COMMAND_MODULES", ("fusedrnn.no_such_package.cli",))
    assert cli_main._optional_command_modules() == []
    # a present module whose own import fails is reported, not silently dropped
    (tmp_path / "fusedrnn_broken_plugin.py").write_text("import fusedrnn_no_such_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(cli_main, "OPTIONAL_COMMAND_MODULES", ("fusedrnn_broken_plugin",))
    with pytest.raises(ModuleNotFoundError, match="fusedrnn_no_such_dependency"):
        cli_main.build_parser()


def test_subcommands_are_extensible(monkeypatch, capsys):
    """A module with ``register(subparsers)`` listed in OPTIONAL_COMMAND_MODULES becomes a command."""
    import types

    plugin = types.ModuleType("fusedrnn_test_plugin")

    def register(subparsers):
        sub = subparsers.add_parser("hello")
        sub.add_argument("--name", default="world")
        sub.set_defaults(func=lambda args: print(f"hello {args.name}") or 3)

    plugin.register = register
    monkeypatch.setitem(sys.modules, "fusedrnn_test_plugin", plugin)
    monkeypatch.setattr(cli_main, "OPTIONAL_COMMAND_MODULES", ("fusedrnn_test_plugin",))
    assert cli_main.main(["hello", "--name", "fusedrnn"]) == 3
    assert capsys.readouterr().out == "hello fusedrnn\n"


# --------------------------------------------------------------------------------------
# info


def test_info_text():
    result = fusedrnn_cli("info")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith(f"fusedrnn   {fusedrnn.__version__}\n")
    for fragment in (f"numpy      {np.__version__}", "blas ", "backend ", "float64", "matplotlib",
                     "fusedrnn[demo]", "optional frameworks"):
        assert fragment in out, fragment


def test_info_json():
    result = fusedrnn_cli("info", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["fusedrnn"] == fusedrnn.__version__
    assert report["numpy"] == np.__version__
    assert report["python"] == sys.version.split()[0]
    assert {"backend", "native_available"} <= set(report["backend"])
    assert report["blas"]["libraries"] and "threads" in report["blas"]["libraries"][0]
    packages = {row["package"]: row for row in report["optional"]}
    assert {"torch", "jax", "tensorflow", "onnx", "onnxruntime", "keras", "h5py", "matplotlib",
            "tqdm"} <= set(packages)
    assert packages["matplotlib"]["extra"] == "fusedrnn[demo]"
    assert packages["matplotlib"]["installed"] is True  # in the test extra


# --------------------------------------------------------------------------------------
# check


def test_check_quick_passes():
    result = fusedrnn_cli("check", "--quick")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    for family in ("CudnnRNNV3 lstm", "CudnnRNNV3 gru", "CudnnRNNV3 rnn_tanh", "CudnnRNNV3 rnn_relu",
                   "BlockLSTM grad", "BlockLSTMV2 grad", "LSTMBlockCell grad", "GRUBlockCell grad"):
        assert any(line.startswith(family) and line.endswith("pass") for line in lines), family
    assert any(" bi " in line and "lengths=" in line for line in lines)
    assert "FAIL" not in result.stdout
    assert lines[-1].startswith(f"{sum(line.endswith('pass') for line in lines)} passed, 0 failed")


def test_fd_checker_catches_a_wrong_gradient():
    """The checker can fail: d/da Σ a³ is 3a², a gradient of 3a² + 1e-4 is rejected."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 4))

    def loss(inputs):
        return float(np.sum(inputs["a"] ** 3))

    assert fd_max_error(loss, {"a": a}, {"a": 3 * a ** 2}, rng, entries=4) < TOLERANCE
    assert fd_max_error(loss, {"a": a}, {"a": 3 * a ** 2 + 1e-4}, rng, entries=0) > TOLERANCE
    wrong_entry = 3 * a ** 2
    wrong_entry[1, 2] += 1e-3
    assert fd_max_error(loss, {"a": a}, {"a": wrong_entry}, rng, entries=a.size) > TOLERANCE


def test_check_exits_nonzero_on_a_failure_or_a_crash(monkeypatch, capsys):
    def failing(quick, seed):
        yield CheckResult("fake family", "wrong on purpose", 1.0, TOLERANCE)

    def crashing(quick, seed):
        yield CheckResult("fake family", "fine", 0.0, TOLERANCE)
        raise RuntimeError("boom")

    monkeypatch.setattr(check_command, "gradient_checks", failing)
    assert cli_main.main(["check", "--no-oracles"]) == 1
    out = capsys.readouterr().out
    assert "wrong on purpose" in out and "FAIL" in out and out.splitlines()[-1].startswith("0 passed, 1 failed")
    monkeypatch.setattr(check_command, "gradient_checks", crashing)
    assert cli_main.main(["check", "--no-oracles"]) == 1
    out = capsys.readouterr().out
    assert "crashed: RuntimeError: boom" in out and out.splitlines()[-1].startswith("1 passed, 1 failed")


# --------------------------------------------------------------------------------------
# demo

SMALL = ["--hidden", "24", "--batch", "8", "--seq-len", "16", "--sample-len", "20"]


def load_saved(path: Path) -> dict:
    with np.load(path, allow_pickle=False) as data:
        return {name: data[name] for name in data.files}


def assert_png(path: Path) -> None:
    import matplotlib.image

    assert path.read_bytes()[:8] == PNG_SIGNATURE
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100


def test_demo_trains_saves_reloads_and_resumes(tmp_path):
    steps = 40
    result = fusedrnn_cli("demo", *SMALL, "--steps", steps, "--out", tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "sample before training" in result.stdout and "sample after training" in result.stdout
    assert "chars/s" in result.stderr and "loss" in result.stderr  # the progress bar
    saved = load_saved(tmp_path / "model.npz")
    config = json.loads(str(saved["config"]))
    assert (config["mode"], config["layers"], config["hidden"], config["bidirectional"]) == ("lstm", 2, 24, False)
    expected_size = int(fusedrnn.cudnn_rnn_params_size(2, 24, config["embed"])[0])
    assert saved["params"].shape == (expected_size,) and saved["params"].dtype == np.float32
    losses = saved["losses"]
    assert losses.shape == (steps,) and np.isfinite(losses).all()
    assert losses[0] == pytest.approx(np.log(len(config["vocab"])), abs=0.3)  # uniform start
    assert losses[-10:].mean() < losses[:10].mean() - 0.3, losses
    (_, held_before), (_, held_after) = saved["held_out"]
    assert held_after < held_before - 0.3
    assert_png(tmp_path / "loss.png")

    # the saved model reloads into a working model
    loaded = demo_command.load_model(tmp_path / "model.npz")
    corpus = demo_command.Corpus(demo_command.load_text(), loaded[0])
    assert demo_command.held_out_loss(loaded[0], loaded[1], corpus)[0] == pytest.approx(held_after, rel=1e-5)

    # --resume continues from the saved step with the saved weights and optimizer state
    more = fusedrnn_cli("demo", "--steps", 10, "--sample-len", 5, "--out", tmp_path, "--resume")
    assert more.returncode == 0, more.stdout + more.stderr
    assert "resuming from" in more.stdout and "at step 40" in more.stdout
    resumed = load_saved(tmp_path / "model.npz")
    assert int(resumed["adam_step"]) == steps + 10
    np.testing.assert_array_equal(resumed["losses"][:steps], losses)
    assert resumed["losses"][steps:].mean() < losses[:10].mean()
    assert_png(tmp_path / "loss.png")

    # a conflicting architecture argument is refused, in one line
    conflict = fusedrnn_cli("demo", "--steps", 1, "--out", tmp_path, "--resume", "--mode", "gru")
    assert_one_line_error(conflict, 1, "--mode gru does not match the model")


@pytest.mark.parametrize("mode,extra", [("gru", ["--layers", "1", "--threads", "2"]), ("rnn_tanh", ["--bidirectional"])],
                         ids=["gru-lm", "rnn_tanh-bidirectional-classifier"])
def test_demo_other_modes_learn(tmp_path, mode, extra):
    result = fusedrnn_cli("demo", *SMALL, "--mode", mode, *extra, "--steps", 30, "--seed", 3, "--out", tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    saved = load_saved(tmp_path / "model.npz")
    config = json.loads(str(saved["config"]))
    assert config["mode"] == mode
    losses = saved["losses"]
    assert losses[-10:].mean() < losses[:10].mean(), losses
    if "--bidirectional" in extra:
        assert "accuracy" in result.stdout and "truth:" in result.stdout
        assert saved["w_out"].shape == (2 * 24, len(demo_command.CLASSES))
        assert losses[0] == pytest.approx(np.log(len(demo_command.CLASSES)), abs=0.3)


def test_demo_cloze_batches_hide_the_middle_character():
    text = demo_command.load_text()
    config = demo_command.Config("lstm", 1, 8, True, "".join(sorted(set(text))), seq_len=9)
    corpus = demo_command.Corpus(text, config)
    tokens, targets = corpus.cloze_batch(corpus.train, np.random.default_rng(0), 50)
    assert tokens.shape == (9, 50) and targets.shape == (50,)
    mask = len(config.vocab)
    assert (tokens[4] == mask).all() and (np.delete(tokens, 4, axis=0) != mask).all()
    assert set(targets.tolist()) <= set(range(len(demo_command.CLASSES)))


def test_shipped_text():
    text = demo_command.load_text()
    assert 50_000 < len(text) < 400_000 and text.isascii()
    assert text.startswith("Macbeth\n") and "Fair is foul, and foul is fair" in text
    assert (REPO / "fusedrnn" / "data" / "README.md").read_text().count("public domain") >= 1


# --------------------------------------------------------------------------------------
# Packaging


def test_import_fusedrnn_stays_light():
    heavy = ["matplotlib", "tqdm", "rich", "torch", "jax", "tensorflow", "onnx", "onnxruntime", "keras", "h5py"]
    code = ("import sys, fusedrnn, fusedrnn.cli.main; "
            f"print([m for m in {heavy!r} if m in sys.modules])")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_console_script_and_extras_declared():
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["fusedrnn"] == "fusedrnn.cli.main:main"
    extras = project["project"]["optional-dependencies"]
    names = {requirement.split(">")[0].split("=")[0] for requirement in extras["demo"]}
    assert {"matplotlib", "tqdm"} <= names
    assert all(requirement in extras["test"] for requirement in extras["demo"])
    # scikit-build-core ships every file under the package directory, the demo's text included
    assert project["tool"]["scikit-build"]["wheel"]["packages"] == ["fusedrnn"]


def test_convert_subcommand_is_wired(tmp_path):
    """``python -m fusedrnn convert``: .npz -> .npz through the real entry point; a bad DST is one
    line and exit status 1, like the other subcommands' runtime errors."""
    from fusedrnn.convert import CudnnWeights

    n = int(fusedrnn.cudnn_rnn_params_size(1, 3, 2)[0])
    weights = CudnnWeights(np.arange(n, dtype=np.float32), rnn_mode="lstm", num_layers=1, num_units=3,
                           input_size=2)
    weights.save(tmp_path / "a.npz")
    result = fusedrnn_cli("convert", tmp_path / "a.npz", tmp_path / "b.npz")
    assert result.returncode == 0, result.stderr
    assert CudnnWeights.load(tmp_path / "b.npz") == weights
    assert_one_line_error(fusedrnn_cli("convert", tmp_path / "a.npz", tmp_path / "b.txt"), 1,
                          "DST must end in .npz, .pt or .onnx")
