# Runs conveyor-bench's steady workloads (quick, small) on the canonical
# PostgreSQL plugin against the server named by $CONVEYOR_TEST_PG_DSN and
# checks what they measured. Without a DSN: skipped locally, a failure under
# CI=true (CI must never pass by skipping).
#   cmake -DBENCH=... -DWORK_DIR=... [-DPSQL=...] -P run_steady_pg.cmake
foreach(var BENCH WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_steady_pg.cmake: -D${var}=... is required")
  endif()
endforeach()

set(dsn "$ENV{CONVEYOR_TEST_PG_DSN}")
if(dsn STREQUAL "")
  if("$ENV{CI}" STREQUAL "true")
    message(FATAL_ERROR "CONVEYOR_TEST_PG_DSN is not set under CI=true: start a PostgreSQL "
                        "(scripts/pg-cluster.sh) and export its DSN")
  endif()
  message("SKIPPED: CONVEYOR_TEST_PG_DSN is not set (scripts/test.sh starts a PostgreSQL)")
  return()
endif()

set(jobs 4000)
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}/out")
file(WRITE "${WORK_DIR}/postgres.toml"
  "[storage]\nplugin = \"postgres\"\n[storage.options]\ndsn = \"${dsn}\"\n")
execute_process(
  COMMAND "${BENCH}" --quick --config "${WORK_DIR}/postgres.toml"
          --workloads steady,steady-held-txn --steady-jobs ${jobs} --steady-rate 2000
          --out "${WORK_DIR}/out"
  WORKING_DIRECTORY "${WORK_DIR}"
  RESULT_VARIABLE code
  OUTPUT_VARIABLE out)
message("${out}")
if(NOT code EQUAL 0)
  message(FATAL_ERROR "conveyor-bench steady workloads exited with ${code}")
endif()

file(READ "${WORK_DIR}/out/bench-results.json" json)
string(JSON runs LENGTH "${json}" backends 0 steady)
if(NOT runs EQUAL 2)
  message(FATAL_ERROR "expected 2 steady runs in bench-results.json, found ${runs}")
endif()
foreach(i 0 1)
  string(JSON workload GET "${json}" backends 0 steady ${i} workload)
  string(JSON held GET "${json}" backends 0 steady ${i} held_transaction)
  string(JSON rate GET "${json}" backends 0 steady ${i} jobs_per_sec)
  string(JSON samples GET "${json}" backends 0 steady ${i} pickup samples)
  string(JSON p99 GET "${json}" backends 0 steady ${i} pickup p99_ms)
  string(JSON before GET "${json}" backends 0 steady ${i} postgres relation_bytes_before)
  string(JSON after GET "${json}" backends 0 steady ${i} postgres relation_bytes_after)
  string(JSON dead_final GET "${json}" backends 0 steady ${i} postgres n_dead_tup_final)
  string(JSON dead_peak GET "${json}" backends 0 steady ${i} postgres n_dead_tup_peak)
  string(JSON xid GET "${json}" backends 0 steady ${i} postgres held_xid)
  if(NOT rate GREATER 0 OR NOT samples EQUAL jobs OR NOT p99 GREATER 0)
    message(FATAL_ERROR "${workload}: ${rate} jobs/s, ${samples} pickup samples (want ${jobs}), "
                        "p99 ${p99} ms")
  endif()
  if(NOT after GREATER before)
    message(FATAL_ERROR "${workload}: relation size ${before} -> ${after} bytes: ${jobs} jobs "
                        "must have grown the schema")
  endif()
  if(dead_peak LESS dead_final)
    message(FATAL_ERROR "${workload}: peak n_dead_tup ${dead_peak} below the final ${dead_final}")
  endif()
  if(workload STREQUAL "steady-held-txn")
    # The canonical backend rewrites each job's row (claim, completion); with
    # the horizon pinned none of those versions can be removed, so the
    # statistics must show at least one dead tuple per job.
    if(NOT held OR NOT xid GREATER 0 OR dead_final LESS jobs)
      message(FATAL_ERROR "${workload}: held ${held} (xid ${xid}), final n_dead_tup "
                          "${dead_final}: expected >= ${jobs} dead tuples with the horizon held")
    endif()
  elseif(held OR NOT xid EQUAL 0)
    message(FATAL_ERROR "${workload}: held_transaction ${held}, xid ${xid}: expected none")
  endif()
endforeach()

file(READ "${WORK_DIR}/out/bench-results.svg" svg)
string(FIND "${svg}" "n_dead_tup (sum over" chart_at)
if(chart_at LESS 0)
  message(FATAL_ERROR "bench-results.svg has no n_dead_tup chart")
endif()

# The scratch schemas were dropped afterwards.
if(PSQL)
  execute_process(
    COMMAND "${PSQL}" -X -A -t -d "${dsn}" -c
            "SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'conveyor\\_bench\\_steady%'"
    RESULT_VARIABLE psql_code
    OUTPUT_VARIABLE left OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT psql_code EQUAL 0 OR NOT left EQUAL 0)
    message(FATAL_ERROR "scratch schemas conveyor_bench_steady* left behind (${left}, psql ${psql_code})")
  endif()
endif()
file(REMOVE_RECURSE "${WORK_DIR}")
