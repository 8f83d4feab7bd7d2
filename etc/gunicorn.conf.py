# gunicorn settings for running zaqar-delay under an external gunicorn:
#
#   ZAQAR_DELAY_CONFIG_FILE=/etc/zaqar-delay/zaqar-delay.conf \
#       gunicorn -c etc/gunicorn.conf.py zaqar_delay.api.wsgi:application
#
# The values are zaqar-delay-server's own (zaqar_delay/cmd/gunicorn_defaults.py), from the
# same configuration file ([server] bind, workers, timeout). For /metrics summed over all
# workers, also export PROMETHEUS_MULTIPROC_DIR=<an empty directory> before starting gunicorn
# (zaqar-delay-server does this by itself).
import os

from zaqar_delay.cmd.gunicorn_defaults import options
from zaqar_delay.conf import load_settings

_config = os.environ.get("ZAQAR_DELAY_CONFIG_FILE")
globals().update(options(load_settings([_config] if _config else [])))
