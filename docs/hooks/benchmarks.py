"""MkDocs hook: the benchmark tables, rendered from the runner's committed ``--json`` output.

A page line ``<!-- benchmarks: GROUP -->`` is replaced by the tables of
``docs/benchmarks/GROUP.json`` (written by ``python -m benchmarks.run ... --json``) and a line
saying when and on what machine they were measured. A missing or unreadable file fails the
build (:class:`MissingBenchmarks`): a page must never show an empty table as if it were a
result. The one exception is ``gpu`` (``benchmarks/gpu_check.py --json``, measured only when a
GPU machine is lent), which renders a note instead.

The rendering needs nothing but the JSON (no benchmark dependency is imported), so the site
builds anywhere the runner's output is committed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[1] / "benchmarks"
"""Where the committed JSON files live (``docs/benchmarks/``)."""

PLACEHOLDER = re.compile(r"^<!-- benchmarks: ([A-Za-z0-9_-]+) -->[ \t]*$", re.MULTILINE)
OPTIONAL = {"gpu": "*Not measured in this build: no GPU machine was available for it.*"}
"""Groups whose JSON may be missing, and what the page says then."""


class MissingBenchmarks(FileNotFoundError):
    """A page asks for a group whose JSON file is not committed (or cannot be read)."""


# ------------------------------------------------------------------------------ formatting


def _seconds(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.4f}" if value >= 0.01 else f"{value:.6f}"


def _ratio(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.2f}" if value >= 0.1 else f"{value:.3f}"


def _spread(peer: list[float], tf: list[float]) -> str:
    """The lowest and highest ratio of the paired runs (peer's i-th ÷ tensorfile's i-th: the
    runs alternate, so each pair shared the host's minute), as ``"(lo–hi)"``; empty when
    there are fewer than two pairs. A headline quotes this range, not one run's ratio."""
    ratios = sorted(p / t for p, t in zip(peer, tf, strict=False) if t > 0)
    if len(ratios) < 2:
        return ""
    return f" ({ratios[0]:.2f}–{ratios[-1]:.2f})"


def _mib(kib: float) -> str:
    return f"{kib / 1024:,.0f}"


def _table(head: list[str], align: str, rows: list[list[str]]) -> list[str]:
    """A Markdown table; ``align`` has one letter per column: l(eft) or r(ight)."""
    marks = {"l": "---", "r": "---:", "c": ":---:"}
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(marks[a] for a in align) + "|"]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return lines


def _label(row: dict[str, Any]) -> str:
    return f"`{row['name']}`: {row['description']}"


# ------------------------------------------------------------------------------ sections


def _results(rows: list[dict[str, Any]], _payload: dict[str, Any]) -> list[str]:
    """In-process rows: peer and tensorfile alternated in one interpreter."""
    out = []
    for r in rows:
        if r.get("target") is None:
            target = met = "n/a"
        else:
            stated = r.get("target_in_issue", True)
            target = f"≥ {r['target']:.1f}"
            met = "yes" if r["met"] else "**no**"
            if not stated:
                target, met = f"({target})", f"({met})"
        out.append(
            [
                _label(r),
                _seconds(r.get("reference_median_s")),
                _seconds(r.get("tensorfile_median_s")),
                _ratio(r.get("ratio")),
                target,
                met,
                f"{r['tensorfile_gbps']:,.2f}",
            ]
        )
    head = ["benchmark", "peer (s)", "tensorfile (s)", "ratio (peer / tf)", "target", "met"]
    return _table([*head, "tensorfile GB/s"], "lrrrrcr", out)


