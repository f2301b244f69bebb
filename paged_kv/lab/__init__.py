"""What only notebooks, graders and benchmarks use: feedback, starters, pictures, widgets, workloads,
baselines, kernel-lab cases and launchers, traces, plots and the notebook kernel. May import every layer."""
