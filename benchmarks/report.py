"""Reporting: the rows derived from the workers' samples, a Markdown report, JSON, a PNG chart.

Speed ratios follow the issues' convention: ``speed = peer time / fusedrnn time`` (median over
median; > 1 means fusedrnn is faster).  ``vs fastest`` compares with the fastest *other* peer that
computed the same problem and mode; ``vs torch`` with PyTorch.  GFLOP/s = the problem's FLOPs
(``benchmarks.problems``) / median time; ``% peak`` = fusedrnn's GFLOP/s / (threads x one-thread
large sgemm).
"""

from __future__ import annotations

import json
import math
import os

from . import peers as peer_registry

SCHEMA = "fusedrnn-benchmarks/1"


def peer_names(result: dict) -> list:
    """The run's libraries in the registry's order, fusedrnn first."""
    chosen = set(result["settings"]["peers"])
    return [name for name in peer_registry.NAMES if name in chosen or name == "fusedrnn"]


def geomean(values: list) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def build_rows(time_workers: list) -> list:
    """One row per (threads, problem, mode) from the time workers' results."""
    rows = []
    for worker in time_workers:
        peak = worker.get("peak", {}).get("peak_gflops")
        for record in worker["results"]:
            entries = record["entries"]
            medians = {name: e["median_s"] for name, e in entries.items() if "median_s" in e}
            ours = medians.get("fusedrnn")
            others = {name: t for name, t in medians.items() if name != "fusedrnn"}
            fastest = min(others, key=others.get) if others else None
            gflops = {name: record["flops"] / t / 1e9 for name, t in medians.items()}
            mismatches = {name: e["check"]["max_abs_diff"] for name, e in entries.items()
                          if e.get("check") and not e["check"]["ok"]}
            rows.append({
                "threads": worker["threads"], "problem": record["problem"], "mode": record["mode"],
                "flops": record["flops"], "median_s": medians, "gflops": gflops,
                "fusedrnn_iqr_s": [entries["fusedrnn"].get("q1_s"), entries["fusedrnn"].get("q3_s")]
                if ours else None,
                "pct_peak": 100.0 * gflops["fusedrnn"] / peak if ours and peak else None,
                "fastest_peer": fastest,
                "speed_vs_fastest": others[fastest] / ours if ours and fastest else None,
                "speed_vs_torch": others["torch"] / ours if ours and "torch" in others else None,
                "first_call_s": {name: e["first_call_s"] for name, e in entries.items() if "first_call_s" in e},
                "skipped": {name: e["skipped"] for name, e in entries.items() if "skipped" in e},
                "errors": {name: e["error"] for name, e in entries.items() if "error" in e},
                "check": "ok" if not mismatches else "MISMATCH " + ", ".join(
                    f"{name} {diff}" for name, diff in mismatches.items()),
                "checked": sorted(name for name, e in entries.items() if e.get("check")),
                "torch_dispatch": record.get("torch_dispatch"),
                "fusedrnn_dispatch": record.get("fusedrnn_dispatch"),
            })
    return rows


def _ms(seconds) -> str:
    return "—" if seconds is None else (f"{1e3 * seconds:.3g}" if seconds < 0.1 else f"{1e3 * seconds:.0f}")


def _x(value) -> str:
    return "—" if value is None else f"{value:.2f}x"


def _peer_cell(row: dict, name: str) -> str:
    if name in row["median_s"]:
        return _ms(row["median_s"][name])
    if name in row["errors"]:
        return "error"
    return "—"


def summary_lines(rows: list) -> list:
    """Geometric-mean speeds over the LSTM grid and over everything, per threads and mode."""
    lines = []
    for threads in sorted({r["threads"] for r in rows}):
        for mode in ("forward", "training"):
            subset = [r for r in rows if r["threads"] == threads and r["mode"] == mode]
            lstm = [r for r in subset if r["problem"].startswith("lstm-H") and "-P" not in r["problem"]
                    and not r["problem"].endswith(("varlen", "f64"))]
            parts = []
            for label, chosen in (("LSTM grid", lstm), ("all problems", subset)):
                torch = geomean([r["speed_vs_torch"] for r in chosen])
                fastest = geomean([r["speed_vs_fastest"] for r in chosen])
                if torch or fastest:
                    parts.append(f"{label}: vs torch {_x(torch)}, vs fastest peer {_x(fastest)}")
            if parts:
                lines.append(f"- {threads} thread(s), {mode}: geomean speed " + "; ".join(parts))
    return lines


