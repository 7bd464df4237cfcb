"""Type-check the installed layout: the top-level folders as the one `gpufleet` package, with mypy.

The folders map into the namespace at install time (setup.py), which an editable install does through
an import hook that mypy cannot follow; so this builds the same layout from symlinks under .typecheck/
and checks that. Zero findings expected (settings in pyproject.toml).
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"collectors": "collectors", "streams": "streams", "models": "models", "sql": "sql"}


def main() -> int:
    tree = ROOT / ".typecheck"
    shutil.rmtree(tree, ignore_errors=True)
    package = tree / "gpufleet"
    package.mkdir(parents=True)
    for entry in (ROOT / "gpufleet").iterdir():
        if entry.suffix == ".py":
            (package / entry.name).symlink_to(entry)
        elif entry.is_dir() and (entry / "__init__.py").exists():      # subpackages, e.g. gpufleet/view
            (package / entry.name).symlink_to(entry, target_is_directory=True)
    for name, folder in FOLDERS.items():
        (package / name).symlink_to(ROOT / folder, target_is_directory=True)
    env = {**os.environ, "MYPYPATH": str(tree)}
    cmd = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir",
           str(tree / ".mypy_cache"), "-p", "gpufleet"]
    return subprocess.run(cmd, cwd=tree, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
