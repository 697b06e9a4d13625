"""``scripts/compat``: the frameworks' own tests against alpstore's adapters (see that script)."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PLUGIN = HERE / "compat_plugin"
REVIEWED = PLUGIN / "reviewed.yaml"

CONFTEST_LINE = (
    "\n# added by alpstore scripts/compat: the checkpointer fixtures with alpstore variants\n"
    "from alpstore_compat import async_checkpointer, sync_checkpointer  # noqa: E402,F401\n"
)

# the files CI runs (the three, plus the pregel basics); the full run takes them all
CI_FILES = {
    "langgraph": [
        "tests/test_large_cases.py",
        "tests/test_large_cases_async.py",
        "tests/test_checkpoint_migration.py",
    ],
    "openai-agents": [
        "tests/memory/test_session.py",
        "tests/memory/test_session_limit.py",
        "tests/memory/test_compaction_suffix.py",
        "tests/memory/test_compaction_model_visibility.py",
        "tests/memory/test_openai_responses_compaction_session.py",
    ],
}
CI_SELECT = {"langgraph": "packets or checkpoint_migration", "openai-agents": None}

# variant of ours -> the framework's own variant it must match (same test, same parameters)
OURS = {
    "alpstore": "sqlite",
    "alpstore_aio": "sqlite_aio",
    "alpstore_pg": "sqlite",
    "alpstore_pg_aio": "sqlite_aio",
}


def fetch(package: str, dest: Path) -> Path:
    """Download and unpack the sdist of the installed version of ``package``; its folder."""
    version = importlib.metadata.version(package)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--disable-pip-version-check",
            "--no-deps",
            "--no-binary",
            ":all:",
            f"{package}=={version}",
            "-d",
            str(dest),
        ],
        check=True,
    )
    stem = package.replace("-", "_")
    (archive,) = [
        p for p in dest.glob("*.tar.gz") if p.name.lower().replace("-", "_").startswith(stem)
    ]
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    folder = dest / archive.name[: -len(".tar.gz")]
    print(f"== {package} {version}: tests from {archive.name}", flush=True)
    return folder


def test_files(suite: str, folder: Path, ci: bool) -> list[str]:
    if ci:
        return CI_FILES[suite]
    if suite == "langgraph":
        pattern, marker = "tests/test_*.py", ("sync_checkpointer", "async_checkpointer")
    else:
        pattern, marker = "tests/**/test_*.py", ("SQLiteSession",)
    found = []
    for path in sorted(folder.glob(pattern)):
        rel = path.relative_to(folder).as_posix()
        if suite == "openai-agents" and rel.startswith("tests/extensions/"):
            continue  # other session classes (encrypted, advanced, async), not SQLiteSession
        if any(m in path.read_text(encoding="utf-8", errors="replace") for m in marker):
            found.append(rel)
    return found


def prepare(suite: str, folder: Path) -> None:
    """Hook the plugin's fixtures into the downloaded suite (LangGraph's conftest), once."""
    if suite == "langgraph":
        conftest = folder / "tests" / "conftest.py"
        text = conftest.read_text(encoding="utf-8")
        if CONFTEST_LINE not in text:
            conftest.write_text(text + CONFTEST_LINE, encoding="utf-8")


def run_suite(
    suite: str,
    folder: Path,
    ci: bool,
    report: Path,
    unreviewed: bool = False,
    files: list[str] | None = None,
    twins: list[str] | None = None,
) -> float:
    """Run ``files`` of the suite in ``folder`` under the plugin; the JSON rows go to ``report``.

    ``twins``: run only the framework's own variant of these base ids (mode ``twins``).
    """
    mode = "twins" if twins is not None else "alpstore" if ci else "all"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(PLUGIN), os.environ.get("PYTHONPATH")])),
        "NO_DOCKER": "true",  # LangGraph's own PostgreSQL and Redis variants need their docker
        "ALPSTORE_COMPAT_MODE": mode,
        "ALPSTORE_COMPAT_REPORT": str(report),
        "ALPSTORE_COMPAT_REVIEWED": str(REVIEWED),
        "ALPSTORE_COMPAT_TWINS": json.dumps(twins or []),
    }
    if unreviewed:
        env["ALPSTORE_COMPAT_UNREVIEWED"] = "1"
    args = [sys.executable, "-m", "pytest", "-p", "alpstore_compat", "-p", "no:cacheprovider"]
    args += ["-q", "--tb=short", "-rf", "-p", "no:randomly"]
    if suite == "langgraph":
        args += ["-o", "addopts=", "-o", "asyncio_default_fixture_loop_scope=function"]
    if ci and CI_SELECT[suite] and files is None:
        args += ["-k", str(CI_SELECT[suite])]
    args += files if files is not None else test_files(suite, folder, ci)
    started = time.monotonic()
    subprocess.run(args, cwd=folder, env=env, check=False)
    return time.monotonic() - started


_ADDRESS = re.compile(r"0x[0-9a-fA-F]{4,16}\b")
_TMP_PATH = re.compile(r"/tmp/[^\s'\":]{1,200}")


def same_failure(ours: str | None, theirs: str | None) -> bool:
    """Whether two crash lines name the same failure: the same exception and message, object
    addresses and temporary paths aside. An empty line never matches (nothing to compare)."""

    def norm(line: str | None) -> str:
        text = _ADDRESS.sub("0x…", (line or "").strip())
        return _TMP_PATH.sub("/tmp/…", text)

    return bool(norm(ours)) and norm(ours) == norm(theirs)


def judge(
    rows: list[dict[str, Any]], twin_rows: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Our unreviewed failures, split: (the framework's: its own twin failed the same way,
    ours: every other one)."""
    twins = {(r["base"], r["variant"]): r for r in twin_rows}
    frameworks, ours = [], []
    for r in rows:
        if r["variant"] not in OURS or r["outcome"] != "failed":
            continue
        twin = twins.get((r["base"], OURS[r["variant"]]))
        if twin and twin["outcome"] == "failed" and same_failure(r.get("error"), twin.get("error")):
            r["twin_error"] = twin.get("error")
            frameworks.append(r)
        else:
            ours.append(r)
    return frameworks, ours


