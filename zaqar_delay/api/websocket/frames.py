"""A session's request frames answered through the HTTP API, in process.

``Frames.answer`` checks a frame's shape, builds the HTTP request of its action
(``actions.ACTIONS``) and calls the API with it, as the HTTP routes would be called: behind
the configured authentication (a keystone session's token, given by its ``authenticate``
frame, travels with each request), with the frame's ``Client-ID`` and ``X-Project-ID``
(and ``X-Roles`` without keystone, as noauth's HTTP API reads it), and a pre-signed URL's
headers, which the API verifies as it does over HTTP (a signed frame needs no
``authenticate``, as in Zaqar). No other header of a frame reaches the API.
"""

from __future__ import annotations

import datetime
import io
import json
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

from zaqar_delay import jsondoc
from zaqar_delay.api.auth import PROJECT_ENVIRON_KEY, WSGIApp, environ_key
from zaqar_delay.api.websocket.actions import ACTIONS, Action, addressed
from zaqar_delay.api.websocket.own_subscriptions import OwnSubscriptions
from zaqar_delay.api.websocket.project_sessions import ProjectSessions
from zaqar_delay.api.websocket.relay import SessionRelay
from zaqar_delay.clock import Clock, SystemClock

#: The frame headers passed on as the HTTP request's (and, without keystone, X-Roles): the
#: client and project, and a pre-signed URL's, which the API verifies as over HTTP.
FORWARDED_HEADERS = {
    name.lower(): environ_key(name)
    for name in (
        "Client-ID",
        "X-Project-ID",
        "URL-Signature",
        "URL-Expires",
        "URL-Methods",
        "URL-Paths",
    )
}
#: Where keystonemiddleware leaves the checked token's user (its project, roles, expiry).
TOKEN_AUTH_ENVIRON_KEY = "keystone.token_auth"
#: A header value as HTTP/1.1 allows it (RFC 9110's field-value): no control character.
FIELD_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*")
#: What the session's environ lends each request: where the client connected from and to.
LENT_ENTRIES = (
    "SERVER_NAME",
    "SERVER_PORT",
    "REMOTE_ADDR",
    "HTTP_HOST",
    "wsgi.url_scheme",
    "wsgi.errors",
)


class FrameError(Exception):
    """A frame that names no action this server serves, or whose fields are malformed: a
    400 frame with ``message`` as its error."""


def response(request: Any, status: int, body: Any) -> dict[str, Any]:
    """Zaqar's response frame: the request as it came (``{}`` when it was not an object),
    the status, the body."""
    echoed = request if isinstance(request, dict) else {}
    return {"request": echoed, "headers": {"status": status}, "body": body}


def error(request: Any, status: int, message: str, title: str = "") -> dict[str, Any]:
    """An error frame; ``error`` is what python-zaqarclient reports."""
    return response(request, status, {"error": message, "exception": title or message})


