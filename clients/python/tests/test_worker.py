"""conveyor_worker against a real `conveyor serve` (see conveyor_server.py).

    CONVEYOR_BIN=build/bin/conveyor python3 -m unittest discover -s clients/python/tests

Kinds are py_*: the server runs its builtin noop and sleep itself, and jobs of
a kind nobody serves there wait for a worker that claims them.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
import unittest

from conveyor_server import (PACKAGE_ROOT, WORKER_TOKEN, ConveyorServer, LineReader,
                             free_port, parse_time, wait_for)

from conveyor_worker import Backpressure, Client, ConnectError, PermanentError, RetryAfter, Worker

server: ConveyorServer


def setUpModule():
    global server
    server = ConveyorServer()
    try:
        server.start()
    except BaseException:
        server.close()
        raise


def tearDownModule():
    server.close()


class Running:
    """A Worker's run() on a thread, stopped (and checked) at exit."""

    def __init__(self, worker: Worker):
        self.worker = worker
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        try:
            self.worker.run()
        except BaseException as e:  # noqa: BLE001 - reported by __exit__
            self.error = e

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.worker.stop()
        self.thread.join(60)
        if exc[0] is None:
            assert not self.thread.is_alive(), "run() did not return within 60 s of stop()"
            if self.error is not None:
                raise self.error


def worker(base: str | None = None, **options) -> Worker:
    options.setdefault("queues", ["py"])
    options.setdefault("wait_seconds", 5)
    return Worker(base or server.base, token=WORKER_TOKEN, **options)


class Recorder:
    """Handler bookkeeping shared with the test thread."""

    def __init__(self):
        self.lock = threading.Lock()
        self.ids: list[int] = []
        self.attempts: dict[int, list[int]] = {}
        self.times: dict[int, list[float]] = {}
        self.running = 0
        self.max_running = 0

    def enter(self, job):
        with self.lock:
            self.ids.append(job.id)
            self.attempts.setdefault(job.id, []).append(job.attempt)
            self.times.setdefault(job.id, []).append(time.monotonic())
            self.running += 1
            self.max_running = max(self.max_running, self.running)

    def leave(self):
        with self.lock:
            self.running -= 1

    def count(self) -> int:
        with self.lock:
            return len(self.ids)