def _process(
    rows: list[dict[str, Any]], peer: str = "reference", tf: str = "tensorfile", short: str = ""
) -> list[str]:
    short = short or "ref/tf"
    out = []
    for r in rows:
        ref, mine = r["reference"]["medians"], r["tensorfile"]["medians"]
        runs = r["reference"].get("runs", []), r["tensorfile"].get("runs", [])

        def spread(key: str, runs: tuple[list[dict[str, Any]], ...] = runs) -> str:
            return _spread([x[key] for x in runs[0]], [x[key] for x in runs[1]])

        out.append(
            [
                _label(r),
                f"{ref['wall_s']:.3f}",
                f"{mine['wall_s']:.3f}",
                f"{r['wall_ratio']:.2f}{spread('wall_s')}",
                f"{ref['load_s']:.3f}",
                f"{mine['load_s']:.3f}",
                f"{r['load_ratio']:.2f}{spread('load_s')}",
                _mib(ref["peak_rss_kib"]),
                _mib(mine["peak_rss_kib"]),
                f"{r['rss_ratio_tf_over_ref']:.2f}",
            ]
        )
    flipped = "/".join(reversed(short.split("/")))
    head = [
        "benchmark",
        f"{peer} wall (s)",
        f"{tf} wall (s)",
        f"wall ratio ({short}): median (runs)",
        f"{peer} load (s)",
        f"{tf} load (s)",
        f"load ratio ({short}): median (runs)",
        f"{peer} peak RSS (MiB)",
        f"{tf} peak RSS (MiB)",
        f"RSS ({flipped})",
    ]
    return _table(head, "lrrrrrrrrr", out)


def _process_results(rows: list[dict[str, Any]], _payload: dict[str, Any]) -> list[str]:
    """Fresh-process rows: one new interpreter per load."""
    return _process(rows)


def _cache_results(rows: list[dict[str, Any]], _payload: dict[str, Any]) -> list[str]:
    """The chunk cache against the peer each row names."""
    return _process(rows, "peer", "cache", "peer/cache")


REMOTE_LOADERS = {
    "tf": "tensorfile",
    "urllib": "urllib GET + safetensors.torch.load",
    "boto3": "boto3 get_object + safetensors.torch.load",
    "s3fs": "s3fs cat_file + safetensors.torch.load",
    "runai": "Run:ai streamer",
}


def _pickle_results(rows: list[dict[str, Any]], _payload: dict[str, Any]) -> list[str]:
    """tensorfile's own pickle reader against ``torch.load(weights_only=True)``."""
    return _process(rows, "torch.load", "tensorfile", "torch/tf")


def _remote_load_results(rows: list[dict[str, Any]], _payload: dict[str, Any]) -> list[str]:
    """Remote loads: one line per loader, the ratio on tensorfile's line."""
    out = []
    for r in rows:
        for name, lo in r["loaders"].items():
            ratio = ""
            if name == "tf":
                met = "met" if r["met"] else "**not met**"
                ratio = (
                    f"**{r['load_ratio_best_peer_over_tf']:.2f}** vs {r['best_peer']}"
                    f"; target ≥ {r['target']}: {met}"
                )
            out.append(
                [
                    _label(r) if name == next(iter(r["loaders"])) else "",
                    f"**{REMOTE_LOADERS[name]}**"
                    if name == "tf"
                    else REMOTE_LOADERS.get(name, name),
                    f"{lo['median_wall_s']:.2f}",
                    f"{lo['median_load_s']:.2f}",
                    f"{r['bytes'] / lo['median_load_s'] / 1e9:.2f}",
                    f"{lo['median_peak_rss_mib']:,.0f}",
                    f"{lo['added_rss_over_tensors']:.2f}",
                    ratio,
                ]
            )
    head = ["benchmark", "loader", "wall (s)", "load (s)", "GB/s", "peak RSS (MiB)"]
    return _table([*head, "added RSS / tensors", "load ratio (best peer / tf)"], "llrrrrrl", out)


