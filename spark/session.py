"""Starting a local SparkSession that can use the `raftka` data source.

``local_session()`` checks for Java 17+ first (``JavaNotFoundError`` with what to install,
instead of a py4j traceback), points Spark's Python workers at this interpreter (they need
pyarrow and the raftka package), keeps Spark on 127.0.0.1, and registers the data source.
On a real cluster, build the session as usual and call ``register(spark)``.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from typing import Any, Mapping

JAVA_MIN_VERSION = 17
JAVA_PROBE_TIMEOUT_S = 30.0


class JavaNotFoundError(RuntimeError):
    """No usable Java (17+) for Spark's JVM."""


def find_java(env: Mapping[str, str] | None = None) -> str | None:
    """The java binary Spark would start: $JAVA_HOME/bin/java, else ``java`` on PATH."""
    env = os.environ if env is None else env
    home = env.get("JAVA_HOME")
    if home:
        candidate = os.path.join(home, "bin", "java")
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("java", path=env.get("PATH", ""))


def java_version(java: str) -> int | None:
    """The major version ``java -version`` reports (8 for 1.8), or None if unreadable."""
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True,
                             timeout=JAVA_PROBE_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def require_java(env: Mapping[str, str] | None = None) -> str:
    """The java binary, or JavaNotFoundError saying what is missing and how to install it."""
    java = find_java(env)
    hint = ("Spark needs Java 17 or newer: install it (Debian/Ubuntu: apt-get install "
            "openjdk-17-jre-headless) or set JAVA_HOME to a JDK/JRE 17+.")
    if java is None:
        raise JavaNotFoundError(f"Java was not found (no $JAVA_HOME/bin/java, no java on PATH). {hint}")
    version = java_version(java)
    if version is None:
        raise JavaNotFoundError(f"{java} did not report a version. {hint}")
    if version < JAVA_MIN_VERSION:
        raise JavaNotFoundError(f"{java} is Java {version}. {hint}")
    return java


def register(spark: Any) -> None:
    """Register the `raftka` format with ``spark`` (a SparkSession)."""
    from raftka.spark.source import RaftkaDataSource
    spark.dataSource.register(RaftkaDataSource)


def local_session(app_name: str = "raftka", master: str = "local[2]",
                  conf: Mapping[str, str] | None = None) -> Any:
    """A SparkSession on this machine with the `raftka` format registered (``getOrCreate``:
    an already running session is reused). Small-machine settings: no UI, 2 shuffle
    partitions."""
    require_java()
    # Workers must run this interpreter: it has pyarrow and the raftka packages.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    builder = (SparkSession.builder.appName(app_name).master(master)
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC"))
    if master.startswith("local"):
        builder = builder.config("spark.driver.host", "127.0.0.1")
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    return spark
