"""The HTTP service's router over a real local server: exact routes, 404 and 405 as JSON, a failing handler
answered with 500 while the server keeps serving."""
import json
import threading
import urllib.error
import urllib.request

import pytest

from gpufleet import web


def get(url: str, method: str = "GET"):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


PAGE = ("<p>" + "gpufleet " * 2000 + "</p>").encode()


@pytest.fixture
def base():
    router = web.Router()
    router.add("GET", "/v1/echo", lambda r: web.json_response({"query": r.query}), "echo")
    router.add("GET", "/boom", lambda r: 1 / 0, "fails")
    router.add("GET", "/page", lambda r: web.Response(200, PAGE, "text/html; charset=utf-8"), "a page")
    with pytest.raises(ValueError, match="already routed"):
        router.add("GET", "/v1/echo", lambda r: web.json_response({}))
    assert router.handle(web.Request("POST", "/v1/echo", {})).status == 405
    server = web.make_server(router, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_routes_errors_and_a_failing_handler(base):
    assert get(f"{base}/v1/echo?pool=a&pool=b&x=1") == (200, b'{"query":{"pool":"b","x":"1"}}')
    status, body = get(f"{base}/nowhere")
    assert status == 404 and json.loads(body)["error"].startswith("no such path /nowhere; try /boom, /page, /v1/echo")
    assert get(f"{base}/v1/echo", "POST")[0] == 501                # only GET and HEAD are served
    assert get(f"{base}/boom")[0] == 500
    assert get(f"{base}/v1/echo")[0] == 200                        # still serving
    status, body = get(f"{base}/v1/echo", "HEAD")
    assert status == 200 and body == b""


def test_the_service_needs_no_forecast_install():
    """`gpufleet serve` runs on the store install: nothing it imports needs numpy or scikit-learn."""
    import subprocess
    import sys
    code = ("import sys\nsys.modules['numpy'] = sys.modules['sklearn'] = None\n"
            "import gpufleet.cli, gpufleet.commands.forecast, gpufleet.feed, gpufleet.web, gpufleet.settings\n"
            "gpufleet.cli.build_parser(full=True).parse_args(['serve', '--port', '0'])\nprint('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_a_page_goes_gzipped_only_to_a_client_that_accepts_it(base):
    import gzip

    def fetch(path: str, accept: str | None):
        req = urllib.request.Request(base + path, headers={"Accept-Encoding": accept} if accept else {})
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.read(), r.headers.get("Content-Encoding"), r.headers.get("Vary"), int(r.headers["Content-Length"])
    body, encoding, vary, length = fetch("/page", "gzip, deflate, br")
    assert encoding == "gzip" and vary == "Accept-Encoding" and length == len(body) < len(PAGE) / 20
    assert gzip.decompress(body) == PAGE
    for accept in (None, "identity", "br", "gzip;q=0"):
        assert fetch("/page", accept)[:2] == (PAGE, None), accept
    small = fetch("/v1/echo", "gzip")          # below a kilobyte: not worth it
    assert small[1] is None and json.loads(small[0]) == {"query": {}}
