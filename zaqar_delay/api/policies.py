"""Policy in code: the rule of every route and method, under Zaqar's rule names.

Enforced with ``auth_strategy = keystone`` (``api/authorization.py``); noauth trusts its
callers and checks only the admin routes, as before. The defaults follow OpenStack's secure
RBAC, for project-scoped tokens (``scope_types=['project']``):

- a project **reader** reads (lists, gets, stats, ping);
- a project **member** writes (creates, updates, deletes, claims, shares, purges);
- **admin** manages pools, flavors, health, ``/metrics`` and ``/v2/placements``; flavors are
  also read by admin only, as before (a flavor names the operator's pools); an operator whose
  tenants choose flavors sets ``flavors:get_all`` and ``flavors:get`` to ``role:reader``.

Zaqar's own defaults (33 rules open to any role, 9 admin only) are each rule's deprecated
rule: with ``[oslo_policy] enforce_new_defaults = false`` a rule allows what either check
allows, so a Zaqar deployment keeps working while its users get roles. Rules under Zaqar's
names keep a Zaqar policy file's meaning; ``metrics:get``, ``placements:get_all``,
``messages:update`` and ``home:get`` are zaqar-delay's own.

Every route of ``api/routes.py`` but the public documents (``/``, ``/openapi.json``) has an
operation here (``tests/unit/test_policies.py`` checks it); :data:`RULE_OF` finds it. A
pre-signed request is authorised by its signature instead (``signed_urls.py``).
"""

from __future__ import annotations

from oslo_config import cfg
from oslo_policy import policy

READER = "role:reader and project_id:%(project_id)s"
MEMBER = "role:member and project_id:%(project_id)s"
ADMIN = "role:admin"
SCOPE = ["project"]

# Zaqar's defaults, kept as each rule's deprecated rule.
ZAQAR_OPEN = ""
ZAQAR_ADMIN = "role:admin"
DEPRECATED_REASON = (
    "zaqar-delay's defaults follow secure RBAC: a project reader reads, a project member "
    "writes. Zaqar let any role of the project do either."
)
DEPRECATED_SINCE = "2026.2"

QUEUE = "/v2/queues/{queue_name}"
MESSAGES = QUEUE + "/messages"
CLAIMS = QUEUE + "/claims"
SUBSCRIPTIONS = QUEUE + "/subscriptions"
TOPIC = "/v2/topics/{topic_name}"
SCHEDULE = QUEUE + "/schedules/{schedule_name}"


def _on_both(method: str, queue_path: str) -> list[tuple[str, str]]:
    """A queue path's operation and its topic's: a topic's messages and subscriptions are
    guarded by the same rules as a queue's, as in Zaqar."""
    return [(method, queue_path), (method, queue_path.replace(QUEUE, TOPIC))]


def _rule(
    name: str,
    check: str,
    description: str,
    operations: list[tuple[str, str]],
    zaqar: str | None = ZAQAR_OPEN,
) -> policy.DocumentedRuleDefault:
    """``zaqar``: Zaqar's default for the rule, kept as its deprecated rule when it differs
    (None: a rule Zaqar does not have)."""
    deprecated = None
    if zaqar is not None and zaqar != check:
        deprecated = policy.DeprecatedRule(
            name=name,
            check_str=zaqar,
            deprecated_reason=DEPRECATED_REASON,
            deprecated_since=DEPRECATED_SINCE,
        )
    return policy.DocumentedRuleDefault(
        name=name,
        check_str=check,
        description=description,
        operations=[{"method": method, "path": path} for method, path in operations],
        scope_types=SCOPE,
        deprecated_rule=deprecated,
    )


