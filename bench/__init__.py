"""gitmem benchmarks (docs/architecture.md#performance-targets); run ``python bench/run.py``."""
