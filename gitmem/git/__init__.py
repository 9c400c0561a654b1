"""The one door to pygit2 and the git command line: objects, refs by compare-and-swap, durability,
maintenance, tree diffs, fast-import, history rewrites and locks. Knows nothing of memories."""