class WorkerTest(unittest.TestCase):
    def test_drain_runs_each_job_once_within_the_concurrency(self):
        ids = server.enqueue("py-drain", "py_task", 300, payload='{"n": 1}')
        rec = Recorder()
        w = worker(queues=["py-drain"], concurrency=8)
        payloads = []

        @w.handler("py_task")
        def task(job):
            rec.enter(job)
            try:
                payloads.append((job.queue, job.kind, job.payload, job.raw["id"]))
                time.sleep(0.002)  # a little work, so that jobs overlap
            finally:
                rec.leave()

        started = time.monotonic()
        with Running(w):
            wait_for(lambda: rec.count() >= 300, 60, "300 jobs run")
            for job_id in ids:
                server.wait_state(job_id, "completed")
            elapsed = time.monotonic() - started
        print(f"\ndrained 300 jobs with concurrency 8 in {elapsed:.2f} s ({300 / elapsed:.0f} jobs/s)",
              file=sys.stderr)
        self.assertEqual(sorted(rec.ids), sorted(ids))  # each once
        self.assertLessEqual(rec.max_running, 8)
        self.assertGreater(rec.max_running, 1)
        self.assertEqual(set(payloads), {("py-drain", "py_task", '{"n": 1}', str(i)) for i in ids})
        self.assertEqual({a for job in rec.attempts.values() for a in job}, {1})

    def test_weighted_queues_both_drain(self):
        a = server.enqueue("py-w-a", "py_task", 20)
        b = server.enqueue("py-w-b", "py_task", 20)
        seen = set()
        w = worker(queues={"py-w-a": 3, "py-w-b": 1}, concurrency=4)
        w.register("py_task", lambda job: seen.add((job.queue, job.id)))
        with Running(w):
            for job_id in a + b:
                server.wait_state(job_id, "completed")
        self.assertEqual(seen, {("py-w-a", i) for i in a} | {("py-w-b", i) for i in b})

    def test_claims_only_the_kinds_it_has_handlers_for(self):
        # Enqueued first and alone in a one-slot worker: a claim that ignored
        # kinds would take it before the other job.
        [other] = server.enqueue("py-kinds", "py_other")
        [mine] = server.enqueue("py-kinds", "py_mine")
        ran = []
        w = worker(queues=["py-kinds"], concurrency=1)
        w.register("py_mine", lambda job: ran.append(job.id))
        with Running(w):
            server.wait_state(mine, "completed")
        self.assertEqual(ran, [mine])
        job = server.job(other)
        self.assertEqual(job["state"], "available")
        self.assertEqual(job.get("attempt", 0), 0)

    def test_retry_after_runs_the_job_again_after_the_delay(self):
        [job_id] = server.enqueue("py-retry", "py_retry", maxAttempts=5)
        rec = Recorder()
        w = worker(queues=["py-retry"])

        @w.handler("py_retry")
        def retry(job):
            rec.enter(job)
            rec.leave()
            if job.attempt == 1:
                raise RetryAfter(1.5, "mailbox busy")

        with Running(w):
            job = server.wait_state(job_id, "completed")
        self.assertEqual(rec.attempts[job_id], [1, 2])
        self.assertEqual(job["attempt"], 2)
        first, second = rec.times[job_id]
        self.assertGreaterEqual(second - first, 1.5)

    def test_backpressure_gives_the_attempt_back_and_holds_the_queue(self):
        [a, b] = server.enqueue("py-429", "py_429", count=2, maxAttempts=1)
        rec = Recorder()
        w = worker(queues=["py-429"], concurrency=1)

        @w.handler("py_429")
        def limited(job):
            rec.enter(job)
            rec.leave()
            if len(rec.times.get(a, [])) + len(rec.times.get(b, [])) == 1:
                raise Backpressure(1.5, "HTTP 429")

        with Running(w):
            server.wait_state(a, "completed")
            server.wait_state(b, "completed")
        # maxAttempts 1: a failed attempt would have failed the job for good.
        starts = sorted(t for times in rec.times.values() for t in times)
        self.assertEqual(len(starts), 3)
        self.assertGreaterEqual(starts[1] - starts[0], 1.5, "the queue was not held")
        for job_id in (a, b):
            self.assertEqual(server.job(job_id)["attempt"], 1)

    def test_permanent_error_fails_the_job_for_good(self):
        [job_id] = server.enqueue("py-perm", "py_perm", maxAttempts=5)
        rec = Recorder()
        w = worker(queues=["py-perm"])

        @w.handler("py_perm")
        def perm(job):
            rec.enter(job)
            rec.leave()
            raise PermanentError("no such mailbox")

        with Running(w):
            job = server.wait_state(job_id, "failed")
        self.assertEqual(rec.attempts[job_id], [1])
        self.assertEqual(job["attempt"], 1)
        self.assertEqual(job["lastError"], "no such mailbox")

    def test_other_exceptions_retry_with_backoff_and_record_the_last_line(self):
        # The server's retry_backoff_base_ms is 100: the retry comes soon.
        [job_id] = server.enqueue("py-raise", "py_raise", maxAttempts=2)
        rec = Recorder()
        w = worker(queues=["py-raise"])

        @w.handler("py_raise")
        def boom(job):
            rec.enter(job)
            rec.leave()
            raise ValueError(f"boom on attempt {job.attempt}")

        with self.assertLogs("conveyor_worker", "WARNING"), Running(w):
            job = server.wait_state(job_id, "failed")
        self.assertEqual(rec.attempts[job_id], [1, 2])
        self.assertEqual(job["lastError"], "ValueError: boom on attempt 2")

    def test_heartbeats_keep_a_job_longer_than_its_lease(self):
        # Leases of 2 s, rescued every 200 ms once expired: the 5 s job lives
        # only by heartbeats. Two slots, so a rescued job would run again here.
        [job_id] = server.enqueue("py-long", "py_long")
        rec = Recorder()
        w = worker(queues=["py-long"], concurrency=2, lease_seconds=2)

        @w.handler("py_long")
        def long(job):
            rec.enter(job)
            time.sleep(5)  # the job's work
            rec.leave()

        expiries = set()
        with Running(w):
            def done():
                job = server.job(job_id)
                if job["state"] == "running" and job.get("leaseExpiresAt"):
                    expiries.add(parse_time(job["leaseExpiresAt"]))
                return job["state"] == "completed"

            wait_for(done, 30, f"job {job_id} completed", 0.2)
        self.assertEqual(rec.attempts[job_id], [1])
        self.assertEqual(server.job(job_id)["attempt"], 1)
        self.assertGreaterEqual(len(expiries), 2, "no heartbeat moved the lease")
        self.assertGreater((max(expiries) - min(expiries)).total_seconds(), 2.0)

    def test_a_job_cancelled_mid_run_loses_its_lease_at_the_next_heartbeat(self):
        [job_id] = server.enqueue("py-cancel", "py_cancel")
        started, gate = threading.Event(), threading.Event()
        runs = []
        w = worker(queues=["py-cancel"], lease_seconds=2)  # heartbeats every 2/3 s

        @w.handler("py_cancel")
        def held(job):
            runs.append(job.id)
            started.set()
            gate.wait(30)

        def logged(text):
            return lambda: any(text in r.getMessage() for r in logs.records)

        with self.assertLogs("conveyor_worker", "WARNING") as logs, Running(w):
            self.assertTrue(started.wait(30))
            self.assertEqual(server.admin.call("conveyor.v1.AdminService/CancelJob", {"id": str(job_id)})
                             ["job"]["state"], "cancelled")
            wait_for(logged(f"job {job_id}: lease lost"), 30, "the lost lease to be logged")
            gate.set()
            wait_for(logged(f"job {job_id}: lease no longer current, Complete discarded"), 30,
                     "the refused Complete to be logged")
        self.assertEqual(runs, [job_id])
        self.assertEqual(server.job(job_id)["state"], "cancelled")

    def test_a_handler_past_shutdown_timeout_is_left_to_its_lease(self):
        [job_id] = server.enqueue("py-overdue", "py_overdue", maxAttempts=3)
        started, gate = threading.Event(), threading.Event()
        self.addCleanup(gate.set)
        w = worker(queues=["py-overdue"], shutdown_timeout=0.5, lease_seconds=2)

        @w.handler("py_overdue")
        def stuck(job):
            started.set()
            gate.wait(60)

        with self.assertLogs("conveyor_worker", "WARNING") as logs, Running(w):
            self.assertTrue(started.wait(30))
            # Running's exit stops the worker: run() returns with the handler still stuck.
        self.assertTrue(any("still running after shutdown_timeout" in r.getMessage() for r in logs.records))
        # Neither failed nor released: still leased, until the lease (no longer
        # heartbeated) expires and the rescue makes it available again.
        self.assertEqual(server.job(job_id)["state"], "running")
        job = server.wait_state(job_id, "available")
        self.assertEqual(job["attempt"], 1)

    def test_a_handler_sees_the_key_its_job_was_enqueued_with(self):
        client = Client(server.base, WORKER_TOKEN)
        self.addCleanup(client.close)
        keyed = client.enqueue("py-key", "py_key", {"n": 1}, key="tenant-\u00e9")
        plain = client.enqueue("py-key", "py_key")
        [batch] = server.enqueue("py-key", "py_key", key="tenant-b")
        seen = {}
        lock = threading.Lock()
        w = worker(queues=["py-key"], concurrency=2)

        @w.handler("py_key")
        def task(job):
            with lock:
                seen[job.id] = (job.key, job.raw.get("key"))

        with Running(w):
            for job_id in (keyed, plain, batch):
                server.wait_state(job_id, "completed")
        self.assertEqual(seen, {keyed: ("tenant-\u00e9", "tenant-\u00e9"), plain: ("", ""),
                                batch: ("tenant-b", "tenant-b")})

    def test_a_bad_token_stops_run_with_unauthenticated(self):
        w = Worker(server.base, token="wrong", queues=["py-auth"], wait_seconds=0)
        w.register("py_task", lambda job: None)
        with self.assertLogs("conveyor_worker", "ERROR"), self.assertRaises(ConnectError) as caught:
            w.run()
        self.assertEqual(caught.exception.code, "unauthenticated")
        self.assertFalse(caught.exception.retryable)


