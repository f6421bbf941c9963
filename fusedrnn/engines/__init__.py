"""Sequence engines: the NumPy reference (lstm, gru, simple_rnn, gru_block) and the native
backend (native).  :func:`active` returns the engine functions of the selected backend."""

from __future__ import annotations

from types import SimpleNamespace

from .. import settings
from . import gru, lstm, simple_rnn
from .common import take_rows

NUMPY = SimpleNamespace(
    lstm_forward=lstm.lstm_forward, lstm_backward=lstm.lstm_backward,
    gru_forward=gru.gru_forward, gru_backward=gru.gru_backward,
    rnn_forward=simple_rnn.rnn_forward, rnn_backward=simple_rnn.rnn_backward,
    take_rows=take_rows)


def active():
    """``lstm_forward`` ... ``rnn_backward`` and ``take_rows`` of the backend :func:`fusedrnn.settings.get_backend`
    selects now (the native module only when it is the one selected)."""
    if settings.get_backend() == "native":
        global _native_engine
        if _native_engine is None:
            from . import native as _native_engine
        return _native_engine
    return NUMPY


_native_engine = None  # engines.native, imported when first selected
