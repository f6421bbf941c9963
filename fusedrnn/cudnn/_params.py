"""The CudnnRNN parameter ops: ``cudnn_rnn_params_size``, ``cudnn_rnn_params_to_canonical``,
``cudnn_rnn_params_to_canonical_v2``, ``cudnn_rnn_canonical_to_params``,
``cudnn_rnn_canonical_to_params_v2``.

They check the attributes and sizes; the opaque layout itself (sizes, offsets,
canonical <-> opaque) is :mod:`fusedrnn.layout`.
"""

from __future__ import annotations

import numpy as np

from .. import layout, resources
from ..layout import RNNConfig
from ..settings import public_op
from ..validate import float_arrays, int_scalar, shape_str
from ._resolve import _Attrs, _attrs, _make_config
from ._results import CanonicalParams


# --------------------------------------------------------------------------------------
# Parameter ops


def _param_config(attrs: _Attrs, num_layers, num_units, input_size) -> RNNConfig:
    num_layers = int_scalar(num_layers, "num_layers")
    num_units = int_scalar(num_units, "num_units")
    input_size = int_scalar(input_size, "input_size")
    if num_layers < 1:
        raise ValueError(f"num_layers must be >= 1, got {num_layers}")
    if num_units < 1:
        raise ValueError(f"num_units must be >= 1, got {num_units}")
    if input_size < 1:
        raise ValueError(f"input_size must be >= 1, got {input_size}")
    return _make_config(attrs, num_layers, num_units, input_size)


def _dtype_attr(value, name: str, allowed: tuple) -> np.dtype:
    value = getattr(value, "as_numpy_dtype", value)  # accepts tf.DType too
    if value is None:  # np.dtype(None) would silently mean float64
        raise TypeError(f"{name} must be a dtype, one of ({', '.join(allowed)}), got None")
    try:
        dtype = np.dtype(value)
    except TypeError:
        raise TypeError(f"{name} must be a dtype, one of ({', '.join(allowed)}), got {value!r}") from None
    if dtype.name not in allowed:
        raise TypeError(f"{name} must be one of ({', '.join(allowed)}), got {dtype.name}")
    return dtype


@public_op
def cudnn_rnn_params_size(num_layers, num_units, input_size, *, T=np.float32, S=np.int32, rnn_mode="lstm",
                          input_mode="linear_input", direction="unidirectional", dropout=0.0, seed=0,
                          seed2=0, num_proj=0) -> np.ndarray:
    """TF ``CudnnRNNParamsSize``: the element count of ``params``, as a ``[1]`` array of dtype S.

    ``num_units`` is the cell size H here; the count follows spec §6.4.
    """
    attrs = _attrs(rnn_mode, input_mode, direction, dropout, seed, seed2, num_proj)
    _dtype_attr(T, "T", ("float16", "float32", "float64"))
    s = _dtype_attr(S, "S", ("int32", "int64"))
    config = _param_config(attrs, num_layers, num_units, input_size)
    if config.params_size > np.iinfo(s).max:
        raise ValueError(f"params size {config.params_size} does not fit in S={s.name}")
    return np.array([config.params_size], dtype=s)


def _to_canonical(attrs, num_layers, num_units, input_size, params, n_weights, n_biases,
                  count_names=("num_params", "num_params")) -> CanonicalParams:
    config = _param_config(attrs, num_layers, num_units, input_size)
    arrays, dtype = float_arrays({"params": params})
    params = arrays["params"]
    if params.ndim != 1:
        raise ValueError(f"params must be a 1-D vector, got shape {shape_str(params.shape)}")
    if n_weights != config.num_weights:
        raise ValueError(f"C Number of params mismatch. Expected {n_weights}, got {config.num_weights} "
                         f"({count_names[0]}={n_weights}, but {config.describe()} has {config.num_weights} "
                         "weights)")
    if n_biases != config.num_biases:
        raise ValueError(f"A Number of params mismatch. Expected {n_biases}, got {config.num_biases} "
                         f"({count_names[1]}={n_biases}, but {config.describe()} has {config.num_biases} "
                         "biases)")
    if params.shape[0] != config.params_size:
        raise ValueError(f"params size mismatch: expected {config.params_size}, got {params.shape[0]} "
                         f"for {config.describe()}")
    resources.ensure_fits(resources.nbytes_of([params.shape], dtype.itemsize) + 128 * (n_weights + n_biases),
                          "CudnnRNNParamsToCanonical", f"params shape {shape_str(params.shape)} with "
                          f"{config.describe()}")
    return CanonicalParams(*layout.params_to_canonical(params, config))