def markdown(result: dict) -> str:
    """The whole report: machine line, one timing table per thread count, summary, memory and
    first-call tables, notes."""
    machine, rows = result["machine"], result["rows"]
    names = peer_names(result)
    columns = names[1:]
    out = [f"# fusedrnn benchmarks ({'quick' if result['settings']['quick'] else 'full'} run)", "",
           f"Machine: {machine['cpu']}, {machine['usable_cpus']} usable CPUs, flags {' '.join(machine['cpu_flags'])}; "
           f"load average at start {machine['loadavg'][0]:.2f}. Duration {result['duration_s']:.0f} s.",
           "Times are medians in ms; speed = peer time / fusedrnn time (> 1: fusedrnn faster); "
           "`—` = the peer does not compute this problem (see JSON `skipped`).", ""]
    for worker in result["workers"]:
        threads, peak = worker["threads"], worker.get("peak", {})
        subset = [r for r in rows if r["threads"] == threads]
        if not subset:
            continue
        out += [f"## {threads} thread(s)", "",
                f"Peak {peak.get('peak_gflops', float('nan')):.0f} GFLOP/s = {threads} x one-thread sgemm "
                f"({peak.get('sgemm_1thread_gflops', float('nan')):.0f}; measured {threads}-thread sgemm "
                f"{peak.get(f'sgemm_{threads}threads_gflops', float('nan')):.0f}).", "",
                "| problem | mode | fusedrnn ms [IQR] | GFLOP/s | % peak | " + " | ".join(columns)
                + " | torch path | fastest peer | vs fastest | vs torch | check |",
                "|---|---|---:|---:|---:|" + "---:|" * len(columns) + "---|---|---:|---:|---|"]
        for r in subset:
            iqr = r["fusedrnn_iqr_s"]
            ours = (f"{_ms(r['median_s']['fusedrnn'])} [{_ms(iqr[0])}–{_ms(iqr[1])}]"
                    if "fusedrnn" in r["median_s"] else ("error" if "fusedrnn" in r["errors"] else "—"))
            gflops = r["gflops"].get("fusedrnn")
            out.append(" | ".join([
                f"| {r['problem']}", r["mode"], ours, "—" if gflops is None else f"{gflops:.1f}",
                "—" if r["pct_peak"] is None else f"{r['pct_peak']:.0f}",
                *[_peer_cell(r, name) for name in columns], r["torch_dispatch"] or "—",
                r["fastest_peer"] or "—", _x(r["speed_vs_fastest"]), _x(r["speed_vs_torch"]), r["check"]]) + " |")
        out.append("")
    out += ["## Summary", ""] + (summary_lines(rows) or ["- no ratios"]) + [""]
    if result.get("memory"):
        trained = [n for n in names if n != "onnxruntime"]
        out += ["## Peak memory of one training step (MiB)", "",
                "Peak RSS growth of one warm training step (`benchmarks/memory.py`); fusedrnn's "
                "`reserve_space` beside it.", "",
                "| problem | fusedrnn reserve_space | " + " | ".join(trained) + " |",
                "|---|---:|" + "---:|" * len(trained)]
        for record in result["memory"]["results"]:
            e = record["entries"]
            cell = lambda n: (f"{e[n]['peak_rss_growth_bytes'] / 2**20:.1f}" if "peak_rss_growth_bytes" in e.get(n, {})  # noqa: E731
                              else ("error" if "error" in e.get(n, {}) else "—"))
            reserve = e.get("fusedrnn", {}).get("reserve_space_bytes")
            out.append(f"| {record['problem']} | {'—' if reserve is None else f'{reserve / 2**20:.1f}'} | "
                       + " | ".join(cell(n) for n in trained) + " |")
        out.append("")
    out += ["## First call (ms; compilation, pre-packing, lazy set-up; excluded from the medians)", "",
            "| threads | problem | mode | " + " | ".join(names) + " |",
            "|---:|---|---|" + "---:|" * len(names)]
    for r in rows:
        out.append(f"| {r['threads']} | {r['problem']} | {r['mode']} | "
                   + " | ".join(_ms(r["first_call_s"].get(n)) for n in names) + " |")
    out += ["", "## Notes", ""] + [f"- {note}" for note in result["notes"]]
    return "\n".join(out) + "\n"


def chart(result: dict, path: str) -> None:
    """GFLOP/s per problem per library (log scale), one panel per thread count and mode, the
    machine peak as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    rows = result["rows"]
    panels = [(w["threads"], mode, w.get("peak", {}).get("peak_gflops")) for w in result["workers"]
              for mode in ("forward", "training")
              if any(r["threads"] == w["threads"] and r["mode"] == mode for r in rows)]
    problems = list(dict.fromkeys(r["problem"] for r in rows))
    names = peer_names(result)
    width = 0.8 / len(names)
    fig, axes = plt.subplots(max(1, len(panels)), 1, figsize=(max(8.0, 0.42 * len(problems) + 2), 3.6 * max(1, len(panels))),
                             squeeze=False)
    colors = plt.get_cmap("tab10")
    for axis, (threads, mode, peak) in zip(axes[:, 0], panels):
        subset = {r["problem"]: r for r in rows if r["threads"] == threads and r["mode"] == mode}
        for k, name in enumerate(names):
            xs = [i + (k - (len(names) - 1) / 2) * width for i, p in enumerate(problems)
                  if name in subset.get(p, {}).get("gflops", {})]
            ys = [subset[p]["gflops"][name] for p in problems if name in subset.get(p, {}).get("gflops", {})]
            if ys:
                axis.bar(xs, ys, width, label=name, color=colors(k))
        if peak:
            axis.axhline(peak, color="black", linestyle="--", linewidth=1,
                         label=f"peak {peak:.0f} ({threads} x 1-thread sgemm)")
        axis.set_yscale("log")
        axis.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        axis.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        axis.set_ylabel("GFLOP/s (log)")
        axis.set_title(f"{mode}, {threads} thread(s)", fontsize=10, pad=16)
        axis.set_xticks(range(len(problems)))
        axis.set_xticklabels(problems, rotation=60, ha="right", fontsize=7)
        axis.legend(fontsize=7, ncol=len(names) + 1, loc="lower left", bbox_to_anchor=(0, 0.99), frameon=False)
        axis.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def write(result: dict, out_dir: str) -> dict:
    """Write ``benchmark.json``, ``benchmark.md`` and ``benchmark.png`` into ``out_dir``; return
    their paths."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {kind: os.path.join(out_dir, f"benchmark.{kind}") for kind in ("json", "md", "png")}
    with open(paths["json"], "w") as handle:
        json.dump(result, handle, indent=1, default=str)
    with open(paths["md"], "w") as handle:
        handle.write(markdown(result))
    chart(result, paths["png"])
    return paths
