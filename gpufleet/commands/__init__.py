"""gpufleet's commands, one module per command or group of commands (see ``COMMANDS``)."""
