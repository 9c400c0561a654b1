"""gitmem benchmarks (DESIGN section 11); run ``python bench/run.py``."""
