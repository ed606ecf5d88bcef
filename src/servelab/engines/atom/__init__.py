"""ATOM (AMD's ROCm serving engine): its server command's grammar. Launched by servelab's recipes and sweeps;
not priced by the performance model (no defaults, policy or kernels here)."""
