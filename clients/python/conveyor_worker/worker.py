"""Worker: claims jobs of the registered kinds and runs their handlers on threads.

Threads: one claims (long poll, never more jobs than free slots), one per
slot runs handlers, one reports results (Complete batched, Fail, Release),
one heartbeats the leases of jobs not yet reported. run() waits for a stop
(SIGTERM, SIGINT or stop()) and then shuts down gracefully.
"""

from __future__ import annotations

import collections
import logging
import os
import random
import signal
import socket
import threading
import time
import traceback
from typing import Callable, Iterable, Mapping

from .client import Client, ConnectError, Job, Lease

log = logging.getLogger("conveyor_worker")

Handler = Callable[[Job], object]

COMPLETE_BATCH = 100  # most leases in one Complete call
RESULT_BATCH_MAX = 1000  # the server's limit per Complete/Heartbeat/Release
REPORT_GRACE = 10.0  # on stop, results are retried this long after the handlers end


class RetryAfter(Exception):
    """Raise in a handler to retry the job no earlier than `seconds` from now."""

    def __init__(self, seconds: float, message: str = ""):
        super().__init__(message or f"retry after {seconds:g} s")
        self.seconds = float(seconds)


class Backpressure(RetryAfter):
    """Raise in a handler when the downstream asked to wait (HTTP 429/503, a quota error).

    Not a failure: the job goes back to pending with its attempt given back, and the server
    holds the whole queue (every worker and its own handlers) for `seconds`; 0 lets the server
    pick a hold that doubles while they follow each other.
    """

    def __init__(self, seconds: float = 0.0, message: str = ""):
        super().__init__(seconds, message or "the downstream asked to wait")


class PermanentError(Exception):
    """Raise in a handler to fail the job for good, whatever attempts it has left."""


class _Backoff:
    """Exponential backoff with jitter: 0.1 s doubling to 10 s."""

    def __init__(self, first: float = 0.1, cap: float = 10.0):
        self._first, self._cap, self._delay = first, cap, first

    def next(self) -> float:
        delay, self._delay = self._delay, min(self._cap, self._delay * 2)
        return delay * random.uniform(0.5, 1.0)

    def reset(self) -> None:
        self._delay = self._first


class _Outage:
    """Logs once when the server becomes unreachable and once when it is back, whichever thread sees it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since: float | None = None

    def failed(self, rpc: str, error: ConnectError) -> None:
        with self._lock:
            if self._since is None:
                self._since = time.monotonic()
                log.warning("server unreachable (%s: %s); retrying with backoff", rpc, error)

    def ok(self) -> None:
        with self._lock:
            if self._since is not None:
                log.warning("server reachable again after %.1f s", time.monotonic() - self._since)
                self._since = None


def _why(result) -> str:
    return f"{result.code}: {result.message}" if result.message else result.code


def _error_line(e: BaseException) -> str:
    """The traceback's last line: "ValueError: bad address"."""
    return traceback.format_exception_only(type(e), e)[-1].strip()