def _cold_results(rows: list[dict[str, Any]], _payload: dict[str, Any]) -> list[str]:
    """Cold and warm page cache, every peer: one line per library, floors, the ratios."""
    out = []
    for r in rows:
        libs = {k: v for k, v in r.items() if isinstance(v, dict) and "medians" in v}
        first = True
        for lib, data in libs.items():
            m = data["medians"]
            backends = sorted({run["backend"] for run in data["runs"] if run.get("backend")})
            shown = f"**{lib}**" if lib.startswith("tensorfile") else lib
            if backends:
                shown += f" (backend: {', '.join(backends)})"
            out.append(
                [
                    _label(r) if first else "",
                    shown,
                    f"{m['wall_s']:.2f}",
                    f"{m['load_s']:.2f}",
                    _mib(m["peak_rss_kib"]),
                ]
            )
            first = False
        for key, floor in r.get("floors_s", {}).items():
            out.append(["", f"*floor: {key} alone*", "", f"{floor['median']:.2f}", ""])
        out.append(
            [
                "",
                "best peer / tensorfile",
                f"**{r['wall_ratio_best_peer_over_tf']:.2f}** ({r['best_peer_wall']})",
                f"**{r['load_ratio_best_peer_over_tf']:.2f}** ({r['best_peer_load']})",
                "",
            ]
        )
    return _table(["benchmark", "library", "wall (s)", "load (s)", "peak RSS (MiB)"], "llrrr", out)


def _feed_results(rows: list[dict[str, Any]], _payload: dict[str, Any]) -> list[str]:
    """Training feeds: one line per loader, the ratio on tensorfile's line."""
    out = []
    notes = []
    for r in rows:
        first = True
        for name, lo in r["loaders"].items():
            ratio = ""
            if name == "tf":
                peer = r["loaders"].get(r["best_peer"], {})
                best = peer.get("what", r["best_peer"])
                runs = _spread(peer.get("times_s", []), lo.get("times_s", []))
                ratio = f"**{r['ratio_best_peer_over_tf']:.2f}**{runs} vs {best}"
                if r.get("target") is not None:
                    met = "met" if r["met"] else "**not met**"
                    ratio += f"; target ≥ {r['target']}: {met}"
            rates = ["n/a", "n/a"] if not r.get("rates", True) else [
                f"{lo['samples_per_s']:,.0f}",
                f"{lo['gbps']:.2f}",
            ]  # fmt: skip
            what = f"*{lo['what']}*" if name.startswith("floor") else lo["what"]
            out.append([_label(r) if first else "", what, f"{lo['median_s']:.3f}", *rates, ratio])
            first = False
        notes += [f"- `{r['name']}`: {note}" for note in r.get("notes", [])]
    head = ["benchmark", "loader", "median (s)", "samples/s", "GB/s"]
    lines = _table([*head, "ratio (best peer / tf): median (runs)"], "llrrrl", out)
    return lines + (["", *notes] if notes else [])


def _shuffle_quality(tables: list[dict[str, Any]], _payload: dict[str, Any]) -> list[str]:
    """How well each order mixes (not a speed row)."""
    lines: list[str] = []
    for t in tables:
        out = [
            [
                name,
                f"{r['neighbour distance']:.4f}",
                f"{r['same-shard neighbours']:.4f}",
                f"{r['shards per batch']:.1f}",
                f"{r['displacement']:.4f}",
                f"{r['ms']:.1f}",
            ]
            for name, r in t["rows"].items()
        ]
        if lines:
            lines.append("")
        lines.append(f"{t['samples']:,} samples in shards of {t['shard']:,}:")
        lines.append("")
        lines += _table(
            [
                "order",
                "neighbour distance (÷ N)",
                "same-shard neighbours",
                "shards per batch",
                "displacement (÷ N)",
                "ms",
            ],
            "lrrrrr",
            out,
        )
    return lines


DCP_NAMES = {
    "tf": "tensorfile",
    "tf_nosync": "tensorfile, no fsync",
    "tf_s3": "tensorfile",
    "hf": "torch HF",
    "fs": "DCP FileSystem",
    "fs_nosync": "DCP FileSystem, no fsync",
    "s3tc": "s3torchconnector",
}


