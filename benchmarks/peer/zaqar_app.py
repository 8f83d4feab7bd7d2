"""Upstream Zaqar's WSGI application, configured from the file ``$ZAQAR_PEER_CONFIG``.

Zaqar's own ``zaqar.transport.wsgi.app`` reads configuration only from the standard paths;
the comparison needs a file of its own per run. Runs inside the peer's virtualenv.
"""

import os

from oslo_config import cfg
from oslo_log import log
from zaqar import bootstrap
from zaqar.common import consts

CONF = cfg.CONF
log.register_options(CONF)
CONF(project="zaqar", prog="zaqar-queues", args=["--config-file", os.environ["ZAQAR_PEER_CONFIG"]])
log.setup(CONF, "zaqar")
boot = bootstrap.Bootstrap(CONF)  # registers the [drivers] options
CONF.drivers.transport = consts.TRANSPORT_WSGI
application = boot.transport.app
