"""Stores as git remotes: the server-side hooks, push checks, hook installation, clones.

Kept import-free: the pre-receive hook imports ``gitmem.push.hook`` on every push."""
