"""Conveyor's reference Python worker: run jobs that `conveyor serve` stores.

    from conveyor_worker import Worker, RetryAfter, PermanentError
    w = Worker("http://queue.internal:8080", token=..., queues=["email:send"], concurrency=20)

    @w.handler("send_email")
    def send(job): ...

    w.run()
"""

from .client import Client, ClaimResult, ConnectError, FailResult, HeartbeatResult, Job, Lease, LeaseResult
from .worker import Backpressure, PermanentError, RetryAfter, Worker

__all__ = [
    "Worker",
    "RetryAfter",
    "Backpressure",
    "PermanentError",
    "Job",
    "Client",
    "ConnectError",
    "Lease",
    "LeaseResult",
    "ClaimResult",
    "FailResult",
    "HeartbeatResult",
]
__version__ = "0.1.0"
