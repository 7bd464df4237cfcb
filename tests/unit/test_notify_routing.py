"""The routing file: matchers, durations, the tree (first match, continue, inheritance, groups) and
one-line errors naming the setting; secrets only from the environment or files."""
import pytest
from notify_helpers import make

from gpufleet.streams.notify.matchers import Matcher, labels, parse_duration
from gpufleet.streams.notify.receivers import RoutesError
from gpufleet.streams.notify.routing import Routes

HOOK = {"type": "webhook", "url": "http://127.0.0.1:9/hook", "signing_key_env": "T_SIGNING_KEY"}


@pytest.fixture(autouse=True)
def secrets(monkeypatch):
    monkeypatch.setenv("T_SIGNING_KEY", "s3cr3t-signing")
    monkeypatch.setenv("T_SLACK_URL", "https://hooks.slack.test/services/T0/B0/XYZsecret")
    monkeypatch.setenv("T_PD_KEY", "0123456789abcdef0123456789abcdef")


def routes(route, receivers=None, **extra):
    return Routes.parse({"route": route, "receivers": receivers or {"a": HOOK, "b": HOOK, "c": HOOK}, **extra})


@pytest.mark.parametrize("text, values, expected", [
    ("kind=idle", {"kind": "idle"}, True),
    ("kind=idle", {"kind": "idler"}, False),
    ("kind!=idle", {"kind": "straggler"}, True),
    ("pool=~h100-.*", {"pool": "h100-east"}, True),
    ("pool=~h100", {"pool": "h100-east"}, False),          # the whole value, as Alertmanager anchors it
    ("node!~gpu-0[1-4]", {"node": "gpu-05"}, True),
    ("tenant=", {"tenant": ""}, True),                      # a missing value is ''
])
def test_matchers(text, values, expected):
    assert Matcher.parse(text).matches(values) is expected


@pytest.mark.parametrize("text", ["kind", "colour=red", "pool=~(", "=idle"])
def test_bad_matchers_say_why(text):
    with pytest.raises(ValueError):
        Matcher.parse(text)


def test_labels_of_an_alert():
    a = make(gpu=None, job=None)
    assert labels(a) == {"kind": "idle", "severity": "warning", "tenant": "acme", "pool": "h100-east", "node": "n1",
                         "job": "", "gpu": ""}