class ClientTest(unittest.TestCase):
    def test_release_and_results_on_a_lease_no_longer_current(self):
        [job_id] = server.enqueue("py-client", "py_client", maxAttempts=3)
        client = Client(server.base, WORKER_TOKEN)
        self.addCleanup(client.close)
        claimed = client.claim(["py-client"], ["py_client"], max_jobs=5, wait_seconds=5, worker_id="test",
                               lease_seconds=60)
        self.assertEqual([j.id for j in claimed.jobs], [job_id])
        self.assertEqual(claimed.lease_seconds, 60)
        job = claimed.jobs[0]
        self.assertEqual((job.queue, job.kind, job.payload, job.attempt, job.max_attempts),
                         ("py-client", "py_client", "{}", 1, 3))
        self.assertEqual(job.lease.job_id, job_id)
        self.assertEqual(server.job(job_id)["state"], "running")

        beat = client.heartbeat([job.lease], 60)
        self.assertEqual([(r.job_id, r.code) for r in beat.results], [(job_id, "ok")])
        self.assertTrue(beat.lease_expires_at)

        [released] = client.release([job.lease])
        self.assertTrue(released.ok)
        after = server.job(job_id)
        self.assertEqual(after["state"], "available")
        self.assertEqual(after.get("attempt", 0), 0)  # a release spends no attempt

        # The released lease is no longer current: every result is refused.
        [late] = client.complete([job.lease])
        self.assertEqual((late.job_id, late.code), (job_id, "failed_precondition"))
        [late] = client.heartbeat([job.lease], 60).results
        self.assertEqual(late.code, "failed_precondition")
        with self.assertRaises(ConnectError) as caught:
            client.fail(job.lease, "too late")
        self.assertEqual((caught.exception.code, caught.exception.http_status), ("failed_precondition", 400))
        self.assertEqual(server.job(job_id)["state"], "available")

        # Claimed again: a new lease, and a Fail that counts.
        again = client.claim(["py-client"], ["py_client"], max_jobs=1, wait_seconds=5).jobs[0]
        self.assertNotEqual(again.lease, job.lease)
        failed = client.fail(again.lease, "later", retry_after_seconds=3600)
        self.assertTrue(failed.will_retry)
        self.assertGreater((parse_time(failed.retry_at) - parse_time(server.job(job_id)["createdAt"]))
                           .total_seconds(), 3000)
        self.assertEqual(server.job(job_id)["state"], "scheduled")

    def test_enqueue_with_a_key_and_the_claimed_job_carries_it(self):
        client = Client(server.base, WORKER_TOKEN)
        self.addCleanup(client.close)
        keyed = client.enqueue("py-client-key", "py_client_key", key="tenant-42", priority=-1,
                               max_attempts=2)
        plain = client.enqueue("py-client-key", "py_client_key", '{"a": 1}')
        self.assertEqual(server.job(keyed)["key"], "tenant-42")
        self.assertEqual(server.job(keyed)["maxAttempts"], 2)
        self.assertEqual(server.job(plain).get("key", ""), "")
        self.assertEqual(server.job(plain)["payload"], '{"a": 1}')
        claimed = []
        for _ in range(5):  # a claim answers once it has a job: both may take two
            claimed += client.claim(["py-client-key"], ["py_client_key"], max_jobs=5, wait_seconds=5).jobs
            if len(claimed) >= 2:
                break
        self.assertEqual({j.id: j.key for j in claimed}, {keyed: "tenant-42", plain: ""})
        self.assertTrue(all(r.ok for r in client.release([j.lease for j in claimed])))
        # The longest key is taken; one byte more, or a key that is not a string, is refused naming it.
        longest = client.enqueue("py-client-key", "py_client_key", key="k" * 200, delay_seconds=3600)
        self.assertEqual(server.job(longest)["key"], "k" * 200)
        with self.assertRaises(ConnectError) as caught:
            client.enqueue("py-client-key", "py_client_key", key="k" * 201)
        self.assertEqual(caught.exception.code, "invalid_argument")
        self.assertTrue(caught.exception.message.startswith("job.key: key is 201 bytes"), caught.exception.message)
        with self.assertRaises(ConnectError) as caught:
            client.enqueue("py-client-key", "py_client_key", key=7)  # type: ignore[arg-type]
        self.assertEqual((caught.exception.code, caught.exception.message),
                         ("invalid_argument", "job.key: must be a string, got 7"))

    def test_errors_name_the_code(self):
        client = Client(server.base, WORKER_TOKEN)
        self.addCleanup(client.close)
        with self.assertRaises(ConnectError) as caught:
            client.claim([], ["py_task"], max_jobs=1)
        self.assertEqual(caught.exception.code, "invalid_argument")
        self.assertFalse(caught.exception.retryable)
        nobody = Client(f"http://127.0.0.1:{free_port()}", WORKER_TOKEN)  # nothing listens there
        self.addCleanup(nobody.close)
        with self.assertRaises(ConnectError) as caught:
            nobody.complete([])
        self.assertEqual((caught.exception.code, caught.exception.http_status), ("unavailable", 0))
        self.assertTrue(caught.exception.retryable)


