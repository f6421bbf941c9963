"""Peak memory of one training step.

Method (Linux): the step runs once to warm up, then ``5`` is written to ``/proc/self/clear_refs``
(resets the process's resident-set high-water mark ``VmHWM`` to the current ``VmRSS``), the step
runs again, and the growth is ``VmHWM - VmRSS before``: the extra resident memory the step needs
on top of what the process already holds.  Measured in a separate worker process started with
``MALLOC_MMAP_THRESHOLD_=131072`` and ``MALLOC_TRIM_THRESHOLD_=131072``, so that glibc returns
freed blocks over 128 KiB to the system instead of keeping them for reuse (with the defaults a
warm step re-uses cached memory and its growth reads far too low); timings are never taken in
that process.  fusedrnn's ``reserve_space`` (bytes of the forward's saved state) is reported beside
it.  Where ``clear_refs`` cannot be written, ``ru_maxrss`` growth is used instead (only growth past
the process's previous peak: a lower bound) and the method is recorded.
"""

from __future__ import annotations

import resource

CHILD_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"}


def _status_bytes(field: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise OSError(f"{field} not in /proc/self/status")


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def peak_growth(run) -> dict:
    """``{"peak_rss_growth_bytes", "method"}`` of one call of ``run`` (already warmed up) and
    ``"result"``: what it returned."""
    if _reset_peak():
        before = _status_bytes("VmRSS")
        result = run()
        return {"peak_rss_growth_bytes": max(0, _status_bytes("VmHWM") - before), "method": "clear_refs+VmHWM",
                "result": result}
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    result = run()
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"peak_rss_growth_bytes": max(0, after - before), "method": "ru_maxrss delta (lower bound)",
            "result": result}


def measure_problem(data, peers: dict) -> dict:
    """``{name: entry}`` for the training step of every peer that supports it."""
    entries = {}
    for name, peer in peers.items():
        reason = peer.unsupported(data.problem, "training")
        if reason:
            entries[name] = {"skipped": reason}
            continue
        try:
            run = peer.build(data, "training")
            run()
            peer.release_caches()  # memory a library keeps for reuse counts in the step's growth
            measured = peak_growth(run)
        except Exception as error:  # reported, not fatal
            entries[name] = {"error": f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"}
            continue
        result = measured.pop("result")
        if name == "fusedrnn":
            measured["reserve_space_bytes"] = peer.reserve_bytes(result)
        entries[name] = measured
        del result, run
    return entries
