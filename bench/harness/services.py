"""The servers a benchmark stands up beside the job: a Kafka broker (unless
KAFKA_BOOTSTRAP_SERVERS names one), and an S3 API server behind Toxiproxy, so that a scenario can
cut the job's link to its object store while loaders reach the store straight."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.job_process import free_port

if TYPE_CHECKING:
    from compactor.dev.kafka_broker import LocalKafkaBroker

MOTO = str(Path(sys.executable).with_name("moto_server"))
REPO = Path(__file__).resolve().parents[2]
# gofakes3 (Go, `make tools`): the S3 API server a long run stands on. moto's server is one Python
# thread and took as much of the machine as the job itself in a years run; gofakes3 serves the
# same calls (conditional PUTs included) at a fraction of the CPU.
GOFAKES3 = REPO / ".tools" / "gofakes3"
S3_SERVERS = ("gofakes3", "moto")


@contextlib.contextmanager
def kafka_broker(work: Path) -> Iterator[tuple[str, LocalKafkaBroker | None]]:
    """(bootstrap servers, the broker this run started or None): KAFKA_BOOTSTRAP_SERVERS if set;
    else a LocalKafkaBroker of our own in `work`, stopped after (resumed first, were it paused)."""
    configured = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if configured:
        yield configured, None
        return
    from compactor.dev.kafka_broker import LocalKafkaBroker

    broker = LocalKafkaBroker(work / "kafka")
    try:
        yield broker.start(), broker
    finally:
        if broker.pid is not None:  # None: it never started
            with contextlib.suppress(OSError):
                os.kill(broker.pid, signal.SIGCONT)  # a scenario may have paused it
        broker.stop()


@contextlib.contextmanager
def kafka_bootstrap(work: Path) -> Iterator[str]:
    """KAFKA_BOOTSTRAP_SERVERS if set; else a LocalKafkaBroker of our own in `work`, stopped after."""
    with kafka_broker(work) as (bootstrap, _):
        yield bootstrap


class ProxiedS3:
    """An S3 API server (gofakes3 or moto, a process of its own) with one bucket, and Toxiproxy in
    front of it: the job reaches the store through `proxy_port`, which `store_cut` takes down;
    `s3()` and `storage_options()` reach it straight."""

    def __init__(self, work: Path, bucket: str, server: str = "gofakes3") -> None:
        if server not in S3_SERVERS:
            raise ValueError(f"S3 server {server!r}: one of {', '.join(S3_SERVERS)}")
        self.work, self.bucket, self.server = work, bucket, server
        self.procs: list[subprocess.Popen[bytes]] = []
        self.s3_port, self.toxi_port, self.proxy_port = free_port(), free_port(), free_port()

    def start(self) -> ProxiedS3:
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "compactor-bench")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "compactor-bench")
        os.environ.setdefault("AWS_REGION", "us-east-1")
        toxiproxy = os.environ.get("TOXIPROXY_SERVER") or str(REPO / ".tools" / "toxiproxy-server")
        if self.server == "gofakes3":
            if not GOFAKES3.exists():
                raise SystemExit(f"{GOFAKES3} is missing: run `make tools` (or pick --s3-server moto)")
            # in memory: the bucket lives as long as the run, and no disk write stands in a request
            s3 = [str(GOFAKES3), "-backend", "memory", "-host", f"127.0.0.1:{self.s3_port}", "-quiet"]
        else:
            s3 = [MOTO, "-H", "127.0.0.1", "-p", str(self.s3_port)]
        with open(self.work / "services.log", "ab") as log:
            for command, env in (
                (s3, os.environ),
                (
                    [toxiproxy, "-host", "127.0.0.1", "-port", str(self.toxi_port)],
                    {**os.environ, "LOG_LEVEL": "error"},
                ),
            ):
                self.procs.append(
                    subprocess.Popen(command, stdout=log, stderr=log, env=env, start_new_session=True)
                )
        self._wait(lambda: self.s3().list_buckets() is not None, f"the S3 server ({self.server})")
        self._wait(lambda: self.toxi("GET", "/version") is not None, "Toxiproxy")
        self.s3().create_bucket(Bucket=self.bucket)
        upstream = f"127.0.0.1:{self.s3_port}"
        self.toxi(
            "POST", "/proxies", {"name": "s3", "listen": f"127.0.0.1:{self.proxy_port}", "upstream": upstream}
        )
        return self

    def _wait(self, check: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + 60
        while True:
            try:
                if check():
                    return
            except Exception:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{what} did not start: see {self.work / 'services.log'}") from None
            time.sleep(0.2)

    def s3(self) -> Any:
        """A boto3 client straight to the S3 server (not through the proxy)."""
        import boto3

        return boto3.client("s3", endpoint_url=f"http://127.0.0.1:{self.s3_port}", region_name="us-east-1")

    def storage_options(self) -> dict[str, str]:
        """delta-rs straight to the S3 server. Its commits are create-if-absent (If-None-Match), as
        the job's are (its conditional-put log store): neither replaces a commit of the other
        (docs/deploying.md, several writers on S3)."""
        return {
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{self.s3_port}",
            "AWS_ALLOW_HTTP": "true",
            "AWS_REGION": "us-east-1",
            "conditional_put": "etag",
        }

    def toxi(self, method: str, path: str, body: dict[str, Any] | None = None) -> str:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"http://127.0.0.1:{self.toxi_port}{path}", data=data, method=method)
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=10) as answer:
            return str(answer.read().decode())

    @contextlib.contextmanager
    def store_cut(self) -> Iterator[None]:
        """The job's link to the object store down: open connections closed, new ones refused."""
        self.toxi("POST", "/proxies/s3", {"enabled": False})
        try:
            yield
        finally:
            self.toxi("POST", "/proxies/s3", {"enabled": True})

    def dump(self, into: Path) -> None:
        """Every object of the bucket into a local folder (to keep a warehouse past its run)."""
        s3 = self.s3()
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket):
            for item in page.get("Contents", []):
                if item["Key"].endswith("/"):  # a directory marker
                    continue
                target = into / item["Key"]
                with contextlib.suppress(OSError):  # a marker without its slash, where a folder is
                    target.parent.mkdir(parents=True, exist_ok=True)
                    s3.download_file(self.bucket, item["Key"], str(target))

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10)
