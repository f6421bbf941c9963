"""fusedrnn.torch against torch.nn.LSTM/GRU/RNN with the same weights: outputs, final states
and every gradient (input, h_0, c_0, all parameters), over mode x direction x layers x
projection x input kind (padded, batch_first, packed unsorted/sorted) x dtype; gradcheck of the
autograd function; initialisation, weight conversion, state_dict, pickle/deepcopy, dropout seeds,
a training loop, torch.compile and the error messages."""

import copy
import pickle

import numpy as np
import pytest

import fusedrnn

torch = pytest.importorskip("torch", reason="fusedrnn.torch is the PyTorch adapter under test")
ft = pytest.importorskip("fusedrnn.torch")
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("torch")]

# (fusedrnn class, torch.nn class, torch constructor extras)
KINDS = {
    "lstm": (ft.CudnnLSTM, torch.nn.LSTM, {}),
    "lstm_proj": (ft.CudnnLSTM, torch.nn.LSTM, {"proj_size": 2}),
    "gru": (ft.CudnnGRU, torch.nn.GRU, {}),
    "rnn_tanh": (ft.CudnnRNNTanh, torch.nn.RNN, {"nonlinearity": "tanh"}),
    "rnn_relu": (ft.CudnnRNNRelu, torch.nn.RNN, {"nonlinearity": "relu"}),
}
I, H, T, B = 3, 4, 5, 3
LENGTHS_UNSORTED = [3, 5, 1]  # includes 1 and T
LENGTHS_SORTED = [5, 3, 1]
TOL = {torch.float64: dict(rtol=1e-10, atol=1e-10), torch.float32: dict(rtol=2e-5, atol=2e-6)}


def reference_module(kind, num_layers, bidirectional, dtype, batch_first=False, seed=0):
    _, torch_cls, extra = KINDS[kind]
    torch.manual_seed(seed)
    return torch_cls(I, H, num_layers=num_layers, bidirectional=bidirectional, batch_first=batch_first,
                     dtype=dtype, **extra)


def random_inputs(kind, module, dtype, seed=1):
    """x [T, B, I], h_0 (and c_0) with random values, requiring grad."""
    g = torch.Generator().manual_seed(seed)
    LD = module.num_layers * (2 if module.bidirectional else 1)
    Hout = getattr(module, "proj_size", 0) or H
    x = torch.randn(T, B, I, generator=g, dtype=dtype).requires_grad_()
    h0 = torch.randn(LD, B, Hout, generator=g, dtype=dtype).requires_grad_()
    c0 = torch.randn(LD, B, H, generator=g, dtype=dtype).requires_grad_() if kind.startswith("lstm") else None
    return x, h0, c0


def run(module, kind, x, h0, c0, layout):
    """Forward + backward of a weighted sum of everything the module returns; returns the
    outputs and the gradients."""
    lengths = {"packed": LENGTHS_UNSORTED, "packed_sorted": LENGTHS_SORTED}.get(layout)
    if lengths is not None:
        seq = pack_padded_sequence(x, torch.tensor(lengths), enforce_sorted=layout == "packed_sorted")
    elif layout == "batch_first":
        seq = x.transpose(0, 1)
    else:
        seq = x
    hx = (h0, c0) if c0 is not None else h0
    out, states = module(seq, hx)
    h_n, c_n = states if c0 is not None else (states, None)
    y = out.data if isinstance(out, PackedSequence) else out
    g = torch.Generator().manual_seed(7)
    loss = (y * torch.randn(y.shape, generator=g, dtype=y.dtype)).sum()
    loss = loss + (h_n * torch.randn(h_n.shape, generator=g, dtype=y.dtype)).sum()
    if c_n is not None:
        loss = loss + (c_n * torch.randn(c_n.shape, generator=g, dtype=y.dtype)).sum()
    grads = torch.autograd.grad(loss, [t for t in (x, h0, c0) if t is not None] + list(module.parameters()))
    return out, h_n, c_n, grads