@public_op
def cudnn_rnn_params_to_canonical(num_layers, num_units, input_size, params, *, num_params,
                                  rnn_mode="lstm", input_mode="linear_input", direction="unidirectional",
                                  dropout=0.0, seed=0, seed2=0) -> CanonicalParams:
    """TF ``CudnnRNNParamsToCanonical``: split ``params`` into ``weights`` (2-D ``[rows, cols]``)
    and ``biases`` (``[H]``), each a list of ``num_params`` arrays in canonical order."""
    attrs = _attrs(rnn_mode, input_mode, direction, dropout, seed, seed2)
    num_params = int_scalar(num_params, "num_params", minimum=1)
    return _to_canonical(attrs, num_layers, num_units, input_size, params, num_params, num_params)


@public_op
def cudnn_rnn_params_to_canonical_v2(num_layers, num_units, input_size, params, *, num_params_weights,
                                     num_params_biases, rnn_mode="lstm", input_mode="linear_input",
                                     direction="unidirectional", dropout=0.0, seed=0, seed2=0,
                                     num_proj=0) -> CanonicalParams:
    """TF ``CudnnRNNParamsToCanonicalV2``: as V1, with a projection matrix ``[P, H]`` after
    each pseudo-layer's recurrent matrices when ``num_proj > 0`` (works with num_proj=0 too)."""
    attrs = _attrs(rnn_mode, input_mode, direction, dropout, seed, seed2, num_proj)
    n_w = int_scalar(num_params_weights, "num_params_weights", minimum=1)
    n_b = int_scalar(num_params_biases, "num_params_biases", minimum=1)
    return _to_canonical(attrs, num_layers, num_units, input_size, params, n_w, n_b,
                         ("num_params_weights", "num_params_biases"))


def _from_canonical(attrs, num_layers, num_units, input_size, weights, biases) -> np.ndarray:
    config = _param_config(attrs, num_layers, num_units, input_size)
    for name, value in (("weights", weights), ("biases", biases)):
        if isinstance(value, np.ndarray) or not isinstance(value, (list, tuple)):
            raise TypeError(f"{name} must be a list of arrays, got {type(value).__name__}")
    named = {f"weights[{k}]": w for k, w in enumerate(weights)}
    named.update({f"biases[{k}]": b for k, b in enumerate(biases)})
    arrays, dtype = float_arrays(named)
    for name, given, expected in (("weights", len(weights), config.num_weights),
                                  ("biases", len(biases), config.num_biases)):
        if given != expected:
            raise ValueError(f"Number of params mismatch. Expected {expected} {name}, got {given} "
                             f"for {config.describe()}")
    regions = config.regions
    for kind, region_list in (("weights", regions.weights), ("biases", regions.biases)):
        for k, region in enumerate(region_list):
            array = arrays[f"{kind}[{k}]"]
            if array.size != region.size:
                note = " (absent skip_input matrix: must be empty)" if region.size == 0 else ""
                raise ValueError(f"Params size mismatch. Expected {region.size}, got {array.size} for "
                                 f"{kind}[{k}] of shape {shape_str(region.shape)}{note}")
    if dtype is None:
        dtype = np.dtype(np.float32)
    resources.ensure_fits(resources.nbytes_of([(config.params_size,)], dtype.itemsize),
                          "CudnnRNNCanonicalToParams", f"params shape [{config.params_size}] with "
                          f"{config.describe()}")
    return layout.canonical_to_params([arrays[f"weights[{k}]"] for k in range(len(weights))],
                                      [arrays[f"biases[{k}]"] for k in range(len(biases))], config, dtype)


@public_op
def cudnn_rnn_canonical_to_params(num_layers, num_units, input_size, weights, biases, *, rnn_mode="lstm",
                                  input_mode="linear_input", direction="unidirectional", dropout=0.0,
                                  seed=0, seed2=0) -> np.ndarray:
    """TF ``CudnnRNNCanonicalToParams``: pack canonical ``weights``/``biases`` lists into ``params``.

    Each tensor needs the region's element count; it is copied in C order (like TF,
    its shape is not otherwise checked)."""
    attrs = _attrs(rnn_mode, input_mode, direction, dropout, seed, seed2)
    return _from_canonical(attrs, num_layers, num_units, input_size, weights, biases)


@public_op
def cudnn_rnn_canonical_to_params_v2(num_layers, num_units, input_size, weights, biases, *,
                                     rnn_mode="lstm", input_mode="linear_input", direction="unidirectional",
                                     dropout=0.0, seed=0, seed2=0, num_proj=0) -> np.ndarray:
    """TF ``CudnnRNNCanonicalToParamsV2``: as V1, with the ``[P, H]`` projection matrices."""
    attrs = _attrs(rnn_mode, input_mode, direction, dropout, seed, seed2, num_proj)
    return _from_canonical(attrs, num_layers, num_units, input_size, weights, biases)
