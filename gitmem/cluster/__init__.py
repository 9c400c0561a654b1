"""A gitmem cluster: PostgreSQL holds the shared state, git holds the data (docs/cluster.md).

The optional extra ``gitmem-store[cluster]`` brings psycopg. Single-node ``gitmem serve`` never
imports this package.
"""
