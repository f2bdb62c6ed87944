"""A thin typed client for conveyor.v1.WorkerService: one method per RPC.

The server speaks the Connect protocol (unary, JSON codec):
POST {base}/conveyor.v1.WorkerService/<Method> with a JSON body in the proto3
JSON mapping. Errors come back as HTTP 4xx/5xx with {"code", "message"} and
are raised here as ConnectError.

Each thread gets its own keep-alive HTTP connection, so one Client can be
shared by threads; close() closes all of them, which also aborts a call in
flight (a long-poll Claim, say) in another thread.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

WORKER_SERVICE = "conveyor.v1.WorkerService"

# Codes worth retrying with backoff: the server is down, restarting or busy.
RETRYABLE_CODES = frozenset({"unavailable", "resource_exhausted", "deadline_exceeded"})


class ConnectError(Exception):
    """A Connect error: the server's answer, or "unavailable" when it could not be reached."""

    def __init__(self, code: str, message: str, http_status: int = 0):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.http_status = http_status  # 0: no answer (connection refused, reset, timed out)

    @property
    def retryable(self) -> bool:
        """True when trying again later may succeed (unreachable, unavailable, 5xx)."""
        return self.code in RETRYABLE_CODES or self.http_status >= 500


@dataclass(frozen=True)
class Lease:
    """A claimed job's lease; every result names it."""

    job_id: int
    token: int

    def to_json(self) -> dict:
        # int64 fields are JSON strings in the proto3 mapping.
        return {"jobId": str(self.job_id), "token": str(self.token)}


@dataclass
class Job:
    """A claimed job, as handlers see it. raw is the server's Job message as a dict."""

    id: int
    queue: str
    kind: str
    payload: str
    attempt: int
    max_attempts: int
    priority: int
    lease: Lease
    raw: dict = field(repr=False)
    # The key it was enqueued with (its queue's per-key limits and fair turns
    # count it under this key); "": the empty key, as from a server before keys.
    key: str = ""
    # Set by the Worker when the server says this attempt ran past its time
    # limit (job_timeout_s, or the job's own timeout) and failed it: whatever
    # the handler does from then on is discarded, so it should stop
    # (job.timed_out.is_set(), or job.timed_out.wait(seconds) instead of a sleep).
    timed_out: threading.Event = field(default_factory=threading.Event, repr=False, compare=False)

    @classmethod
    def from_claimed(cls, claimed: Mapping[str, Any]) -> "Job":
        job = claimed.get("job", {})
        lease = claimed.get("lease", {})
        return cls(
            id=int(job.get("id", 0)),
            queue=job.get("queue", ""),
            kind=job.get("kind", ""),
            payload=job.get("payload", ""),
            attempt=int(job.get("attempt", 0)),
            max_attempts=int(job.get("maxAttempts", 0)),
            priority=int(job.get("priority", 0)),
            lease=Lease(int(lease.get("jobId", job.get("id", 0))), int(lease.get("token", 0))),
            raw=dict(job),
            key=job.get("key", ""),
        )


@dataclass
class ClaimResult:
    jobs: list[Job]
    lease_seconds: float  # the leases' length; heartbeat every third of it


@dataclass
class LeaseResult:
    job_id: int
    # "ok"; "failed_precondition": the lease is no longer current;
    # "deadline_exceeded": no longer current because the job ran past its time
    # limit (job_timeout_s) and the server failed the attempt.
    code: str
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.code == "ok"

    @property
    def timed_out(self) -> bool:
        return self.code == "deadline_exceeded"


@dataclass
class FailResult:
    will_retry: bool
    retry_at: str  # RFC 3339, when will_retry


@dataclass
class HeartbeatResult:
    results: list[LeaseResult]
    lease_expires_at: str  # RFC 3339: the new end of the leases extended


def queue_weights(queues: Mapping[str, int] | Iterable[str] | str) -> list[dict]:
    """["a", "b"] or {"a": 3, "b": 1} as the request's [{queue, weight}]."""
    if isinstance(queues, str):
        queues = [queues]
    if isinstance(queues, Mapping):
        return [{"queue": q, "weight": int(w)} for q, w in queues.items()]
    return [{"queue": q, "weight": 1} for q in queues]


