"""Policy enforcement under keystone: each request checked against its route's rule
(``api/policies.py``) with the token's roles, project and scope.

keystonemiddleware has replaced the identity headers with the token's (``auth.py``), and
oslo.context reads them from the WSGI environment. The target is the request's project, so a
rule such as ``role:reader and project_id:%(project_id)s`` holds for the token's own project
only. A refusal (wrong role or wrong scope) is a 403 in the API's error form.
"""

from __future__ import annotations

from typing import Any

import falcon
from oslo_context import context
from oslo_policy import policy

from zaqar_delay import errors
from zaqar_delay.api import policies
from zaqar_delay.conf import Settings, conf_of


class Authorizer:
    """Allows or refuses a request by the rule of its route and method."""

    def __init__(self, enforcer: policy.Enforcer) -> None:
        self._enforcer = enforcer

    def authorize(self, req: falcon.Request, project: str) -> None:
        """Nothing when the route's rule allows the caller on ``project``; Forbidden
        otherwise. A route without a rule (a public document) is allowed."""
        rule = policies.rule_of(req.method, req.uri_template or "")
        if rule is not None:
            self.authorize_rule(rule, req.env, project)

    def authorize_rule(self, rule: str, environ: dict[str, Any], project: str) -> None:
        """Nothing when ``rule`` allows the caller whose identity keystonemiddleware put in
        ``environ`` on ``project``; Forbidden otherwise."""
        caller = context.RequestContext.from_environ(environ)
        try:
            self._enforcer.authorize(rule, {"project_id": project}, caller, do_raise=True)
        except (policy.PolicyNotAuthorized, policy.InvalidScope) as exc:
            raise errors.Forbidden() from exc


def keystone_authorizer(settings: Settings) -> Authorizer:
    """The authorizer of ``settings``' configuration files (their ``[oslo_policy]``)."""
    return Authorizer(policies.enforcer(conf_of(settings)))
