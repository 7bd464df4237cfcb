"""A local HTTP receiver that records every request: the tests' receivers, and what ``demo --notify`` and
``replay --notify`` deliver to when given no routing file (:func:`local_routing`).

:class:`RecordingReceiver` listens on 127.0.0.1, answers each POST as ``answer`` says (by default 200,
and 202 with PagerDuty's success body on paths under ``/pagerduty``) and keeps every request with its
arrival time and the status it got. :meth:`down` closes the port (connections are refused, as with a
receiver that is down) and :meth:`up` opens it again on the same port. With ``log_path`` each request is
also written there as a JSON line (path, headers, body). Nothing here runs unless a command, a test or a
benchmark starts it.
"""
from __future__ import annotations

import http.server
import json
import os
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
    def __init__(self, port: int = 0, answer: Answer = default_answer, delay_s: float = 0.0,
                 log_path: str | None = None):
        self.port, self.answer, self.delay_s, self.log_path = port, answer, delay_s, log_path
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
                    if receiver.log_path:
                        receiver.log(self.path, headers, body)
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

    def log(self, path: str, headers: dict[str, str], body: bytes) -> None:
        assert self.log_path
        try:
            shown = json.loads(body)
        except ValueError:
            shown = body.decode("utf-8", "replace")
        kept = {k: v for k, v in headers.items() if k.startswith("x-gpufleet") or k == "content-type"}
        with open(self.log_path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"receiver": path.strip("/").split("/")[0], "path": path, "headers": kept,
                                "body": shown}, ensure_ascii=False) + "\n")

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


# The routing of ``--notify`` given no file: the shipped example's shape (every alert to chat, critical ones paged
# too, every one to Alertmanager and a signed webhook), each receiver a path of one local recording receiver.
LOCAL_SECRET = "local-receiver"


def local_routing(url: str) -> dict:
    """A routing file (as parsed TOML) whose receivers all post to ``url`` (a local :class:`RecordingReceiver`);
    the secrets it names are set in this process's environment by :func:`start_local`."""
    return {
        "route": {"receiver": "slack", "group_by": ["kind", "pool"], "group_wait": "30s", "group_interval": "5m",
                  "routes": [{"match": {"severity": "critical"}, "receiver": "pagerduty", "continue": True},
                             {"match_re": {"pool": ".*"}, "receiver": "alertmanager", "continue": True},
                             {"match_re": {"pool": ".*"}, "receiver": "webhook", "group_by": ["..."],
                              "continue": True},
                             {"match_re": {"pool": ".*"}, "receiver": "slack"}]},
        "receivers": {
            "slack": {"type": "slack", "url_env": "GPUFLEET_LOCAL_SLACK_URL", "rate_per_s": 0},
            "pagerduty": {"type": "pagerduty", "url": f"{url}/pagerduty", "routing_key_env": "GPUFLEET_LOCAL_SECRET",
                          "rate_per_s": 0},
            "alertmanager": {"type": "alertmanager", "url": f"{url}/alertmanager"},
            "webhook": {"type": "webhook", "url": f"{url}/webhook", "signing_key_env": "GPUFLEET_LOCAL_SECRET"},
        },
    }


def start_local(log_path: str) -> RecordingReceiver:
    """A recording receiver on a free local port, writing every request to ``log_path`` (emptied first), with the
    environment :func:`local_routing`'s secrets come from."""
    os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
    open(log_path, "w").close()
    receiver = RecordingReceiver(log_path=log_path).up()
    os.environ["GPUFLEET_LOCAL_SLACK_URL"] = receiver.url("/slack")
    os.environ["GPUFLEET_LOCAL_SECRET"] = LOCAL_SECRET
    return receiver