def _dcp_results(rows: list[dict[str, Any]], _payload: dict[str, Any]) -> list[str]:
    """Distributed checkpoints: one line per writer or reader, then one per compared pair."""
    out = []
    for r in rows:
        first = True
        for key, side in r["sides"].items():
            each = side.get("s3_received_per_rank", side.get("rchar_per_rank"))
            each_cell = " / ".join(f"{b / 2**20:,.0f}" for b in each) if each else ""
            if side.get("requests_per_rank"):
                reads = " / ".join(f"{n:,}" for n in side["requests_per_rank"])
                each_cell += f" in {reads} reads"
            fetched = side.get("fetched_over_checkpoint")
            fetched_cell = "" if fetched is None else f"{fetched:.2f}"
            if fetched is not None and key.startswith("tf"):
                met = "met" if fetched <= r["bytes_target"] else "**not met**"
                fetched_cell += f" (target ≤ {r['bytes_target']}: {met})"
            what = f"**{side['what']}**" if key.startswith("tf") else side["what"]
            out.append(
                [
                    _label(r) if first else "",
                    what,
                    f"{side['median_s']:.2f}",
                    f"{side['gbps']:.2f}",
                    each_cell,
                    fetched_cell,
                    "",
                    "",
                    "",
                ]
            )
            first = False
        for key, floor in r.get("floors_s", {}).items():
            gbps = f"{r['bytes'] / floor['median'] / 1e9:.2f}"
            out.append(["", f"*floor: {key} alone*", f"{floor['median']:.2f}", gbps, *[""] * 5])
        for p in r["pairs"]:
            runs = p["run_ratios"]
            spread = f" ({min(runs):.2f}–{max(runs):.2f})" if len(runs) > 1 else ""
            target = f"≥ {p['target']:.1f}"
            met = "yes" if p["met"] else "**no**"
            if not p["target_in_issue"]:
                target, met = f"({target})", f"({met})"
            names = f"{DCP_NAMES[p['peer']]} ÷ {DCP_NAMES[p['tensorfile']]}"
            ratio = f"**{p['ratio']:.2f}**{spread}"
            out.append(["", names, "", "", "", "", ratio, target, met])
    head = ["benchmark", "writer or reader", "median (s)", "GB/s", "each rank read (MiB)"]
    head += ["fetched, all ranks ÷ checkpoint", "ratio (peer / tf): median (runs)", "target"]
    return _table([*head, "met"], "llrrrrrrc", out)


RANKLOAD_NAMES = {"coop": "cooperative", "alone": "each rank alone", "ref": "reference"}


def _rankload_results(rows: list[dict[str, Any]], _payload: dict[str, Any]) -> list[str]:
    """Rank-aware loads: per source, one line per side (its medians and bytes), the floors,
    then the ratios of the peers' times over the cooperative load's."""
    out = []
    for r in rows:
        first = True
        for key, side in r["sides"].items():
            fetched = f"{side['fetched_over_checkpoint']:.2f}"
            if key == "coop" and r["source"] in ("http", "s3"):
                met = "met" if r["bytes_met"] else "**not met**"
                fetched += f" (target ≤ {r['bytes_target']}: {met})"
            what = f"**{side['what']}**" if key == "coop" else side["what"]
            out.append(
                [
                    _label(r) if first else "",
                    what,
                    f"{side['median_load_s']:.2f}",
                    f"{side['median_wall_s']:.2f}",
                    fetched,
                    "",
                    "",
                    "",
                ]
            )
            first = False
        for key, floor in r.get("floors_s", {}).items():
            out.append(["", f"*floor: {key} alone*", f"{floor['median']:.2f}", *[""] * 5])
        for key, side in r["sides"].items():
            if key == "coop":
                continue
            for what, label in (("load", "load"), ("wall", "wall")):
                p = side[f"{what}_ratio_over_coop"]
                runs = p["run_ratios"]
                spread = f" ({min(runs):.2f}–{max(runs):.2f})" if len(runs) > 1 else ""
                target = met = ""
                if key == "ref" and what == "load":
                    target = f"≥ {r['time_target']:.1f}"
                    met = "yes" if r["time_met"] else "**no**"
                names = f"{RANKLOAD_NAMES[key]} ÷ cooperative, {label}"
                out.append(["", names, "", "", "", f"**{p['ratio']:.2f}**{spread}", target, met])
    head = ["benchmark", "loader", "time to a loaded rank (s)", "wall (s)"]
    head += ["fetched, all ranks ÷ checkpoint", "ratio: median (runs)", "target", "met"]
    return _table(head, "llrrrrrc", out)


