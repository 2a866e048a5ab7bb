"""Sources read facts (NVML, kernel log, sysfs, nvidia-smi dumps, bug reports, /proc, the network)."""
