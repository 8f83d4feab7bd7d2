"""Zaqar v2's WebSocket transport, served on the API's own port.

An HTTP/1.1 ``Upgrade: websocket`` request to ``/`` or ``/v2`` opens a session
(``route.py``). Each request frame ``{"action", "headers", "body"}`` becomes the HTTP request
of the same operation, made in process to the API behind its authentication (``actions.py``),
so the routes' validation, policy, delays, encryption, journal and metrics apply unchanged:
one door. Its answer comes back as Zaqar's response frame ``{"request", "headers":
{"status"}, "body"}``, as JSON text or MessagePack when the request came as binary.
"""