RULES: list[policy.DocumentedRuleDefault] = [
    _rule("home:get", READER, "The API's home document.", [("GET", "/v2/")], zaqar=None),
    _rule("ping:get", READER, "Whether the service answers.", [("GET", "/v2/ping")]),
    _rule(
        "health:get", ADMIN, "Detailed health of the stores.", [("GET", "/v2/health")], ZAQAR_ADMIN
    ),
    _rule(
        "metrics:get", ADMIN, "Prometheus metrics of every project.", [("GET", "/metrics")], None
    ),
    _rule("queues:get_all", READER, "List queues.", [("GET", "/v2/queues")]),
    _rule("queues:create", MEMBER, "Create a queue.", [("PUT", QUEUE)]),
    _rule("queues:get", READER, "Show a queue's metadata.", [("GET", QUEUE)]),
    _rule("queues:delete", MEMBER, "Delete a queue.", [("DELETE", QUEUE)]),
    _rule("queues:update", MEMBER, "Update a queue's metadata.", [("PATCH", QUEUE)]),
    _rule("queues:stats", READER, "Show a queue's statistics.", [("GET", QUEUE + "/stats")]),
    _rule("queues:share", MEMBER, "Make a pre-signed URL.", [("POST", QUEUE + "/share")]),
    _rule("queues:purge", MEMBER, "Purge a queue.", [("POST", QUEUE + "/purge")]),
    _rule("topics:get_all", READER, "List topics.", [("GET", "/v2/topics")]),
    _rule("topics:create", MEMBER, "Create a topic.", [("PUT", TOPIC)]),
    _rule("topics:get", READER, "Show a topic's metadata.", [("GET", TOPIC)]),
    _rule("topics:delete", MEMBER, "Delete a topic.", [("DELETE", TOPIC)]),
    _rule("topics:update", MEMBER, "Update a topic's metadata.", [("PATCH", TOPIC)]),
    _rule("topics:stats", READER, "Show a topic's statistics.", [("GET", TOPIC + "/stats")]),
    _rule("topics:purge", MEMBER, "Purge a topic.", [("POST", TOPIC + "/purge")]),
    _rule(
        "schedules:get_all",
        READER,
        "List a queue's or topic's recurring schedules.",
        _on_both("GET", QUEUE + "/schedules"),
        zaqar=None,
    ),
    _rule(
        "schedules:create",
        MEMBER,
        "Create or replace a recurring schedule.",
        _on_both("PUT", SCHEDULE),
        zaqar=None,
    ),
    _rule("schedules:get", READER, "Show a schedule.", _on_both("GET", SCHEDULE), zaqar=None),
    _rule(
        "schedules:update", MEMBER, "Change a schedule.", _on_both("PATCH", SCHEDULE), zaqar=None
    ),
    _rule(
        "schedules:delete", MEMBER, "Delete a schedule.", _on_both("DELETE", SCHEDULE), zaqar=None
    ),
    _rule(
        "schedules:run",
        MEMBER,
        "Fire a schedule once now.",
        _on_both("POST", SCHEDULE + "/run"),
        zaqar=None,
    ),
    _rule("messages:get_all", READER, "List messages.", _on_both("GET", MESSAGES)),
    _rule("messages:create", MEMBER, "Post messages.", _on_both("POST", MESSAGES)),
    _rule("messages:get", READER, "Show a message.", _on_both("GET", MESSAGES + "/{message_id}")),
    _rule(
        "messages:delete",
        MEMBER,
        "Delete a message.",
        _on_both("DELETE", MESSAGES + "/{message_id}"),
    ),
    _rule(
        "messages:delete_all",
        MEMBER,
        "Delete messages by id, or pop them.",
        _on_both("DELETE", MESSAGES),
    ),
    _rule(
        "messages:update",
        MEMBER,
        "Edit a message (ttl, body, due time).",
        _on_both("PATCH", MESSAGES + "/{message_id}"),
        zaqar=None,
    ),
    _rule("claims:create", MEMBER, "Claim messages.", [("POST", CLAIMS)]),
    _rule("claims:get", READER, "Show a claim.", [("GET", CLAIMS + "/{claim_id}")]),
    _rule("claims:delete", MEMBER, "Release a claim.", [("DELETE", CLAIMS + "/{claim_id}")]),
    _rule("claims:update", MEMBER, "Renew a claim.", [("PATCH", CLAIMS + "/{claim_id}")]),
    _rule("subscription:get_all", READER, "List subscriptions.", _on_both("GET", SUBSCRIPTIONS)),
    _rule("subscription:create", MEMBER, "Subscribe.", _on_both("POST", SUBSCRIPTIONS)),
    _rule(
        "subscription:get",
        READER,
        "Show a subscription.",
        _on_both("GET", SUBSCRIPTIONS + "/{subscription_id}"),
    ),
    _rule(
        "subscription:delete",
        MEMBER,
        "Delete a subscription.",
        _on_both("DELETE", SUBSCRIPTIONS + "/{subscription_id}"),
    ),
    _rule(
        "subscription:update",
        MEMBER,
        "Update a subscription.",
        _on_both("PATCH", SUBSCRIPTIONS + "/{subscription_id}"),
    ),
    _rule(
        "subscription:confirm",
        MEMBER,
        "Confirm a subscription (usually through its pre-signed URL).",
        _on_both("PUT", SUBSCRIPTIONS + "/{subscription_id}/confirm"),
    ),
    _rule("pools:get_all", ADMIN, "List pools.", [("GET", "/v2/pools")], ZAQAR_ADMIN),
    _rule(
        "pools:create", ADMIN, "Register a pool.", [("PUT", "/v2/pools/{pool_name}")], ZAQAR_ADMIN
    ),
    _rule("pools:get", ADMIN, "Show a pool.", [("GET", "/v2/pools/{pool_name}")], ZAQAR_ADMIN),
    _rule(
        "pools:delete", ADMIN, "Remove a pool.", [("DELETE", "/v2/pools/{pool_name}")], ZAQAR_ADMIN
    ),
    _rule(
        "pools:update", ADMIN, "Update a pool.", [("PATCH", "/v2/pools/{pool_name}")], ZAQAR_ADMIN
    ),
    _rule("flavors:get_all", ADMIN, "List flavors.", [("GET", "/v2/flavors")]),
    _rule(
        "flavors:create",
        ADMIN,
        "Create a flavor.",
        [("PUT", "/v2/flavors/{flavor_name}")],
        ZAQAR_ADMIN,
    ),
    _rule("flavors:get", ADMIN, "Show a flavor.", [("GET", "/v2/flavors/{flavor_name}")]),
    _rule(
        "flavors:delete",
        ADMIN,
        "Delete a flavor.",
        [("DELETE", "/v2/flavors/{flavor_name}")],
        ZAQAR_ADMIN,
    ),
    _rule(
        "flavors:update",
        ADMIN,
        "Update a flavor.",
        [("PATCH", "/v2/flavors/{flavor_name}")],
        ZAQAR_ADMIN,
    ),
    _rule(
        "placements:get_all",
        ADMIN,
        "Show which pool each queue of a project lives on.",
        [("GET", "/v2/placements")],
        zaqar=None,
    ),
]

