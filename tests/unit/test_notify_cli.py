"""The alert delivery commands' arguments and settings: one line naming what is wrong, exit code 2,
before anything is opened."""
import pytest

from gpufleet.cli import main

ROUTES = """
[route]
receiver = "hook"
[[route.routes]]
match = { severity = "critical" }
receiver = "pd"
[receivers.hook]
type = "webhook"
url = "https://hooks.test/in"
signing_key_env = "T_SIGNING_KEY"
[receivers.pd]
type = "pagerduty"
routing_key_env = "T_PD_KEY"
"""


@pytest.fixture
def routes(tmp_path, monkeypatch):
    monkeypatch.setenv("T_SIGNING_KEY", "k")
    monkeypatch.setenv("T_PD_KEY", "pd-secret-key")
    path = tmp_path / "routes.toml"
    path.write_text(ROUTES)
    return path


def one_line_error(capsys, *names):
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for name in names:
        assert name in err, err
    return err


def test_notify_check_prints_the_tree(routes, capsys):
    assert main(["notify", "--routes", str(routes), "--check"]) == 0
    out = capsys.readouterr().out
    assert "receiver pd: pagerduty, 2/s, bursts of 10" in out and "severity=critical -> pd [pagerduty]" in out
    assert "pd-secret-key" not in out


@pytest.mark.parametrize("args, names", [
    (["notify"], ["--routes"]),
    (["notify", "--routes", "/no/such/routes.toml"], ["no such file"]),
    (["silence", "add", "--match", "colour=red", "--for", "2h"], ["--match", "colour"]),
    (["silence", "add", "--match", "kind=idle", "--for", "soon"], ["--for"]),
    (["silence", "add", "--match", "kind=idle", "--for", "400d"], ["--for"]),
    (["silence", "add", "--for", "2h"], ["--match"]),
    (["replay", __file__, "--no-store", "--notify", "/no/such/routes.toml"], ["routes file"]),
])
def test_bad_arguments(args, names, capsys):
    assert main(args) == 2
    one_line_error(capsys, *names)


def test_a_missing_secret_names_the_setting_and_never_the_value(routes, capsys, monkeypatch):
    monkeypatch.delenv("T_PD_KEY")
    assert main(["notify", "--routes", str(routes), "--check"]) == 2
    one_line_error(capsys, "receivers.pd.routing_key_env", "T_PD_KEY")


def test_a_secret_in_clear_is_refused(tmp_path, capsys):
    path = tmp_path / "routes.toml"
    path.write_text('[route]\nreceiver = "s"\n[receivers.s]\ntype = "slack"\n'
                    'url = "https://hooks.slack.com/services/T0/B0/XYZsecret"\n')
    assert main(["notify", "--routes", str(path), "--check"]) == 2
    err = one_line_error(capsys, "receivers.s", "url_env")
    assert "XYZsecret" not in err


def test_bad_notify_settings_name_them(routes, capsys, monkeypatch):
    monkeypatch.setenv("GPUFLEET_NOTIFY__BACKOFF_S", "5")
    monkeypatch.setenv("GPUFLEET_NOTIFY__BACKOFF_MAX_S", "1")
    assert main(["notify", "--routes", str(routes), "--check"]) == 2
    one_line_error(capsys, "notify.backoff_max_s", "GPUFLEET_NOTIFY__BACKOFF_MAX_S")
    monkeypatch.delenv("GPUFLEET_NOTIFY__BACKOFF_MAX_S")
    monkeypatch.setenv("GPUFLEET_NOTIFY__RETRY_FOR_S", "-1")
    assert main(["notify", "--routes", str(routes), "--check"]) == 2
    one_line_error(capsys, "notify.retry_for_s")


def test_routes_from_the_settings(routes, capsys, monkeypatch):
    monkeypatch.setenv("GPUFLEET_NOTIFY__ROUTES", str(routes))
    assert main(["notify", "--check"]) == 0
    assert "2 receivers" in capsys.readouterr().out


