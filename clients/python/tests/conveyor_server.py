"""A real `conveyor serve` for the tests: SQLite in a temp dir, 127.0.0.1, tokens.

Environment: CONVEYOR_BIN (required: build/bin/conveyor), CONVEYOR_PLUGIN_DIR
(default: the binary's own, <bin>/../lib/conveyor/plugins).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime

HERE = pathlib.Path(__file__).resolve().parent
PACKAGE_ROOT = HERE.parent  # clients/python: the tests import the source tree
sys.path.insert(0, str(PACKAGE_ROOT))

from conveyor_worker import Client  # noqa: E402

ADMIN_TOKEN = "admin-secret"
WORKER_TOKEN = "worker-secret"


def wait_for(predicate, timeout: float = 30.0, what: str = "a condition", interval: float = 0.05):
    """Polls predicate until it returns something truthy; fails the test after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


def parse_time(text: str) -> datetime:
    """RFC 3339 with a Z suffix, as the server writes it."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ConveyorServer:
    """Starts `conveyor serve`; stop() and start() again keep the port and the database."""

    def __init__(self, engine: dict | None = None, queues: dict[str, dict] | None = None):
        binary = os.environ.get("CONVEYOR_BIN")
        if not binary:
            raise RuntimeError("set CONVEYOR_BIN=/path/to/build/bin/conveyor")
        self.binary = binary
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="conveyor-pyworker-"))
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = self.dir / "server.log"
        self.process: subprocess.Popen | None = None
        engine = {"shutdown_timeout_ms": 500, "rescue_interval_ms": 200, "retry_backoff_base_ms": 100,
                  **(engine or {})}
        plugin_dir = os.environ.get("CONVEYOR_PLUGIN_DIR")
        lines = ["[storage]", 'plugin = "sqlite"']
        if plugin_dir:
            lines.append(f'plugin_dir = "{plugin_dir}"')
        lines += ["[storage.options]", f'path = "{self.dir / "conveyor.db"}"', "[engine]"]
        lines += [f"{k} = {v}" for k, v in engine.items()]
        for queue, settings in (queues or {}).items():  # [queues."NAME"]: key = value
            lines.append(f'[queues."{queue}"]')
            lines += [f"{k} = {v}" for k, v in settings.items()]
        lines += ["[server]", f'listen = "127.0.0.1:{self.port}"', f'admin_token = "{ADMIN_TOKEN}"',
                  f'worker_token = "{WORKER_TOKEN}"', ""]
        self.config = self.dir / "conveyor.toml"
        self.config.write_text("\n".join(lines))
        self.admin = Client(self.base, ADMIN_TOKEN)

    def start(self) -> None:
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen([self.binary, "--config", str(self.config), "serve"],
                                        stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        log.close()

        def answering():
            if self.process.poll() is not None:
                raise AssertionError(f"conveyor serve exited {self.process.returncode}:\n{self.log()}")
            try:
                urllib.request.urlopen(self.base + "/", timeout=2).close()
            except urllib.error.HTTPError:
                pass  # any HTTP answer: it is listening
            except OSError:
                return False
            return True

        wait_for(answering, 20, f"conveyor serve to answer on {self.base}:\n{self.log()}", 0.1)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            code = self.process.wait(30)
            if code != 0:
                raise AssertionError(f"conveyor serve exited {code}:\n{self.log()}")
        self.process = None

    def close(self) -> None:
        try:
            self.stop()
        finally:
            self.admin.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    # -- TaskService over JSON, with the admin token ------------------------------

    def enqueue(self, queue: str, kind: str, count: int = 1, payload: str = "{}", **fields) -> list[int]:
        jobs = [{"queue": queue, "kind": kind, "payload": payload, **fields} for _ in range(count)]
        ids = []
        for i in range(0, len(jobs), 500):
            answer = self.admin.call("conveyor.v1.TaskService/EnqueueBatch", {"jobs": jobs[i:i + 500]})
            ids += [int(x) for x in answer["ids"]]
        return ids

    def job(self, job_id: int) -> dict:
        return self.admin.call("conveyor.v1.TaskService/GetJob", {"id": str(job_id)})["job"]

    def wait_state(self, job_id: int, state: str, timeout: float = 30.0) -> dict:
        found = {}

        def reached():
            found.update(self.job(job_id))
            return found["state"] == state

        try:
            wait_for(reached, timeout, f"job {job_id} to be {state}")
        except AssertionError as e:
            raise AssertionError(f"{e}; it is {found.get('state')}: {found}") from None
        return found


class LineReader:
    """Collects a subprocess's output lines on a thread; wait_line() waits for one."""

    def __init__(self, stream):
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:
        for raw in stream:
            with self._cond:
                self.lines.append(raw.decode(errors="replace").rstrip("\n"))
                self._cond.notify_all()

    def wait_line(self, text: str, timeout: float = 30.0, start: int = 0) -> int:
        """The index of the first line from start on that contains text."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for i in range(start, len(self.lines)):
                    if text in self.lines[i]:
                        return i
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"no line with {text!r} after {timeout:g} s; output:\n"
                                         + "\n".join(self.lines))
                self._cond.wait(remaining)

    def text(self) -> str:
        with self._cond:
            return "\n".join(self.lines)
