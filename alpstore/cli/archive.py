"""`alpstore archive`: put, get, stats, verify, train-dict, pack and gc on the blob archive."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from alpstore.cli._common import MAX_COUNT, echo, print_json, read_store, store, write_json_text
from alpstore.codec import parse_digest, parse_json
from alpstore.errors import InputError, IntegrityError

app = typer.Typer(
    help="The content-addressed blob archive: every message and summary stored once.",
    no_args_is_help=True,
)

MAX_PUT_BYTES = 256 * 1024 * 1024
PUT_KINDS = ("message", "state", "manifest")
"""The node kinds `archive put` stores (a summary is made by `session fold`)."""


@app.command("put")
def put(
    ctx: typer.Context,
    source: Annotated[str, typer.Argument(help="A JSON file, or - for standard input.")],
    kind: Annotated[
        str, typer.Option("--kind", help="Node kind: message, state or manifest.")
    ] = "message",
) -> None:
    """Store a JSON document once and print its BLAKE3 digest."""
    if kind not in PUT_KINDS:
        raise InputError(f"--kind {kind!r}: expected message, state or manifest")
    where = "stdin" if source == "-" else source
    try:
        data = sys.stdin.buffer.read(MAX_PUT_BYTES + 1) if source == "-" else _read(Path(source))
    except OSError as err:
        raise InputError(f"{where}: cannot read ({err.strerror})") from err
    if len(data) > MAX_PUT_BYTES:
        raise InputError(f"{where}: larger than {MAX_PUT_BYTES} bytes")
    value = parse_json(data, where=where)
    from alpstore.db.names import BLOB_KINDS

    by_name = {name: number for number, name in BLOB_KINDS.items()}
    digest = store(ctx).archive.put(value, by_name[kind])
    echo(digest.hex())


def _read(path: Path) -> bytes:
    with path.open("rb") as handle:
        return handle.read(MAX_PUT_BYTES + 1)


@app.command("get")
def get(
    ctx: typer.Context,
    digest: Annotated[str, typer.Argument(help="The blob's 64-character hex digest.")],
    pretty: Annotated[bool, typer.Option("--pretty", help="Indent the JSON.")] = False,
) -> None:
    """Print a stored document (its canonical JSON), verifying its digest."""
    _kind, raw = read_store(ctx).archive.get_raw(parse_digest(digest), verify=True)
    if pretty:
        write_json_text(json.dumps(json.loads(raw), indent=2, ensure_ascii=False) + "\n")
    else:
        write_json_text(raw.decode("utf-8") + "\n")


@app.command("stats")
def stats(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Print counts and sizes: blobs, raw and stored bytes, compression ratio."""
    s = read_store(ctx).archive.stats()
    doc = {
        "blobs": s.blobs,
        "messages": s.messages,
        "summaries": s.summaries,
        "other": s.other,
        "raw_bytes": s.raw_bytes,
        "stored_bytes": s.stored_bytes,
        "ratio": round(s.ratio, 3),
        "dictionaries": s.dictionaries,
        "dict_compressed": s.dict_compressed,
        "loose_bytes": s.loose_bytes,
        "packed_blobs": s.packed_blobs,
        "frames": s.frames,
        "packed_bytes": s.packed_bytes,
        "dead_fraction": round(s.dead_fraction, 4),
        "dict_frames": s.dict_frames,
    }
    if as_json:
        print_json(doc)
        return
    echo(
        f"blobs           {s.blobs} ({s.messages} messages, {s.summaries} summaries, "
        f"{s.other} other)"
    )
    echo(f"raw bytes       {s.raw_bytes}")
    echo(f"stored bytes    {s.stored_bytes}")
    echo(f"ratio           {s.ratio:.2f}x")
    echo(
        f"dictionaries    {s.dictionaries} ({s.dict_compressed} loose blobs and "
        f"{s.dict_frames} frames use one)"
    )
    echo(f"loose           {s.blobs - s.packed_blobs} blobs, {s.loose_bytes} bytes")
    echo(
        f"packed          {s.packed_blobs} blobs in {s.frames} frames, {s.packed_bytes} bytes "
        f"({s.dead_fraction:.1%} dead)"
    )


