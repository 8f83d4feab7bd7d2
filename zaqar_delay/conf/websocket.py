"""``[drivers:transport:websocket]``: WebSocket sessions (Zaqar's group, and its limits)."""

from __future__ import annotations

import dataclasses

from oslo_config import cfg

from zaqar_delay.conf.options import option, options


@options("drivers:transport:websocket")
@dataclasses.dataclass(frozen=True, slots=True)
class WebSocketSettings:
    """Where WebSocket sessions are served besides the API's port, and their limits."""

    bind: str = option(
        cfg.StrOpt,
        default="",
        help=(
            "Address of the extra WebSocket port (with port set; empty: the host of [server] "
            "bind). Sessions are always served on the API's own port too."
        ),
    )
    port: int = option(
        cfg.IntOpt,
        default=0,
        min=0,
        max=65535,
        help=(
            "A second port the server listens on, where WebSocket sessions (and the HTTP API) "
            "are served as on the API's port, for clients configured with Zaqar's WebSocket "
            "port (Zaqar's default is 9000). 0 (the default): the API's port only."
        ),
    )
    external_port: int = option(
        cfg.IntOpt,
        default=0,
        min=0,
        max=65535,
        help=(
            "The port clients reach WebSocket sessions at, through a proxy (Zaqar's option): "
            "a session request whose Host header names another port is refused with 400, as "
            "Zaqar's server refuses it, so a page of another origin cannot open sessions "
            "through a name that resolves here. 0 (the default): the Host header is not "
            "checked."
        ),
    )
    max_sessions: int = option(
        cfg.IntOpt,
        default=500,
        min=1,
        help=(
            "WebSocket sessions each server worker holds at most; a session asked for beyond "
            "them is answered 503. Each session holds one of the worker's 1,000 connections."
        ),
    )
    max_sessions_per_project: int = option(
        cfg.IntOpt,
        default=100,
        min=1,
        help=(
            "Under keystone, WebSocket sessions of one project (the project of the token a "
            "session authenticated with) each server worker holds at most; authenticating "
            "one more is answered 429. Without keystone a frame may name any project, and "
            "only max_sessions bounds them."
        ),
    )
    notification_bind: str = option(
        cfg.StrOpt,
        default="127.0.0.1",
        help=(
            "Address each server process listens on (a port of its own, chosen by the "
            "system) for the pushes to the sessions it holds that subscribed themselves, "
            "and names in their subscribers (Zaqar's option of the same name and purpose). "
            "Loopback serves one machine; with several servers, an address of this one the "
            "others reach."
        ),
    )
    ping_interval: int = option(
        cfg.IntOpt,
        default=30,
        min=1,
        help=(
            "Seconds after which a session the client sent nothing on is pinged; one that "
            "still sends nothing (not even the pong) for as long again is closed."
        ),
    )