class Frames:
    """Answers one session's request frames with ``app`` (the API behind authentication),
    lending each request the session's ``environ`` entries (``LENT_ENTRIES``).

    Under keystone (``keystone``) a session authenticates first, as Zaqar's does: its
    ``authenticate`` frame's ``X-Auth-Token`` is checked by a request to the API, and then
    sent with every request; until then other frames are answered 403. The session ends when
    that token expires (``expires_at``; authenticating again with a newer token moves it).
    """

    def __init__(
        self,
        app: WSGIApp,
        environ: Mapping[str, Any],
        keystone: bool,
        relay: SessionRelay | None = None,
        projects: ProjectSessions | None = None,
        clock: Clock | None = None,
    ) -> None:
        """``relay``: where this process's sessions subscribe themselves (None: they
        cannot); ``projects``: the sessions each project holds (keystone sessions count
        there once authenticated); ``clock``: the service's, which pre-signed URLs are
        checked against (default: the system's)."""
        self._app = app
        self._lent = {key: environ[key] for key in LENT_ENTRIES if key in environ}
        self._keystone = keystone
        # Without keystone the roles header is the caller's say, as over HTTP; with it, the
        # token's roles alone count.
        self._forwarded = (
            FORWARDED_HEADERS
            if keystone
            else {**FORWARDED_HEADERS, "x-roles": environ_key("X-Roles")}
        )
        #: The keystone token this session authenticated with (``authenticate``).
        self.token: str | None = None
        #: When that token expires (epoch seconds; None: never, or no token).
        self.expires_at: float | None = None
        self._authenticated_with: dict[str, str] = {}  # the frame headers of the check
        self._projects = projects
        self._project: str | None = None  # the token's, counted in ``projects``
        #: The session's subscriptions of itself.
        self.own = OwnSubscriptions(relay, clock or SystemClock())

    def answer(self, frame: Any) -> dict[str, Any]:
        """The response frame for a decoded request frame."""
        try:
            action, headers, body = checked_frame(frame)
            if action == "authenticate":
                return self._authenticate(frame, headers)
            signed = any(name.lower() == "url-signature" for name in headers)
            if self._keystone and self.token is None and not signed:
                return error(frame, 403, "Not authentified.")
            chosen = addressed(ACTIONS[action], body)
            if action == "subscription_create" and not body.get("subscriber"):
                status, answer = self.own.subscribe(self, headers, _path(chosen, body), body)
                return _reply(frame, chosen, body, status, "", answer)
            return self._call(frame, chosen, headers, body)
        except FrameError as exc:
            return error(frame, 400, str(exc))

    def _authenticate(self, frame: Any, headers: Mapping[str, str]) -> dict[str, Any]:
        if not self._keystone:
            return response(frame, 200, {"message": "Authentified."})
        token = {k.lower(): v for k, v in headers.items()}.get("x-auth-token", "")
        if token:
            # Any answer but 401 is a token keystone accepted (a role may still be refused
            # the listing).
            self.token, previous = token, self.token
            seen: dict[str, Any] = {}
            status, _, _ = self.call("GET", "/v2/queues", headers, "limit=1", seen=seen)
            if status != 401:
                # keystonemiddleware put the token's project in the checking request.
                if self._counted(str(seen.get(PROJECT_ENVIRON_KEY, ""))):
                    self.expires_at = token_expiry(seen)
                    self._authenticated_with = dict(headers)
                    return response(frame, 200, {"message": "Authentified."})
                self.token = previous
                limit = self._projects.limit if self._projects is not None else 0
                return error(
                    frame,
                    429,
                    f"This project holds its {limit} WebSocket sessions on this server "
                    "process ([drivers:transport:websocket] max_sessions_per_project).",
                    "Too many sessions",
                )
            self.token = previous
        return error(frame, 401, "Authentication failed.")

    def token_refused(self) -> bool:
        """Whether keystone now refuses the session's token (revoked, say): a request with it
        answered 401, as any HTTP request with it would be. Any other answer, an outage's
        included, keeps the session."""
        if self.token is None:
            return False
        status, _, _ = self.call("GET", "/v2/queues", self._authenticated_with, "limit=1")
        return status == 401

    def expired(self, now_s: float) -> bool:
        """Whether the token the session authenticated with has expired at ``now_s``."""
        return self.expires_at is not None and now_s >= self.expires_at

    def _counted(self, project: str) -> bool:
        """Count the session as ``project``'s (no longer its former project's); False when
        that project holds its sessions already."""
        if self._projects is None or project == self._project:
            return True
        if not self._projects.take(project):
            return False
        if self._project is not None:
            self._projects.give(self._project)
        self._project = project
        return True

    def end(self) -> None:
        """The session is over: what it subscribed of itself goes, and its project's count."""
        self.own.end()
        if self._projects is not None and self._project is not None:
            self._projects.give(self._project)
            self._project = None

    def call(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str],
        query: str = "",
        data: bytes = b"",
        environ: Mapping[str, Any] | None = None,
        seen: dict[str, Any] | None = None,
    ) -> tuple[int, str, Any]:
        """One HTTP request to the API: its status, Location header and JSON body (None for
        none); ``environ``: entries of the server's own for the request; ``seen`` is given
        the request's environ as the API left it."""
        request: dict[str, Any] = {
            **(environ or {}),
            **self._lent,
            "REQUEST_METHOD": method,
            "SCRIPT_NAME": "",
            # WSGI carries a path's UTF-8 bytes as Latin-1 text, as a server would.
            "PATH_INFO": path.encode("utf-8", "surrogatepass").decode("latin-1"),
            "QUERY_STRING": query,
            "SERVER_PROTOCOL": "HTTP/1.1",
            "CONTENT_TYPE": "application/json",
            "CONTENT_LENGTH": str(len(data)),
            "wsgi.input": io.BytesIO(data),
            "wsgi.version": (1, 0),
            "wsgi.multithread": False,
            "wsgi.multiprocess": True,
            "wsgi.run_once": False,
        }
        request.setdefault("wsgi.url_scheme", "http")
        request.setdefault("wsgi.errors", io.StringIO())
        for name, value in headers.items():
            key = self._forwarded.get(name.lower())
            if key is not None:
                request[key] = value
        if self.token is not None:
            request[environ_key("X-Auth-Token")] = self.token
        started: list[Any] = []

        def start_response(status: str, response_headers: list[tuple[str, str]], *_: Any) -> Any:
            started[:] = [status, response_headers]
            return lambda _: None

        result = self._app(request, start_response)
        if seen is not None:
            seen.update(request)
        try:
            raw = b"".join(result)
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
        status, response_headers = started
        location = next((v for k, v in response_headers if k.lower() == "location"), "")
        return int(status.split()[0]), location, _decoded(raw)

    def _call(
        self, frame: Any, action: Action, headers: Mapping[str, str], body: Mapping[str, Any]
    ) -> dict[str, Any]:
        path = _path(action, body)
        query = urllib.parse.urlencode(
            [
                (name, _query_value(body[field], field))
                for field, name in action.query.items()
                if body.get(field) is not None
            ],
            errors="surrogatepass",  # a lone surrogate is sent as the bytes it would be
        )
        if action.entire:
            sent = body.get(action.entire) or {}
        else:
            sent = {**action.defaults, **{name: body[name] for name in action.sent if name in body}}
        try:
            data = jsondoc.dumps(sent).encode() if sent or action.always_body else b""
        except (TypeError, ValueError) as exc:  # a MessagePack frame's bytes, say
            raise FrameError(f"The body must hold JSON values only: {exc}") from exc
        status, location, answer = self.call(action.method, path, headers, query, data)
        return _reply(frame, action, body, status, location, answer)


