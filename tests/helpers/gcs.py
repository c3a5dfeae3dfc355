"""fake-gcs-server, a real GCS JSON API on 127.0.0.1 (`make test` builds it into `.tools/` with
`go install`), and how Google's Hadoop connector reaches it."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from compactor.dev.broker_process import free_ports
from tests.helpers.tools import tool_binary


@dataclass
class GcsServer:
    """The emulator's process, one bucket in it, and the settings a user gives for such an endpoint."""

    workdir: Path
    bucket: str = "compactor-test"
    port: int = field(default_factory=lambda: free_ports(1, set())[0])
    _proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def spark_conf(self) -> dict[str, str]:
        """An emulator's endpoint, no credentials, and copy-then-delete renames (it has no moveTo)."""
        return {
            "spark.hadoop.fs.gs.storage.root.url": self.endpoint + "/",
            "spark.hadoop.fs.gs.auth.type": "UNAUTHENTICATED",
            "spark.hadoop.fs.gs.project.id": "compactor-test",
            "spark.hadoop.fs.gs.operation.move.enable": "false",
        }

    def location(self, name: str) -> str:
        return f"gs://{self.bucket}/{name}"

    def start(self) -> GcsServer:
        binary = str(tool_binary("fake-gcs-server", "FAKE_GCS_SERVER"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        with (self.workdir / "fake-gcs-server.log").open("ab") as out:
            self._proc = subprocess.Popen(
                [binary, "-scheme", "http", "-host", "127.0.0.1", "-port", str(self.port), "-backend", "memory",
                 "-public-host", f"127.0.0.1:{self.port}", "-external-url", self.endpoint, "-log-level", "warn"],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + 30
        while not self._answers():
            if time.monotonic() > deadline or self._proc.poll() is not None:
                self.stop()
                raise RuntimeError(
                    f"fake-gcs-server did not start; see {self.workdir / 'fake-gcs-server.log'}"
                )
            time.sleep(0.1)
        self._post("/storage/v1/b?project=compactor-test", {"name": self.bucket})
        return self

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            self._proc.wait(timeout=10)

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.endpoint}/storage/v1/b", timeout=2):
                return True
        except (urllib.error.URLError, OSError):
            return False

    def _post(self, path: str, body: dict[str, str]) -> None:
        request = urllib.request.Request(
            f"{self.endpoint}{path}", data=json.dumps(body).encode(), method="POST"
        )
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=10):
            pass