class Worker:
    """Runs handlers for jobs of the registered kinds from the given queues.

    queues: a name, a list of names, or {name: weight}. concurrency: handler
    threads, and so the most jobs held at once. See README.md for every option.
    """

    def __init__(
        self,
        base_url: str,
        token: str = "",
        queues: Mapping[str, int] | Iterable[str] | str = (),
        concurrency: int = 10,
        *,
        wait_seconds: float = 20.0,
        lease_seconds: float = 0.0,
        shutdown_timeout: float = 30.0,
        worker_id: str | None = None,
        handle_signals: bool = True,
        timeout: float = 30.0,
    ):
        self._queues = {queues: 1} if isinstance(queues, str) else (
            dict(queues) if isinstance(queues, Mapping) else {q: 1 for q in queues})
        if not self._queues:
            raise ValueError("queues: give at least one queue name (or {name: weight})")
        if not 1 <= concurrency <= RESULT_BATCH_MAX:
            raise ValueError(f"concurrency: must be 1..{RESULT_BATCH_MAX}, got {concurrency}")
        if not 0 <= wait_seconds <= 30:
            raise ValueError(f"wait_seconds: must be 0..30, got {wait_seconds}")
        self.concurrency = concurrency
        self.wait_seconds = wait_seconds
        self.lease_seconds = lease_seconds
        self.shutdown_timeout = shutdown_timeout
        self.worker_id = worker_id if worker_id is not None else f"{socket.gethostname()}:{os.getpid()}"
        self.handle_signals = handle_signals
        self._client = Client(base_url, token, timeout)
        # Its own client, so that stopping can abort a long poll in flight.
        self._claim_client = Client(base_url, token, timeout)
        self._handlers: dict[str, Handler] = {}
        self._outage = _Outage()
        self._stopping = threading.Event()
        self._signals = 0  # set by the signal handler, which must take no locks
        self._fatal: ConnectError | None = None

        # Slots, guarded by _cond.
        self._cond = threading.Condition()
        self._ready: collections.deque[Job] = collections.deque()  # claimed, not started
        self._running: dict[int, Job] = {}
        self._busy = 0  # ready + running: never more than concurrency
        self._active: dict[int, Lease] = {}  # claimed and not yet reported: heartbeated
        self._reporting: set[Lease] = set()  # results on their way: a lost lease is no news
        self._claim_lease = lease_seconds  # the lease length the server granted

        # Results waiting to be sent, guarded by _results_cond.
        self._results_cond = threading.Condition()
        self._results: collections.deque[tuple] = collections.deque()
        self._finish = False  # no more results will come: flush and end
        self._give_up_at: float | None = None
        self._heartbeat_stop = threading.Event()

    # -- registration ------------------------------------------------------------

    def handler(self, kind: str) -> Callable[[Handler], Handler]:
        """Decorator: @worker.handler("send_email") registers the function for that kind."""

        def register(fn: Handler) -> Handler:
            self.register(kind, fn)
            return fn

        return register

    def register(self, kind: str, fn: Handler) -> None:
        if kind in self._handlers:
            raise ValueError(f"kind {kind!r} already has a handler")
        self._handlers[kind] = fn

    # -- running ----------------------------------------------------------------

    def stop(self) -> None:
        """Asks run() to stop gracefully; returns at once. Safe from any thread, a handler too."""
        self._stopping.set()
        with self._cond:
            self._cond.notify_all()

    def run(self) -> None:
        """Runs until SIGTERM/SIGINT or stop(); then finishes running jobs (up to
        shutdown_timeout), releases claimed jobs not started and reports results.
        Raises ConnectError when the server refuses the claims (a bad token, a bad queue name)."""
        if not self._handlers:
            raise ValueError("register a handler first (@worker.handler('kind'))")
        previous = self._install_signal_handlers()
        threads = [self._thread(self._slot_loop, f"conveyor-slot-{i}") for i in range(self.concurrency)]
        claimer = self._thread(self._claim_loop, "conveyor-claim")
        reporter = self._thread(self._report_loop, "conveyor-report")
        heartbeater = self._thread(self._heartbeat_loop, "conveyor-heartbeat")
        for t in [*threads, claimer, reporter, heartbeater]:
            t.start()
        log.info("worker %s: %d slots, kinds %s, queues %s", self.worker_id, self.concurrency,
                 sorted(self._handlers), self._queues)
        try:
            # Polled, not a blocking wait: the signal handler only sets a counter.
            while not self._stopping.is_set() and not self._signals:
                self._stopping.wait(0.1)
            if self._signals:
                log.info("signal received: stopping")
            self.stop()
            self._shutdown(claimer, reporter, heartbeater)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
            self._client.close()
            self._claim_client.close()
        if self._fatal is not None:
            raise self._fatal

    def _thread(self, loop: Callable[[], None], name: str) -> threading.Thread:
        def guarded():
            try:
                loop()
            except BaseException:  # a bug here: stop rather than hang without the thread
                log.critical("%s crashed; stopping the worker", name, exc_info=True)
                self.stop()

        return threading.Thread(target=guarded, name=name, daemon=True)

    def _install_signal_handlers(self) -> dict:
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            return {}

        def on_signal(signum, frame):
            self._signals += 1

        return {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}

    def _shutdown(self, claimer: threading.Thread, reporter: threading.Thread,
                  heartbeater: threading.Thread) -> None:
        deadline = time.monotonic() + self.shutdown_timeout
        with self._cond:
            if self._running:
                log.info("stopping: waiting up to %g s for %d running job(s) (a second signal: no wait)",
                         self.shutdown_timeout, len(self._running))
            while self._running and time.monotonic() < deadline and self._signals < 2:
                self._cond.wait(min(0.1, max(0.0, deadline - time.monotonic())))
            unstarted = list(self._ready)
            self._ready.clear()
            self._busy -= len(unstarted)
            overdue = list(self._running.values())
        # The claimer may be in a long poll: abort it (jobs it still gets are
        # released). Closed again until it ends: a connection being opened
        # has no socket to shut yet.
        while claimer.is_alive():
            self._claim_client.close()
            claimer.join(0.1)
        if unstarted:
            log.info("releasing %d claimed job(s) not started: stopping", len(unstarted))
            self._add_results(("release", job.lease) for job in unstarted)
        # Left to lease expiry (docs/workers.md): no more heartbeats once
        # the results are flushed, and the rescue runs them again.
        for job in overdue:
            log.warning("job %d (%s) still running after shutdown_timeout %g s: left to expire with its "
                        "lease, then it runs again", job.id, job.kind, self.shutdown_timeout)
        with self._results_cond:
            self._finish = True
            self._give_up_at = time.monotonic() + REPORT_GRACE
            self._results_cond.notify_all()
        reporter.join()
        self._heartbeat_stop.set()
        heartbeater.join()
        log.info("worker %s stopped", self.worker_id)

    # -- claiming -----------------------------------------------------------------

    def _claim_loop(self) -> None:
        backoff = _Backoff()
        kinds = sorted(self._handlers)
        while True:
            with self._cond:
                while self._busy >= self.concurrency and not self._stopping.is_set():
                    self._cond.wait()
                if self._stopping.is_set():
                    return
                free = self.concurrency - self._busy
            log.debug("claiming up to %d job(s)", free)
            try:
                claimed = self._claim_client.claim(self._queues, kinds, free, self.wait_seconds,
                                                   self.worker_id, self.lease_seconds)
            except ConnectError as e:
                if self._stopping.is_set():
                    return
                if not e.retryable:
                    log.error("Claim refused: %s; stopping", e)
                    self._fatal = e
                    self.stop()
                    return
                self._outage.failed("Claim", e)
                delay = backoff.next()
                log.debug("Claim failed (%s); retrying in %.2f s", e, delay)
                self._stopping.wait(delay)
                continue
            self._outage.ok()
            backoff.reset()
            if claimed.lease_seconds > 0:
                self._claim_lease = claimed.lease_seconds
            with self._cond:
                for job in claimed.jobs:
                    self._active[job.id] = job.lease
                stopping = self._stopping.is_set()
                if not stopping:
                    self._ready.extend(claimed.jobs)
                    self._busy += len(claimed.jobs)
                    self._cond.notify_all()
            if stopping and claimed.jobs:
                log.info("releasing %d claimed job(s) not started: stopping", len(claimed.jobs))
                self._add_results(("release", job.lease) for job in claimed.jobs)

    # -- running handlers ------------------------------------------------------------

    def _slot_loop(self) -> None:
        while True:
            with self._cond:
                while not self._ready and not self._stopping.is_set():
                    self._cond.wait()
                if self._stopping.is_set():
                    return  # jobs still ready are released by _shutdown
                job = self._ready.popleft()
                self._running[job.id] = job
            if job.timed_out.is_set():  # timed out before it started: nothing to run
                log.info("job %d (%s): not started: its attempt timed out while it waited", job.id, job.kind)
                result = None
            else:
                result = self._execute(job)
            if result is None:
                pass
            elif job.timed_out.is_set():
                # The server failed this attempt at its deadline: nothing to report.
                log.info("job %d (%s): the handler returned after its attempt timed out; its "
                         "result (%s) is discarded", job.id, job.kind, result[0])
                result = None
            elif result[0] == "fail" and result[5] and self._report_backpressure(result[1:]):
                result = None
            with self._cond:
                del self._running[job.id]
                self._busy -= 1
                self._cond.notify_all()
            if result is not None:
                self._add_results([result])  # after the shutdown's flush, nobody sends it

    def _report_backpressure(self, fail: tuple) -> bool:
        """Sends a backpressure Fail before this slot may claim again, so the server holds the
        queue before it grants the next job. False: not sent (the reporter retries it)."""
        lease = fail[0]
        try:
            self._client.fail(*fail)
        except ConnectError as e:
            if e.retryable:
                return False
            log.warning("job %d: backpressure fail refused, result dropped: %s", lease.job_id, e.message)
        self._forget([lease])
        return True

    def _execute(self, job: Job) -> tuple:
        try:
            handler = self._handlers.get(job.kind)
            if handler is None:
                raise LookupError(f"no handler for kind {job.kind!r} here (kinds: {sorted(self._handlers)})")
            handler(job)
            return ("complete", job.lease)
        except Backpressure as e:
            log.info("job %d (%s): the downstream asks to wait %g s: %s", job.id, job.kind, e.seconds, e)
            return ("fail", job.lease, str(e), e.seconds, False, True)
        except RetryAfter as e:
            log.info("job %d (%s) asks to retry after %g s: %s", job.id, job.kind, e.seconds, e)
            return ("fail", job.lease, str(e), e.seconds, False, False)
        except PermanentError as e:
            log.warning("job %d (%s) failed for good: %s", job.id, job.kind, e)
            return ("fail", job.lease, str(e) or type(e).__name__, 0.0, True, False)
        except BaseException as e:  # noqa: BLE001 - a handler's failure is the job's, never the worker's
            log.warning("job %d (%s) attempt %d raised", job.id, job.kind, job.attempt, exc_info=True)
            return ("fail", job.lease, _error_line(e), 0.0, False, False)

    # -- reporting ------------------------------------------------------------------

    def _add_results(self, results: Iterable[tuple]) -> None:
        with self._results_cond:
            self._results.extend(results)
            self._results_cond.notify_all()

    def _report_loop(self) -> None:
        # Results go out at once when no call is on its way; those that come
        # meanwhile go together in the next call (up to COMPLETE_BATCH). Not a
        # flush timer: the server holds a queue's max_workers permit for each
        # job until its result lands, so waiting would cap the queue's rate.
        completes: list[Lease] = []
        releases: list[Lease] = []
        fails: list[tuple] = []
        retry_at = 0.0  # after a failed call: not before this (backoff)
        backoff = _Backoff()
        while True:
            with self._results_cond:
                while True:
                    for result in self._results:
                        if result[0] == "complete":
                            completes.append(result[1])
                        elif result[0] == "release":
                            releases.append(result[1])
                        else:
                            fails.append(result[1:])
                    self._results.clear()
                    pending = len(completes) + len(releases) + len(fails)
                    if self._finish and not pending:
                        return
                    now = time.monotonic()
                    if self._give_up_at is not None and now >= self._give_up_at and pending:
                        log.error("stopping: gave up reporting %d result(s) after %g s; those jobs run "
                                  "again when their leases expire", pending, REPORT_GRACE)
                        return
                    if pending and now >= retry_at:
                        break
                    wake = retry_at if pending else None
                    if self._give_up_at is not None:
                        wake = min(wake, self._give_up_at) if wake is not None else self._give_up_at
                    self._results_cond.wait(None if wake is None else wake - now)
            try:
                self._send(completes, releases, fails)
            except ConnectError as e:
                self._outage.failed("reporting results", e)
                delay = backoff.next()
                log.debug("reporting results failed (%s); retrying in %.2f s", e, delay)
                retry_at = time.monotonic() + delay
                continue
            self._outage.ok()
            backoff.reset()
            retry_at = 0.0

    def _send(self, completes: list[Lease], releases: list[Lease], fails: list[tuple]) -> None:
        """Sends what is pending, removing each item once the server answered it.
        Raises a retryable ConnectError with the rest still pending."""
        with self._cond:
            self._reporting.update(f[0] for f in fails)
            self._reporting.update(releases)
            self._reporting.update(completes)
        while fails:
            lease, error, retry_after, permanent, backpressure = fails[0]
            try:
                answer = self._client.fail(lease, error, retry_after, permanent, backpressure)
                log.debug("job %d failed: will_retry=%s retry_at=%s", lease.job_id, answer.will_retry,
                          answer.retry_at)
            except ConnectError as e:
                if e.retryable:
                    raise
                if e.code == "failed_precondition":
                    log.warning("job %d: lease no longer current, failure discarded: %s", lease.job_id,
                                e.message)
                else:
                    log.error("job %d: Fail refused, result dropped: %s", lease.job_id, e)
            fails.pop(0)
            self._forget([lease])
        for rpc, pending, batch in (("Release", releases, RESULT_BATCH_MAX), ("Complete", completes, COMPLETE_BATCH)):
            while pending:
                leases = pending[:batch]
                call = self._client.release if rpc == "Release" else self._client.complete
                try:
                    results = call(leases)
                except ConnectError as e:
                    if e.retryable:
                        raise
                    log.error("%s refused, %d result(s) dropped: %s", rpc, len(leases), e)
                    results = []
                for r in results:
                    if not r.ok:
                        log.warning("job %d: lease no longer current, %s discarded: %s", r.job_id, rpc,
                                    _why(r))
                del pending[:len(leases)]
                self._forget(leases)

    def _forget(self, leases: list[Lease]) -> None:
        with self._cond:
            for lease in leases:
                self._reporting.discard(lease)
                if self._active.get(lease.job_id) == lease:
                    del self._active[lease.job_id]

    # -- heartbeats ------------------------------------------------------------------

    def _heartbeat_loop(self) -> None:
        # Every third of the lease, extend the leases of all jobs held and not
        # yet reported; a tick the server misses is retried at the next. The
        # lease is known once a claim answered.
        while True:
            lease = self._claim_lease
            if self._heartbeat_stop.wait(max(0.05, lease / 3) if lease > 0 else 0.1):
                return
            if lease <= 0:
                continue
            with self._cond:
                leases = list(self._active.values())
            for i in range(0, len(leases), RESULT_BATCH_MAX):
                batch = leases[i:i + RESULT_BATCH_MAX]
                try:
                    answer = self._client.heartbeat(batch, self._claim_lease)
                except ConnectError as e:
                    if e.retryable:
                        self._outage.failed("Heartbeat", e)
                        log.debug("Heartbeat failed (%s); retrying at the next beat", e)
                    else:
                        log.error("Heartbeat refused: %s", e)
                    break
                self._outage.ok()
                with self._cond:
                    lost = [lease for lease, r in zip(batch, answer.results)
                            if not r.ok and lease not in self._reporting and self._active.get(lease.job_id) == lease]
                    for lease in lost:
                        del self._active[lease.job_id]
                    # The handler may watch job.timed_out to stop early.
                    running = {job.id: job for job in (*self._running.values(), *self._ready)}
                    for lease, r in zip(batch, answer.results):
                        job = running.get(lease.job_id)
                        if r.timed_out and job is not None and job.lease == lease:
                            job.timed_out.set()
                for lease, r in zip(batch, answer.results):
                    if lease in lost and r.timed_out:
                        log.warning("job %d: timed out: the server failed this attempt at its deadline "
                                    "(%s); no more heartbeats, and the handler's result will be discarded",
                                    r.job_id, r.message or r.code)
                    elif lease in lost:
                        log.warning("job %d: lease lost (%s): no more heartbeats; another worker may run "
                                    "it, and this run's result will be discarded", r.job_id, _why(r))
