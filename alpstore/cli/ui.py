"""`alpstore ui`: a local, read-only web inspector over the archive (needs `alpstore[ui]`)."""

from __future__ import annotations

import os
import socket
import sys
import threading
from pathlib import Path
from typing import Annotated

import typer

from alpstore.cli._common import echo, options, warn
from alpstore.errors import UsageError

ENV_HOME = "ALP_HOME"
LOOPBACK = ("127.0.0.1", "localhost", "::1")
URL_HOST = {"0.0.0.0": "127.0.0.1", "::": "localhost", "": "127.0.0.1"}
"""The host a printed URL names when the server binds every interface (no browser can reach
``0.0.0.0``, and the Host check would refuse it)."""


def _open_in_browser(url: str) -> None:
    """Open ``url`` in a web browser without holding up the server (a browser command that
    waits for its window would otherwise keep the server from answering it).
    """
    import webbrowser

    threading.Thread(target=webbrowser.open, args=(url,), daemon=True).start()


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {err.strerror or err}") from err
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def command(
    ctx: typer.Context,
    port: Annotated[
        int, typer.Option("--port", help="Port to listen on (0: any free port).", min=0, max=65535)
    ] = 8765,
    host: Annotated[
        str, typer.Option("--host", help="Address to bind (default: this machine only).")
    ] = "127.0.0.1",
    open_browser: Annotated[
        bool, typer.Option("--open", help="Open the printed URL in a web browser.")
    ] = False,
    alp_home: Annotated[
        Path | None,
        typer.Option(
            "--alp-home",
            help=f"ALP home for the Continuity page (default: ${ENV_HOME}, else ~/.alp).",
        ),
    ] = None,
) -> None:
    """Serve a read-only web inspector of the archive: sessions and their lineage, timelines,
    the conversation at any checkpoint, diffs, bisect, archive stats and continuity.

    It never writes, migrates or creates an archive. Every request needs the random token in
    the printed URL (--open hands the browser a one-time code instead, good once for two
    minutes: a browser's command line is visible to other local users).
    """
    try:
        import uvicorn

        from alpstore.ui.app import Settings, allowed_hosts, create_app, new_token
    except ImportError as err:
        raise UsageError(
            f"alpstore ui needs the ui extra ({err.name} is not installed)",
            hint="pip install 'alpstore[ui]'",
        ) from err
    from alpstore.ui.readonly import open_read_only

    opts = options(ctx)
    store = open_read_only(opts.root, opts.db_url)
    try:
        sock = _listen(host, port)
        actual = int(sock.getsockname()[1])
        token = new_token()
        home = (alp_home or Path(os.environ.get(ENV_HOME) or "~/.alp")).expanduser()
        settings = Settings(store, token, actual, allowed_hosts(host), home, store.db.location)
        app = create_app(settings)
        named = URL_HOST.get(host, host)
        shown = f"[{named}]" if ":" in named else named
        base = f"http://{shown}:{actual}/"
        if host not in LOOPBACK:
            warn(f"listening on {host}: whoever reaches it with the token can read the archive")
        echo(f"alpstore ui: {store.db.location} (read-only) at {base}?token={token}")
        if host in URL_HOST:
            echo("answers to Host: " + ", ".join(settings.hosts))
        echo("press Ctrl+C to stop")
        sys.stdout.flush()
        if open_browser:  # a one-time code, not the token: a command line is visible in `ps`
            _open_in_browser(f"{base}?code={settings.new_open_code()}")
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        store.close()
