#!/usr/bin/env python3
"""What a by-key index costs a SQLite claim, in bare SQL (no Conveyor code).

The SQLite plugin's schema (jobs and its partial indexes, jobs_key among
them), 100,000 jobs, claimed 100 per transaction in the order fair turns take
them (each key's first job, key after key) and completed 100 per transaction,
as conveyor-bench's keys-many drains them. Printed per run: seconds in the
claim's UPDATE, in its COMMIT, and in the completions.

A claim deletes each claimed job's jobs_key entry. Without keys (every job the
empty key) the 100 entries sit side by side on one or two index pages; with
one key per job of 100 consecutive keys they are a key's backlog apart, so a
commit writes a page per few keys to the WAL. The jobs per key set the
spread: run it with 1, 10 and 100.

    python3 benchmarks/experiments/sqlite_key_index_pages.py [scratch dir]
"""
import json
import os
import sqlite3
import sys
import tempfile
import time

SCHEMA = """
CREATE TABLE jobs(pos INTEGER PRIMARY KEY, id INTEGER NOT NULL, queue TEXT NOT NULL,
  kind TEXT NOT NULL, payload BLOB NOT NULL, priority INTEGER NOT NULL, state INTEGER NOT NULL,
  attempt INTEGER NOT NULL DEFAULT 0, max_attempts INTEGER NOT NULL, run_at INTEGER NOT NULL,
  created_at INTEGER NOT NULL, finalized_at INTEGER NOT NULL DEFAULT 0,
  lease_token INTEGER NOT NULL DEFAULT 0, lease_expires INTEGER NOT NULL DEFAULT 0,
  last_error TEXT NOT NULL DEFAULT '', cost INTEGER NOT NULL DEFAULT 1,
  key TEXT NOT NULL DEFAULT '');
CREATE UNIQUE INDEX jobs_id ON jobs (id);
CREATE INDEX jobs_claim ON jobs (queue, priority, run_at, id) WHERE state = 1;
CREATE INDEX jobs_lease ON jobs (lease_expires) WHERE state = 3;
CREATE INDEX jobs_final ON jobs (finalized_at) WHERE state >= 4;
CREATE INDEX jobs_list ON jobs (queue, state, kind, id) WHERE state >= 4;
CREATE INDEX jobs_key ON jobs (queue, key, priority, run_at, id) WHERE state = 1;
"""
JOBS = 100_000
BATCH = 100


def run(scratch, keyed, per_key):
    path = os.path.join(scratch, "keys.db")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    c = sqlite3.connect(path, isolation_level=None)
    c.execute("PRAGMA journal_mode = WAL")
    c.execute("PRAGMA synchronous = NORMAL")
    c.executescript(SCHEMA)
    keys = JOBS // per_key
    c.execute("BEGIN")
    c.executemany(
        "INSERT INTO jobs (pos, id, queue, kind, payload, priority, state, max_attempts, run_at,"
        " created_at, key) VALUES (?, ?, 'keys-many', 'noop', '{}', 0, 1, 3, 0, 0, ?)",
        [(i, i, "key-%06d" % (i % keys) if keyed else "") for i in range(1, JOBS + 1)])
    c.execute("COMMIT")
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    # Fair turns: round r takes each key's r-th job, key after key.
    order = [r * keys + k + 1 for r in range(per_key) for k in range(keys)]
    update = commit = complete = 0.0
    for b in range(0, JOBS, BATCH):
        places = order[b:b + BATCH]
        t0 = time.perf_counter()
        c.execute("BEGIN IMMEDIATE")
        c.execute("UPDATE jobs SET state = 3, attempt = attempt + 1, lease_token = 1,"
                  " lease_expires = 5 WHERE pos IN (SELECT value FROM json_each(?))"
                  " AND state = 1 RETURNING id", (json.dumps(places),)).fetchall()
        t1 = time.perf_counter()
        c.execute("COMMIT")
        t2 = time.perf_counter()
        c.execute("BEGIN IMMEDIATE")
        c.executemany("UPDATE jobs SET state = 4, finalized_at = 7, lease_token = 0,"
                      " lease_expires = 0 WHERE pos = ? AND lease_token = 1",
                      [(p,) for p in places])
        c.execute("COMMIT")
        t3 = time.perf_counter()
        update += t1 - t0
        commit += t2 - t1
        complete += t3 - t2
    c.close()
    what = "%6d keys x %3d" % (keys, per_key) if keyed else "no key        "
    print("%s  claim update %.3f s  claim commit %.3f s  completions %.3f s"
          % (what, update, commit, complete))


def main():
    scratch = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="key-pages-")
    run(scratch, False, 10)
    for per_key in (1, 10, 100):
        run(scratch, True, per_key)


if __name__ == "__main__":
    main()
