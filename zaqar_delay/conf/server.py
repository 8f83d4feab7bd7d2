"""``[server]``: how the HTTP server listens and authenticates."""

from __future__ import annotations

import dataclasses

from oslo_config import cfg

from zaqar_delay.conf.options import option, options


@options("server")
@dataclasses.dataclass(frozen=True, slots=True)
class ServerSettings:
    """The HTTP server: Zaqar-delay's ``[server]`` options."""

    bind: str = option(
        cfg.StrOpt,
        default="127.0.0.1:8888",
        help=(
            "HOST:PORT the HTTP server listens on. When no file sets it, Zaqar's "
            "[drivers:transport:wsgi] bind and port are read."
        ),
    )
    workers: int = option(cfg.IntOpt, default=2, min=1, help="Number of gunicorn worker processes.")
    timeout: int = option(
        cfg.IntOpt, default=30, min=1, help="Seconds before gunicorn restarts a stuck worker."
    )
    keepalive: int = option(
        cfg.IntOpt,
        default=650,
        min=1,
        help=(
            "Seconds within which a request's line and headers must arrive once a client "
            "connection is idle (new, or between requests); the server closes it otherwise "
            "(gunicorn's keepalive). Behind a load balancer keep it above the balancer's own "
            "idle timeout (60 s on AWS, 600 s on Google Cloud by default), or it sends "
            "requests on connections the server just closed."
        ),
    )
    transfer_timeout: int = option(
        cfg.IntOpt,
        default=60,
        min=1,
        help=(
            "Seconds within which a client must send a request's body once the server reads "
            "it, and take each response (or WebSocket frame) the server sends; the server "
            "closes the connection otherwise, answering 408 to a body that did not arrive. "
            "It keeps clients that stall from holding the server's connections."
        ),
    )
    max_unsent_responses: int = option(
        cfg.IntOpt,
        default=128,
        min=0,
        help=(
            "MiB of responses a worker may hold for clients that have not taken them. Past "
            "it, the connections whose responses have waited longest (at least a second) are "
            "closed, so clients that ask for large listings or claims and read nothing cannot "
            "make the workers take the host's memory. Responses under 16 KiB are not counted. "
            "0: no limit (transfer_timeout alone bounds how long a response is held)."
        ),
    )
    max_active_requests: int = option(
        cfg.IntOpt,
        default=16,
        min=0,
        help=(
            "Requests a server process works on at once. Past it, a request waits for one "
            "to end, in a line of its project's, and each request that ends lets in the "
            "first of the project with the fewest requests at work: a project sending "
            "hundreds of large listings at once then delays another project's request by "
            "one turn, not by its whole backlog. Claims waiting for messages (?wait=) do not "
            "count while they wait. 0: no limit."
        ),
    )
    auth_strategy: str = option(
        cfg.StrOpt,
        default="noauth",
        choices=["noauth", "keystone", ""],
        # Zaqar's place for it: a Zaqar configuration file asking for keystone must get it.
        deprecated_opts=[cfg.DeprecatedOpt("auth_strategy", group="DEFAULT")],
        convert=lambda strategy: strategy or "noauth",  # Zaqar's empty value
        help=(
            "noauth trusts the X-Project-ID and X-Roles headers: for local use only. keystone "
            "validates X-Auth-Token with keystonemiddleware (options in [keystone_authtoken]; "
            "install zaqar-delay[keystone]) and takes project and roles from the token. "
            "Zaqar's [DEFAULT] auth_strategy is read when this is not set; empty is noauth, as "
            "in Zaqar."
        ),
    )
    default_project: str = option(
        cfg.StrOpt,
        default="",
        help=(
            "With auth_strategy = noauth only: the project of a request that names none "
            "(no X-Project-ID header), for clients such as the openstack CLI with "
            "--os-auth-type none, which send none. Empty (the default) answers such a request "
            "400, as Zaqar does. Ignored with keystone."
        ),
    )