class WorkerProcessTest(unittest.TestCase):
    """A worker in its own process, stopped by SIGTERM."""

    SCRIPT = """
import logging, os, sys, time
sys.path.insert(0, {root!r})
from conveyor_worker import Worker
logging.basicConfig(level=logging.DEBUG, stream=sys.stderr, format="%(levelname)s %(message)s")
w = Worker({base!r}, token={token!r}, queues=[{queue!r}], concurrency=2, wait_seconds=25)

@w.handler("py_block")
def block(job):
    with open({started!r}, "a") as f:
        f.write(f"{{job.id}}\\n")
    # Holds the job until the test says go (or a minute passes).
    deadline = time.monotonic() + 60
    while not os.path.exists({go!r}) and time.monotonic() < deadline:
        time.sleep(0.02)

w.run()
print("run returned", flush=True)
"""

    def start(self, queue: str):
        self.started = server.dir / f"{queue}.started"
        self.go = server.dir / f"{queue}.go"
        script = self.SCRIPT.format(root=str(PACKAGE_ROOT), base=server.base, token=WORKER_TOKEN, queue=queue,
                                    started=str(self.started), go=str(self.go))
        proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.addCleanup(proc.stdout.close)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        return proc, LineReader(proc.stdout)

    def started_ids(self) -> list[int]:
        return [int(x) for x in self.started.read_text().split()] if self.started.exists() else []

    def test_sigterm_finishes_the_running_job_and_releases_the_rest(self):
        [first] = server.enqueue("py-term", "py_block")
        proc, out = self.start("py-term")
        wait_for(lambda: self.started_ids() == [first], 30, "the first job to start")
        # The free slot's claim is on its way (logged before it is sent).
        out.wait_line("claiming up to 1 job(s)")
        proc.send_signal(signal.SIGTERM)
        out.wait_line("stopping: waiting up to 30 s for 1 running job(s)")
        # The claim in flight gets this job after the stop: it must not run.
        [second] = server.enqueue("py-term", "py_block")
        out.wait_line("releasing 1 claimed job(s) not started: stopping")
        self.assertEqual(server.job(first)["state"], "running")
        self.go.touch()
        self.assertEqual(proc.wait(30), 0, out.text())
        out.wait_line("run returned")
        self.assertEqual(self.started_ids(), [first])
        self.assertEqual(server.job(first)["state"], "completed")
        job = server.job(second)
        self.assertEqual(job["state"], "available")
        self.assertEqual(job.get("attempt", 0), 0)

    def test_sigterm_ends_an_idle_long_poll_at_once(self):
        proc, out = self.start("py-idle")
        out.wait_line("claiming up to 2 job(s)")
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        self.assertEqual(proc.wait(30), 0, out.text())
        # The claim waits up to 25 s; stopping must not wait for it.
        self.assertLess(time.monotonic() - sent, 5, out.text())
        out.wait_line("run returned")


