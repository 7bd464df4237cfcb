"""The manual agrees with the code: its generated pages are current, the commands page and the parser agree both
ways, every setting, contract field and detector constant is documented, every page is in the navigation, the
README stays a front page that names every dependency, and no page names a file the project lacks or a path
outside it. (The strict build itself, links and anchors included, is `make docs`.)"""
from __future__ import annotations

import importlib.util
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README_MAX_LINES = 260


def _gen():
    spec = importlib.util.spec_from_file_location("docs_gen", DOCS / "gen.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gen():
    return _gen()


def _pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def _prose() -> list[Path]:
    """Every Markdown file of the project: the manual and the top-level files."""
    return [*_pages(), *sorted(ROOT.glob("*.md"))]


# -- generated pages ------------------------------------------------------------------------------------------------
def test_the_generated_pages_are_what_docs_gen_makes_of_the_code_now(gen):
    stale = [str(p.relative_to(ROOT)) for p in gen.stale()]
    assert not stale, f"{stale} are stale: run make docs-gen (.venv/bin/python docs/gen.py) and commit them"


def test_a_region_between_markers_is_all_the_generator_rewrites(gen):
    begin, end = gen.BEGIN.format("x"), gen.END.format("x")
    text = f"# hand\n\nkept\n\n{begin}\nold\n{end}\n\nkept too\n"
    assert gen.fill(text, "x", "new\n", DOCS / "page.md") == f"# hand\n\nkept\n\n{begin}\nnew\n{end}\n\nkept too\n"
    with pytest.raises(SystemExit, match="lacks the markers"):
        gen.fill("# no markers\n", "x", "new\n", DOCS / "page.md")


# -- commands -------------------------------------------------------------------------------------------------------
def _commands_on_the_page() -> dict[str, list[str]]:
    """Every command heading of docs/commands.md with the options its table lists (their strings, and positional
    arguments by name)."""
    found: dict[str, list[str]] = {}
    current = None
    for line in (DOCS / "commands.md").read_text().splitlines():
        m = re.match(r"^#{2,6} `(gpufleet[^`]*)`$", line)
        if m:
            current = m.group(1)
            found[current] = []
            continue
        m = re.match(r"^\| `([^`]+)` \|", line)
        if m and current is not None and m.group(1) != "option":
            label = m.group(1)
            flags = [t.rstrip(",") for t in label.split() if t.startswith("-")]
            found[current] += flags or [label.split()[0]]
    return found


def test_the_commands_page_lists_every_command_and_option_the_parser_knows_and_no_other(gen):
    parser_side, page_side = gen.commands(), _commands_on_the_page()
    assert set(page_side) == set(parser_side), (
        f"only in the parser: {sorted(set(parser_side) - set(page_side))}; "
        f"only on the page: {sorted(set(page_side) - set(parser_side))}")
    for command, options in parser_side.items():
        assert sorted(page_side[command]) == sorted(options), command


def test_every_option_of_the_commands_page_is_in_that_command_s_help(gen):
    for path, parser, _ in gen.command_tree():
        text = parser.format_help()
        for option in _commands_on_the_page()[" ".join(path)]:
            assert option in text, (" ".join(path), option)


# -- settings, contracts, constants ---------------------------------------------------------------------------------
def test_every_setting_has_a_type_a_default_and_a_meaning_on_the_configuration_page(gen):
    page = (DOCS / "configuration.md").read_text()
    rows = [row for _, _, rows in gen.settings_sections() for row in rows]
    from gpufleet.settings import Settings
    sections = set(Settings.model_fields)
    assert {r[0].split(".")[0] for r in rows} == sections
    for path, type_, default, _, meaning in rows:
        assert type_ and default, path
        assert meaning.strip(), (f"setting {path} has no meaning: give its Field a description, or add it to "
                                 "SETTING_MEANINGS in docs/gen.py")
        assert f"| `{path}` |" in page, path


def test_the_generator_s_own_notes_name_settings_that_exist(gen):
    known = set(gen.all_settings())
    for table in ("SETTING_DEFAULTS", "SETTING_MEANINGS", "SETTING_NOTES"):
        stale = set(getattr(gen, table)) - known
        assert not stale, f"docs/gen.py {table} names settings that do not exist: {sorted(stale)}"


def test_every_field_of_every_contract_has_a_meaning(gen):
    fields = gen.contract_fields()
    missing = [f"{name} {f}" for name, model in gen.contract_models() for f, *_, meaning in
               gen.contract_rows(name, model) if not meaning.strip()]
    assert not missing, f"contract fields without a meaning (add them to CONTRACT_MEANINGS in docs/gen.py): {missing}"
    stale = [f"{name} {f}" for name, meanings in gen.CONTRACT_MEANINGS.items() for f in meanings
             if f not in fields.get(name, [])]
    assert not stale, f"CONTRACT_MEANINGS names fields the contracts do not have: {stale}"


def test_every_detector_constant_is_on_its_page_with_why_it_has_its_value(gen):
    import importlib
    for kind in gen.detector_kinds():
        path = ROOT / "models" / "detectors" / kind / "constants.py"
        listed = gen.constants_of(path)
        names = {n.strip() for names, _, _ in listed for n in names.split(",")}
        module = importlib.import_module(f"gpufleet.models.detectors.{kind}.constants")
        assert names == {n for n in vars(module) if n.isupper()}, kind
        page = (DOCS / "detectors" / f"{kind}.md").read_text()
        for name, _, why in listed:
            assert why, f"{kind}: constant {name} has no comment saying its unit and why (models/detectors/{kind})"
            assert f"| `{name}` |" in page, (kind, name)


def test_each_detector_and_alert_kind_has_its_page_and_its_runbook(gen):
    from gpufleet.models.detectors import COST_KINDS, STREAM_KINDS
    for kind in gen.detector_kinds():
        assert (DOCS / "detectors" / f"{kind}.md").exists(), kind
    for kind in [*gen.detector_kinds(), *STREAM_KINDS, *COST_KINDS]:
        assert (DOCS / "runbooks" / f"{kind}.md").exists(), kind


# -- navigation -----------------------------------------------------------------------------------------------------
def test_every_page_is_in_the_navigation_and_every_entry_is_a_page():
    nav = re.findall(r"^\s*- (?:[^:\n]+: )?(\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)
    assert len(nav) == len(set(nav)), "a page is twice in the navigation"
    on_disk = {str(p.relative_to(DOCS)) for p in _pages()}
    assert not on_disk - set(nav), f"pages missing from mkdocs.yml's nav: {sorted(on_disk - set(nav))}"
    absent = {p for p in nav if not (DOCS / p).exists()}
    assert not absent, f"the nav names pages that do not exist: {sorted(absent)}"


# -- the README -----------------------------------------------------------------------------------------------------
def _dependencies() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = [*project["dependencies"], *(s for group in project["optional-dependencies"].values() for s in group)]
    names = {re.split(r"[\[<>=!~; ]", s, maxsplit=1)[0].lower() for s in specs}
    return names - {"gpufleet"}


def test_the_readme_is_a_front_page_that_names_every_dependency_and_why():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= README_MAX_LINES
    deps = text[text.index("## Dependencies"):]
    rows = [line for line in deps.splitlines() if line.startswith("| ") and not line.startswith("| package")]
    named = {n.strip().lower() for row in rows for n in row.split("|")[1].split(",")}
    missing = _dependencies() - named
    assert not missing, f"README's dependency table lacks {sorted(missing)}"
    for heading in ("## The two commands", "## Who uses it", "## Installs per role", "## The manual"):
        assert heading in text
    assert "make demo" in text and "make test" in text


def test_the_readme_s_install_table_is_the_manual_s():
    def table(text: str) -> list[str]:
        start = text.index("| install | for | adds |")
        return text[start:text.index("\n\n", start)].splitlines()
    assert table((ROOT / "README.md").read_text()) == table((DOCS / "index.md").read_text())


# -- what pages name ------------------------------------------------------------------------------------------------
LINK = re.compile(r"\]\(([^)\s]+)\)")
MD_NAME = re.compile(r"(?<![\w/.-])((?:\.\./|\./)*[\w.-]+(?:/[\w.-]+)*\.md)\b")
PARENT = re.compile(r"(?<![\w.])((?:\.\./)+[\w./-]*)")


def _inside(path: Path) -> bool:
    return path.resolve().is_relative_to(ROOT)


def test_every_link_of_every_page_leads_to_a_file_of_the_project():
    bad = []
    for page in _prose():
        for target in LINK.findall(page.read_text()):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue
            path = (page.parent / target.split("#")[0]).resolve()
            if not _inside(path) or not path.exists():
                bad.append(f"{page.relative_to(ROOT)}: {target}")
    assert not bad, bad


def _tracked_text() -> list[Path]:
    """The project's own text files: what git tracks or would track (never a virtualenv, a build or the site)."""
    suffixes = {".md", ".py", ".toml", ".yml", ".yaml", ".sh", ".service", ".sql", ".txt"}
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True)
    if listed.returncode == 0:
        files = [ROOT / name for name in listed.stdout.splitlines()]
    else:  # not a git checkout (an unpacked source archive): everything but what the tools make
        made = {".git", "site", ".services", ".eval", ".eval-intervals", ".typecheck", ".lint-imports", "build"}
        files = [p for p in ROOT.rglob("*")
                 if not any(part in made or part.startswith(".venv") for part in p.relative_to(ROOT).parts[:-1])]
    return [p for p in files if p.is_file() and p.suffix in suffixes and p.name != "test_docs.py"]


# Markdown files a program of the project writes when it runs (not references): bench/eval_forecast.py's report
WRITTEN_BY_PROGRAMS = {"report.md"}
# Markdown files named by a kind that lives only in a test (tests/unit/test_toy_kind.py's toy kind)
NAMED_BY_TEST_FIXTURES = {"runbooks/hot_gpu.md"}


def test_no_file_names_a_markdown_file_the_project_does_not_have():
    bad = []
    for path in _tracked_text():
        named = set(MD_NAME.findall(path.read_text(errors="replace")))
        for name in named - WRITTEN_BY_PROGRAMS - NAMED_BY_TEST_FIXTURES:
            where = [path.parent / name, ROOT / name, DOCS / name]
            if not any(w.exists() for w in where):
                bad.append(f"{path.relative_to(ROOT)}: {name}")
    assert not bad, f"names of Markdown files the project does not have: {bad}"


def test_no_file_gives_a_relative_path_out_of_the_project():
    bad = []
    for path in _tracked_text():
        for rel in set(PARENT.findall(path.read_text(errors="replace"))):
            if not _inside(path.parent / rel):
                bad.append(f"{path.relative_to(ROOT)}: {rel}")
    assert not bad, f"paths that leave the project: {bad}"


def test_the_checks_of_names_and_paths_catch_what_they_are_for():
    """The patterns themselves, on text that must fail and text that must pass."""
    assert MD_NAME.findall("see DESIGN.md and docs/alerting.md") == ["DESIGN.md", "docs/alerting.md"]
    assert PARENT.findall("the notes in ../sibling/notes.txt") == ["../sibling/notes.txt"]
    assert not _inside(DOCS / "../../sibling")
    assert _inside(DOCS / "../deploy")
    assert PARENT.findall("gpufleet eval --traces /tmp/traces") == []      # an absolute example path is no parent path
    assert LINK.findall("[a](runbooks/idle.md#x) and [b](https://example.com)") == \
        ["runbooks/idle.md#x", "https://example.com"]
