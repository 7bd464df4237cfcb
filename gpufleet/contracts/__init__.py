"""The contracts every layer of gpufleet reads: the telemetry schema, the event schemas and dead letters, the
job sample's columns, what processing hands its driver (``Output``), state saved by name and version, and
files handed to gpufleet. They import nothing else of gpufleet (the bottom layer, checked by ``make lint``)."""