def table(rows: list[dict[str, Any]], markdown: bool = False) -> str:
    """Per file and variant: passed / failed / skipped (+ reviewed). For each alpstore variant a
    "ran alpstore" column counts only the tests that built our adapter (passed / failed /
    skipped among them, "+N ran nothing of ours": the rest, which prove nothing about alpstore).
    """
    variants = sorted({r["variant"] for r in rows}, key=_variant_order)
    ours = [v for v in variants if v in OURS]
    counts: dict[str, dict[str, Counter[str]]] = defaultdict(lambda: defaultdict(Counter))
    for r in rows:
        counts[r["file"]][r["variant"]][r["outcome"]] += 1
        if r["variant"] in OURS:
            ran = "ran" if r.get("ran_alpstore") else "not"
            counts[r["file"]][r["variant"]][f"{ran}:{r['outcome']}"] += 1
    head = ["file", *variants, *(f"{v}: ran alpstore" for v in ours)]
    lines = []
    for file in sorted(counts):
        cells = [file]
        for v in variants:
            c = counts[file][v]
            cell = f"{c['passed']}/{c['failed']}/{c['skipped']}" if c else "-"
            if c["reviewed"]:
                cell += f" (+{c['reviewed']} reviewed)"
            cells.append(cell)
        for v in ours:
            c = counts[file][v]
            if not c:
                cells.append("-")
                continue
            cell = f"{c['ran:passed']}/{c['ran:failed']}/{c['ran:skipped']}"
            if c["ran:reviewed"]:
                cell += f" (+{c['ran:reviewed']} reviewed)"
            nothing = sum(n for k, n in c.items() if k.startswith("not:"))
            if nothing:
                cell += f"; {nothing} ran nothing of ours"
            cells.append(cell)
        lines.append(cells)
    if markdown:
        out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        out += ["| " + " | ".join(cells) + " |" for cells in lines]
        return "\n".join(out)
    widths = [max(len(str(x)) for x in col) for col in zip(head, *lines, strict=True)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*head), *(fmt.format(*cells) for cells in lines)])


def _variant_order(v: str) -> tuple[int, str]:
    return (1 if v.startswith("alpstore") else 0, v)


def regressions(rows: list[dict[str, Any]]) -> list[str]:
    """In a full run: our failures of tests that built our adapter whose framework twin (same
    test and parameters, their SQLite implementation) passed."""
    theirs = {(r["base"], r["variant"]): r["outcome"] for r in rows}
    bad = []
    for r in rows:
        if r["variant"] not in OURS or r["outcome"] != "failed":
            continue
        if theirs.get((r["base"], OURS[r["variant"]])) == "passed" and r.get("ran_alpstore"):
            bad.append(r["nodeid"])
    return bad


