"""Entry point kept for stores whose hook shims predate ``gitmem.push.hook``.

Shims written by older versions run ``python -m gitmem.hook``; this forwards to the hook so an
upgrade never leaves a store without its checks (``gitmem hooks install --all`` rewrites the shims).
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    from gitmem.push.hook import main

    sys.exit(main(sys.argv[1:]))
