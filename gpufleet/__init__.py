"""gpufleet: finds idle, straggling, IO-starved and leaking GPUs in a rented fleet as it happens."""

__version__ = "0.1.0"
