"""Test doubles shipped with the router: a local HTTP receiver that records every request.

:class:`RecordingReceiver` listens on 127.0.0.1, answers each POST as ``answer`` says (by default 200,
and 202 with PagerDuty's success body on paths under ``/pagerduty``) and keeps every request with its
arrival time and the status it got. :meth:`down` closes the port (connections are refused, as with a
receiver that is down) and :meth:`up` opens it again on the same port. Used by the tests and by
``bench/bench_notify.py``; nothing here runs unless a test or a benchmark starts it.
"""
from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Recorded:
    path: str
    headers: dict[str, str]          # names in lower case
    body: bytes
    at: float                        # time.time() when it arrived
    status: int                      # what it was answered

    def json(self):
        return json.loads(self.body)


Answer = Callable[["RecordingReceiver", str, dict[str, str], bytes], tuple[int, dict[str, str], bytes]]


def default_answer(receiver: RecordingReceiver, path: str, headers: dict[str, str],
                   body: bytes) -> tuple[int, dict[str, str], bytes]:
    if path.startswith("/pagerduty"):
        key = json.loads(body).get("dedup_key", "")
        return 202, {"Content-Type": "application/json"}, json.dumps(
            {"status": "success", "message": "Event processed", "dedup_key": key}).encode()
    return 200, {"Content-Type": "text/plain"}, b"ok"


class RecordingReceiver:
    def __init__(self, port: int = 0, answer: Answer = default_answer, delay_s: float = 0.0):
        self.port, self.answer, self.delay_s = port, answer, delay_s
        self.requests: list[Recorded] = []
        self.lock = threading.Lock()
        self.server: http.server.ThreadingHTTPServer | None = None
        self.thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------
    def up(self) -> RecordingReceiver:
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):              # noqa: N802 (the name http.server calls)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                if receiver.delay_s:
                    time.sleep(receiver.delay_s)
                status, extra, answer = receiver.answer(receiver, self.path, headers, body)
                with receiver.lock:
                    receiver.requests.append(Recorded(self.path, headers, body, time.time(), status))
                self.send_response(status)
                for k, v in extra.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       name="recording-receiver", daemon=True)
        self.thread.start()
        return self

    def down(self) -> None:
        """Stop listening: new connections are refused until :meth:`up`."""
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    stop = down

    def __enter__(self) -> RecordingReceiver:
        return self.up() if self.server is None else self

    def __exit__(self, *exc) -> None:
        self.down()

    # -- what arrived ----------------------------------------------------------------
    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def received(self, path: str | None = None, accepted_only: bool = False) -> list[Recorded]:
        with self.lock:
            found = list(self.requests)
        return [r for r in found if (path is None or r.path.startswith(path)) and
                (not accepted_only or 200 <= r.status < 300)]

    def wait_for(self, predicate: Callable[[], bool], timeout_s: float, what: str = "") -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout_s:g} s for {what or 'the receiver'}")
            time.sleep(0.05)
