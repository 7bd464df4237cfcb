"""One HTTP POST through the standard library (urllib: proxies from the environment are honoured).

Redirects are not followed: a webhook answered with a redirect is a configuration to fix, and
following it would turn the POST into a GET. Any answer with a status is returned, 4xx and 5xx
included; only a request that got no answer (refused, reset, timed out, bad address) raises.
"""
from __future__ import annotations

import http.client
import urllib.error
import urllib.request
from dataclasses import dataclass, field

MAX_BODY = 64 * 1024       # of an answer: enough for any error text


class Unreachable(Exception):
    """No answer: connection refused or reset, a timeout, a name that does not resolve."""


class BadRequest(Exception):
    """A request that can never be sent as it is (a URL urllib cannot open): not worth a retry."""


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str] = field(default_factory=dict)      # names in lower case
    body: bytes = b""

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None            # urllib then raises HTTPError with the 3xx answer


_opener: urllib.request.OpenerDirector | None = None


def post(url: str, body: bytes, headers: dict[str, str], timeout_s: float) -> Response:
    global _opener
    if _opener is None:
        _opener = urllib.request.build_opener(_NoRedirect)
    try:
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    except ValueError as err:                  # "unknown url type": a configuration to fix, never an answer
        raise BadRequest(f"cannot send to this URL: {err}") from None
    try:
        with _opener.open(request, timeout=timeout_s) as answer:
            return Response(answer.status, {k.lower(): v for k, v in answer.headers.items()}, answer.read(MAX_BODY))
    except urllib.error.HTTPError as err:
        try:
            text = err.read(MAX_BODY)
        except (OSError, http.client.HTTPException):
            text = b""
        return Response(err.code, {k.lower(): v for k, v in (err.headers or {}).items()}, text)
    except urllib.error.URLError as err:
        raise Unreachable(str(err.reason)) from None
    except (OSError, http.client.HTTPException, ValueError) as err:   # timeouts, resets, a bad URL
        raise Unreachable(f"{type(err).__name__}: {err}") from None
