"""The wheel carries every module of every mapped folder, installs into a fresh virtual environment
and imports from there (an editable install would hide a module missing from the wheel)."""
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"gpufleet": "gpufleet", "collectors": "gpufleet.collectors", "streams": "gpufleet.streams",
           "models": "gpufleet.models", "sql": "gpufleet.sql"}


def source_modules() -> list[str]:
    found = []
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            if parts and parts[-1] == "__main__":
                continue
            found.append(".".join([package, *parts]))
    return found


@pytest.mark.slow
def test_wheel_installs_and_imports_every_module(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(ROOT)],
                   check=True, capture_output=True, timeout=300, cwd=tmp_path)
    (wheel,) = dist.glob("gpufleet-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = source_modules()
    for module in modules:
        as_file = module.replace(".", "/")
        assert f"{as_file}.py" in names or f"{as_file}/__init__.py" in names, f"{module} missing from the wheel"
    assert any(n.startswith("gpufleet/sql/migrations/0001_") for n in names)

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    # third-party dependencies come from the test environment; gpufleet itself only from the wheel
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--quiet", str(wheel)],
                   check=True, timeout=300)
    script = ("import importlib, gpufleet, sys\n"
              f"mods = {modules!r}\n"
              "for m in mods: importlib.import_module(m)\n"
              "assert gpufleet.__file__.startswith(sys.prefix), gpufleet.__file__\n"
              "print(len(mods))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([str(py), "-c", script], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) == len(modules) > 20
    cli = subprocess.run([str(venv / "bin" / "gpufleet"), "--help"], capture_output=True, text=True, env=env)
    assert cli.returncode == 0 and "replay" in cli.stdout
    from gpufleet.sql import migrations
    assert len(migrations()) >= 2