def named_param_grads(module, grads):
    """Parameter gradients keyed by PyTorch names (a fusedrnn module's flat gradient is split
    with the adapter's mapping, whose correctness the forward comparison establishes)."""
    params = list(module.parameters())
    if isinstance(module, ft._CudnnRNNBase):
        return ft._params_to_torch(module._config, grads[0].numpy())
    names = [name for name, _ in module.named_parameters()]
    assert len(names) == len(params) == len(grads)
    return {name: g.numpy() for name, g in zip(names, grads)}


def assert_same(kind, num_layers, bidirectional, layout, dtype):
    ref = reference_module(kind, num_layers, bidirectional, dtype, batch_first=layout == "batch_first")
    ours = KINDS[kind][0].from_torch(ref)
    assert ours.batch_first == (layout == "batch_first")
    tol = TOL[dtype]
    ref_inputs = random_inputs(kind, ref, dtype)
    our_inputs = tuple(None if t is None else t.detach().clone().requires_grad_() for t in ref_inputs)
    r_out, r_h, r_c, r_grads = run(ref, kind, *ref_inputs, layout)
    o_out, o_h, o_c, o_grads = run(ours, kind, *our_inputs, layout)
    what = f"{kind} L{num_layers} {'bi' if bidirectional else 'uni'} {layout} {dtype}"
    if layout.startswith("packed"):
        assert isinstance(o_out, PackedSequence)
        for field in ("batch_sizes", "sorted_indices", "unsorted_indices"):
            a, b = getattr(o_out, field), getattr(r_out, field)
            assert (a is None and b is None) or torch.equal(a, b), f"{field}, {what}"
        o_out, r_out = o_out.data, r_out.data
    assert o_out.shape == r_out.shape and o_out.dtype == r_out.dtype
    torch.testing.assert_close(o_out, r_out, **tol, msg=lambda m: f"output, {what}: {m}")
    torch.testing.assert_close(o_h, r_h, **tol, msg=lambda m: f"h_n, {what}: {m}")
    if r_c is not None:
        torch.testing.assert_close(o_c, r_c, **tol, msg=lambda m: f"c_n, {what}: {m}")
    n_inputs = sum(t is not None for t in ref_inputs)
    for name, a, b in zip(("input", "h_0", "c_0"), o_grads[:n_inputs], r_grads[:n_inputs]):
        torch.testing.assert_close(a, b, **tol, msg=lambda m: f"grad of {name}, {what}: {m}")
    ours_named = named_param_grads(ours, o_grads[n_inputs:])
    ref_named = named_param_grads(ref, r_grads[n_inputs:])
    assert ours_named.keys() == ref_named.keys()
    for name in ref_named:
        np.testing.assert_allclose(ours_named[name], ref_named[name], **tol, err_msg=f"grad of {name}, {what}")