class JobTimeoutProcessTest(unittest.TestCase):
    """A worker process whose handler hangs past the queue's job_timeout_s."""

    SCRIPT = """
import logging, os, sys, time
sys.path.insert(0, {root!r})
from conveyor_worker import Worker
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
w = Worker({base!r}, token={token!r}, queues=["py-timeout"], concurrency=1, wait_seconds=5,
           lease_seconds=1)

@w.handler("py_hang")
def hang(job):
    with open({started!r}, "a") as f:
        f.write(f"{{job.id}}\\n")
    # Hangs: only the server's "timed out" (seen by a heartbeat) ends the wait.
    if job.timed_out.wait(60):
        with open({saw!r}, "a") as f:
            f.write(f"{{job.id}}\\n")

w.run()
"""

    @classmethod
    def setUpClass(cls):
        cls.server = ConveyorServer(queues={"py-timeout": {"job_timeout_s": 2}})
        try:
            cls.server.start()
        except BaseException:
            cls.server.close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.server.close()

    def test_a_hung_handler_is_timed_out_by_the_server_and_told_so(self):
        own = self.server
        started, saw = own.dir / "timeout.started", own.dir / "timeout.saw"
        [job_id] = own.enqueue("py-timeout", "py_hang", maxAttempts=1)
        script = self.SCRIPT.format(root=str(PACKAGE_ROOT), base=own.base, token=WORKER_TOKEN,
                                    started=str(started), saw=str(saw))
        proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.addCleanup(proc.stdout.close)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        out = LineReader(proc.stdout)
        wait_for(lambda: started.exists(), 30, "the job to start")
        began = time.monotonic()
        # The server fails the attempt at its deadline (no attempts left: for good).
        job = own.wait_state(job_id, "failed", 30)
        self.assertGreaterEqual(time.monotonic() - began, 1.0, "failed well before its 2 s")
        self.assertEqual(job["lastError"], "timed out after 2 s (job_timeout_s)")
        self.assertEqual(job["attempt"], 1)
        # The next heartbeat tells the worker, which stops heartbeating it and
        # lets the handler see it; the handler's late return reports nothing.
        out.wait_line(f"job {job_id}: timed out: the server failed this attempt")
        out.wait_line(f"job {job_id} (py_hang): the handler returned after its attempt timed out")
        wait_for(lambda: saw.exists(), 30, "the handler to see job.timed_out")
        self.assertEqual(saw.read_text().split(), [str(job_id)])
        self.assertEqual(started.read_text().split(), [str(job_id)], "run once")
        self.assertEqual(own.job(job_id)["state"], "failed")
        self.assertEqual(own.job(job_id)["lastError"], "timed out after 2 s (job_timeout_s)")
        proc.send_signal(signal.SIGTERM)
        self.assertEqual(proc.wait(30), 0, out.text())
        self.assertNotIn("Complete discarded", out.text(), "a result was sent for the timed-out job")
        self.assertNotIn("lease lost", out.text())


