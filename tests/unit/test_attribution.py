import json
import logging
import os
from pathlib import Path

import pytest

from gpufleet.collectors.attribution import Attributor, LabelsFile, ProcessAttributor

SECRET = "hunter2-s3cr3t-token"
UID = "1b2c3d4e-aaaa-bbbb-cccc-0123456789ab"


def write_labels(path: Path, mapping) -> None:
    path.write_text(mapping if isinstance(mapping, str) else json.dumps(mapping))


def bump_mtime(path: Path) -> None:
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def add_process(proc: Path, pid: int, start: int = 1000, environ: dict | None = None, cgroup: str | None = None,
                comm: str = "python") -> None:
    d = proc / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    # field 22 is the start time; the command name may hold spaces and parens
    fields = ["S", "1", str(pid), str(pid), "0", "-1", "4194560"] + ["0"] * 12 + [str(start), "123456"]
    (d / "stat").write_text(f"{pid} ({comm}) " + " ".join(fields) + "\n")
    if environ is not None:
        (d / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in environ.items()))
    if cgroup is not None:
        (d / "cgroup").write_text(cgroup)


# --- labels file -----------------------------------------------------------------------------------

def test_labels_lookup_and_reload_on_change(tmp_path):
    path = tmp_path / "labels.json"
    write_labels(path, {"GPU-a": {"tenant": "acme", "job": "train-1", "extra": 5}, "GPU-b": {"tenant": "beta"}})
    labels = LabelsFile(str(path))
    assert labels.lookup("GPU-a") == ("acme", "train-1")
    assert labels.lookup("GPU-b") == ("beta", None)
    assert labels.lookup("GPU-z") is None and labels.error is None

    write_labels(path, {"GPU-a": {"tenant": "zeta", "job": None}})
    assert labels.lookup("GPU-a") == ("acme", "train-1")    # only refresh() looks at the file
    labels.refresh()
    assert labels.lookup("GPU-a") == ("zeta", None) and labels.lookup("GPU-b") is None


def test_unchanged_file_is_not_read_again(tmp_path):
    path = tmp_path / "labels.json"
    write_labels(path, {"GPU-a": {"tenant": "acme", "job": "j1"}})
    labels = LabelsFile(str(path))
    st = os.stat(path)
    with open(path, "r+") as f:     # same inode, same size, mtime put back: looks unchanged
        f.write(json.dumps({"GPU-a": {"tenant": "acmf", "job": "j1"}}))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    labels.refresh()
    assert labels.lookup("GPU-a") == ("acme", "j1")
    bump_mtime(path)
    labels.refresh()
    assert labels.lookup("GPU-a") == ("acmf", "j1")


def test_bad_file_keeps_last_good_mapping_reports_once_and_recovers(tmp_path, caplog):
    path = tmp_path / "labels.json"
    write_labels(path, {"GPU-a": {"tenant": "acme", "job": "j1"}})
    labels = LabelsFile(str(path))
    caplog.set_level(logging.WARNING, logger="gpufleet.collect")

    write_labels(path, '{"GPU-a": {"tenant": "other"')
    for _ in range(3):
        labels.refresh()
    assert labels.lookup("GPU-a") == ("acme", "j1")
    assert str(path) in labels.error and "not JSON" in labels.error and "\n" not in labels.error
    assert [r.getMessage() for r in caplog.records] == [labels.error]

    write_labels(path, '["GPU-a", "acme"]')     # valid JSON, wrong shape: a second distinct change
    labels.refresh()
    labels.refresh()
    assert labels.lookup("GPU-a") == ("acme", "j1") and "expected an object" in labels.error
    assert len(caplog.records) == 2

    write_labels(path, {"GPU-a": {"tenant": "beta", "job": "j2"}})
    labels.refresh()
    assert labels.lookup("GPU-a") == ("beta", "j2") and labels.error is None


@pytest.mark.parametrize("entry", [
    "acme", ["acme"], {"tenant": 7}, {"tenant": ""}, {"job": "x" * 254}, {"tenant": "acme", "job": False},
])
def test_bad_entry_is_left_out_and_reported(tmp_path, entry):
    path = tmp_path / "labels.json"
    write_labels(path, {"GPU-a": {"tenant": "acme", "job": "x" * 253}, "GPU-bad": entry})
    labels = LabelsFile(str(path))
    assert labels.lookup("GPU-a") == ("acme", "x" * 253)
    assert labels.lookup("GPU-bad") is None
    assert str(path) in labels.error and "'GPU-bad'" in labels.error


