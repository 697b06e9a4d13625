"""Command line of scripts/torture (a file, so that multiprocessing can re-import it)."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from alpstore.testing.torture import TortureConfig, run


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/torture", description="kill -9 torture of an alpstore run root"
    )
    parser.add_argument("--kills", type=int, default=1000, help="workers to kill (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of operations and delays")
    parser.add_argument("--epoch", type=int, default=40, help="kills per fresh run root")
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it")
    parser.add_argument(
        "--long",
        type=float,
        metavar="SECONDS",
        help="instead: the long-lived stress run (writers beside a GC loop) for SECONDS",
    )
    parser.add_argument("--db", help="with --long: a PostgreSQL URL instead of a SQLite root")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="alpstore-torture-") as tmp:
        workdir = args.keep or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        if args.long is not None:
            return long_run(workdir, args.long, args.db, args.seed)
        config = TortureConfig(workdir=workdir, kills=args.kills, seed=args.seed, epoch=args.epoch)
        print(f"torture: {args.kills} kills, seed {args.seed}, in {workdir}", flush=True)
        report = run(config, progress=lambda text: print(text, flush=True))
        print(report.summary())
        for failure in report.failures:
            print(f"FAILED: {failure}", file=sys.stderr)
        return 1 if report.failures else 0


def long_run(workdir: Path, seconds: float, url: str | None, seed: int) -> int:
    """Two native writers and a LangGraph writer, long-lived, beside a GC loop (issue 13)."""
    from alpstore.testing.stress import run_stress

    root = workdir / "run"
    root.mkdir(exist_ok=True)
    print(f"torture --long: {seconds:.0f} s of writers beside gc, in {workdir}", flush=True)
    report = run_stress(root, url, workdir / "stress", seconds, seed=seed)
    print(report.summary())
    for failure in report.failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