# (method, route template) -> rule name; HEAD is checked as GET.
RULE_OF: dict[tuple[str, str], str] = {
    (operation["method"], operation["path"]): rule.name
    for rule in RULES
    for operation in rule.operations
}


def rule_of(method: str, template: str) -> str | None:
    """The rule that guards ``method`` on the route ``template``; None for a route without
    one (the public documents)."""
    return RULE_OF.get(("GET" if method == "HEAD" else method, template))


def list_rules() -> list[policy.DocumentedRuleDefault]:
    """The ``oslo.policy.policies`` entry point (namespace ``zaqar_delay``)."""
    return RULES


def enforcer(conf: cfg.ConfigOpts) -> policy.Enforcer:
    """An enforcer of ``conf``'s ``[oslo_policy]`` with these defaults registered. It reads
    ``policy_file`` again whenever the file changes, so overrides apply without a restart."""
    enforcing = policy.Enforcer(conf)
    enforcing.register_defaults(RULES)
    return enforcing


def get_enforcer() -> policy.Enforcer:
    """The ``oslo.policy.enforcer`` entry point (``oslopolicy-policy-generator``,
    ``oslopolicy-list-redundant``), on the default configuration files of zaqar-delay (such
    as ``/etc/zaqar-delay/zaqar-delay.conf``) and their ``[oslo_policy]``."""
    from zaqar_delay.conf import make_conf

    conf = make_conf()
    conf(args=[], project="zaqar-delay")
    return enforcer(conf)
