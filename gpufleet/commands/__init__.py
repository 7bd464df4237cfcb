"""gpufleet's commands: one module per command or group of commands, each with an ``add_<command>(sub)`` that
registers its parser and handler (``set_defaults(fn=...)``). Adding a command is a module and a line here; the
order here is the order of ``gpufleet --help``. Modules import what only their handlers need inside them, so
``gpufleet --help`` stays quick."""

COMMANDS = (           # (command, module)
    ("demo", "demo"), ("collect", "collect"), ("worker", "worker"), ("notify", "notify"), ("silence", "notify"),
    ("model", "model"), ("topics", "topics"), ("publish", "publish"), ("status", "status"), ("simulate", "simulate"),
    ("replay", "replay"), ("db", "db"), ("summary", "summary"), ("forecast", "forecast"), ("scale", "forecast"),
    ("serve", "view"), ("report", "view"), ("top", "view"), ("bill", "bill"), ("sql", "sql"),
)
