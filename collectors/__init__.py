"""Node-side code: the telemetry contract, the NVML and /proc readers, the simulated fleet."""
