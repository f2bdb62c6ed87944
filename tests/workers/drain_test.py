#!/usr/bin/env python3
"""A Python worker and a Node worker drain 10,000 jobs together through a real
`conveyor serve`, while a third worker is killed with SIGKILL mid-job.

    drain_test.py --storage sqlite|postgres --python-client DIR --node-index FILE

Environment: CONVEYOR_BIN, CONVEYOR_PLUGIN_DIR, and for postgres
CONVEYOR_TEST_PG_DSN (skipped without it, failed under CI=true).

Checks, from what every worker's handler records and what the server says:
every job completed, each exactly once by the surviving workers; the jobs
the killed worker held ran again (attempt 2) after their leases expired;
both survivors did part of the work.
"""
import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

JOBS = 10_000
QUEUE = "drain"
ADMIN = "drain-admin-token"
WORKER = "drain-worker-token"

PY_WORKER = r"""import sys, time
sys.path.insert(0, sys.argv[1])
from conveyor_worker import Worker
url, token, log_path, mode = sys.argv[2:6]
log = open(log_path, "a", buffering=1)
hang = mode == "hang"
w = Worker(url, token=token, queues=["drain"], concurrency=4 if hang else 8,
           lease_seconds=3 if hang else 10, worker_id=f"python-{mode}")
@w.handler("work")
def work(job):
    log.write(f"{job.id} {job.attempt}\n")
    if hang:
        time.sleep(3600)
w.run()
"""

NODE_WORKER = r"""import { openSync, writeSync } from "node:fs";
import { pathToFileURL } from "node:url";
const [index, url, token, logPath] = process.argv.slice(2);
const { Worker } = await import(pathToFileURL(index).href);
const fd = openSync(logPath, "a");
const w = new Worker(url, { token, queues: ["drain"], concurrency: 8, leaseSeconds: 10,
                            workerId: "node-survivor" });
w.handler("work", async (job) => { writeSync(fd, `${job.id} ${job.attempt}\n`); });
await w.run();
"""