def test_missing_file_is_an_empty_mapping_and_an_error(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="gpufleet.collect")
    path = tmp_path / "labels.json"
    labels = LabelsFile(str(path))
    labels.refresh()
    assert labels.lookup("GPU-a") is None and str(path) in labels.error
    assert len(caplog.records) == 1

    write_labels(path, {"GPU-a": {"tenant": "acme", "job": "j1"}})
    labels.refresh()
    assert labels.lookup("GPU-a") == ("acme", "j1") and labels.error is None

    path.unlink()
    labels.refresh()
    assert labels.lookup("GPU-a") is None and labels.error is not None
    assert len(caplog.records) == 2


# --- processes -------------------------------------------------------------------------------------

def test_environ_gives_only_the_named_variables_and_never_leaks_the_rest(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    proc = tmp_path / "proc"
    add_process(proc, 41, environ={"PATH": "/usr/bin", "AWS_SECRET_ACCESS_KEY": SECRET,
                                   "NOTE": "SLURM_JOB_ID=666", "MY_SLURM_JOB_ID": "777",
                                   "SLURM_JOB_ID": "4242", "TENANT": "acme", "SLURM_JOB_ID_2": "888"},
                comm="my (weird) cmd")
    plain = ProcessAttributor(str(proc))
    with_tenant = ProcessAttributor(str(proc), tenant_env_var="TENANT")
    results = [plain.attribute([41]), with_tenant.attribute([41]), with_tenant.attribute([41])]
    assert results[0] == (None, "4242", "process_env")
    assert results[1] == results[2] == ("acme", "4242", "process_env")

    kept = repr(results) + repr(vars(plain)) + repr(vars(with_tenant))
    logged = " ".join(f"{r.getMessage()} {r.args!r} {r.exc_text}" for r in caplog.records)
    assert SECRET not in kept and SECRET not in logged
    assert "/usr/bin" not in kept and "666" not in kept


def test_tenant_variable_alone_is_enough(tmp_path):
    proc = tmp_path / "proc"
    add_process(proc, 5, environ={"TENANT": "acme"})
    assert ProcessAttributor(str(proc), tenant_env_var="TENANT").attribute([5]) == ("acme", None, "process_env")
    assert ProcessAttributor(str(proc)).attribute([5]) is None


@pytest.mark.parametrize("line", [
    f"11:memory:/kubepods/burstable/pod{UID}/0f1e2d3c4b5a\n",
    f"3:cpu,cpuacct:/kubepods/pod{UID}/0f1e2d3c4b5a\n",
    "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + UID.replace("-", "_")
    + ".slice/cri-containerd-" + "ab" * 32 + ".scope\n",
    "0::/kubepods.slice/kubepods-pod" + UID.replace("-", "_") + ".slice/crio-" + "cd" * 32 + ".scope\n",
])
def test_cgroup_v1_and_v2_pod_uid(tmp_path, line):
    proc = tmp_path / "proc"
    add_process(proc, 7, cgroup="12:pids:/\n" + line + "1:name=systemd:/\n")
    assert ProcessAttributor(str(proc)).attribute([7]) == (None, f"pod-{UID}", "cgroup")


@pytest.mark.parametrize("cgroup", [
    "0::/user.slice/user-1000.slice/session-3.scope\n",
    "0::/system.slice/docker-" + "ab" * 32 + ".scope\n",
    "0::/machine.slice/libpod-pod" + "ef" * 16 + ".slice\n",     # a pod, but not a Kubernetes one
])
def test_cgroup_outside_kubernetes_says_nothing(tmp_path, cgroup):
    proc = tmp_path / "proc"
    add_process(proc, 7, cgroup=cgroup)
    assert ProcessAttributor(str(proc)).attribute([7]) is None


def test_unreadable_files_are_skipped_and_pids_tried_in_order(tmp_path):
    proc = tmp_path / "proc"
    add_process(proc, 1, environ={"HOME": "/root"})
    (proc / "1" / "cgroup").mkdir()                      # reading it fails like a permission error would
    add_process(proc, 2)                                  # neither environ nor cgroup
    (proc / "2" / "environ").mkdir()
    add_process(proc, 3, environ={"SLURM_JOB_ID": "33"})
    add_process(proc, 4, environ={"SLURM_JOB_ID": "44"})
    attributor = ProcessAttributor(str(proc))
    assert attributor.attribute([99, 1, 2, 4, 3]) == (None, "44", "process_env")   # 99 is gone
    assert attributor.attribute([3, 4]) == (None, "33", "process_env")
    assert attributor.attribute([99, 1, 2]) is None
    assert attributor.attribute([]) is None


def test_environ_comes_before_cgroup_for_one_process(tmp_path):
    proc = tmp_path / "proc"
    add_process(proc, 8, environ={"SLURM_JOB_ID": "88"}, cgroup=f"0::/kubepods/pod{UID}/c\n")
    assert ProcessAttributor(str(proc)).attribute([8]) == (None, "88", "process_env")
    assert ProcessAttributor(str(proc), env_var=None).attribute([8]) == (None, f"pod-{UID}", "cgroup")


def test_reused_pid_is_read_again_same_process_is_cached(tmp_path):
    proc = tmp_path / "proc"
    comm = "x) 1 2 (y"      # a command name that looks like more fields
    add_process(proc, 100, start=5000, environ={"SLURM_JOB_ID": "first"}, comm=comm)
    attributor = ProcessAttributor(str(proc))
    assert attributor.attribute([100]) == (None, "first", "process_env")
    add_process(proc, 100, start=5000, environ={"SLURM_JOB_ID": "second"}, comm=comm)
    assert attributor.attribute([100]) == (None, "first", "process_env")      # same process: cached
    add_process(proc, 100, start=9000, environ={"SLURM_JOB_ID": "second"}, comm=comm)
    assert attributor.attribute([100]) == (None, "second", "process_env")     # new process, same pid


def test_cache_is_bounded(tmp_path):
    proc = tmp_path / "proc"
    for pid in range(1, 11):
        add_process(proc, pid, environ={"SLURM_JOB_ID": str(pid)})
    attributor = ProcessAttributor(str(proc), cache_size=3)
    for pid in range(1, 11):
        assert attributor.attribute([pid]) == (None, str(pid), "process_env")
    assert len(attributor._cache) == 3


@pytest.mark.parametrize("kwargs", [{"env_var": ""}, {"env_var": "A=B"}, {"tenant_env_var": "X\0"},
                                    {"cache_size": 0}])
def test_bad_settings_raise_at_construction(kwargs):
    with pytest.raises(ValueError):
        ProcessAttributor(**kwargs)


# --- precedence ------------------------------------------------------------------------------------

def test_precedence_labels_then_process_env_then_cgroup(tmp_path):
    proc = tmp_path / "proc"
    add_process(proc, 10, environ={"SLURM_JOB_ID": "555"})
    add_process(proc, 11, cgroup=f"0::/kubepods/besteffort/pod{UID}/c\n")
    add_process(proc, 12, environ={"SLURM_JOB_ID": "666"}, cgroup=f"0::/kubepods/besteffort/pod{UID}/c\n")
    path = tmp_path / "labels.json"
    write_labels(path, {"GPU-rented": {"tenant": "acme", "job": "lease-9"}, "GPU-free": {"tenant": None}})
    attributor = Attributor(LabelsFile(str(path)), ProcessAttributor(str(proc)))

    assert attributor.attribute("GPU-rented", [10, 11]) == ("acme", "lease-9", "labels")
    assert attributor.attribute("GPU-rented", []) == ("acme", "lease-9", "labels")
    assert attributor.attribute("GPU-free", [10]) == (None, "555", "process_env")
    assert attributor.attribute("GPU-other", [12]) == (None, "666", "process_env")
    assert attributor.attribute("GPU-other", [11]) == (None, f"pod-{UID}", "cgroup")
    assert attributor.attribute("GPU-other", []) == (None, None, None)

    write_labels(path, {"GPU-other": {"tenant": "beta", "job": None}})
    attributor.refresh()
    assert attributor.attribute("GPU-other", [10]) == ("beta", None, "labels")
    assert attributor.attribute("GPU-rented", [10]) == (None, "555", "process_env")


def test_attributor_without_sources():
    assert Attributor().attribute("GPU-a", [1, 2]) == (None, None, None)
    Attributor().refresh()
