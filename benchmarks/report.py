"""Turn a pytest-benchmark JSON run and the tables the benchmarks wrote into RESULTS.md + a plot.

Usage: python benchmarks/report.py RUN.json [MORE.json …] (pytest-benchmark --benchmark-json)
"""

from __future__ import annotations

import json
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
RESULTS = HERE / "RESULTS.md"
PLOT = HERE / "results" / "turns.png"


def _by_name(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {b["name"]: b for b in run.get("benchmarks", [])}


def _ms(b: dict[str, Any], stat: str = "median") -> float:
    return float(b["stats"][stat]) * 1000


def core_section(b: dict[str, dict[str, Any]]) -> list[str]:
    out: list[str] = []
    bare, ours = b.get("test_ingest_bare_loop"), b.get("test_ingest_alpstore")
    if bare and ours:
        n = ours["extra_info"]["messages"]
        rate_bare = n / (bare["stats"]["median"])
        rate_ours = n / (ours["stats"]["median"])
        info = ours["extra_info"]
        raw = info["raw_bytes"]
        out += [
            "## Ingest (issue 2)",
            "",
            f"{n:,} realistic messages (0.2–8 KB), batches of 1,000, fresh archive per round; "
            "median of 3 rounds.",
            "",
            "| | messages/s | ratio |",
            "|---|---:|---:|",
            "| bare loop: json.dumps + blake3 + zstd + sqlite3 executemany | "
            f"{rate_bare:,.0f} | 1.00 |",
            "| alpstore `put_many` (canonical JSON, dedup, dictionary, deltas) | "
            f"{rate_ours:,.0f} | **{rate_ours / rate_bare:.2f}** |",
            "",
            "Compression on the same corpus: per-message zstd-3 "
            f"{raw / info['stored_bytes_without_dictionary']:.2f}×, with the trained dictionary "
            f"(and deltas) {raw / info['stored_bytes_with_dictionary']:.2f}× "
            "(raw ÷ stored payload bytes).",
            "",
        ]
    rows = [
        b[f"test_checkpoint_every_turn[{t}]"]
        for t in (100, 1000, 10000)
        if f"test_checkpoint_every_turn[{t}]" in b
    ]
    if rows:
        base = _ms(rows[0])
        out += [
            "## Every-turn checkpoints (issue 3)",
            "",
            "An agent appends 4 messages and checkpoints every turn (`commit_turn`); 200 more "
            "turns timed at each history length. Bytes from SQLite's dbstat (pages in use).",
            "",
            "| history (turns) | ms / turn (median) | ÷ at 100 | checkpoint row + index "
            "bytes | entry bytes / turn (4 entries) |",
            "|---:|---:|---:|---:|---:|",
        ]
        for r in rows:
            e = r["extra_info"]
            out.append(
                f"| {e['turns']:,} | {_ms(r):.3f} | {_ms(r) / base:.2f} | "
                f"{e['checkpoint_row_bytes']:.0f} | {e['entry_bytes_per_turn']:.0f} |"
            )
        out.append("")
    bt = {k: v for k, v in b.items() if k.startswith("test_backtrack")}
    if bt:
        out += [
            "## Backtrack retarget (issue 3)",
            "",
            "| history entries | persisted `backtrack(1)` (ms) | "
            "`copy.deepcopy` of the history (ms) | deepcopy ÷ persisted |",
            "|---:|---:|---:|---:|",
        ]
        for n in (100, 10000):
            pers = bt.get(f"test_backtrack_persisted[{n}]")
            deep = bt.get(f"test_backtrack_deepcopy_baseline[{n}]")
            if pers and deep:
                out.append(
                    f"| {n:,} | {_ms(pers):.3f} | {_ms(deep):.1f} | {_ms(deep) / _ms(pers):,.0f}× |"
                )
        small, large = (
            bt.get("test_backtrack_persisted[100]"),
            bt.get("test_backtrack_persisted[10000]"),
        )
        if small and large:
            out.append("")
            out.append(
                f"Persisted backtrack at 10,000 ÷ at 100: **{_ms(large) / _ms(small):.2f}** "
                "(O(1): goal ≤ 1.5)."
            )
        out.append("")
    h = {k: v for k, v in b.items() if "hydrate" in k}
    if h:
        out += [
            "## Hydrate a 10,000-message head (issue 3)",
            "",
            "| | ms (median) | speed vs baseline |",
            "|---|---:|---:|",
        ]
        bare = h.get("test_hydrate_bare_loop[fetch+decompress]")
        parse = h.get("test_hydrate_bare_loop[fetch+decompress+parse]")
        raw = h.get("test_hydrate_raw_alpstore")
        full = h.get("test_hydrate_alpstore")
        if bare:
            out.append(f"| bare loop: fetch + zstd decompress | {_ms(bare):.1f} | 1.00 |")
        if raw and bare:
            out.append(
                f"| alpstore `hydrate_raw` (canonical bytes, what an export streams) | "
                f"{_ms(raw):.1f} | **{_ms(bare) / _ms(raw):.2f}** |"
            )
        if parse:
            out.append(f"| bare loop: fetch + decompress + json.loads | {_ms(parse):.1f} | 1.00 |")
        if full and parse:
            out.append(
                f"| alpstore `hydrate` (parsed entries) | {_ms(full):.1f} | "
                f"**{_ms(parse) / _ms(full):.2f}** |"
            )
        out.append("")
    return out


def other_groups(b: dict[str, dict[str, Any]], known: set[str]) -> list[str]:
    rest = [
        v
        for k, v in b.items()
        if k not in known
        and not k.startswith(
            (
                "test_ingest",
                "test_checkpoint_every_turn",
                "test_backtrack",
                "test_hydrate",
                "test_curves",
                "test_langgraph",
                "test_ui_page",
                "test_live_",
                "test_cli_startup",
                "test_turn_latency",
                "test_bytes",
            )
        )
    ]
    if not rest:
        return []
    out = [
        "## Other benchmarks",
        "",
        "| benchmark | group | median (ms) | extra |",
        "|---|---|---:|---|",
    ]
    for r in sorted(rest, key=lambda r: (r.get("group") or "", r["name"])):
        extra = json.dumps(r.get("extra_info") or {}, sort_keys=True)
        out.append(f"| {r['name']} | {r.get('group') or ''} | {_ms(r):.2f} | {extra[:160]} |")
    out.append("")
    return out


def curves_section(path: Path) -> list[str]:
    if not path.exists():
        return []
    data = json.loads(path.read_text())
    marks = data["marks"]
    out = [
        "## The same conversation through LangGraph's savers and alpstore (issue 3)",
        "",
        "Generated coding-agent conversation, a checkpoint every turn. Database = file + WAL "
        "after a WAL checkpoint; ms / turn = mean of the 10 turns before the mark; load = "
        "latest state.",
        "",
        "| store | turns | raw | database | × raw | ms / turn | load latest (ms) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for curve in data["curves"]:
        points = {p["turn"]: p for p in curve["points"]}
        for m in marks:
            p = points.get(m)
            if p is None:
                out.append(f"| {curve['name']} | {m:,} | | not run (quadratic) | | | |")
                continue
            out.append(
                f"| {curve['name']} | {m:,} | {p['raw'] / 1e6:.2f} MB | "
                f"{p['bytes'] / 1e6:.2f} MB | {p['bytes'] / p['raw']:.2f} | "
                f"{p['ms_per_turn']:.2f} | {p['load_ms']:.1f} |"
            )
    out += ["", f"![bytes and time per turn]({PLOT.relative_to(HERE)})", ""]
    _plot(data)
    return out


def _plot(data: dict[str, Any]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for curve in data["curves"]:
        pts = curve["points"]
        turns = [p["turn"] for p in pts]
        ax1.plot(turns, [p["bytes"] / p["raw"] for p in pts], marker=".", label=curve["name"])
        ax2.plot(turns, [p["ms_per_turn"] for p in pts], marker=".", label=curve["name"])
    ax1.set_yscale("log")
    ax1.set_xlabel("turns")
    ax1.set_ylabel("database bytes ÷ raw conversation bytes")
    ax1.set_title("Storage")
    ax2.set_yscale("log")
    ax2.set_xlabel("turns")
    ax2.set_ylabel("ms per turn (mean of last 10)")
    ax2.set_title("Time per turn")
    for ax in (ax1, ax2):
        ax.grid(True, which="both", alpha=0.3)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(PLOT, dpi=110)


def main(argv: list[str]) -> int:
    runs = [json.loads(Path(a).read_text()) for a in argv[1:] if Path(a).exists()]
    run = runs[0] if runs else {}
    b: dict[str, dict[str, Any]] = {}
    for r in runs:  # later runs (e.g. a re-run of one benchmark) win
        b.update(_by_name(r))
    lines = [
        "# Benchmark results",
        "",
        f"Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.machine()}, "
        f"{run.get('machine_info', {}).get('cpu', {}).get('count', '?')} cores, Python "
        f"{platform.python_version()}. Reproduce: `scripts/bench`. Every figure is paired "
        "with a baseline measured in the same run.",
        "",
    ]
    lines += core_section(b)
    lines += curves_section(HERE / "results" / "curves.json")
    for name in (
        "langgraph.md",
        "startup.md",
        "turn_latency.md",
        "bytes.md",
        "saver.md",
        "saver_async.md",
        "backends.md",
        "postgres.md",
        "portable.md",
        "debug.md",
        "integrity.md",
        "decode.md",
        "ui.md",
        "live.md",
        "delta_search.md",
        "secret_scan.md",
    ):
        extra = HERE / "results" / name
        if extra.exists():
            text = extra.read_text().strip().splitlines()
            if text and text[0].startswith("# "):
                text[0] = "#" + text[0]
            lines += [*text, ""]
    lines += other_groups(b, set())
    RESULTS.write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
