# gunicorn settings for running zaqar-delay under an external gunicorn:
#
#   ZAQAR_DELAY_CONFIG_FILE=/etc/zaqar-delay/zaqar-delay.conf \
#       gunicorn -c etc/gunicorn.conf.py zaqar_delay.api.wsgi:application
#
# zaqar-delay-server applies the same values (zaqar_delay/cmd/gunicorn_defaults.py).
# For /metrics summed over all workers, also export PROMETHEUS_MULTIPROC_DIR=<an empty
# directory> before starting gunicorn (zaqar-delay-server does this by itself).
bind = ["127.0.0.1:8888"]
workers = 2
# gevent's own WSGI server in each worker: waiting claims (?wait=S) sleep in greenlets,
# each worker holds worker_connections of them while serving other requests, and requests
# cost less CPU than under the plain gevent worker.
worker_class = "zaqar_delay.cmd.worker.Worker"
worker_connections = 1000
timeout = 30
graceful_timeout = 10
keepalive = 5
proc_name = "zaqar-delay"
errorlog = "-"
loglevel = "info"


def child_exit(server, worker):  # noqa: ANN001 - gunicorn's hook signature
    """Drop a dead worker's live metrics from the shared directory."""
    from zaqar_delay.cmd.gunicorn_defaults import forget_worker_metrics

    forget_worker_metrics(server, worker)
