"""The ``gpufleet`` command line: the commands of ``gpufleet/commands`` put together, and errors mapped to exit
codes (0 done, 1 failed while running, 2 bad argument or setting: one line on stderr, never a traceback)."""
from __future__ import annotations

import argparse
import importlib
import logging
import sys

from gpufleet import __version__
from gpufleet.commands import COMMANDS
from gpufleet.commands.common import Parser
from gpufleet.errors import UsageError
from gpufleet.settings import SettingsError

EPILOG = """settings: every command reads GPUFLEET_* environment variables and an optional TOML
file (--config or GPUFLEET_CONFIG); docs/configuration.md lists them all.
exit codes: 0 done, 1 failed while running, 2 bad argument or setting."""


# the optional dependency groups (pyproject.toml) by the module that tells one is missing
EXTRAS = {"clickhouse_connect": "store", "chdb": "embedded", "faust": "worker", "mode": "worker",
          "numpy": "train", "sklearn": "train", "matplotlib": "train", "msgspec": "embedded",
          "cramjam": "embedded"}
# a module in more than one group: the smaller install that a command needs it from
EXTRAS_OF_COMMAND = {("numpy", "forecast"): "forecast", ("numpy", "scale"): "forecast",
                     ("sklearn", "forecast"): "forecast", ("sklearn", "scale"): "forecast",
                     ("msgspec", "worker"): "worker", ("cramjam", "worker"): "worker"}


GLOBAL_OPTIONS_WITH_VALUE = ("--config", "--log-level")


def command_of(argv: list[str]) -> str | None:
    """The command ``argv`` asks for (its first word that is not an option of ``gpufleet`` itself), or None."""
    words = iter(argv)
    for word in words:
        if word in GLOBAL_OPTIONS_WITH_VALUE:
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def build_parser(argv: list[str] | None = None, full: bool = False) -> Parser:
    """The parser for ``argv``: every command listed with its summary, and only the one ``argv`` asks for built
    whole (its module imported); ``full`` builds every command (the manual's reference)."""
    wanted = None if full else command_of(sys.argv[1:] if argv is None else argv)
    p = Parser(prog="gpufleet", description="Telemetry, anomaly detection and metering for rented GPU fleets.",
               epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"gpufleet {__version__}")
    p.add_argument("--config", metavar="FILE", help="TOML settings file (default: $GPUFLEET_CONFIG)")
    p.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                   help="log verbosity on stderr (default WARNING; INFO for the worker, whose rebalances "
                        "an operator follows)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for name, info in COMMANDS.items():
        if full or name == wanted:
            getattr(importlib.import_module(f"gpufleet.commands.{info.module}"), f"add_{name}")(sub)
        else:               # listed with its summary; its module is read only when it is asked for
            sub.add_parser(name, help=info.summary)
    return p


def main(argv: list[str] | None = None) -> int:
    from gpufleet.sql import StoreError, StoreMissing

    parser = build_parser(argv)
    args = None
    try:
        args = parser.parse_args(argv)
        args.prog = f"gpufleet {args.command}"
        if args.log_level is None:
            args.log_level = "INFO" if args.command in ("worker", "notify") else "WARNING"
        logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        return args.fn(args)
    except (UsageError, SettingsError) as err:
        print(f"gpufleet: {err}" if isinstance(err, SettingsError) else str(err), file=sys.stderr)
        return 2
    except StoreMissing as err:
        print(f"gpufleet: setting store.database: {err}".splitlines()[0], file=sys.stderr)
        return 2
    except StoreError as err:
        print(f"gpufleet: store: {err}".splitlines()[0], file=sys.stderr)
        return 1
    except ModuleNotFoundError as err:
        module = (err.name or "").split(".")[0]
        extra = EXTRAS_OF_COMMAND.get((module, getattr(args, "command", ""))) or EXTRAS.get(module)
        if extra is None:
            raise
        print(f"gpufleet {getattr(args, 'command', '')}: needs the {extra} install, which lacks {err.name}: "
              f"pip install 'gpufleet[{extra}]'", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gpufleet: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