def _reply(
    frame: Any, action: Action, body: Mapping[str, Any], status: int, location: str, answer: Any
) -> dict[str, Any]:
    """The frame of a route's answer: shaped as the action answers in Zaqar, or an error's
    title and description as ``exception`` and ``error``."""
    if status < 400:
        return response(frame, status, action.shape(body, status, location, answer))
    described = answer if isinstance(answer, dict) else {}
    title = str(described.get("title") or f"HTTP {status}")
    return error(frame, status, str(described.get("description") or title), title)


def token_expiry(environ: Mapping[str, Any]) -> float | None:
    """When the token keystonemiddleware accepted for a request expires (epoch seconds), from
    the user it left in the request's environ; None when it left none."""
    user = getattr(environ.get(TOKEN_AUTH_ENVIRON_KEY), "user", None)
    expires = getattr(user, "expires", None)
    if not isinstance(expires, datetime.datetime):
        return None
    if expires.tzinfo is None:  # keystone's times are UTC
        expires = expires.replace(tzinfo=datetime.UTC)
    return expires.timestamp()


def checked_frame(frame: Any) -> tuple[str, dict[str, str], dict[str, Any]]:
    """A request frame's action, headers and body, or FrameError saying what is wrong."""
    if not isinstance(frame, dict):
        raise FrameError("Unexpected body type. Expected dict or dict like.")
    action = frame.get("action")
    if not isinstance(action, str) or (action not in ACTIONS and action != "authenticate"):
        raise FrameError(f"Invalid action: {action!r}.")
    headers = frame.get("headers", {})
    if not isinstance(headers, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        raise FrameError("The headers must be an object of strings.")
    for name, value in headers.items():
        if not FIELD_VALUE.fullmatch(value):
            raise FrameError(f"The header {name[:64]!r} holds a character HTTP forbids.")
    body = frame.get("body", {})
    if not isinstance(body, dict):
        raise FrameError("The body must be an object.")
    return action, headers, body


def _decoded(raw: bytes) -> Any:
    """An answer's JSON body (None for none; the text when it is not JSON)."""
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")


def _path(action: Action, body: Mapping[str, Any]) -> str:
    """The action's path with the names the frame's body gives."""
    return action.path.format_map({name: _name(body, name) for name in action.path_fields()})


def _name(body: Mapping[str, Any], field: str) -> str:
    value = body.get(field)
    if not isinstance(value, str) or not value:
        raise FrameError(f"Missing parameter {field} in body.")
    if "/" in value or "?" in value or "#" in value:
        raise FrameError(f"Invalid {field}: {value[:64]!r}.")
    return value


def _query_value(value: Any, field: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | str):
        return str(value)
    if isinstance(value, list) and all(isinstance(v, str) and "," not in v for v in value):
        return ",".join(value)
    raise FrameError(f"Invalid {field}: {str(value)[:64]}.")