def test_the_demo_recreates_its_database_and_keeps_the_silences(tmp_path):
    """`demo` starts from an empty database each run, but an operator's silences are theirs: they stay."""
    import subprocess
    import sys
    dsn = f"chdb://{tmp_path / 'store'}"

    def gpufleet(*args):
        out = subprocess.run([sys.executable, "-m", "gpufleet", *args, "--dsn", dsn, "--database", "gpufleet_demo"],
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        return out.stdout
    gpufleet("demo", "--nodes", "2", "--gpus-per-node", "2", "--hours", "0.25", "--faults", "0")
    added = gpufleet("silence", "add", "--match", "kind=idle", "--match", "tenant=acme", "--for", "2h",
                     "--comment", "maintenance")
    sid = added.split()[1]
    gpufleet("demo", "--nodes", "2", "--gpus-per-node", "2", "--hours", "0.25", "--faults", "0")
    listed = gpufleet("silence", "list")
    assert sid in listed and "maintenance" in listed and "tenant=acme" in listed


def test_routes_test_prints_the_receivers_a_label_set_reaches(routes, capsys, monkeypatch):
    monkeypatch.delenv("T_PD_KEY")                      # no secret is read
    assert main(["notify", "routes", "test", "--routes", str(routes), "kind=memory_leak", "severity=critical"]) == 0
    assert capsys.readouterr().out == "pd\n"
    assert main(["notify", "routes", "test", "--routes", str(routes), "kind=idle", "-v"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "hook" and out[1].startswith("  route -> hook [webhook]")
    assert main(["notify", "routes", "test", "--routes", str(routes), "severity=critical",
                 "--verify-receivers", "hook"]) == 1
    assert "expected receivers hook, got pd" in capsys.readouterr().err


@pytest.mark.parametrize("labels, names", [(["colour=red"], "'colour=red'"), (["kind"], "'kind'")])
def test_routes_test_refuses_what_is_not_a_label(routes, labels, names, capsys):
    assert main(["notify", "routes", "test", "--routes", str(routes), *labels]) == 2
    one_line_error(capsys, names, "kind, severity")


def test_check_lists_the_inhibition_rules(tmp_path, routes, capsys):
    path = tmp_path / "inhibit.toml"
    path.write_text(routes.read_text() + '[[inhibit_rules]]\nsource_matchers = ["severity=critical"]\n'
                    'target_matchers = ["severity=warning"]\nequal = ["node", "tenant"]\n')
    assert main(["notify", "--routes", str(path), "--check"]) == 0
    out = capsys.readouterr().out
    assert "2 inhibition rules" in out
    assert "inhibit inhibit_rules[0]: {severity=critical} mutes {severity=warning} with equal node, tenant" in out


@pytest.mark.parametrize("kind, setting", [("pagerduty", 'routing_key_env = "T_PD"\nurl = "not a url"'),
                                           ("alertmanager", 'url = "not a url"'),
                                           ("webhook", 'url = "not a url"\nsigning_key_env = "T_PD"')])
def test_check_refuses_a_url_that_is_not_one_for_every_receiver(tmp_path, capsys, monkeypatch, kind, setting):
    monkeypatch.setenv("T_PD", "key")
    path = tmp_path / "routes.toml"
    path.write_text(f'[route]\nreceiver = "r"\n[receivers.r]\ntype = "{kind}"\n{setting}\n')
    assert main(["notify", "--routes", str(path), "--check"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "receivers.r" in err and "url" in err and "Traceback" not in err


def test_notify_status_reads_the_delivery_log_and_says_which_receiver_is_down(tmp_path, capsys):
    from gpufleet.streams.notify.outbox import Outbox
    outbox = Outbox(str(tmp_path / "log"), fsync=False)
    outbox.receiver_state("oncall", "down", 1.8e9, "no answer: connection refused")
    outbox.receiver_state("chat", "up", None)
    outbox.close()
    assert main(["notify", "status", "--outbox", str(tmp_path / "log")]) == 1
    out = capsys.readouterr().out
    assert "oncall" in out and "DOWN since 2027-01-15" in out and "connection refused" in out
    assert main(["notify", "status", "--outbox", str(tmp_path / "none")]) == 0
    assert "nothing delivered yet" in capsys.readouterr().out
    assert not (tmp_path / "none").exists()                      # reading creates nothing