def _lease_results(answer: Mapping[str, Any]) -> list[LeaseResult]:
    return [
        LeaseResult(int(r.get("jobId", 0)), r.get("code", ""), r.get("message", ""))
        for r in answer.get("results", [])
    ]


class Client:
    """Calls the server at base_url ("http://host:port") with a bearer token."""

    def __init__(self, base_url: str, token: str = "", timeout: float = 30.0):
        url = urllib.parse.urlsplit(base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"base_url must look like http://host:port, got {base_url!r}")
        self._https = url.scheme == "https"
        self._host = url.hostname
        self._port = url.port
        self._prefix = url.path.rstrip("/")
        self._token = token
        self.timeout = timeout
        self._local = threading.local()
        self._lock = threading.Lock()
        self._conns: set[http.client.HTTPConnection] = set()
        self._in_call: set[http.client.HTTPConnection] = set()  # connections in a call now
        self._closed = False

    # -- WorkerService -------------------------------------------------------

    def claim(
        self,
        queues: Mapping[str, int] | Iterable[str] | str,
        kinds: Sequence[str],
        max_jobs: int,
        wait_seconds: float = 0.0,
        worker_id: str = "",
        lease_seconds: float = 0.0,
    ) -> ClaimResult:
        """Up to max_jobs jobs; waits up to wait_seconds for the first one."""
        answer = self.call(
            f"{WORKER_SERVICE}/Claim",
            {
                "queues": queue_weights(queues),
                "kinds": list(kinds),
                "maxJobs": max_jobs,
                "waitSeconds": wait_seconds,
                "workerId": worker_id,
                "leaseSeconds": lease_seconds,
            },
            # The server holds a long poll for wait_seconds: outlast it.
            timeout=wait_seconds + self.timeout,
        )
        return ClaimResult(
            [Job.from_claimed(c) for c in answer.get("jobs", [])], float(answer.get("leaseSeconds", 0))
        )

    def complete(self, leases: Sequence[Lease]) -> list[LeaseResult]:
        """Marks jobs completed; one result per lease, in order."""
        answer = self.call(f"{WORKER_SERVICE}/Complete", {"leases": [l.to_json() for l in leases]})
        return _lease_results(answer)

    def fail(
        self,
        lease: Lease,
        error: str,
        retry_after_seconds: float = 0.0,
        permanent: bool = False,
        backpressure: bool = False,
    ) -> FailResult:
        """Records a failed attempt, or with backpressure gives the job back and holds its queue.
        A lease no longer current: ConnectError failed_precondition."""
        answer = self.call(
            f"{WORKER_SERVICE}/Fail",
            {
                "lease": lease.to_json(),
                "error": error,
                "retryAfterSeconds": retry_after_seconds,
                "permanent": permanent,
                "backpressure": backpressure,
            },
        )
        return FailResult(bool(answer.get("willRetry", False)), answer.get("retryAt", ""))

    def heartbeat(self, leases: Sequence[Lease], lease_seconds: float = 0.0) -> HeartbeatResult:
        """Extends the leases by lease_seconds from now."""
        answer = self.call(
            f"{WORKER_SERVICE}/Heartbeat",
            {"leases": [l.to_json() for l in leases], "leaseSeconds": lease_seconds},
        )
        return HeartbeatResult(_lease_results(answer), answer.get("leaseExpiresAt", ""))

    def release(self, leases: Sequence[Lease]) -> list[LeaseResult]:
        """Gives jobs back unrun: available at once, the attempt not spent."""
        answer = self.call(f"{WORKER_SERVICE}/Release", {"leases": [l.to_json() for l in leases]})
        return _lease_results(answer)

    # -- TaskService -----------------------------------------------------------

    def enqueue(
        self,
        queue: str,
        kind: str,
        payload: str | Any = "{}",
        *,
        key: str = "",
        priority: int = 0,
        max_attempts: int | None = None,
        delay_seconds: float = 0.0,
        cost: int = 1,
    ) -> int:
        """Adds one job; returns its id. payload: JSON text, or a value to encode as JSON.
        key: the job's key, which its queue's per-key limits and fair turns count it under (up to
        200 bytes of UTF-8; "": the empty key). A bad field: ConnectError invalid_argument naming it."""
        job: dict[str, Any] = {
            "queue": queue,
            "kind": kind,
            "payload": payload if isinstance(payload, str) else json.dumps(payload),
        }
        # Defaults stay out of the message, so a server that predates a field takes it.
        if key:
            job["key"] = key
        if priority:
            job["priority"] = priority
        if max_attempts is not None:
            job["maxAttempts"] = max_attempts
        if delay_seconds:
            job["delaySeconds"] = delay_seconds
        if cost != 1:
            job["cost"] = cost
        answer = self.call("conveyor.v1.TaskService/Enqueue", {"job": job})
        return int(answer.get("id", 0))

    # -- transport -----------------------------------------------------------

    def call(self, method: str, body: Mapping[str, Any], timeout: float | None = None) -> dict:
        """POSTs body to {base}/{method} ("conveyor.v1.TaskService/GetJob", say); returns the answer."""
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        path = f"{self._prefix}/{method}"
        # A kept-alive connection the server closed while idle fails on first
        # use: try once more on a fresh one.
        for attempt in (0, 1):
            conn, reused = self._connection()
            try:
                conn.timeout = timeout if timeout is not None else self.timeout
                if conn.sock is not None:
                    conn.sock.settimeout(conn.timeout)
                conn.request("POST", path, body=data, headers=headers)
                response = conn.getresponse()
                text = response.read()
                if response.will_close:
                    self._drop(conn)
                return self._decode(response.status, text)
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                self._drop(conn)
                if reused and attempt == 0 and not self._closed:
                    continue
                raise ConnectError("unavailable", f"{self._host}:{self._port}: {e or type(e).__name__}") from e
            except (OSError, http.client.HTTPException) as e:
                self._drop(conn)
                raise ConnectError("unavailable", f"{self._host}:{self._port}: {e or type(e).__name__}") from e
            finally:
                with self._lock:
                    self._in_call.discard(conn)
                    closed = self._closed
                if closed:
                    self._drop(conn)
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Closes every connection, aborting calls in flight; later calls fail with unavailable."""
        with self._lock:
            self._closed = True
            busy = list(self._in_call)
            idle = [c for c in self._conns if c not in self._in_call]
            self._conns.difference_update(idle)
        for conn in idle:
            conn.close()
        # Shut, not closed: the thread in the call closes it when the call
        # fails (closing under it could break http.client's state).
        for conn in busy:
            sock = conn.sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _connection(self) -> tuple[http.client.HTTPConnection, bool]:
        """This thread's connection, marked in a call; and whether it was used before."""
        conn = getattr(self._local, "conn", None)
        with self._lock:
            if self._closed:
                raise ConnectError("unavailable", "the client is closed")
            if conn is not None and conn in self._conns:
                self._in_call.add(conn)
                return conn, conn.sock is not None
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        conn = cls(self._host, self._port, timeout=self.timeout)
        with self._lock:
            if self._closed:
                raise ConnectError("unavailable", "the client is closed")
            self._conns.add(conn)
            self._in_call.add(conn)
        self._local.conn = conn
        return conn, False

    def _drop(self, conn: http.client.HTTPConnection) -> None:
        conn.close()
        with self._lock:
            self._conns.discard(conn)
        if getattr(self._local, "conn", None) is conn:
            self._local.conn = None

    @staticmethod
    def _decode(status: int, text: bytes) -> dict:
        try:
            answer = json.loads(text) if text else {}
        except ValueError:
            answer = None
        if status == 200 and isinstance(answer, dict):
            return answer
        if isinstance(answer, dict) and isinstance(answer.get("code"), str):
            raise ConnectError(answer["code"], str(answer.get("message", "")), status)
        # Not a Connect answer (a proxy's error page, say): name the status.
        code = "unavailable" if status in (429, 502, 503, 504) else "unknown"
        snippet = text[:200].decode("utf-8", "replace")
        raise ConnectError(code, f"HTTP {status}: {snippet}", status)
