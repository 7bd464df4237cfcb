"""The house rules a maintainer relies on, checked on every shipped module: no function longer than 80 lines (a
longer one is doing several things), none with more than seven parameters (a typed record instead)."""
import ast
import subprocess

from conftest import ROOT

SHIPPED = ("gpufleet", "streams", "models", "sql", "collectors")
MAX_LINES, MAX_PARAMETERS = 80, 7


def shipped_functions():
    files = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    for path in files:
        if path.split("/")[0] not in SHIPPED:
            continue
        for node in ast.walk(ast.parse((ROOT / path).read_text(), path)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                yield path, node


def parameters(node) -> list[str]:
    a = node.args
    names = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs if p.arg not in ("self", "cls")]
    return names + (["*" + a.vararg.arg] if a.vararg else []) + (["**" + a.kwarg.arg] if a.kwarg else [])


def test_no_shipped_function_is_longer_than_80_lines():
    long = [f"{path}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)" for path, n in shipped_functions()
            if n.end_lineno - n.lineno + 1 > MAX_LINES]
    assert not long, long


def test_no_shipped_function_takes_more_than_seven_parameters():
    many = [f"{path}:{n.lineno} {n.name}({', '.join(parameters(n))})" for path, n in shipped_functions()
            if len(parameters(n)) > MAX_PARAMETERS]
    assert not many, many
