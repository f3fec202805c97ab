"""ctxscope.web: the browser UI and its JSON API, served by the daemon.

``routes.add_web_routes(app, db_path, writer)`` mounts the page at "/" and everything else under
"/_ctxscope/" (static files, a read-only JSON API, Server-Sent Events, one token-guarded delete).
Data comes from ``ctxscope.inspector.store.queries`` in worker threads; the page is plain ES modules
(``static/``) that render captured text only as text.
"""
