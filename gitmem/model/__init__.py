"""Pure rules and value types: memory paths and scope names, limits and integrity policy, version
trailers, front matter. No I/O: every function here maps values to values or raises."""