SECTIONS: dict[str, Callable[[list[dict[str, Any]], dict[str, Any]], list[str]]] = {
    "results": _results,
    "process_results": _process_results,
    "remote_load_results": _remote_load_results,
    "cache_results": _cache_results,
    "pickle_results": _pickle_results,
    "cold_results": _cold_results,
    "feed_results": _feed_results,
    "dcp_results": _dcp_results,
    "rankload_results": _rankload_results,
    "shuffle_quality": _shuffle_quality,
}
"""The runner's JSON keys, in the order the tables appear."""


def _rerun(argv: list[str], group: str | None) -> str:
    """The runner's command line, its ``--json`` pointed at the committed file."""
    args: list[str] = []
    skip = False
    for arg in argv:
        if skip or arg.startswith("--json="):
            skip = False
            continue
        if arg == "--json":
            skip = True
            continue
        args.append(arg)
    if group is not None:
        args += ["--json", f"docs/benchmarks/{group}.json"]
    return " ".join(["python -m benchmarks.run", *args])


def _measured_on(payload: dict[str, Any], group: str | None = None) -> str:
    m = payload["machine"]
    cfg = payload.get("config", {})
    date = str(payload.get("date", "an unrecorded date"))[:10]
    cpus = f"{m['cpu_count']} CPUs"
    if m.get("usable_cpus") not in (None, m["cpu_count"]):
        cpus += f" ({m['usable_cpus']} usable)"
    versions = [f"Python {m['python']}", f"tensorfile {m['tensorfile']}"]
    versions += [f"numpy {m['numpy']}", f"torch {m['torch']}"]
    peers = m.get("peers") or {"safetensors": m.get("safetensors")}
    versions += [f"{name} {v}" for name, v in peers.items() if v]
    how = ["quick size (a smoke test, not a measurement)" if cfg.get("quick") else "full size"]
    if cfg and payload.get("results"):
        how.append(
            f"in-process rows: {cfg['repeat_small']} runs each ({cfg['repeat_big']} for the "
            "1 GiB rows)"
        )
    fresh = ("process_results", "cache_results", "remote_load_results", "cold_results")
    if cfg and any(payload.get(key) for key in fresh):
        how.append(
            f"fresh processes: {cfg['settle_s']:g} s settle before each"
            + (f", {cfg['process_repeat']} per library" if payload.get("process_results") else "")
        )
    if payload.get("dcp_results"):
        rounds = sorted({r["rounds"] for r in payload["dcp_results"]}, reverse=True)
        shown = " (S3: ".join(map(str, rounds)) + ")" * (len(rounds) - 1)
        how.append(f"distributed checkpoints: {shown} rounds, a process per rank (gloo)")
    if payload.get("rankload_results"):
        ranked = payload["rankload_results"]
        rounds = max(len(side["runs"]) for r in ranked for side in r["sides"].values())
        how.append(
            f"rank-aware loads: {rounds} rounds, {ranked[0]['world']} ranks (gloo), fresh "
            f"processes per run, {cfg.get('settle_s', 0):g} s settle before each"
        )
    line = (
        f"*Measured on {date}, on {m['platform']} ({m['machine']}), {cpus}; "
        f"{', '.join(versions)}; {'; '.join(how)}.*"
    )
    if payload.get("argv"):
        line += f" Rerun: `{_rerun(payload['argv'], group)}`."
    return line


