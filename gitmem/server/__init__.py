"""``gitmem serve``: the authenticated network face of gitmem (extra ``gitmem-store[server]``).

``app.create_app(home)`` is the ASGI app; ``tokens`` the API tokens every face authenticates with;
``anthropic_api`` the Anthropic memory stores API; ``errors`` the one error-to-status mapping;
``pool`` lends Store objects to threads. See docs/server.md.
"""