class ServerRestartTest(unittest.TestCase):
    def test_the_worker_reconnects_and_finishes_the_queue(self):
        own = ConveyorServer()
        self.addCleanup(own.close)
        own.start()
        ids = own.enqueue("py-restart", "py_task", 60)
        gate = threading.Event()
        rec = Recorder()
        w = worker(own.base, queues=["py-restart"], concurrency=4)

        @w.handler("py_task")
        def task(job):
            rec.enter(job)
            try:
                if rec.count() > 10:
                    gate.wait(60)  # held while the server is down
            finally:
                rec.leave()

        def retries():
            return sum("failed" in r.getMessage() and "retrying" in r.getMessage() for r in logs.records)

        with self.assertLogs("conveyor_worker", "DEBUG") as logs, Running(w):
            wait_for(lambda: rec.running == 4 and rec.count() >= 14, 30, "4 jobs held")
            own.stop()
            gate.set()  # their results now meet a server that is down
            # Claims and results retried, with backoff, several times.
            wait_for(lambda: retries() >= 6, 30, "6 tries while the server is down")
            own.start()
            for job_id in ids:
                own.wait_state(job_id, "completed", 60)
        self.assertEqual(set(rec.ids), set(ids))  # at least once each
        down = [r for r in logs.records if "server unreachable" in r.getMessage()]
        back = [r for r in logs.records if "server reachable again" in r.getMessage()]
        # Once per outage, not once per try.
        self.assertEqual(len(down), 1, [r.getMessage() for r in logs.records])
        self.assertEqual(len(back), 1, [r.getMessage() for r in logs.records])


if __name__ == "__main__":
    unittest.main()