@pytest.mark.parametrize("layout", ["padded", "batch_first", "packed", "packed_sorted"])
@pytest.mark.parametrize("num_layers", [1, 2], ids=lambda n: f"L{n}")
@pytest.mark.parametrize("bidirectional", [False, True], ids=["uni", "bi"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_matches_torch_float64(kind, bidirectional, num_layers, layout):
    assert_same(kind, num_layers, bidirectional, layout, torch.float64)


@pytest.mark.parametrize("layout", ["batch_first", "packed"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_matches_torch_float32(kind, layout):
    assert_same(kind, 2, True, layout, torch.float32)


def test_unbatched_input_matches_torch(torch):
    ref = reference_module("lstm_proj", 2, True, torch.float64)
    ours = ft.CudnnLSTM.from_torch(ref)
    x = torch.randn(T, I, dtype=torch.float64)
    h0, c0 = torch.randn(4, 2, dtype=torch.float64), torch.randn(4, H, dtype=torch.float64)
    for hx in (None, (h0, c0)):
        (y, (h, c)), (ry, (rh, rc)) = ours(x, hx), ref(x, hx)
        assert y.shape == ry.shape == (T, 4) and h.shape == rh.shape == (4, 2) and c.shape == (4, H)
        for a, b in ((y, ry), (h, rh), (c, rc)):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_default_states_are_zeros(torch):
    ref = reference_module("gru", 2, True, torch.float64)
    ours = ft.CudnnGRU.from_torch(ref)
    x = torch.randn(T, B, I, dtype=torch.float64)
    (y, h), (ry, rh) = ours(x), ref(x)
    torch.testing.assert_close(y, ry, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(h, rh, rtol=1e-10, atol=1e-10)


# ----------------------------------------------------------------------------------------------
# The autograd function


def gradcheck_case(mode, num_proj, bidirectional, time_major, lengths, dropout=0.0, L=2):
    D = 2 if bidirectional else 1
    In, Hc, Tn, Bn = 2, 3, 3, len(lengths)
    Hout = num_proj or Hc
    size = int(fusedrnn.cudnn_rnn_params_size(L, Hc, In, S=np.int64, rnn_mode=mode, num_proj=num_proj,
                                              direction="bidirectional" if bidirectional else "unidirectional")[0])
    g = torch.Generator().manual_seed(3)
    x = torch.randn((Tn, Bn, In) if time_major else (Bn, Tn, In), generator=g, dtype=torch.float64)
    h = torch.randn((L * D, Bn, Hout) if time_major else (Bn, L * D, Hout), generator=g, dtype=torch.float64)
    c = torch.randn((L * D, Bn, Hc) if time_major else (Bn, L * D, Hc), generator=g, dtype=torch.float64)
    w = torch.empty(size, dtype=torch.float64).uniform_(-0.6, 0.6, generator=g)
    inputs = [t.requires_grad_() for t in (x, h, c if mode == "lstm" else None, w) if t is not None]
    attrs = dict(rnn_mode=mode, num_proj=num_proj, time_major=time_major, dropout=dropout, seed=5, seed2=9,
                 direction="bidirectional" if bidirectional else "unidirectional")
    lens = torch.tensor(lengths, dtype=torch.int32)

    def f(x, h, *rest):
        c, w = (rest[0], rest[1]) if mode == "lstm" else (None, rest[0])
        y, hn, cn = ft.cudnn_rnn(x, h, c, w, lens, **attrs)
        return (y, hn, cn) if mode == "lstm" else (y, hn)

    return f, inputs


@pytest.mark.parametrize("mode,num_proj,bidirectional,time_major,lengths,dropout", [
    ("lstm", 0, True, True, (3, 1), 0.0),
    ("lstm", 2, True, False, (2, 3), 0.0),  # projection, batch-major, variable lengths
    ("lstm", 1, False, True, (3, 3), 0.4),  # dropout with fixed seeds: the same masks in every call
    ("gru", 0, True, False, (1, 3), 0.0),
    ("rnn_tanh", 0, False, True, (2, 3), 0.0),
    ("rnn_relu", 0, True, True, (3, 2), 0.0),
], ids=["lstm-bi-var", "lstm-proj-batch_major", "lstm-dropout", "gru-bi-batch_major", "tanh", "relu-bi"])
def test_gradcheck(torch, mode, num_proj, bidirectional, time_major, lengths, dropout):
    f, inputs = gradcheck_case(mode, num_proj, bidirectional, time_major, lengths, dropout)
    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-7, rtol=1e-6)


def test_needs_input_grad_and_no_grad(torch):
    f, (x, h, c, w) = gradcheck_case("lstm", 0, False, True, (3, 2))
    x.requires_grad_(False)
    c.requires_grad_(False)
    y, hn, cn = f(x, h, c, w)
    y.sum().backward()
    assert x.grad is None and c.grad is None and h.grad is not None and w.grad is not None
    with torch.no_grad():
        y2, _, _ = f(x, h, c, w)
    assert torch.equal(y.detach(), y2) and not y2.requires_grad


def test_inplace_change_of_an_input_is_detected(torch):
    """The inputs go through save_for_backward: modifying one before backward is an error,
    not a silently wrong gradient."""
    _, (x, h, w) = gradcheck_case("gru", 0, False, True, (3, 2))
    x_used = x * 1.0
    y, _, output_c = ft.cudnn_rnn(x_used, h, None, w, rnn_mode="gru")
    assert output_c.shape == () and not output_c.requires_grad
    x_used.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_inference_mode_gradient_has_no_dropout(torch):
    """is_training=False: no dropout, and the gradient is the gradient of that function."""
    _, (x, h, c, w) = gradcheck_case("lstm", 0, False, True, (3, 2))
    kw = dict(seed=1, seed2=2, sequence_lengths=torch.tensor([3, 2]))
    y_eval, _, _ = ft.cudnn_rnn(x, h, c, w, dropout=0.5, is_training=False, **kw)
    y_plain, _, _ = ft.cudnn_rnn(x, h, c, w, dropout=0.0, is_training=True, **kw)
    assert torch.equal(y_eval, y_plain)
    g_eval = torch.autograd.grad(y_eval.sum(), [x, w])
    g_plain = torch.autograd.grad(y_plain.sum(), [x, w])
    for a, b in zip(g_eval, g_plain):
        assert torch.equal(a, b)


def test_outputs_share_memory_with_numpy(torch):
    """Zero copy in: the op reads the tensor's memory; zero copy out: from_numpy."""
    _, (x, h, c, w) = gradcheck_case("lstm", 0, False, True, (3, 2))
    with torch.no_grad():
        y, hn, cn = ft.cudnn_rnn(x, h, c, w, torch.tensor([3, 2]), is_training=False)
    ref = fusedrnn.cudnn_rnn_v3(x.detach().numpy(), h.detach().numpy(), c.detach().numpy(), w.detach().numpy(),
                                np.array([3, 2], np.int32), is_training=False)
    np.testing.assert_array_equal(y.numpy(), ref.output)
    np.testing.assert_array_equal(hn.numpy(), ref.output_h)


# ----------------------------------------------------------------------------------------------
# Weights: init, conversion, state_dict, pickling


@pytest.mark.parametrize("kind", list(KINDS))
def test_init_equals_torch_under_manual_seed(kind):
    cls, torch_cls, extra = KINDS[kind]
    extra = {k: v for k, v in extra.items() if k != "nonlinearity"}
    for dtype in (torch.float32, torch.float64):
        torch.manual_seed(11)
        ours = cls(I, H, 2, bidirectional=True, dtype=dtype, **extra)
        ref = reference_module(kind, 2, True, dtype, seed=11)
        assert ours.params.dtype == dtype
        assert ours.params.numel() == int(fusedrnn.cudnn_rnn_params_size(
            2, H, I, S=np.int64, rnn_mode=ours._rnn_mode, direction="bidirectional",
            num_proj=extra.get("proj_size", 0))[0])
        assert torch.equal(ours.params, ft.CudnnLSTM.from_torch(ref).params if cls is ft.CudnnLSTM
                           else cls.from_torch(ref).params)
        assert ours.params.abs().max() <= 1 / np.sqrt(H)


@pytest.mark.parametrize("kind", list(KINDS))
def test_to_torch_round_trip(kind):
    cls = KINDS[kind][0]
    ref = reference_module(kind, 2, True, torch.float64, batch_first=True)
    ours = cls.from_torch(ref)
    back = ours.to_torch()
    assert type(back) is type(ref) and back.batch_first and back.bidirectional
    for (name, a), (_, b) in zip(back.named_parameters(), ref.named_parameters()):
        assert torch.equal(a, b), name
    assert torch.equal(cls.from_torch(back).params, ours.params)


def test_opaque_buffer_equals_numpy_op(torch):
    """Loading a TF-style opaque buffer into params gives fusedrnn.cudnn_rnn_v3's results."""
    module = ft.CudnnLSTM(I, H, num_layers=2, bidirectional=True, dtype=torch.float64)
    buffer = np.random.default_rng(0).uniform(-0.5, 0.5, module.params.numel())
    with torch.no_grad():
        module.params.copy_(torch.from_numpy(buffer))
    x = np.random.default_rng(1).standard_normal((T, B, I))
    y, (h, c) = module(torch.from_numpy(x))
    zeros = np.zeros((4, B, H))
    ref = fusedrnn.cudnn_rnn_v3(x, zeros, zeros, buffer, np.full(B, T, np.int32), direction="bidirectional",
                                is_training=False)
    np.testing.assert_array_equal(y.detach().numpy(), ref.output)
    np.testing.assert_array_equal(c.detach().numpy(), ref.output_c)


def test_state_dict_round_trip(torch):
    a = ft.CudnnGRU(I, H, num_layers=2)
    b = ft.CudnnGRU(I, H, num_layers=2)
    assert list(a.state_dict()) == ["params"]
    assert not torch.equal(a.params, b.params)
    b.load_state_dict(a.state_dict())
    assert torch.equal(a.params, b.params)
    x = torch.randn(T, B, I)
    assert torch.equal(a(x)[0], b(x)[0])
    with pytest.raises(RuntimeError, match="size mismatch"):
        ft.CudnnGRU(I, H + 1).load_state_dict(a.state_dict())


def test_pickle_and_deepcopy(torch):
    module = ft.CudnnLSTM(I, H, num_layers=2, dropout=0.3, seed=4, proj_size=2)
    x = torch.randn(T, B, I)
    expected = module.eval()(x)[0]
    for clone in (pickle.loads(pickle.dumps(module)), copy.deepcopy(module)):
        assert type(clone) is ft.CudnnLSTM and clone.seed == 4 and clone.proj_size == 2
        assert clone.params.data_ptr() != module.params.data_ptr()
        assert torch.equal(clone(x)[0], expected)


def test_skip_input_mode(torch):
    module = ft.CudnnLSTM(H, H, input_mode="skip_input", dtype=torch.float64)
    linear = ft.CudnnLSTM(H, H, dtype=torch.float64)
    assert module.params.numel() == linear.params.numel() - 4 * H * H
    y, _ = module(torch.randn(T, B, H, dtype=torch.float64))
    assert y.shape == (T, B, H)
    with pytest.raises(ValueError, match="no skip_input"):
        module.to_torch()


# ----------------------------------------------------------------------------------------------
# Dropout, training


def test_dropout_seed_schemes(torch):
    x = torch.randn(T, B, I)
    a = ft.CudnnLSTM(I, H, num_layers=2, dropout=0.5, seed=3)
    b = copy.deepcopy(a)
    first, second = a(x)[0], a(x)[0]
    assert not torch.equal(first, second)  # a new mask per call
    assert torch.equal(b(x)[0], first) and torch.equal(b(x)[0], second)  # same per-module stream
    eval_out = a.eval()(x)[0]
    no_dropout = ft.CudnnLSTM.from_torch(a.to_torch()).eval()
    no_dropout.dropout = 0.0
    assert torch.equal(eval_out, no_dropout(x)[0])
    c = ft.CudnnLSTM(I, H, num_layers=2, dropout=0.5)  # seed=None: torch's generator
    torch.manual_seed(5)
    r1 = c(x)[0]
    torch.manual_seed(5)
    assert torch.equal(c(x)[0], r1)


def test_training_loss_falls(torch):
    torch.manual_seed(0)
    lstm = ft.CudnnLSTM(2, 8, num_layers=2, batch_first=True, dropout=0.1)
    head = torch.nn.Linear(8, 1)
    opt = torch.optim.Adam(list(lstm.parameters()) + list(head.parameters()), lr=0.03)
    x = torch.randn(16, 6, 2)
    target = x[:, :, :1].cumsum(1) * 0.3  # a running sum: needs the recurrence
    losses = []
    for _ in range(40):
        opt.zero_grad()
        loss = ((head(lstm(x)[0]) - target) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.3 * losses[0], losses


def check_torch_compile(backend):
    torch.manual_seed(0)
    gru = ft.CudnnGRU(3, 4, batch_first=True)
    x = torch.randn(2, 5, 3, requires_grad=True)

    def f(x):
        return (gru(torch.tanh(x))[0] ** 2).sum()

    torch._dynamo.reset()
    compiled = torch.compile(f, backend=backend)
    loss = compiled(x)
    (grad,) = torch.autograd.grad(loss, x)
    (expected_grad,) = torch.autograd.grad(f(x), x)
    torch.testing.assert_close(loss, f(x), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-6, atol=1e-6)


def test_torch_compile_runs_the_op_eagerly(torch):
    """torch.compile works: the fusedrnn call is a graph break (torch.compiler.disable) and runs
    eagerly; the code around it is traced (aot_eager: the autograd tracing, no C++ compile).
    fullgraph=True fails with a message that says why."""
    check_torch_compile("aot_eager")
    gru = ft.CudnnGRU(3, 4)
    with pytest.raises(Exception, match="runs NumPy code on the host: it is a graph break"):
        torch.compile(lambda x: gru(x)[0], fullgraph=True, backend="aot_eager")(torch.randn(5, 2, 3))


@pytest.mark.slow
def test_torch_compile_inductor(torch):
    """The default inductor backend (compiles C++ with gcc): ~8 s on 2 cores."""
    check_torch_compile("inductor")


# ----------------------------------------------------------------------------------------------
# Errors


def test_error_messages(torch):
    with pytest.raises(ValueError, match="bias must be True"):
        ft.CudnnLSTM(I, H, bias=False)
    with pytest.raises(ValueError, match="device must be cpu"):
        ft.CudnnGRU(I, H, device="meta")
    with pytest.raises(TypeError, match="torch.float32 or torch.float64, got torch.float16"):
        ft.CudnnGRU(I, H, dtype=torch.float16)
    with pytest.raises(ValueError, match="proj_size has to be smaller"):
        ft.CudnnLSTM(I, H, proj_size=H)
    with pytest.raises(ValueError, match="nonlinearity='tanh'"):
        ft.CudnnRNNTanh(I, H, nonlinearity="relu")
    module = ft.CudnnLSTM(I, H)
    with pytest.raises(RuntimeError, match="input_size. Expected 3, got 4"):
        module(torch.randn(T, B, 4))
    with pytest.raises(RuntimeError, match=r"Expected hidden size \(1, 3, 4\), got \[2, 3, 4\] for h_0"):
        module(torch.randn(T, B, I), (torch.zeros(2, B, H), torch.zeros(1, B, H)))
    with pytest.raises(TypeError, match=r"tuple \(h_0, c_0\)"):
        module(torch.randn(T, B, I), torch.zeros(1, B, H))
    with pytest.raises(TypeError, match="float32 or float64, got torch.int64"):
        module(torch.zeros(T, B, I, dtype=torch.int64))
    with pytest.raises(TypeError, match="must share one dtype"):
        module(torch.zeros(T, B, I, dtype=torch.float64))
    with pytest.raises(ValueError, match="must be a CPU tensor"):
        ft.cudnn_rnn(torch.zeros(T, B, I, device="meta"), torch.zeros(1, B, H), torch.zeros(1, B, H),
                     module.params)
    with pytest.raises(TypeError, match=r"needs a torch.nn.RNN\(nonlinearity='relu'\)"):
        ft.CudnnRNNRelu.from_torch(torch.nn.RNN(I, H))
    with pytest.raises(TypeError, match="needs a torch.nn.GRU"):
        ft.CudnnGRU.from_torch(torch.nn.LSTM(I, H))
    with pytest.raises(ValueError, match="needs bias=True"):
        ft.CudnnLSTM.from_torch(torch.nn.LSTM(I, H, bias=False))
    with pytest.raises(ValueError, match=r"sequence_lengths\[1\] = 0 is outside \[1, 5\]"):
        ft.cudnn_rnn(torch.zeros(T, B, I), torch.zeros(1, B, H), torch.zeros(1, B, H), module.params,
                     torch.tensor([1, 0, 2]))