def render(payload: dict[str, Any], group: str | None = None) -> str:
    """The Markdown of one runner payload: every non-empty section's table, then the
    machine line. Raises ``ValueError`` when the payload holds no rows at all."""
    parts: list[str] = []
    for key, section in SECTIONS.items():
        rows = payload.get(key) or []
        if rows:
            parts.append("\n".join(section(rows, payload)))
    if not parts:
        raise ValueError("the benchmark file holds no results")
    parts.append(_measured_on(payload, group))
    return "\n\n".join(parts)


def render_gpu(payload: dict[str, Any]) -> str:
    """The Markdown of ``benchmarks/gpu_check.py --json``."""

    def f(value: Any, spec: str) -> str:
        return "n/a" if value is None else format(value, spec)

    def versus_reference(r: dict[str, Any]) -> str:
        """On tensorfile's line: the reference's load time ÷ tensorfile's, median (runs)."""
        ref = next(
            (x for x in payload["rows"]
             if x["loader"] == "ref" and (x["size_mib"], x["mode"]) == (r["size_mib"], r["mode"])),
            None,
        )  # fmt: skip
        if r["loader"] != "tf" or ref is None or not r.get("load_s") or ref.get("load_s") is None:
            return ""
        spread = _spread(ref.get("all_load_s", []), r.get("all_load_s", []))
        return f"{ref['load_s'] / r['load_s']:.2f}{spread}"

    out = []
    for r in payload["rows"]:
        equal = {True: "yes", False: "**no**", None: "n/a"}[r.get("equal")]
        if r.get("errors"):
            equal += f" ({r['errors'][0]})"
        loader = GPU_LOADERS.get(r["loader"], r["loader"])
        out.append(
            [
                f"{r['size_mib']:,} MiB",
                r["mode"],
                f"**{loader}**" if r["loader"] == "tf" else loader,
                f(r["load_s"], ".3f"),
                f(r["gb_s"], ".2f"),
                f(r["peak_rss_gib"], ".2f"),
                f(r["extra_rss_gib"], ".2f"),
                equal,
                str(r["runs"]),
                versus_reference(r),
            ]
        )
    head = ["file", "page cache", "loader", "load (s, median)", "GB/s", "peak RSS (GiB)"]
    head += ["RSS added by the load (GiB)", "same values", "runs"]
    lines = _table([*head, "safetensors / tf: median (runs)"], "lllrrrrllr", out)
    when = payload.get("measured", "an unrecorded date")
    soft = [f"Python {payload['python']}"] if payload.get("python") else []
    if payload.get("torch"):
        soft.append(f"torch {payload['torch']}")
    skipped = ", ".join(payload.get("skipped") or []) or "none"
    lines += [
        "",
        f"*Measured on {when}, on {payload['device']} with {payload['cpus']} CPUs"
        + (f"; {', '.join(soft)}" if soft else "")
        + f"; loaders skipped (not installed): {skipped}.*",
    ]
    return "\n".join(lines)


GPU_LOADERS = {
    "tf": "tensorfile",
    "tf8": "tensorfile, 8 threads",
    "ref": "safetensors",
    "fastsafe": "fastsafetensors",
    "runai": "Run:ai streamer",
}


def render_group(group: str, data: Path = DATA) -> str:
    """The Markdown for ``<!-- benchmarks: GROUP -->``, from ``data/GROUP.json``."""
    path = data / f"{group}.json"
    if not path.is_file():
        if group in OPTIONAL:
            return OPTIONAL[group]
        raise MissingBenchmarks(
            f"{path} is missing: run `python -m benchmarks.run --only ... --json {path}` "
            "(see docs/benchmarks.md) and commit it"
        )
    try:
        payload = json.loads(path.read_text())
        return render_gpu(payload) if group == "gpu" else render(payload, group)
    except (ValueError, KeyError, TypeError) as exc:
        raise MissingBenchmarks(f"{path} cannot be rendered: {exc!r}") from exc


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return PLACEHOLDER.sub(lambda m: render_group(m.group(1)), markdown)


__all__ = ["MissingBenchmarks", "on_page_markdown", "render", "render_gpu", "render_group"]
