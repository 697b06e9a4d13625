"""The inspector's web application (Starlette): routes, the token gate, security headers.

Every route is a GET that reads; nothing here can write (the store it is given is opened
read-only, :mod:`alpstore.ui.readonly`). A request needs the random token — in the URL once, then
in a cookie — and a Host header naming this machine (DNS rebinding); every page is rendered by
Jinja2 with autoescape on, under a Content-Security-Policy that allows only this server's own
script and stylesheet.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse
from starlette.responses import Response as StarletteResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from alpstore.errors import AlpstoreError, NotFoundError, UsageError
from alpstore.ui import pages
from alpstore.ui.present import message, size, text_diff, visible, when
from alpstore.ui.settings import Settings, new_token

__all__ = ["Settings", "allowed_hosts", "create_app", "new_token"]

STATIC_DIR = Path(__file__).with_name("static")

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


def _env() -> Environment:
    env = Environment(
        loader=PackageLoader("alpstore.ui", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["visible"] = visible
    env.globals.update(message=message, when=when, size=size, text_diff=text_diff)
    env.filters["role_class"] = lambda r: r if re.fullmatch(r"[a-z]{1,20}", str(r)) else "other"
    env.globals["qs"] = lambda **kw: urlencode({k: v for k, v in kw.items() if v is not None})
    return env


Handler = Callable[[Request, Settings], dict[str, Any] | StarletteResponse]


def _page(template: str, handler: Handler, settings: Settings, env: Environment) -> Any:
    tpl = env.get_template(template)

    async def endpoint(request: Request) -> StarletteResponse:
        def run() -> StarletteResponse:
            try:
                result = handler(request, settings)
            except NotFoundError as err:
                return _error(env, settings, 404, err)
            except UsageError as err:
                return _error(env, settings, 400, err)
            except AlpstoreError as err:
                return _error(env, settings, 500, err)
            if isinstance(result, StarletteResponse):
                return result
            return HTMLResponse(tpl.render(label=settings.label, **result))

        return await run_in_threadpool(run)

    return endpoint


def _error(env: Environment, settings: Settings, status: int, err: AlpstoreError) -> HTMLResponse:
    html = env.get_template("error.html").render(
        label=settings.label, status=status, message=err.message, hint=err.hint
    )
    return HTMLResponse(html, status_code=status)


class TokenGate:
    """ASGI middleware: the Host check first, then the token in the query string (or the
    one-time ``code`` of ``ui --open``; then a cookie) or 401; GET/HEAD only; security headers
    on every response.
    """

    def __init__(self, app: Any, settings: Settings) -> None:
        self.app = app
        self.settings = settings
        # before the token is looked at: a foreign Host is refused, never given the cookie
        self.host_check = TrustedHostMiddleware(self._gated, allowed_hosts=settings.hosts)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Gate one ASGI call."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_secure(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
                message = {**message, "headers": headers}
            await send(message)

        await self.host_check(scope, receive, send_secure)

    async def _gated(self, scope: Any, receive: Any, send: Any) -> None:
        response = self._gate(Request(scope))
        if response is not None:
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _gate(self, request: Request) -> StarletteResponse | None:
        token = self.settings.token
        if request.method not in ("GET", "HEAD"):
            return PlainTextResponse("read-only inspector: GET only\n", status_code=405)
        given = request.query_params.get("token")
        code = request.query_params.get("code")
        if (given is not None and secrets.compare_digest(given.encode(), token.encode())) or (
            code is not None and self.settings.take_open_code(code)
        ):
            query = [
                (k, v) for k, v in request.query_params.multi_items() if k not in ("token", "code")
            ]
            path = "/" + request.url.path.lstrip("/")  # "//host/…" would leave this server
            target = path + (f"?{urlencode(query)}" if query else "")
            response = RedirectResponse(target, status_code=303)
            response.set_cookie(
                self.settings.cookie, token, httponly=True, samesite="strict", path="/"
            )
            return response
        cookie = request.cookies.get(self.settings.cookie, "")
        if cookie and secrets.compare_digest(cookie.encode(), token.encode()):
            return None
        return PlainTextResponse(
            "401: this alpstore inspector needs its token: open the URL `alpstore ui` printed\n",
            status_code=401,
        )


def create_app(settings: Settings) -> Starlette:
    """The inspector over ``settings.store``."""
    env = _env()
    routes = [
        Route("/", _page("sessions.html", pages.sessions, settings, env)),
        Route("/s/{ref:path}/bisect", _page("bisect.html", pages.bisect, settings, env)),
        Route("/s/{ref:path}/poll", _json(pages.poll, settings)),
        Route("/s/{ref:path}", _page("timeline.html", pages.timeline, settings, env)),
        Route("/t/{ref:path}", _page("thread.html", pages.thread, settings, env)),
        Route("/c/{ck:int}", _page("conversation.html", pages.conversation, settings, env)),
        Route("/diff", _page("diff.html", pages.diff, settings, env)),
        Route("/archive", _page("archive.html", pages.archive, settings, env)),
        Route("/continuity", _page("continuity.html", pages.continuity, settings, env)),
        Mount("/static", StaticFiles(directory=STATIC_DIR), name="static"),
    ]
    middleware = [Middleware(TokenGate, settings=settings)]
    return Starlette(routes=routes, middleware=middleware)


def _json(
    handler: Callable[[Request, Settings], dict[str, Any]], settings: Settings
) -> Callable[[Request], Awaitable[StarletteResponse]]:
    async def endpoint(request: Request) -> StarletteResponse:
        def run() -> StarletteResponse:
            try:
                return JSONResponse(handler(request, settings))
            except NotFoundError as err:
                return JSONResponse({"error": err.message}, status_code=404)
            except AlpstoreError as err:
                return JSONResponse({"error": err.message}, status_code=400)

        return await run_in_threadpool(run)

    return endpoint


WILDCARDS = ("0.0.0.0", "::", "")
"""Bind addresses meaning every interface."""


def allowed_hosts(host: str, machine: list[str] | None = None) -> list[str]:
    """Host header values the server answers to: this machine's loopback names, plus the
    address it binds when that is another one; bound to every interface (``0.0.0.0``, ``::``),
    this machine's own names and addresses (``machine``, default :func:`machine_names`) — never
    the wildcard itself, which no browser sends.
    """
    hosts = list(LOCAL_HOSTS)
    extra = (machine_names() if machine is None else machine) if host in WILDCARDS else [host]
    for name in extra:
        shown = f"[{name}]" if ":" in name and not name.startswith("[") else name
        if shown not in hosts:
            hosts.append(shown)
    return hosts


def machine_names() -> list[str]:
    """This machine's host name, its fully qualified name and the addresses they resolve to
    (what another machine may put in a Host header to reach a server bound to every
    interface).
    """
    import socket

    names: list[str] = []
    for name in (socket.gethostname(), socket.getfqdn()):
        if name and name not in names:
            names.append(name)
    for name in list(names):
        try:
            infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
        except OSError:
            continue
        for info in infos:
            address = str(info[4][0]).split("%", 1)[0]
            if address not in names:
                names.append(address)
    return names
