"""Maps the top-level folders into the one `gpufleet` import namespace.

The package list is derived by walking each folder, so a new subpackage can
never be left out of the wheel (a hand-written list in pyproject.toml would
silently drop it, and an editable install would hide the loss).
"""
import os

from setuptools import setup

FOLDERS = {
    "gpufleet": "gpufleet",
    "gpufleet.collectors": "collectors",
    "gpufleet.streams": "streams",
    "gpufleet.models": "models",
    "gpufleet.sql": "sql",
}


def packages():
    found = []
    for package, folder in FOLDERS.items():
        for root, dirs, files in os.walk(folder):
            dirs[:] = [d for d in dirs if not d.startswith((".", "__"))]
            rel = os.path.relpath(root, folder)
            name = package if rel == "." else package + "." + rel.replace(os.sep, ".")
            # a package, or a folder of data inside one (sql/migrations): setuptools warns of any it is not told of
            if "__init__.py" in files or (files and name.rsplit(".", 1)[0] in found):
                found.append(name)
    return found


setup(
    packages=packages(),
    package_dir=FOLDERS,
    package_data={"gpufleet.sql.migrations": ["*.sql"], "gpufleet.models": ["*.json"]},
)
