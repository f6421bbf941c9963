"""The timing harness: every peer of one problem and mode built, warmed up, then timed in
interleaved rounds.

Per peer: ``setup_s`` (building its tensors / module / session, untimed in the rounds),
``first_call_s`` (the first call: compilation, weight pre-packing, lazy initialisation — reported,
never mixed into the samples), one more untimed warm-up call unless the first call took longer
than ``WARM_UP_S`` (a call that long has warmed the caches itself), then the rounds.  In round ``r`` every peer runs once, in an order rotated by
``r`` (so no peer always follows the same neighbour), timed with ``time.perf_counter``.  Rounds
stop after ``repeat``, or once at least ``min_rounds`` are done and the rounds took longer than
``budget_s``; a peer whose first call took longer than ``slow_s`` takes at most ``min_rounds``
samples.  Statistics: median, quartiles, min and max of the samples.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

CHECK_TOLERANCE = {"float32": 1e-4, "float64": 1e-9}
WARM_UP_S = 0.3
# Before each timed call (not counted) the process must be quiet: the thread pools of the peer
# that ran just before may still spin (libgomp's, PyTorch's, for ~12 ms of a core after every
# call here; Eigen's, fusedrnn's team for a few ms), and on a 2-core machine a call timed against
# a spinning thread measures that thread.  settle() sleeps SETTLE_S, then waits in windows of
# QUIET_WINDOW_S until the process used less than QUIET_FRACTION of a core during one, at most
# SETTLE_MAX_S.  Nothing is changed in any library's own spinning policy.
SETTLE_S = 0.002
QUIET_WINDOW_S = 0.001
QUIET_FRACTION = 0.3
SETTLE_MAX_S = 0.05


def settle() -> float:
    """Wait until no thread of this process is busy (see above); returns the seconds waited."""
    begin = time.perf_counter()
    time.sleep(SETTLE_S)
    while time.perf_counter() - begin < SETTLE_MAX_S:
        cpu, wall = time.process_time(), time.perf_counter()
        time.sleep(QUIET_WINDOW_S)
        if time.process_time() - cpu < QUIET_FRACTION * (time.perf_counter() - wall):
            break
    return time.perf_counter() - begin


def summary(samples: list) -> dict:
    """Median, quartiles (inclusive method), min and max of a list of seconds."""
    values = sorted(samples)
    if len(values) >= 2:
        q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    else:
        q1 = q3 = values[0]
    return {"median_s": statistics.median(values), "q1_s": q1, "q3_s": q3, "min_s": values[0],
            "max_s": values[-1], "n": len(values)}


def check(reference: np.ndarray, output: np.ndarray, dtype: str) -> dict:
    """Forward-output agreement with fusedrnn: ``max|a - b| <= tol * max(1, max|a|)``."""
    output = np.asarray(output)
    if output.shape != reference.shape:
        return {"ok": False, "max_abs_diff": None, "note": f"shape {output.shape} vs {reference.shape}"}
    diff = float(np.max(np.abs(output.astype(np.float64) - reference))) if reference.size else 0.0
    bound = CHECK_TOLERANCE[dtype] * max(1.0, float(np.max(np.abs(reference))) if reference.size else 1.0)
    return {"ok": bool(diff <= bound), "max_abs_diff": diff}


def time_problem(data, mode: str, peers: dict, repeat: int, min_rounds: int, budget_s: float,
                 slow_s: float) -> dict:
    """Time ``mode`` of ``data.problem`` for every peer in ``peers`` (``{name: Peer}``, fusedrnn
    first).  Returns ``{name: entry}``; an entry holds ``skipped`` (the peer's reason) or
    ``error`` (what its build or first call raised), or the timings and ``samples_s``; in forward
    mode each peer's output is checked against fusedrnn's (``check``)."""
    problem = data.problem
    entries, runs, reference = {}, {}, None
    for name, peer in peers.items():
        reason = peer.unsupported(problem, mode)
        if reason:
            entries[name] = {"skipped": reason}
            continue
        try:
            start = time.perf_counter()
            run = peer.build(data, mode)
            built = time.perf_counter()
            result = run()
            done = time.perf_counter()
            entry = {"setup_s": built - start, "first_call_s": done - built, "samples_s": []}
            if mode == "forward":
                output = np.asarray(peer.output(result), dtype=np.float64)
                if name == "fusedrnn":
                    reference = output
                elif reference is not None:
                    entry["check"] = check(reference, output, problem.dtype)
            del result
            if entry["first_call_s"] < WARM_UP_S:
                run()
        except Exception as error:  # a peer that cannot run this problem is reported, not fatal
            entries[name] = {"error": f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"}
            continue
        entries[name], runs[name] = entry, run

    names = list(runs)
    rounds_start = time.perf_counter()
    for round_index in range(repeat):
        shift = round_index % max(1, len(names))
        for name in names[shift:] + names[:shift]:
            entry = entries[name]
            if entry["first_call_s"] >= slow_s and len(entry["samples_s"]) >= min_rounds:
                continue
            entry.setdefault("settle_s", []).append(settle())
            start = time.perf_counter()
            runs[name]()
            entry["samples_s"].append(time.perf_counter() - start)
        if round_index + 1 >= min_rounds and time.perf_counter() - rounds_start > budget_s:
            break
    for name in names:
        entries[name].update(summary(entries[name]["samples_s"]))
    return entries
