"""``fusedrnn demo``: train a character-level RNN on *Macbeth* with fusedrnn's cuDNN-style ops.

Everything but the recurrent stack is NumPy, written out here so the whole model is visible:

* tokens ``[T, B]`` -> embedding ``E [V(+1), I]`` -> ``x [T, B, I]``;
* ``fusedrnn.cudnn_rnn_v3`` (``--mode``, ``--layers``, ``--hidden``, time-major, opaque
  ``params``) -> ``y [T, B, D*H]``; its gradients come from ``fusedrnn.cudnn_rnn_backprop_v3``;
* a dense read-out ``logits = y W + b`` and the softmax cross-entropy
  ``loss = -mean log softmax(logits)[target]`` (nats; ``d loss / d logits = (p - onehot) / N``);
* Adam (``lr``, beta 0.9 / 0.999), gradients clipped to a global L2 norm of ``--clip``.

Two tasks:

``lm`` (default, unidirectional)
    next-character prediction; the text is cut into ``B`` parallel streams read ``T`` characters
    at a time (truncated back-propagation through time): each window starts from the states the
    previous window ended in (``output_h``/``output_c`` carried, not differentiated through).
``classify`` (``--bidirectional``)
    a next-character model cannot use the future, so a bidirectional stack gets a cloze task:
    in a window of ``T`` characters the middle one is replaced by a mask token and the model
    predicts its class (lowercase letter, uppercase letter, space, newline, punctuation) from
    both sides; the loss is read at the middle position only.

The last 10 % of the text is held out; its loss is reported before and after training.  The
model (the opaque ``params`` buffer, the NumPy weights, the Adam moments, the config and the loss
history) is one ``.npz``; ``--resume`` continues from it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.resources
import importlib.util
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ._common import add_command, missing_extra, positive_int

TEXT_FILE = "macbeth.txt"
CLASSES = ("lowercase letter", "uppercase letter", "space", "newline", "punctuation")
HELD_OUT_FRACTION = 0.1
HELD_OUT_BATCH = 16  # parallel streams when the language model reads the held-out text
PROMPT = "MACBETH:\n"
MODEL_FILE = "model.npz"
PLOT_FILE = "loss.png"


def register(subparsers) -> None:
    parser = add_command(
        subparsers, "demo", func=run, help="train a character-level RNN on Macbeth (~1 minute)",
        description="Train a character-level language model (a 2-layer LSTM by default) on "
                    "Shakespeare's Macbeth with fusedrnn's CudnnRNNV3 forward and backprop plus "
                    "NumPy; print samples before and after, save the model and a loss curve.")
    parser.add_argument("--mode", choices=("lstm", "gru", "rnn_tanh"), default=None,
                        help="recurrent cell (default lstm; from the file with --resume)")
    parser.add_argument("--layers", type=positive_int, default=None, help="stacked layers (default 2)")
    parser.add_argument("--hidden", type=positive_int, default=None, help="units per layer (default 128)")
    parser.add_argument("--bidirectional", action="store_true", default=None,
                        help="bidirectional stack; the task becomes classifying a masked middle character")
    parser.add_argument("--steps", type=positive_int, default=1000, help="training steps (Adam updates)")
    parser.add_argument("--batch", type=positive_int, default=32, help="sequences per step")
    parser.add_argument("--seq-len", type=positive_int, default=64,
                        help="characters per sequence (the truncated-BPTT window)")
    parser.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate")
    parser.add_argument("--clip", type=float, default=5.0, help="global gradient-norm clip")
    parser.add_argument("--seed", type=int, default=0, help="seed of the initialisation, batches and samples")
    parser.add_argument("--threads", type=positive_int, default=1,
                        help="compute threads: BLAS and, when present, the native engine. One by default: "
                             "the demo's matrices are small, and on a busy machine OpenBLAS's spinning "
                             "threads made it 10x slower (measured on 2 cores)")
    parser.add_argument("--out", type=Path, default=Path("fusedrnn-demo"),
                        help=f"output folder for {MODEL_FILE} and {PLOT_FILE}")
    parser.add_argument("--resume", nargs="?", type=Path, const=True, default=None, metavar="NPZ",
                        help=f"continue training from a saved model (default: OUT/{MODEL_FILE})")
    parser.add_argument("--sample-len", type=int, default=300, help="characters generated per sample")


# --------------------------------------------------------------------------------------
# Data


def load_text() -> str:
    """The shipped training text (``fusedrnn/data/macbeth.txt``, public domain)."""
    return (importlib.resources.files("fusedrnn") / "data" / TEXT_FILE).read_text(encoding="ascii")


def char_class(ch: str) -> int:
    """Index into :data:`CLASSES`."""
    if ch.islower():
        return 0
    if ch.isupper():
        return 1
    if ch == " ":
        return 2
    if ch == "\n":
        return 3
    return 4


# --------------------------------------------------------------------------------------
# Model


@dataclass(frozen=True)
class Config:
    """Everything that defines the model and its training (saved as JSON in the ``.npz``)."""

    mode: str
    layers: int
    hidden: int
    bidirectional: bool
    vocab: str  # the characters, index = token id; the classifier's mask token is id len(vocab)
    embed: int = 32
    batch: int = 32
    seq_len: int = 64
    lr: float = 3e-3
    clip: float = 5.0
    seed: int = 0

    @property
    def task(self) -> str:
        return "classify" if self.bidirectional else "lm"

    @property
    def direction(self) -> str:
        return "bidirectional" if self.bidirectional else "unidirectional"

    @property
    def num_dirs(self) -> int:
        return 2 if self.bidirectional else 1

    @property
    def num_tokens(self) -> int:
        return len(self.vocab) + (1 if self.bidirectional else 0)

    @property
    def num_outputs(self) -> int:
        return len(CLASSES) if self.bidirectional else len(self.vocab)

    @property
    def rnn_attrs(self) -> dict:
        return dict(rnn_mode=self.mode, direction=self.direction)


def init_weights(config: Config, rng: np.random.Generator) -> dict:
    """``embedding [tokens, I]``, opaque ``params`` (uniform ±1/sqrt(H), PyTorch's default),
    ``w_out [D*H, K]``, ``b_out [K]`` (float32)."""
    import fusedrnn

    size = int(fusedrnn.cudnn_rnn_params_size(config.layers, config.hidden, config.embed,
                                              **config.rnn_attrs)[0])
    bound = 1.0 / np.sqrt(config.hidden)
    width = config.num_dirs * config.hidden
    weights = {
        "embedding": rng.standard_normal((config.num_tokens, config.embed)) * 0.3,
        "params": rng.uniform(-bound, bound, size),
        "w_out": rng.standard_normal((width, config.num_outputs)) / np.sqrt(width),
        "b_out": np.zeros(config.num_outputs),
    }
    return {name: value.astype(np.float32) for name, value in weights.items()}


def zero_state(config: Config, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """``(h, c)`` of shape ``[L*D, B, H]``; ``c`` is a rank-0 placeholder except for lstm."""
    shape = (config.layers * config.num_dirs, batch, config.hidden)
    h = np.zeros(shape, np.float32)
    return h, (np.zeros(shape, np.float32) if config.mode == "lstm" else np.zeros((), np.float32))


def _softmax_xent(logits: np.ndarray, targets: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean cross-entropy of ``logits [N, K]`` against ``targets [N]`` and its gradient."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_z = np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    log_p = shifted - log_z
    rows = np.arange(len(targets))
    loss = -float(log_p[rows, targets].mean())
    grad = np.exp(log_p)
    grad[rows, targets] -= 1.0
    return loss, grad / len(targets)


def forward(config: Config, weights: dict, tokens: np.ndarray, state, training: bool):
    """Run the stack on ``tokens [T, B]``; returns ``(x, fused result)``."""
    import fusedrnn

    x = weights["embedding"][tokens]
    lengths = np.full(tokens.shape[1], tokens.shape[0], np.int32)
    result = fusedrnn.cudnn_rnn_v3(x, state[0], state[1], weights["params"], lengths,
                                   is_training=training, **config.rnn_attrs)
    return x, result


def _readout_positions(config: Config, output: np.ndarray) -> np.ndarray:
    """The RNN outputs the loss reads: all ``[T*B, D*H]`` (lm) or the middle step ``[B, D*H]``."""
    if config.task == "lm":
        return output.reshape(-1, output.shape[-1])
    return output[output.shape[0] // 2]


def loss_and_grads(config: Config, weights: dict, tokens: np.ndarray, targets: np.ndarray, state):
    """Loss of one batch, the gradient of every weight, and the final states (for carrying).

    ``targets`` is ``[T, B]`` next characters (lm) or ``[B]`` classes of the middle (classify).
    """
    import fusedrnn

    x, fwd = forward(config, weights, tokens, state, training=True)
    features = _readout_positions(config, fwd.output)
    loss, d_logits = _softmax_xent(features @ weights["w_out"] + weights["b_out"], targets.reshape(-1))
    d_features = d_logits @ weights["w_out"].T
    d_output = np.zeros_like(fwd.output)
    if config.task == "lm":
        d_output[...] = d_features.reshape(fwd.output.shape)
    else:
        d_output[fwd.output.shape[0] // 2] = d_features
    lengths = np.full(tokens.shape[1], tokens.shape[0], np.int32)
    back = fusedrnn.cudnn_rnn_backprop_v3(
        x, state[0], state[1], weights["params"], lengths, fwd.output, fwd.output_h, fwd.output_c,
        d_output, np.zeros_like(fwd.output_h), np.zeros_like(fwd.output_c), fwd.reserve_space,
        fwd.host_reserved, **config.rnn_attrs)
    d_embedding = np.zeros_like(weights["embedding"])
    np.add.at(d_embedding, tokens.reshape(-1), back.input_backprop.reshape(-1, config.embed))
    grads = {"embedding": d_embedding, "params": back.params_backprop,
             "w_out": features.T @ d_logits, "b_out": d_logits.sum(axis=0)}
    return loss, grads, (fwd.output_h, fwd.output_c)


def clip_global_norm(grads: dict, max_norm: float) -> float:
    """Scale all gradients in place so their joint L2 norm is at most ``max_norm``; returns
    the norm before clipping."""
    norm = float(np.sqrt(sum(float(np.vdot(g, g)) for g in grads.values())))
    if max_norm > 0 and norm > max_norm:
        for g in grads.values():
            g *= max_norm / norm
    return norm


class Adam:
    """Adam (Kingma & Ba): ``m = b1 m + (1-b1) g``, ``v = b2 v + (1-b2) g²``,
    ``w -= lr * m̂ / (sqrt(v̂) + eps)`` with bias-corrected ``m̂, v̂``; updates in place."""

    def __init__(self, weights: dict, lr: float, beta1=0.9, beta2=0.999, eps=1e-8):
        self.lr, self.beta1, self.beta2, self.eps = lr, beta1, beta2, eps
        self.m = {name: np.zeros_like(w) for name, w in weights.items()}
        self.v = {name: np.zeros_like(w) for name, w in weights.items()}
        self.step = 0

    def update(self, weights: dict, grads: dict) -> None:
        self.step += 1
        correction1 = 1.0 - self.beta1 ** self.step
        correction2 = 1.0 - self.beta2 ** self.step
        for name, g in grads.items():
            m, v = self.m[name], self.v[name]
            m *= self.beta1
            m += (1.0 - self.beta1) * g
            v *= self.beta2
            v += (1.0 - self.beta2) * g * g
            weights[name] -= (self.lr / correction1) * m / (np.sqrt(v / correction2) + self.eps)


# --------------------------------------------------------------------------------------
# Batches


class Corpus:
    """Token ids of the training and held-out parts of the text, and the batches of each task."""

    def __init__(self, text: str, config: Config):
        index = {ch: i for i, ch in enumerate(config.vocab)}
        unknown = sorted(set(text) - set(index))
        if unknown:
            raise ValueError(f"the text has characters outside the model's vocabulary: {unknown[:10]}")
        ids = np.array([index[ch] for ch in text], np.int64)
        classes = np.array([char_class(ch) for ch in config.vocab], np.int64)
        split = int(len(ids) * (1 - HELD_OUT_FRACTION))
        self.config, self.classes = config, classes
        self.train, self.held_out = ids[:split], ids[split:]

    # --- lm: B parallel streams, read T characters at a time -----------------------------

    def stream_count(self, ids: np.ndarray, batch: int) -> int:
        return (len(ids) - 1) // batch

    def lm_window(self, ids: np.ndarray, batch: int, position: int):
        """``(tokens [T, B], targets [T, B])`` of the window starting at ``position`` in each of
        the ``batch`` streams (stream ``b`` starts at ``b * stream_length``)."""
        stream_length = self.stream_count(ids, batch)
        starts = np.arange(batch) * stream_length + position
        offsets = np.arange(self.config.seq_len + 1)[:, None]
        window = ids[starts[None, :] + offsets]
        return window[:-1], window[1:]

    def lm_windows_per_epoch(self, ids: np.ndarray, batch: int) -> int:
        return (self.stream_count(ids, batch) - 1) // self.config.seq_len

    # --- classify: random windows, middle character masked --------------------------------

    def cloze_batch(self, ids: np.ndarray, rng: np.random.Generator, batch: int):
        """``(tokens [T, B], classes [B])``: random windows of ``T`` characters whose middle one
        is replaced by the mask token, and the class of the replaced character."""
        T = self.config.seq_len
        starts = rng.integers(0, len(ids) - T, batch)
        tokens = ids[starts[None, :] + np.arange(T)[:, None]].copy()
        middle = T // 2
        targets = self.classes[tokens[middle]]
        tokens[middle] = len(self.config.vocab)
        return tokens, targets


def held_out_loss(config: Config, weights: dict, corpus: Corpus) -> tuple[float, float | None]:
    """Mean held-out cross-entropy (nats) and, for the classifier, accuracy."""
    if config.task == "lm":
        batch = HELD_OUT_BATCH
        state = zero_state(config, batch)
        losses = []
        for window in range(corpus.lm_windows_per_epoch(corpus.held_out, batch)):
            tokens, targets = corpus.lm_window(corpus.held_out, batch, window * config.seq_len)
            _, fwd = forward(config, weights, tokens, state, training=False)
            logits = _readout_positions(config, fwd.output) @ weights["w_out"] + weights["b_out"]
            losses.append(_softmax_xent(logits, targets.reshape(-1))[0])
            state = (fwd.output_h, fwd.output_c)
        return float(np.mean(losses)), None
    tokens, targets = corpus.cloze_batch(corpus.held_out, np.random.default_rng(12345), 512)
    _, fwd = forward(config, weights, tokens, zero_state(config, tokens.shape[1]), training=False)
    logits = _readout_positions(config, fwd.output) @ weights["w_out"] + weights["b_out"]
    return _softmax_xent(logits, targets)[0], float((logits.argmax(axis=1) == targets).mean())


# --------------------------------------------------------------------------------------
# Samples


def generate(config: Config, weights: dict, prompt: str, length: int, rng: np.random.Generator,
             temperature: float = 0.8) -> str:
    """Feed ``prompt`` (its characters outside the vocabulary dropped), then sample ``length``
    characters one at a time from ``softmax(logits / temperature)``, carrying the states."""
    index = {ch: i for i, ch in enumerate(config.vocab)}
    tokens = np.array([[index[ch]] for ch in prompt if ch in index], np.int64)
    state = zero_state(config, 1)
    produced = []
    for _ in range(length):
        _, fwd = forward(config, weights, tokens, state, training=False)
        state = (fwd.output_h, fwd.output_c)
        logits = (fwd.output[-1, 0] @ weights["w_out"] + weights["b_out"]) / temperature
        p = np.exp(logits - logits.max())
        token = int(rng.choice(len(p), p=p / p.sum()))
        produced.append(config.vocab[token])
        tokens = np.array([[token]], np.int64)
    return "".join(produced)


def cloze_examples(config: Config, weights: dict, corpus: Corpus, count: int = 4) -> str:
    """A few held-out windows with the masked middle shown as ``_`` (newlines as ``\\n``), the
    prediction and the truth."""
    tokens, targets = corpus.cloze_batch(corpus.held_out, np.random.default_rng(7), count)
    _, fwd = forward(config, weights, tokens, zero_state(config, count), training=False)
    predicted = (_readout_positions(config, fwd.output) @ weights["w_out"] + weights["b_out"]).argmax(axis=1)
    lines = []
    for b in range(count):
        chars = ["_" if t == len(config.vocab) else config.vocab[t] for t in tokens[:, b]]
        shown = "".join(chars).replace("\n", "\\n")
        verdict = "right" if predicted[b] == targets[b] else "wrong"
        lines.append(f"  {shown:<{config.seq_len + 8}} -> {CLASSES[predicted[b]]:<17} "
                     f"(truth: {CLASSES[targets[b]]}, {verdict})")
    return "\n".join(lines)


def show_sample(config: Config, weights: dict, corpus: Corpus, title: str, sample_len: int) -> None:
    print(f"--- {title} ---")
    if config.task == "lm":
        print(PROMPT + generate(config, weights, PROMPT, sample_len, np.random.default_rng(config.seed)))
    else:
        print(cloze_examples(config, weights, corpus))
    print("---")


# --------------------------------------------------------------------------------------
# Saving, loading, plotting


def save_model(path: Path, config: Config, weights: dict, adam: Adam, losses: list, position: int,
               held_out: list) -> None:
    """One ``.npz``: weights (``params`` is the opaque cuDNN buffer), Adam state, ``config`` (JSON),
    per-step training ``losses``, the lm stream ``position`` and ``held_out`` [step, loss] pairs."""
    arrays = {name: w for name, w in weights.items()}
    arrays.update({f"adam_m/{name}": m for name, m in adam.m.items()})
    arrays.update({f"adam_v/{name}": v for name, v in adam.v.items()})
    arrays.update(config=np.array(json.dumps(asdict(config))), adam_step=np.array(adam.step),
                  losses=np.array(losses, np.float64), position=np.array(position),
                  held_out=np.array(held_out, np.float64).reshape(-1, 2))
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, **arrays)
    tmp.replace(path)


def load_model(path: Path):
    """``(config, weights, adam, losses, position, held_out)`` from :func:`save_model`'s file."""
    if not path.is_file():
        raise FileNotFoundError(f"--resume: no saved model at {path}")
    with np.load(path, allow_pickle=False) as data:
        if "config" not in data.files or "params" not in data.files:
            raise ValueError(f"--resume: {path} is not a fusedrnn demo model (no config/params)")
        config = Config(**json.loads(str(data["config"])))
        weights = {name: data[name] for name in ("embedding", "params", "w_out", "b_out")}
        adam = Adam(weights, config.lr)
        adam.m = {name: data[f"adam_m/{name}"] for name in weights}
        adam.v = {name: data[f"adam_v/{name}"] for name in weights}
        adam.step = int(data["adam_step"])
        losses = data["losses"].tolist()
        held_out = [tuple(pair) for pair in data["held_out"].tolist()]
        position = int(data["position"])
    return config, weights, adam, losses, position, held_out


def plot_losses(path: Path, config: Config, losses: list, held_out: list) -> None:
    """Training loss per step (thin), its 25-step running mean (thick), held-out loss (dots)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = np.arange(1, len(losses) + 1)
    window = min(25, len(losses))
    running = np.convolve(losses, np.ones(window) / window, mode="valid")
    figure, axes = plt.subplots(figsize=(7, 4), dpi=100)
    axes.plot(steps, losses, color="tab:blue", alpha=0.3, linewidth=0.8, label="training loss (per step)")
    axes.plot(steps[window - 1:], running, color="tab:blue", linewidth=2,
              label=f"training loss ({window}-step mean)")
    if held_out:
        at, value = zip(*held_out)
        axes.plot(at, value, "o", color="tab:red", label="held-out loss")
    what = "next character" if config.task == "lm" else "class of the masked middle character"
    axes.set(xlabel="step", ylabel="cross-entropy (nats)",
             title=f"fusedrnn demo: {config.layers}-layer {config.direction} {config.mode}, "
                   f"H={config.hidden}, {what}")
    axes.title.set_fontsize(9)
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


# --------------------------------------------------------------------------------------
# Threads and the command


@contextlib.contextmanager
def _openblas_threads(threads: int, required: bool):
    """NumPy's OpenBLAS on ``threads`` threads (the handle :mod:`fusedrnn.settings` found),
    restored on exit; when it cannot be controlled, an error if ``required``, else nothing."""
    from .. import settings

    blas = settings._get_blas()
    if not blas.controllable:
        if required:
            raise RuntimeError("--threads: cannot control this NumPy's BLAS library; pip install "
                               "threadpoolctl, or set OPENBLAS_NUM_THREADS / OMP_NUM_THREADS")
        yield
        return
    saved = blas.get()
    blas.set(threads)
    try:
        yield
    finally:
        blas.set(saved)


def thread_scope(threads: int):
    """A context in which compute uses ``threads`` threads: the native engine's team size
    (``fusedrnn.set_num_threads``, when this fusedrnn has one) and the BLAS thread count
    (threadpoolctl when installed, else NumPy's OpenBLAS directly)."""
    import fusedrnn

    has_native_threads = hasattr(fusedrnn, "set_num_threads")
    if has_native_threads:
        fusedrnn.set_num_threads(threads)
    if importlib.util.find_spec("threadpoolctl") is not None:
        import threadpoolctl

        return threadpoolctl.threadpool_limits(limits=threads, user_api="blas")
    return _openblas_threads(threads, required=not has_native_threads)


def _require_demo_extras() -> None:
    for package in ("matplotlib", "tqdm"):
        if importlib.util.find_spec(package) is None:
            raise missing_extra(package, "demo", "fusedrnn demo")


def _resolve_config(args, text: str) -> Config:
    """A fresh run's config from the arguments (defaults: 2-layer unidirectional lstm, H=128)."""
    return Config(mode=args.mode or "lstm", layers=args.layers or 2, hidden=args.hidden or 128,
                  bidirectional=bool(args.bidirectional), vocab="".join(sorted(set(text))),
                  batch=args.batch, seq_len=args.seq_len, lr=args.lr, clip=args.clip, seed=args.seed)


def _check_resume_matches(args, config: Config, path: Path) -> None:
    """Architecture arguments given with ``--resume`` must agree with the saved model."""
    for name in ("mode", "layers", "hidden", "bidirectional"):
        given = getattr(args, name)
        if given is not None and given != getattr(config, name):
            raise ValueError(f"--{name} {given} does not match the model in {path} "
                             f"({name}={getattr(config, name)}); leave it out to resume")


def _check_sizes(config: Config, corpus: Corpus) -> None:
    """Each part of the text must hold at least one batch of ``--batch`` x ``--seq-len``."""
    for part, ids, batch in (("training", corpus.train, config.batch), ("held-out", corpus.held_out, HELD_OUT_BATCH)):
        fits = (corpus.lm_windows_per_epoch(ids, batch) >= 1 if config.task == "lm"
                else config.seq_len < len(ids))
        if not fits:
            raise ValueError(f"--batch {config.batch} x --seq-len {config.seq_len} does not fit the {part} text "
                             f"({len(ids):,} characters); use smaller values")


def run(args) -> int:
    _require_demo_extras()
    if args.seq_len < 3 and args.bidirectional:
        raise ValueError(f"--seq-len must be >= 3 with --bidirectional (a middle and both sides), got {args.seq_len}")
    from tqdm import tqdm

    if args.out.exists() and not args.out.is_dir():
        raise NotADirectoryError(f"--out {args.out} exists and is not a folder")
    text = load_text()
    model_path = args.out / MODEL_FILE
    if args.resume is not None:
        resume_path = model_path if args.resume is True else args.resume
        config, weights, adam, losses, position, held_out = load_model(resume_path)
        _check_resume_matches(args, config, resume_path)
        print(f"resuming from {resume_path} at step {adam.step}")
    else:
        config = _resolve_config(args, text)
        weights = init_weights(config, np.random.default_rng(config.seed))
        adam, losses, position, held_out = Adam(weights, config.lr), [], 0, []
    corpus = Corpus(text, config)
    _check_sizes(config, corpus)
    what = ("next-character language model" if config.task == "lm"
            else f"masked-middle-character classifier ({len(CLASSES)} classes)")
    n_params = sum(w.size for w in weights.values())
    print(f"fusedrnn demo: {config.layers}-layer {config.direction} {config.mode}, hidden {config.hidden}, "
          f"{what}, {n_params:,} weights ({weights['params'].size:,} in the opaque cuDNN params)")
    print(f"text: Macbeth, {len(corpus.train):,} training + {len(corpus.held_out):,} held-out characters, "
          f"vocabulary {len(config.vocab)}; batch {config.batch} x {config.seq_len} characters, "
          f"{args.steps} steps")

    with thread_scope(args.threads):
        loss_before, accuracy_before = held_out_loss(config, weights, corpus)
        if not held_out:
            held_out.append((adam.step, loss_before))
        show_sample(config, weights, corpus, f"sample before training (step {adam.step})", args.sample_len)

        state = zero_state(config, config.batch)
        windows = corpus.lm_windows_per_epoch(corpus.train, config.batch)
        chars_per_step = config.batch * config.seq_len
        started = time.perf_counter()
        running = None
        with tqdm(total=args.steps, unit="step", desc="training", dynamic_ncols=True,
                  mininterval=0.5, file=sys.stderr) as bar:
            for _ in range(args.steps):
                if config.task == "lm":
                    if position >= windows:  # a new pass over the text: streams restart from zero states
                        position, state = 0, zero_state(config, config.batch)
                    tokens, targets = corpus.lm_window(corpus.train, config.batch, position * config.seq_len)
                    position += 1
                else:
                    rng = np.random.default_rng([config.seed, adam.step])
                    tokens, targets = corpus.cloze_batch(corpus.train, rng, config.batch)
                    state = zero_state(config, config.batch)
                loss, grads, state = loss_and_grads(config, weights, tokens, targets, state)
                clip_global_norm(grads, config.clip)
                adam.update(weights, grads)
                losses.append(loss)
                running = loss if running is None else 0.95 * running + 0.05 * loss
                rate = chars_per_step * bar.n / max(time.perf_counter() - started, 1e-9)
                bar.set_postfix_str(f"loss {running:.3f}, {rate:,.0f} chars/s", refresh=False)
                bar.update(1)
        elapsed = time.perf_counter() - started
        loss_after, accuracy_after = held_out_loss(config, weights, corpus)
        held_out.append((adam.step, loss_after))
        show_sample(config, weights, corpus, f"sample after training (step {adam.step})", args.sample_len)

    args.out.mkdir(parents=True, exist_ok=True)
    save_model(model_path, config, weights, adam, losses, position, held_out)
    plot_path = args.out / PLOT_FILE
    plot_losses(plot_path, config, losses, held_out)
    print(f"trained {args.steps} steps in {elapsed:.1f} s "
          f"({args.steps * chars_per_step / elapsed:,.0f} chars/s)")
    line = f"held-out loss {loss_before:.3f} -> {loss_after:.3f} nats"
    if config.task == "lm":
        line += f" ({loss_before / np.log(2):.2f} -> {loss_after / np.log(2):.2f} bits per character)"
    else:
        majority = float(np.bincount(corpus.classes[corpus.held_out], minlength=len(CLASSES)).max()
                         / len(corpus.held_out))
        line += f"; accuracy {accuracy_before:.1%} -> {accuracy_after:.1%} (majority class: {majority:.1%})"
    print(line)
    print(f"saved {model_path} and {plot_path}; continue with: python -m fusedrnn demo --out {args.out} --resume")
    return 0