@pytest.mark.parametrize("text, seconds", [("30s", 30), ("5m", 300), ("1h30m", 5400), ("2d", 172800),
                                           ("500ms", 0.5), (90, 90), ("0s", 0)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5 minutes", "-1s", "1x", True])
def test_bad_durations(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_first_matching_child_takes_the_alert_unless_it_continues():
    r = routes({"receiver": "a", "routes": [
        {"match": {"severity": "critical"}, "receiver": "b", "continue": True},
        {"match": {"kind": "straggler"}, "receiver": "c"},
        {"match_re": {"kind": "strag.*"}, "receiver": "a"},          # never reached: the one before takes it
    ]})
    assert [m.receiver for m in r.match(make("straggler", severity="critical"))] == ["b", "c"]
    assert [m.receiver for m in r.match(make("straggler"))] == ["c"]
    assert [m.receiver for m in r.match(make("idle", severity="critical"))] == ["b"]
    assert [m.receiver for m in r.match(make("idle"))] == ["a"]         # no child: the root


def test_children_inherit_receiver_grouping_and_timers():
    r = routes({"receiver": "a", "group_by": ["kind"], "group_wait": "10s", "repeat_interval": "1h",
                "routes": [{"match": {"tenant": "acme"}, "group_wait": "1s",
                            "routes": [{"match": {"pool": "h100-east"}, "receiver": "b"}]}]})
    (m,) = r.match(make())
    assert (m.receiver, m.route.group_by, m.route.group_wait, m.route.group_interval, m.route.repeat_interval) == \
        ("b", ("kind",), 1.0, 300.0, 3600.0)
    assert m.route.path == "route.routes[0].routes[0]"


def test_groups_by_the_group_by_labels():
    r = routes({"receiver": "a", "group_by": ["kind", "pool"]})
    one, two, other = (r.match(make(target=t, gpu=t, pool=p))[0] for t, p in
                       (("GPU-1", "x"), ("GPU-2", "x"), ("GPU-3", "y")))
    assert one.group_key == two.group_key != other.group_key
    assert one.group == {"kind": "idle", "pool": "x"}
    every = routes({"receiver": "a", "group_by": ["..."]})
    assert every.match(make(target="GPU-1"))[0].group_key != every.match(make(target="GPU-2", gpu="GPU-2"))[0].group_key


def test_a_receiver_reached_twice_is_told_once():
    r = routes({"receiver": "a", "routes": [{"match": {"kind": "idle"}, "receiver": "b", "continue": True},
                                            {"match": {"tenant": "acme"}, "receiver": "b"}]})
    assert [m.receiver for m in r.match(make())] == ["b"]


def test_operator_link_is_filled_and_quoted():
    r = routes({"receiver": "a"}, operator_url="https://ops.test/gpu?node={node}&job={job}")
    link = r.receivers["a"].operator_url(make(node="n 1", job="j/1"))
    assert link == "https://ops.test/gpu?node=n%201&job=j%2F1"


@pytest.mark.parametrize("raw, names", [
    ({"route": {"receiver": "nope"}}, "route.receiver"),
    ({"route": {"receiver": "a", "routes": [{"receiver": "zz"}]}}, "route.routes[0].receiver"),
    ({"route": {"receiver": "a", "routes": [{"match_re": {"pool": "("}}]}}, "route.routes[0].match_re"),
    ({"route": {"receiver": "a", "routes": [{"match": {"colour": "x"}}]}}, "route.routes[0].match"),
    ({"route": {"receiver": "a", "group_wait": "soon"}}, "route.group_wait"),
    ({"route": {"receiver": "a", "group_by": ["colour"]}}, "route.group_by"),
    ({"route": {"receiver": "a", "grup_by": ["kind"]}}, "route.grup_by"),
    ({"route": {"receiver": "a", "match": {"kind": "idle"}}}, "route.match"),
    ({"route": {}}, "route.receiver"),
    ({"route": {"receiver": "a"}, "operator_url": "https://x/{colour}"}, "operator_url"),
    ({"route": {"receiver": "a"}, "inhibit_rules": [{"source_matchers": ["colour=red"],
                                                    "target_matchers": ["kind=idle"]}]},
     "inhibit_rules[0].source_matchers"),
    ({"route": {"receiver": "a"}, "inhibit_rules": [{"source_matchers": ["kind=idle"], "target_matchers": []}]},
     "inhibit_rules[0].target_matchers"),
    ({"route": {"receiver": "a"}, "inhibit_rules": [{"source_matchers": ["kind=idle"], "target_matchers": ["kind~x"]}]},
     "inhibit_rules[0].target_matchers"),
    ({"route": {"receiver": "a"}, "inhibit_rules": [{"source_matchers": ["kind=idle"], "target_matchers": ["node=~a"],
                                                    "equal": ["rack"]}]}, "inhibit_rules[0].equal"),
    ({"route": {"receiver": "a"}, "inhibit_rules": [{"source_matchers": ["kind=idle"], "target_matchers": ["node=~a"],
                                                    "source_match": {"kind": "idle"}}]},
     "inhibit_rules[0].source_match"),
])
def test_bad_routes_name_the_setting(raw, names):
    raw = {"receivers": {"a": HOOK}, **raw}
    with pytest.raises(RoutesError) as err:
        Routes.parse(raw)
    text = str(err.value)
    assert names in text and "\n" not in text, text


@pytest.mark.parametrize("receiver, names", [
    ({"type": "slack", "url": "https://hooks.slack.test/services/T0/B0/XYZsecret"}, "receivers.a: url: a secret"),
    ({"type": "pagerduty", "routing_key": "abc"}, "routing_key: a secret"),
    ({"type": "pagerduty"}, "routing_key_env or routing_key_file is required"),
    ({"type": "pagerduty", "routing_key_env": "T_PD_KEY", "routing_key_file": "/x"}, "not both"),
    ({"type": "webhook", "url": "http://x/"}, "signing_key_env or signing_key_file"),
    ({"type": "webhook", "signing_key_env": "T_SIGNING_KEY"}, "exactly one of url"),
    ({"type": "slack", "url_env": "T_UNSET_VARIABLE"}, "receivers.a.url_env: environment variable T_UNSET_VARIABLE"),
    ({"type": "pagerduty", "routing_key_file": "/no/such/file"},
     "receivers.a.routing_key_file: /no/such/file: no such file"),
    ({"type": "pagerduty", "routing_key_env": "T_PD_KEY", "severity": {"warning": "loud"}}, "receivers.a.severity"),
    ({"type": "carrier-pigeon"}, "receivers.a.type"),
    ({"type": "alertmanager", "url": "am:9093"}, "receivers.a.url"),
    ({"type": "webhook", "url": "http://x/", "signing_key_env": "T_SIGNING_KEY", "retries": 3}, "receivers.a.retries"),
    ({"type": "webhook", "url": "not a url", "signing_key_env": "T_SIGNING_KEY"},
     "receivers.a: url 'not a url' is not an http(s) URL"),
    ({"type": "webhook", "url": "ftp://files.test/in", "signing_key_env": "T_SIGNING_KEY"},
     "receivers.a: url 'ftp://files.test/in' is not an http(s) URL"),
    ({"type": "slack", "url_env": "T_BAD_URL"}, "receivers.a.url_env (T_BAD_URL): not a URL"),
    ({"type": "slack", "url_env": "T_NO_HOST_URL"}, "receivers.a.url_env (T_NO_HOST_URL): a URL without a host"),
])
def test_receiver_settings_and_secrets(receiver, names, monkeypatch):
    monkeypatch.setenv("T_BAD_URL", "hooks.slack.test/XYZsecret")
    monkeypatch.setenv("T_NO_HOST_URL", "https:///XYZsecret")
    with pytest.raises(RoutesError) as err:
        Routes.parse({"route": {"receiver": "a"}, "receivers": {"a": receiver}})
    text = str(err.value)
    assert names in text and "\n" not in text, text
    assert "XYZsecret" not in text and "'abc'" not in text


def test_secrets_from_a_file(tmp_path):
    key = tmp_path / "pd"
    key.write_text("0123456789abcdef0123456789abcdef\n")
    r = Routes.parse({"route": {"receiver": "p"},
                      "receivers": {"p": {"type": "pagerduty", "routing_key_file": str(key)}}})
    assert r.receivers["p"].secrets == {"routing_key": "0123456789abcdef0123456789abcdef"}


def test_a_file_with_a_syntax_error_or_missing(tmp_path):
    bad = tmp_path / "routes.toml"
    bad.write_text("[route\nreceiver = 'a'\n")
    with pytest.raises(RoutesError, match="not TOML"):
        Routes.load(str(bad))
    with pytest.raises(RoutesError, match="no such file"):
        Routes.load(str(tmp_path / "missing.toml"))


def test_check_without_secrets_reads_none(monkeypatch):
    monkeypatch.delenv("T_SIGNING_KEY")
    r = Routes.parse({"route": {"receiver": "a"}, "receivers": {"a": HOOK}}, build=False)
    assert r.receivers["a"].secrets == {}
    with pytest.raises(RoutesError, match="T_SIGNING_KEY"):
        Routes.parse({"route": {"receiver": "a"}, "receivers": {"a": HOOK}})


def test_inhibition_rules_as_alertmanager_reads_them():
    r = Routes.parse({"receivers": {"a": HOOK}, "route": {"receiver": "a"}, "inhibit_rules": [
        {"source_matchers": ["severity=critical"], "target_matchers": ["severity=warning"], "equal": ["node"]}]})
    node_over_gpu, rule = r.inhibit_rules
    assert node_over_gpu.name == "node_over_gpu" and rule.name == "inhibit_rules[0]"
    crit = labels(make(severity="critical", node="n1", gpu="GPU-1"))
    warn = labels(make(severity="warning", node="n1", gpu="GPU-2"))
    assert rule.mutes(crit, warn)
    assert not rule.mutes(crit, {**warn, "node": "n2"})                  # equal: the node must be the same
    assert not rule.mutes(warn, crit)
    # both sides empty count as equal, as in Alertmanager
    assert rule.mutes({**crit, "node": ""}, {**warn, "node": ""})
    off = Routes.parse({"receivers": {"a": HOOK}, "route": {"receiver": "a"}, "inhibit": {"node_over_gpu": False}})
    assert off.inhibit_rules == ()


def test_an_alert_matching_both_sides_never_mutes_its_like():
    r = Routes.parse({"receivers": {"a": HOOK}, "route": {"receiver": "a"}, "inhibit": {"node_over_gpu": False},
                      "inhibit_rules": [{"source_matchers": ["kind=~.+"], "target_matchers": ["kind=~.+"],
                                         "equal": ["node"]}]})
    (rule,) = r.inhibit_rules
    one, two = labels(make(gpu="GPU-1")), labels(make(gpu="GPU-2"))
    assert not rule.mutes(one, two) and not rule.mutes(two, one)


def test_the_example_routing_file_is_the_manual_s_and_never_pages_for_underuse(capsys):
    from pathlib import Path

    from gpufleet.cli import main

    root = Path(__file__).resolve().parents[2]
    example = root / "deploy" / "notify" / "routes.toml"
    assert f"```toml\n{example.read_text()}```" in (root / "docs" / "alerting.md").read_text()

    def receivers(*labels: str) -> list[str]:
        assert main(["notify", "routes", "test", "--routes", str(example), *labels]) == 0
        return capsys.readouterr().out.strip().split(",")

    for tenant in ("acme", "globex", ""):
        for pool in ("h100-sxm-east", ""):
            got = receivers("kind=underuse", "severity=info", f"tenant={tenant}", f"pool={pool}", "node=node-001")
            assert got == (["acme-webhook"] if tenant == "acme" else ["fleet-slack"]), (tenant, pool, got)
    assert receivers("kind=memory_leak", "severity=critical", "tenant=globex", "pool=p") == ["oncall", "alertmanager"]
