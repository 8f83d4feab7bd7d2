"""A hello-world falcon app: the ceiling of falcon under gunicorn on this machine.

Answers every POST with 201 and a small JSON document, every GET with 200.
"""

from __future__ import annotations

import falcon


class Hello:
    def on_get(self, req: falcon.Request, resp: falcon.Response, **_: str) -> None:
        resp.media = {"hello": "world"}

    def on_post(self, req: falcon.Request, resp: falcon.Response, **_: str) -> None:
        req.bounded_stream.read()
        resp.status = falcon.HTTP_201
        resp.media = {"resources": ["/v2/queues/q/messages/0"]}


application = falcon.App()
application.add_sink(lambda req, resp, **kw: Hello().on_post(req, resp) if req.method == "POST" else Hello().on_get(req, resp))
