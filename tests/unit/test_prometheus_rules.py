"""The Prometheus rules of deploy/prometheus/ as Prometheus reads them: `promtool check rules` and the rule unit
tests (`promtool test rules`), with Debian's promtool (`apt-get install prometheus`, which .ci/run does). That a real
Prometheus scrapes `gpufleet serve` and evaluates them is tests/integration/test_views.py."""
import re
import shutil
import subprocess
from pathlib import Path

import pytest

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"

pytestmark = pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool (apt-get install prometheus)")


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", *args], cwd=RULES, capture_output=True, text=True, timeout=120)


def test_the_rules_are_valid():
    out = promtool("check", "rules", "gpufleet.rules.yml")
    assert out.returncode == 0 and "SUCCESS: 12 rules found" in out.stdout, out.stdout + out.stderr


def test_the_rules_unit_tests_pass_and_fail_when_a_rule_changes(tmp_path):
    out = promtool("test", "rules", "gpufleet.rules.test.yml")
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr
    # the same tests against a rule whose threshold moved: they see it
    for name in ("gpufleet.rules.yml", "gpufleet.rules.test.yml"):
        shutil.copy(RULES / name, tmp_path / name)
    rules = tmp_path / "gpufleet.rules.yml"
    rules.write_text(re.sub(r"gpufleet_telemetry_age_seconds > 600", "gpufleet_telemetry_age_seconds > 6000",
                            rules.read_text()))
    broken = subprocess.run(["promtool", "test", "rules", "gpufleet.rules.test.yml"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert broken.returncode != 0 and "GpufleetTelemetryStale" in broken.stdout + broken.stderr
    rules.write_text(re.sub(r"gpufleet_worker_partition_stuck\) == 1", "gpufleet_worker_partition_stuck) == 2",
                            (RULES / "gpufleet.rules.yml").read_text()))
    broken = subprocess.run(["promtool", "test", "rules", "gpufleet.rules.test.yml"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert broken.returncode != 0 and "GpufleetWorkerPartitionStuck" in broken.stdout + broken.stderr


def test_every_alert_rule_links_a_runbook_page_that_exists():
    text = (RULES / "gpufleet.rules.yml").read_text()
    alerts = re.findall(r"- alert: (\w+)", text)
    links = re.findall(r'runbook_url: "http://127\.0\.0\.1:8080/manual/runbooks/([^"]+)/"', text)
    assert len(alerts) == len(links) == 6
    pages = RULES.parents[1] / "docs" / "runbooks"
    for link in links:
        name = "memory_leak" if link == "{{ $labels.kind }}" else link     # the kind the rule's tests use
        assert (pages / f"{name}.md").is_file(), link
