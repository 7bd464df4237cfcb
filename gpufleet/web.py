"""gpufleet's HTTP service (``gpufleet serve``): a small router on the standard library's ThreadingHTTPServer.

Parts of the service mount their routes on one :class:`Router` (the forecast feed: ``feed.mount``), so
other pages join the same service the same way. Handlers take a :class:`Request` and return a
:class:`Response`; an exception in a handler is logged and answered with 500, never kills the server.
"""
from __future__ import annotations

import gzip
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

log = logging.getLogger("gpufleet.web")
GZIP_MIN = 1024          # bytes: smaller answers go as they are


def accepts_gzip(accept_encoding: str) -> bool:
    """Whether an Accept-Encoding header accepts gzip (``gzip;q=0`` refuses it)."""
    for part in accept_encoding.split(","):
        name, _, params = part.strip().partition(";")
        if name.strip().lower() in ("gzip", "*"):
            q = params.strip()
            return not (q.startswith("q=") and float(q[2:] or 0) == 0)
    return False


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


def json_response(value, status: int = 200) -> Response:
    return Response(status, json.dumps(value, separators=(",", ":")).encode())


def error(status: int, message: str) -> Response:
    return json_response({"error": message}, status)


Handler = Callable[[Request], Response]


class Router:
    """Routes by method and exact path."""

    def __init__(self):
        self.routes: dict[tuple[str, str], Handler] = {}
        self.prefixes: list[tuple[str, Handler]] = []          # GET paths under a prefix (static files)
        self.descriptions: dict[str, str] = {}

    def add_prefix(self, prefix: str, handler: Handler, description: str = "") -> None:
        """Answer GET of every path under ``prefix`` (ending in ``/``) with ``handler``."""
        self.prefixes.append((prefix, handler))
        if description:
            self.descriptions[prefix] = description

    def add(self, method: str, path: str, handler: Handler, description: str = "") -> None:
        if (method, path) in self.routes:
            raise ValueError(f"{method} {path} is already routed")
        self.routes[(method, path)] = handler
        if description:
            self.descriptions[path] = description

    def handle(self, request: Request) -> Response:
        handler = self.routes.get((request.method, request.path))
        if handler is None and request.method == "GET":
            handler = next((h for p, h in self.prefixes if request.path.startswith(p) or request.path == p[:-1]),
                           None)
        if handler is None:
            if any(p == request.path for _, p in self.routes):
                return error(405, f"{request.method} is not allowed on {request.path}")
            return error(404, f"no such path {request.path}; try " + ", ".join(sorted(self.descriptions)))
        try:
            return handler(request)
        except Exception:
            log.exception("%s %s failed", request.method, request.path)
            return error(500, "internal error, see the server's log")


def static_files(directory: str, prefix: str, missing: str) -> Handler:
    """A handler serving the files under ``directory`` at ``prefix`` (``index.html`` for a folder); ``missing`` is
    what a 404 says while the directory does not exist. Never a path outside ``directory``."""
    import mimetypes
    import os

    root = os.path.realpath(directory)

    def handle(request: Request) -> Response:
        if not os.path.isdir(root):
            return error(404, missing)
        if request.path == prefix[:-1]:
            return Response(301, b"", "text/plain", {"Location": prefix})
        rel = request.path[len(prefix):]
        path = os.path.realpath(os.path.join(root, rel))
        if path != root and not path.startswith(root + os.sep):
            return error(404, f"no such page {request.path}")
        if os.path.isdir(path):
            path = os.path.join(path, "index.html")
        if not os.path.isfile(path):
            return error(404, f"no such page {request.path}")
        with open(path, "rb") as f:
            body = f.read()
        kind = mimetypes.guess_type(path)[0] or "application/octet-stream"
        if kind.startswith("text/") or kind in ("application/javascript", "application/json"):
            kind += "; charset=utf-8"
        return Response(200, body, kind)
    return handle


def make_server(router: Router, host: str, port: int) -> ThreadingHTTPServer:
    """A server bound to ``host:port`` (port 0: any free one; ``server.server_address`` tells which)."""

    class RequestHandler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self, method: str, head: bool = False) -> None:
            parts = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            response = router.handle(Request(method, parts.path, query, dict(self.headers.items())))
            body = response.body
            self.send_response(response.status)
            self.send_header("Content-Type", response.content_type)
            for name, value in response.headers.items():
                self.send_header(name, value)
            if len(body) >= GZIP_MIN:
                self.send_header("Vary", "Accept-Encoding")
                try:
                    zipped = accepts_gzip(self.headers.get("Accept-Encoding", ""))
                except ValueError:
                    zipped = False
                if zipped:
                    body = gzip.compress(body, compresslevel=6, mtime=0)
                    self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not head:
                self.wfile.write(body)

        def do_GET(self):        # noqa: N802 (the standard library's names)
            self._serve("GET")

        def do_HEAD(self):       # noqa: N802
            self._serve("GET", head=True)

        def log_message(self, format, *args):   # noqa: A002 (the standard library's signature)
            log.debug("%s - %s", self.address_string(), format % args)

    server = ThreadingHTTPServer((host, port), RequestHandler)
    server.daemon_threads = True
    return server


def serve(router: Router, host: str, port: int, stop: threading.Event | None = None,
          ready: Callable[[str, int], None] | None = None) -> None:
    """Serve until ``stop`` is set (or forever)."""
    server = make_server(router, host, port)
    bound_host, bound_port = server.server_address[:2]
    if ready is not None:
        ready(str(bound_host), int(bound_port))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            if stop is None:
                thread.join(0.5)
            elif stop.wait(0.5):
                break
    finally:
        server.shutdown()
        server.server_close()
