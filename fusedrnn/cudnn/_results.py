"""The result NamedTuples of the CudnnRNN ops (fields are TensorFlow's output names).

Re-exported by :mod:`fusedrnn.cudnn` and :mod:`fusedrnn`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class CudnnRNNResult(NamedTuple):
    output: np.ndarray
    output_h: np.ndarray
    output_c: np.ndarray
    reserve_space: np.ndarray


class CudnnRNNV2Result(NamedTuple):
    output: np.ndarray
    output_h: np.ndarray
    output_c: np.ndarray
    reserve_space: np.ndarray
    host_reserved: np.ndarray


CudnnRNNV3Result = CudnnRNNV2Result


class CudnnRNNBackpropResult(NamedTuple):
    input_backprop: np.ndarray
    input_h_backprop: np.ndarray
    input_c_backprop: np.ndarray
    params_backprop: np.ndarray


class CanonicalParams(NamedTuple):
    weights: list
    biases: list