@app.command("pack")
def pack(
    ctx: typer.Context,
    keep_loose: Annotated[
        int,
        typer.Option("--keep-loose", min=0, max=MAX_COUNT, help="Leave the newest N blobs loose."),
    ] = 0,
) -> None:
    """Rewrite cold loose blobs, in conversation order, into compressed pack frames (one
    short transaction per frame), merge each segment's small runs of entries, then compact the
    SQLite file.
    """
    archive = store(ctx, create=False).archive
    report = archive.pack_cold(keep_loose=keep_loose)
    merged = archive.merge_runs()
    if report.frames or merged:
        archive.compact()
    echo(
        f"packed {report.blobs} blobs ({report.raw_bytes} bytes) into {report.frames} frames: "
        f"{report.stored_before} stored bytes became {report.stored_after}; "
        f"{merged} small runs of entries merged"
    )


@app.command("verify")
def verify(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    repair: Annotated[
        bool,
        typer.Option(
            "--repair",
            help="Drop damaged blobs that nothing reaches or refers to (and report each).",
        ),
    ] = False,
) -> None:
    """Re-hash every blob and check every view and reference; exit non-zero on damage."""
    from alpstore.maintenance import verify as run_verify
    from alpstore.repairing import repair as run_repair

    repaired = run_repair(store(ctx, create=False)) if repair else None
    report = repaired.after if repaired else run_verify(read_store(ctx))
    if repaired and not as_json:
        for line in [*repaired.dropped, *repaired.kept]:
            echo(f"REPAIR {line}")
    if as_json:
        print_json(
            {
                **(
                    {"repair": {"dropped": repaired.dropped, "kept": repaired.kept}}
                    if repaired
                    else {}
                ),
                "ok": report.ok,
                "blobs_checked": report.blobs_checked,
                "segments_checked": report.rows_checked,
                "problems": [
                    {
                        "what": p.what,
                        "digest": p.digest,
                        "sessions": list(p.sessions),
                        "checkpoints": list(p.checkpoints),
                    }
                    for p in report.problems
                ],
            }
        )
    else:
        for problem in report.problems:
            echo(f"BAD {problem.line()}")
        echo(
            f"checked {report.blobs_checked} blobs and {report.rows_checked} view segments: "
            + ("ok" if report.ok else f"{len(report.problems)} problem(s)")
        )
    if not report.ok:
        raise typer.Exit(IntegrityError.exit_code)


@app.command("train-dict")
def train_dict(
    ctx: typer.Context,
    size: Annotated[
        int, typer.Option("--size", min=1024, max=MAX_COUNT, help="Dictionary size in bytes.")
    ] = (112 * 1024),
    samples: Annotated[
        int,
        typer.Option(
            "--samples", min=8, max=MAX_COUNT, help="How many recent small blobs to learn from."
        ),
    ] = 4000,
    recompress: Annotated[
        bool,
        typer.Option("--recompress/--no-recompress", help="Re-encode the sampled blobs with it."),
    ] = True,
) -> None:
    """Train a zstd dictionary from the archive's small blobs and use it for new ones."""
    dict_id, used, changed = store(ctx, create=False).archive.train_dictionary(
        samples=samples, size=size, recompress=recompress
    )
    echo(f"dictionary {dict_id} trained from {used} blobs; {changed} blobs recompressed")


@app.command("gc")
def gc(
    ctx: typer.Context,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Report what would be removed; change nothing.")
    ] = False,
) -> None:
    """Remove views and blobs that no session head, checkpoint or summary references."""
    from alpstore.maintenance import gc as run_gc

    report = run_gc(store(ctx, create=False), dry_run=dry_run)
    verb = "would remove" if dry_run else "removed"
    echo(
        f"{verb} {report.blobs_removed} blobs ({report.bytes_freed} bytes), "
        f"{report.segments_removed} view segments, {report.entries_removed} view entries"
        + (
            f"; pack frames: {report.frames_deleted} deleted, {report.frames_rewritten} rewritten"
            if report.frames_deleted or report.frames_rewritten
            else ""
        )
    )
