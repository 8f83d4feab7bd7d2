"""``zaqar-delay-status upgrade check``: what an operator checks before (and after) an
upgrade, in the oslo.upgradecheck form (exit 0 success, 1 warning, 2 failure).

Reads the store the configuration names, changing nothing:

- **Store durability**: what an acknowledged write survives (a warning unless it survives
  a power loss, a failure unless it survives a process crash);
- **Store settings**: what the server would warn about or refuse at start (a Redis that
  evicts keys, one without an append-only file or replica, a standalone MongoDB, fewer
  replicas than ``replica_acks``);
- **Pending schema changes**: what the next start would change (MongoDB indexes to build,
  Redis queues to move to the current layout).

The embedded store is started for the check (or joined when a server runs it).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from oslo_config import cfg
from oslo_upgradecheck import upgradecheck

from zaqar_delay import clock
from zaqar_delay.conf import load_settings, make_conf
from zaqar_delay.errors import StorageConfigError, StorageUnavailable
from zaqar_delay.storage.base import Driver
from zaqar_delay.storage.resolve import redact, redact_in
from zaqar_delay.storage.uri import embedded_db_path, open_driver

Code = upgradecheck.Code
Result = upgradecheck.Result


class StoreChecks(upgradecheck.UpgradeCommands):
    """The checks, each on a driver opened from the parsed configuration files."""

    def __init__(self, config_files: Callable[[], Sequence[str]]) -> None:
        self._config_files = config_files

    def _with_driver(self, check: Callable[[Driver], Result]) -> Result:
        embedded = None
        uri: str | None = None
        try:
            settings = load_settings(list(self._config_files()))
            uri, db_path = settings.storage.uri, embedded_db_path(settings)
            if db_path is not None:
                from zaqar_delay.storage.redis.embedded import embedded_store

                embedded = embedded_store(db_path, settings.storage)
                uri = embedded.uri
            driver = open_driver(uri, settings)
            try:
                reason = driver.unreachable_reason()
                if reason is not None:
                    return Result(
                        Code.FAILURE,
                        f"cannot reach the store at {redact(uri)}: {redact_in(reason, uri)}",
                    )
                return check(driver)
            finally:
                driver.close()
        except (StorageConfigError, StorageUnavailable, OSError, ValueError, cfg.Error) as exc:
            # A configuration the server would refuse at start fails each check, in one line.
            return Result(Code.FAILURE, redact_in(str(getattr(exc, "description", exc)), uri))
        finally:
            if embedded is not None:
                embedded.close()

    def check_durability(self) -> Result:
        def judge(driver: Driver) -> Result:
            durability = driver.durability()
            if durability is None:
                return Result(Code.WARNING, "the store does not tell what a write survives")
            if "process crash" not in durability.survives:
                return Result(Code.FAILURE, durability.summary())
            if "power loss" not in durability.survives:
                return Result(Code.WARNING, durability.summary())
            return Result(Code.SUCCESS, durability.summary())

        return self._with_driver(judge)

    def check_settings(self) -> Result:
        def judge(driver: Driver) -> Result:
            warnings = driver.deployment_warnings()  # StorageConfigError: would be refused
            if warnings:
                return Result(Code.WARNING, "; ".join(warnings))
            return Result(Code.SUCCESS)

        return self._with_driver(judge)

    def check_pending_changes(self) -> Result:
        def judge(driver: Driver) -> Result:
            pending = driver.pending_changes()
            if pending:
                return Result(Code.WARNING, "; ".join(pending))
            return Result(Code.SUCCESS)

        return self._with_driver(judge)

    def check_clock(self) -> Result:
        def judge(driver: Driver) -> Result:
            skewed = clock.skew_warning(driver.clock_ms, clock.SystemClock())
            return Result(Code.WARNING, skewed) if skewed else Result(Code.SUCCESS)

        return self._with_driver(judge)

    _upgrade_checks = (
        ("Store durability", check_durability),
        ("Store settings", check_settings),
        ("Clock", check_clock),
        ("Pending schema changes", check_pending_changes),
    )


def main(argv: Sequence[str] | None = None) -> int:
    conf = make_conf()
    checks = StoreChecks(lambda: conf.config_file or [])
    code: int = upgradecheck.main(
        conf,
        project="zaqar-delay",
        upgrade_command=checks,
        argv=list(sys.argv[1:] if argv is None else argv),
        default_config_files=[],
    )
    return code


if __name__ == "__main__":
    sys.exit(main())
