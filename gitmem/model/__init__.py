"""Pure rules of gitmem: no I/O, no git, no printing."""
