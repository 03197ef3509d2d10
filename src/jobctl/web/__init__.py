"""``jobctl serve``: the HTTP API, the Prometheus metrics and the web dashboard (README, The
dashboard and the HTTP API).

The only user of a web framework (Starlette, uvicorn, Jinja2: the ``jobctl[web]``
extra). Nothing else in jobctl imports this package; ``cli/serve.py`` imports it only
when ``serve`` runs, so other commands never load the web stack.

- :mod:`.auth` the token, sessions and CSRF tokens (no framework)
- :mod:`.bodies` JSON bodies and query strings -> the CLI's validation (no framework)
- :mod:`.metrics` the Prometheus text page
- :mod:`.context` what every handler shares: the store, the token, the sessions, errors
- :mod:`.app` the application: routes, the guard (401, security headers), errors
- :mod:`.api` the JSON handlers; :mod:`.pages` the dashboard
- :mod:`.server` uvicorn on a bound socket
"""
