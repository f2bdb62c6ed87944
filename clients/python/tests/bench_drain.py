"""Drain throughput of one worker against a real `conveyor serve` (not a test: run by hand):

    CONVEYOR_BIN=build/bin/conveyor python3 clients/python/tests/bench_drain.py [JOBS] [CONCURRENCY...]

Enqueues JOBS jobs of a no-op kind into one queue per concurrency (default 8
and 32) and reports how fast one worker runs them and has them completed.
"""

import sys
import threading
import time

from conveyor_server import WORKER_TOKEN, ConveyorServer, wait_for

from conveyor_worker import Worker

count = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
concurrencies = [int(c) for c in sys.argv[2:]] or [8, 32]
server = ConveyorServer()
server.start()
try:
    for concurrency in concurrencies:
        queue = f"bench-{concurrency}"
        server.enqueue(queue, "py_bench", count)
        done = []
        w = Worker(server.base, token=WORKER_TOKEN, queues=[queue], concurrency=concurrency)
        w.register("py_bench", lambda job: done.append(job.id))
        start = time.monotonic()
        runner = threading.Thread(target=w.run)
        runner.start()
        wait_for(lambda: len(done) >= count, 300, f"{count} jobs")
        w.stop()  # run() returns once the last results are sent
        runner.join()
        elapsed = time.monotonic() - start
        print(f"concurrency {concurrency}: {count} jobs in {elapsed * 1000:.0f} ms = {count / elapsed:.0f} jobs/s")
finally:
    server.close()
