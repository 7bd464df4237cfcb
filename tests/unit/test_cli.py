"""The command line: help, one-line errors with exit code 2, simulate."""
import json
import os
import subprocess
import sys

import pytest

from gpufleet.cli import main


def run(*args, env=None):
    return subprocess.run([sys.executable, "-m", "gpufleet", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})}, cwd=os.path.dirname(__file__))


@pytest.mark.parametrize("args, names", [
    (["simulate", "--nodes", "lots"], "--nodes"),
    (["simulate", "--nodes", "0"], "--nodes"),
    (["simulate", "--hours", "-2"], "--hours"),
    (["simulate", "--start", "yesterday-ish"], "--start"),
    (["replay"], "FILE"),
    (["replay", "/no/such/file.jsonl"], "FILE"),
    (["frobnicate"], "frobnicate"),
    (["summary", "--dsn", "mysql://db"], "store.dsn"),
    (["summary", "--database", "bad-name!"], "store.database"),
    (["bill"], "--month"),
    (["bill", "--month", "2026-13"], "--month"),
    (["bill", "--month", "2026-01", "--format", "pdf"], "--format"),
    (["model", "eval", "--nodes", "0"], "--nodes"),
    (["model", "eval", "--interval", "-5"], "--interval"),
    (["model", "eval", "--faults", "-1"], "--faults"),
    (["model", "eval", "--seeds", "9001-x"], "--seeds"),
    (["model", "train", "--intervals", "5,fast"], "--intervals"),
    (["model", "train", "--gpus-per-node", "65"], "--gpus-per-node"),
    (["model", "train", "--faults", "0"], "--faults"),
])
def test_bad_arguments_give_one_line_and_exit_2(args, names, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and names in err and "Traceback" not in err, err


def test_bad_setting_from_the_environment_names_it():
    out = run("summary", env={"GPUFLEET_STREAM__LATENESS_S": "-5"})
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0
    assert "stream.lateness_s" in out.stderr and "GPUFLEET_STREAM__LATENESS_S" in out.stderr


def test_bad_config_file_names_it(tmp_path):
    cfg = tmp_path / "gpufleet.toml"
    cfg.write_text("[store]\nbatch_rows = 0\n")
    assert main(["--config", str(cfg), "summary"]) == 2
    cfg.write_text("[stream]\nidle_window = 5\n")        # a misspelt setting is refused, not ignored
    assert main(["--config", str(cfg), "summary"]) == 2
    assert main(["--config", str(tmp_path / "missing.toml"), "summary"]) == 2


def test_help_explains_every_command():
    out = run("--help")
    assert out.returncode == 0
    for command in ("demo", "simulate", "replay", "db", "summary", "forecast", "scale", "serve", "bill"):
        assert command in out.stdout
        sub = run(command, "--help")
        assert sub.returncode == 0 and "usage: gpufleet " + command in sub.stdout


def test_simulate_writes_telemetry_and_labels(tmp_path):
    out = tmp_path / "t.jsonl"
    assert main(["simulate", "--nodes", "2", "--gpus-per-node", "2", "--hours", "1", "--faults", "1",
                 "-o", str(out)]) == 0
    lines = out.read_text().splitlines()
    assert len(lines) == 2 * 720 and json.loads(lines[0])["schema"] == "gpufleet.telemetry.v1"
    labels = [json.loads(x) for x in (tmp_path / "t.labels.jsonl").read_text().splitlines()]
    assert all({"kind", "start", "end", "node"} <= set(label) for label in labels)


@pytest.mark.parametrize("command, extra", [(["replay", "x.jsonl"], "embedded"), (["worker"], "worker")])
def test_a_stream_command_without_msgspec_names_the_install_that_brings_it(tmp_path, command, extra):
    blocked = tmp_path / "msgspec"
    blocked.mkdir()
    (blocked / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'msgspec'\", name='msgspec')\n")
    (tmp_path / "x.jsonl").write_text('{"schema": "gpufleet.telemetry.v1", "ts": 1767571200, "node": "n"}\n')
    out = subprocess.run([sys.executable, "-m", "gpufleet", *command], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip() == (f"gpufleet {command[0]}: needs the {extra} install, which lacks msgspec: "
                                  f"pip install 'gpufleet[{extra}]'")


def test_model_eval_simulates_the_fleet_its_options_describe():
    """--interval and --start reach the simulated fleet (the fleet it says it scores is the one it scores)."""
    out = run("model", "eval", "--nodes", "1", "--gpus-per-node", "2", "--hours", "0.05", "--faults", "0",
              "--interval", "30", "--start", "2026-03-02", "--seeds", "7", "--no-baselines")
    assert out.returncode == 0, out.stderr
    assert "seed 7 (1 nodes x 2 GPUs, 0.05 h from 2026-03-02 00:00 UTC, sampled every 30 s)" in out.stderr


def test_a_bill_action_takes_the_store_before_or_after_it():
    """`bill --dsn X rerate` and `bill rerate --dsn X` reach the same store: the action's own default never
    overrides a value given before it."""
    from gpufleet.cli import build_parser

    rerate = ["rerate", "--from", "2026-11", "--to", "2026-12", "--reason", "r"]
    parser = build_parser(full=True)
    before = parser.parse_args(["bill", "--dsn", "http://a:1", "--database", "d1", *rerate])
    after = parser.parse_args(["bill", *rerate, "--dsn", "http://b:2", "--database", "d2"])
    neither = parser.parse_args(["bill", *rerate])
    assert (before.dsn, before.database) == ("http://a:1", "d1")
    assert (after.dsn, after.database) == ("http://b:2", "d2")
    assert neither.dsn is None and neither.database is None


def test_help_lists_every_command_without_importing_any_commands_module():
    code = ("import sys\nfrom gpufleet.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith('gpufleet.commands.')), file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stderr.strip() == "['gpufleet.commands.common']", out.stderr
    from gpufleet.commands import COMMANDS
    for name, info in COMMANDS.items():
        assert f"    {name} " in out.stdout and info.summary.split()[0] in out.stdout, name


def test_each_commands_summary_is_the_one_its_own_help_shows_and_only_the_one_asked_for_is_built():
    from gpufleet.cli import build_parser
    from gpufleet.commands import COMMANDS

    def subparsers(parser):
        (sub,) = [a for a in parser._actions if a.dest == "command"]
        return sub
    full = subparsers(build_parser(full=True))
    assert {c.dest: c.help for c in full._choices_actions} == {name: info.summary for name, info in COMMANDS.items()}
    for name in COMMANDS:
        sub = subparsers(build_parser(["--config", "x.toml", name, "--help"]))
        built = {n for n, p in sub.choices.items() if len(p._actions) > 1}       # more than its -h
        assert built == {name}, (name, built)
