"""Run a real single-node Apache Kafka broker (KRaft) in its own JVM.

Local runs and integration tests need a genuine Kafka (consumer groups,
transactions, offsets surviving restarts) on machines without Docker. The broker
jars come from Maven Central via `compactor.spark.jvm`; one process acts as broker and
controller with a static one-voter quorum, and all state lives under `data_dir`
so a restart finds the same topics, offsets and messages.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from compactor.config.kafka import KafkaConfig
from compactor.dev.broker_process import (
    CLUSTER_ID_FILE,
    JAVA_HEAP,
    LOG_FILE,
    LOG_TAIL_LINES,
    RUN_MARKER,
    STATE_FILE,
    failure_report,
    free_ports,
    is_broker_process,
    java,
    new_cluster_id,
    probe_config,
    read_state,
    running_bootstrap,
    stop_from_dir,
)
from compactor.dev.broker_security import ADMIN, MECHANISM, MUTUAL_TLS, BrokerSecurity
from compactor.errors import BrokerStartError
from compactor.kafka.settings import KafkaSettings
from compactor.spark import jvm

log = logging.getLogger(__name__)

_LOG4J = """\
log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File={path}
log4j.appender.file.Append=true
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.state.change.logger=WARN
"""


class LocalKafkaBroker:
    """A single-node Kafka 3.9 broker+controller in its own JVM, state under `data_dir`.

    Ports are fixed for the object's life, so `restart()` (after `stop()` or
    `kill()`) comes back on the same bootstrap and clients reconnect on their own.
    """

    def __init__(
        self, data_dir: Path, port: int | None = None, security: BrokerSecurity | None = None
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.security = security  # None: one PLAINTEXT listener, no authorizer
        avoid = {port} if port is not None else set()
        picked = free_ports(2 if port is not None else 3, avoid)
        self.port: int = port if port is not None else picked[2]
        self.controller_port: int = picked[0]
        self.tls_port: int = picked[1]  # a secured broker's mutual-TLS listener
        self._proc: subprocess.Popen[bytes] | None = None

    # -- paths and state -------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """`127.0.0.1:<port>`: what clients put in bootstrap.servers."""
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / LOG_FILE

    @property
    def properties_path(self) -> Path:
        return self.data_dir / "server.properties"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def bootstrap_for(self, way_in: str = MECHANISM) -> str:
        """Where clients signing in `way_in` connect: a secured broker's mutual-TLS listener has a
        port of its own."""
        return f"127.0.0.1:{self.tls_port}" if way_in == MUTUAL_TLS else self.bootstrap

    def kafka_block(self, user: str = ADMIN, way_in: str = MECHANISM) -> dict[str, Any]:
        """The config file's `kafka:` block for `user` signing in `way_in` (a secured broker's; a
        plain one has no users, and the block is empty)."""
        if self.security is None:
            return {}
        return self.security.kafka_block(user, self.data_dir, way_in)

    def client_settings(self, user: str = ADMIN, way_in: str = MECHANISM) -> dict[str, Any]:
        """librdkafka's settings for `user`: its `kafka:` block mapped as every client maps it."""
        block = self.kafka_block(user, way_in)
        config = KafkaConfig.model_validate(block) if block else None
        return KafkaSettings(self.bootstrap_for(way_in), config=config).librdkafka()

    def server_properties(self) -> dict[str, str]:
        """The broker's configuration: one combined node, one-voter static quorum; a secured
        broker's listeners, TLS and authorizer over the plain ones."""
        secured = (
            self.security.server_properties(self.port, self.controller_port, self.data_dir, self.tls_port)
            if self.security is not None
            else {}
        )
        return self._plain_properties() | secured

    def _plain_properties(self) -> dict[str, str]:
        return {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            # One broker: internal topics cannot have more than one replica.
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            # Nobody else will join a group: do not wait 3 s before the first assignment.
            "group.initial.rebalance.delay.ms": "0",
            # After a SIGKILL the dead incarnation stays registered until its session
            # expires, and the restarted broker cannot register before that: 9 s by
            # default (plus retry backoff). A short session makes crash tests quick.
            "broker.session.timeout.ms": "3000",
            "broker.heartbeat.interval.ms": "1000",
            "num.partitions": "1",
            "auto.create.topics.enable": "true",
            "log.dirs": str(self.data_dir / "logs"),
        }

    def _write_config(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.security is not None:
            self.security.write_tls(self.data_dir)
        (self.data_dir / "log4j.properties").write_text(_LOG4J.format(path=self.log_path))
        body = "".join(f"{k}={v}\n" for k, v in self.server_properties().items())
        self.properties_path.write_text(body)

    def _cluster_id(self) -> str:
        """The cluster id, kept in data_dir so every format of this dir agrees."""
        path = self.data_dir / CLUSTER_ID_FILE
        if path.exists():
            return path.read_text().strip()
        cluster_id = new_cluster_id()
        path.write_text(cluster_id + "\n")
        return cluster_id

    def _java_command(self, main_class: str, *args: str) -> list[str]:
        classpath = os.pathsep.join(str(j) for j in jvm.kafka_broker_jars())
        return [
            java(),
            JAVA_HEAP,
            "-Djava.awt.headless=true",
            f"-Dlog4j.configuration=file:{self.data_dir / 'log4j.properties'}",
            "-cp",
            classpath,
            main_class,
            *args,
        ]

    def _write_state(self) -> None:
        assert self._proc is not None
        state = {
            "pid": self._proc.pid,
            "bootstrap": self.bootstrap,
            "port": self.port,
            "controller_port": self.controller_port,
            "properties": str(self.properties_path),
        }
        tmp = self.data_dir / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        tmp.replace(self.data_dir / STATE_FILE)

    def _clear_state(self) -> None:
        (self.data_dir / STATE_FILE).unlink(missing_ok=True)

    # -- lifecycle ---------------------------------------------------------

    def _format_storage(self) -> None:
        """Write meta.properties into log.dirs; a no-op for an already formatted dir."""
        cmd = self._java_command(
            "kafka.tools.StorageTool",
            "format",
            "-t",
            self._cluster_id(),
            "-c",
            str(self.properties_path),
            "--ignore-formatted",
            *(self.security.format_args() if self.security is not None else ()),
        )
        try:
            proc = subprocess.run(
                cmd, cwd=self.data_dir, capture_output=True, text=True, timeout=120, check=False
            )
        except subprocess.TimeoutExpired as e:
            raise BrokerStartError(f"Kafka StorageTool format timed out in {self.data_dir}") from e
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-LOG_TAIL_LINES:])
            raise BrokerStartError(f"Kafka StorageTool format failed in {self.data_dir}:\n{tail}")

    def start(self, timeout: float = 60) -> str:
        """Format storage if needed, launch the JVM and wait until it serves metadata.

        Returns the bootstrap string. Raises BrokerStartError (with the first
        errors and the end of broker.log) if the JVM exits or does not answer
        within `timeout` seconds (which includes formatting). The JVM runs in its
        own session, so Ctrl-C does not reach it: on any failure here, including
        KeyboardInterrupt, it is killed so no half-started broker is left behind.
        """
        if self.is_running:
            return self.bootstrap
        other = (read_state(self.data_dir) or {}).get("pid")
        if isinstance(other, int) and is_broker_process(other, self.properties_path):
            raise BrokerStartError(
                f"a broker (pid {other}) already runs on {self.data_dir}; "
                "use running_bootstrap() or stop_from_dir()"
            )
        began = time.monotonic()
        self._write_config()
        self._format_storage()
        cmd = self._java_command("kafka.Kafka", str(self.properties_path))
        with self.log_path.open("ab") as out:
            out.write(f"\n{RUN_MARKER} {time.ctime()} ===\n".encode())
            out.flush()
            self._proc = subprocess.Popen(
                cmd,
                cwd=self.data_dir,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._write_state()
        log.info("Kafka broker pid %d starting on %s", self._proc.pid, self.bootstrap)
        try:
            self._wait_ready(began + timeout)
        except BaseException:
            self.kill()
            raise
        log.info("Kafka broker ready on %s after %.1fs", self.bootstrap, time.monotonic() - began)
        return self.bootstrap

    def _wait_ready(self, deadline: float) -> None:
        assert self._proc is not None
        admin = AdminClient({**probe_config(self.bootstrap), **self.client_settings()})
        while True:
            code = self._proc.poll()
            if code is not None:
                self._proc = None
                self._clear_state()
                raise BrokerStartError(
                    f"Kafka broker exited with code {code} during start-up; {failure_report(self.log_path)}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise BrokerStartError(
                    f"Kafka broker did not answer on {self.bootstrap} in time; "
                    f"{failure_report(self.log_path)}"
                )
            try:
                if admin.list_topics(timeout=min(2.0, max(remaining, 0.1))).brokers:
                    return
            except KafkaException:
                pass
            time.sleep(0.2)

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM for a clean shutdown (logs flushed, no recovery on restart).

        Falls back to SIGKILL after `timeout` seconds. Safe to call repeatedly.
        """
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            log.info("Stopping Kafka broker pid %d", proc.pid)
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                log.warning("Kafka broker pid %d ignored SIGTERM for %ss; killing", proc.pid, timeout)
                proc.kill()
                proc.wait()
        self._proc = None
        self._clear_state()

    def kill(self) -> None:
        """SIGKILL at once, as a crash would: for fault-injection tests."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            log.info("Killing Kafka broker pid %d", proc.pid)
            proc.kill()
            proc.wait()
        self._proc = None
        self._clear_state()

    def restart(self, timeout: float = 60) -> str:
        """Stop (if still running) and start again on the same data dir and ports."""
        self.stop()
        return self.start(timeout)

    def __enter__(self) -> str:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"LocalKafkaBroker({str(self.data_dir)!r}, port={self.port}, pid={self.pid})"


__all__ = ["LocalKafkaBroker", "running_bootstrap", "stop_from_dir"]