def fail(message: str) -> None:
    print(f"workers drain test FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(url: str, method: str, body: dict, token: str = ADMIN) -> dict:
    request = urllib.request.Request(
        f"{url}/conveyor.v1.{method}", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def wait_for(what: str, condition, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)


def read_log(path: Path) -> list[tuple[int, int]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2:
            out.append((int(parts[0]), int(parts[1])))
    return out


def completed(url: str) -> int:
    for q in call(url, "AdminService/ListQueues", {}).get("queues", []):
        if q["queue"] == QUEUE:
            return int(q.get("completed", 0))
    return 0


def main() -> None:
    args = argparse.ArgumentParser()
    args.add_argument("--storage", choices=["sqlite", "postgres"], required=True)
    args.add_argument("--python-client", required=True)
    args.add_argument("--node-index", required=True)
    opts = args.parse_args()
    binary = os.environ["CONVEYOR_BIN"]
    work = Path(tempfile.mkdtemp(prefix=f"conveyor-drain-{opts.storage}-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    if opts.storage == "sqlite":
        storage = f'plugin = "sqlite"\n[storage.options]\npath = "{work}/conveyor.db"\n'
    else:
        dsn = os.environ.get("CONVEYOR_TEST_PG_DSN", "")
        if not dsn:
            if os.environ.get("CI") == "true":
                fail("CONVEYOR_TEST_PG_DSN is not set (CI must not skip PostgreSQL)")
            print("workers drain test SKIPPED: no CONVEYOR_TEST_PG_DSN")
            return
        schema = f"drain_{random.randrange(1 << 40)}"
        storage = f'plugin = "postgres"\n[storage.options]\ndsn = "{dsn}"\nschema = "{schema}"\n'
    plugin_dir = os.environ.get("CONVEYOR_PLUGIN_DIR")
    if plugin_dir:
        storage = storage.replace("\n[storage.options]", f'\nplugin_dir = "{plugin_dir}"\n[storage.options]', 1)
    config = work / "conveyor.toml"
    config.write_text(
        f"[storage]\n{storage}\n"
        "[engine]\nrescue_interval_ms = 500\n\n"
        f"[queues.{QUEUE}]\nmax_workers = 64\n\n"
        f'[server]\nlisten = "127.0.0.1:{port}"\nadmin_token = "{ADMIN}"\nworker_token = "{WORKER}"\n')
    server_log = open(work / "serve.log", "w")
    server = subprocess.Popen([binary, "serve", "--config", str(config)],
                              stdout=server_log, stderr=subprocess.STDOUT)
    workers: list[subprocess.Popen] = []
    try:
        def up() -> bool:
            try:
                call(url, "AdminService/ListQueues", {})
                return True
            except (urllib.error.URLError, ConnectionError):
                return False
        wait_for("the server to listen", up, 30)
        ids: set[int] = set()
        for start in range(0, JOBS, 1000):
            answer = call(url, "TaskService/EnqueueBatch",
                          {"jobs": [{"queue": QUEUE, "kind": "work", "payload": json.dumps({"n": i})}
                                    for i in range(start, start + 1000)]}, token=WORKER)
            ids.update(int(i) for i in answer["ids"])
        if len(ids) != JOBS:
            fail(f"enqueued {len(ids)} distinct ids, not {JOBS}")

        py_script = work / "worker.py"
        py_script.write_text(PY_WORKER)
        node_script = work / "worker.mjs"
        node_script.write_text(NODE_WORKER)
        logs = {name: work / f"{name}.log" for name in ("victim", "python", "node")}
        stderr = {name: open(work / f"{name}.err", "w") for name in logs}

        def python(mode: str) -> subprocess.Popen:
            return subprocess.Popen(
                [sys.executable, str(py_script), opts.python_client, url, WORKER,
                 str(logs[mode if mode == "victim" else "python"]), "hang" if mode == "victim" else "run"],
                stdout=subprocess.DEVNULL, stderr=stderr[mode])

        # The victim first, so it holds jobs; killed once it runs them.
        victim = python("victim")
        workers.append(victim)
        wait_for("the victim to start jobs", lambda: len(read_log(logs["victim"])) >= 4, 60)
        survivors = [python("python"),
                     subprocess.Popen(["node", str(node_script), opts.node_index, url, WORKER,
                                       str(logs["node"])],
                                      stdout=subprocess.DEVNULL, stderr=stderr["node"])]
        workers.extend(survivors)
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        held = {job for job, _ in read_log(logs["victim"])}
        started = time.monotonic()
        wait_for(f"{JOBS} jobs completed", lambda: completed(url) >= JOBS, 300)
        elapsed = time.monotonic() - started
        for w in survivors:
            w.send_signal(signal.SIGTERM)
        for w, name in zip(survivors, ("python", "node")):
            code = w.wait(60)
            if code != 0:
                fail(f"the {name} worker exited {code}: {(work / f'{name}.err').read_text()[-2000:]}")

        runs = {"python": read_log(logs["python"]), "node": read_log(logs["node"])}
        seen: dict[int, list[tuple[str, int]]] = {}
        for name, entries in runs.items():
            for job, attempt in entries:
                seen.setdefault(job, []).append((name, attempt))
        if set(seen) != ids:
            fail(f"jobs never run by a survivor: {sorted(ids - set(seen))[:10]}; "
                 f"ids never enqueued: {sorted(set(seen) - ids)[:10]}")
        twice = {job: r for job, r in seen.items() if len(r) > 1}
        if twice:
            fail(f"{len(twice)} jobs ran more than once on the survivors, e.g. {list(twice.items())[:5]}")
        for job in held:
            if seen[job][0][1] != 2:
                fail(f"job {job}, held by the killed worker, ran at attempt {seen[job][0][1]}, not 2")
        others = [a for job, r in seen.items() if job not in held for _, a in r]
        if any(a != 1 for a in others):
            fail("a job the killed worker never held ran at an attempt other than 1")
        share = {name: len(entries) for name, entries in runs.items()}
        if min(share.values()) < JOBS // 20:
            fail(f"one survivor did almost nothing: {share}")
        states = call(url, "AdminService/ListQueues", {})["queues"]
        print(f"drained {JOBS} jobs on {opts.storage} in {elapsed:.1f} s "
              f"({JOBS / elapsed:.0f} jobs/s): python {share['python']}, node {share['node']}; "
              f"{len(held)} jobs of the SIGKILLed worker ran again at attempt 2; queue {states}")
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()
        server.send_signal(signal.SIGTERM)
        try:
            code = server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            code = "killed after 30 s"
        if code != 0:
            print(f"conveyor serve exited {code}; its log: {work / 'serve.log'}", file=sys.stderr)
            sys.exit(1)


if __name__ == "__main__":
    main()
