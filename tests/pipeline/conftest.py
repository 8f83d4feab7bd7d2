"""A local[1] SparkSession shared by the whole test session, and the suite's own secantusdb."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from testbed.processes import SecantusServer
from tests.helpers.stores import secantus_of_its_own


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # the driver and its block manager on loopback
    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers import zaqar_delay from this venv
    session = (
        SparkSession.builder.master("local[1]")
        .appName("zaqar-delay-tests")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.default.parallelism", "1")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def secantus_server() -> Iterator[SecantusServer]:
    """This suite's own secantusdb (tests.helpers.stores.secantus_of_its_own says why)."""
    yield from secantus_of_its_own()
