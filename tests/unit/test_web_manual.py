"""The manual served at /manual/ by gpufleet serve's router: its pages, folders as their index.html, nothing outside
the built site, and a 404 that says how to build it while it is not there."""
import json

from gpufleet.web import Request, Router, static_files


def served(tmp_path):
    site = tmp_path / "site"
    (site / "runbooks" / "memory_leak").mkdir(parents=True)
    (site / "runbooks" / "memory_leak" / "index.html").write_text("<h1>Memory leak</h1>")
    (site / "style.css").write_text("h1{}")
    (tmp_path / "secret.txt").write_text("no")
    router = Router()
    router.add_prefix("/manual/", static_files(str(site), "/manual/", "not built: run make docs"), "the manual")
    return router


def get(router, path):
    return router.handle(Request("GET", path, {}))


def test_runbook_pages_and_files_are_served(tmp_path):
    router = served(tmp_path)
    page = get(router, "/manual/runbooks/memory_leak/")
    assert page.status == 200 and page.body == b"<h1>Memory leak</h1>" and page.content_type.startswith("text/html")
    assert get(router, "/manual/style.css").content_type.startswith("text/css")
    moved = get(router, "/manual")
    assert moved.status == 301 and moved.headers["Location"] == "/manual/"


def test_nothing_outside_the_site_and_a_missing_site_says_how_to_build_it(tmp_path):
    router = served(tmp_path)
    for path in ("/manual/../secret.txt", "/manual/%2e%2e/secret.txt", "/manual/runbooks/nope/"):
        assert get(router, path).status == 404
    router = Router()
    router.add_prefix("/manual/", static_files(str(tmp_path / "none"), "/manual/", "not built: run make docs"))
    answer = get(router, "/manual/runbooks/idle/")
    assert answer.status == 404 and json.loads(answer.body)["error"] == "not built: run make docs"
