"""A hello-world falcon app: the ceiling of falcon under gunicorn on this machine.

Every POST gets 201 and a small JSON document, every other request 200: the least any
Zaqar-shaped endpoint can do per request.
"""

from __future__ import annotations

import falcon


def answer(req: falcon.Request, resp: falcon.Response, **_: str) -> None:
    if req.method == "POST":
        req.bounded_stream.read()
        resp.status = falcon.HTTP_201
        resp.media = {"resources": ["/v2/queues/hello/messages/0"]}
    else:
        resp.media = {"hello": "world"}


application = falcon.App()
application.add_sink(answer)