def run_ci(suite: str, folder: Path, base: Path, files: list[str] | None) -> list[dict[str, Any]]:
    """The CI run of one suite: our variants; then, for each of our unreviewed failures, the
    framework's own twin of that test. Rows carry ``verdict``: ``ours`` or ``framework``."""
    report = base / f"{suite}.json"
    run_suite(suite, folder, True, report, files=files)
    rows = _rows(suite, report)
    failed = sorted({r["base"] for r in rows if r["variant"] in OURS and r["outcome"] == "failed"})
    twin_rows: list[dict[str, Any]] = []
    if failed:
        print(f"== {suite}: {len(failed)} failing test(s) again on the framework's own twin")
        twin_report = base / f"{suite}-twins.json"
        run_suite(suite, folder, True, twin_report, files=files, twins=failed)
        twin_rows = _rows(suite, twin_report)
    frameworks, ours = judge(rows, twin_rows)
    for r in frameworks:
        r["verdict"] = "framework"
    for r in ours:
        r["verdict"] = "ours"
    return rows


def _rows(suite: str, report: Path) -> list[dict[str, Any]]:
    if not report.exists():
        raise SystemExit(f"compat: {suite}: pytest wrote no report (collection failed)")
    rows: list[dict[str, Any]] = json.loads(report.read_text(encoding="utf-8"))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(prog="scripts/compat")
    parser.add_argument("--ci", action="store_true", help="alpstore variants, CI subset")
    parser.add_argument("--suite", choices=["langgraph", "openai-agents"], action="append")
    parser.add_argument("--markdown", type=Path, help="also write the table here (Markdown)")
    parser.add_argument(
        "--unreviewed",
        action="store_true",
        help="run the reviewed tests without their xfail (to record their real failures)",
    )
    parser.add_argument("--keep", type=Path, help="download into this folder and keep it")
    parser.add_argument(
        "--source",
        type=Path,
        help="the framework's source tree to take the tests from, instead of downloading the "
        "sdist of the installed version (one --suite)",
    )
    parser.add_argument("--files", nargs="+", help="these test files (relative to the suite)")
    opts = parser.parse_args()
    suites = opts.suite or ["langgraph", "openai-agents"]
    if opts.source and len(suites) != 1:
        parser.error("--source takes exactly one --suite")
    tmp = None
    if opts.keep:
        base = opts.keep
        base.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="alpstore-compat-")
        base = Path(tmp.name)
    all_rows: list[dict[str, Any]] = []
    durations = {}
    try:
        for suite in suites:
            folder = opts.source.resolve() if opts.source else fetch(suite, base / suite)
            prepare(suite, folder)
            started = time.monotonic()
            if opts.ci:
                rows = run_ci(suite, folder, base, opts.files)
            else:
                report = base / f"{suite}.json"
                run_suite(suite, folder, False, report, opts.unreviewed, files=opts.files)
                rows = _rows(suite, report)
            durations[suite] = time.monotonic() - started
            for r in rows:
                r["file"] = f"{suite}: {r['file']}"
            all_rows += rows
    finally:
        if tmp is not None:
            tmp.cleanup()
    print()
    print("passed/failed/skipped per implementation (reviewed: on the reviewed list, run as xfail)")
    print(table(all_rows))
    for suite, seconds in durations.items():
        print(f"{suite}: {seconds:.0f} s")
    if opts.markdown:
        opts.markdown.write_text(table(all_rows, markdown=True) + "\n", encoding="utf-8")
    theirs = [r for r in all_rows if r.get("verdict") == "framework"]
    if theirs:
        print(
            f"\ncompat: {len(theirs)} failure(s) are the framework's own: its twin "
            "(same test on its own implementation) fails the same way; not counted against alpstore"
        )
        for r in theirs:
            print(f"  {r['nodeid']}\n    {r.get('error') or '(no message)'}")
    if opts.ci:
        bad = [r["nodeid"] for r in all_rows if r.get("verdict") == "ours"]
    else:
        bad = regressions(all_rows)
    if bad:
        print(
            f"\ncompat: {len(bad)} failure(s) for alpstore not on the reviewed list:",
            file=sys.stderr,
        )
        for nodeid in bad:
            print(f"  {nodeid}", file=sys.stderr)
        return 1
    print("\ncompat: alpstore passes every test its framework twin passes (reviewed list apart)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
