# Runs the job-key workloads small (`conveyor-bench --quick --workloads keys
# --keys-scale SCALE ARGS...`) in a fresh directory and checks their figures
# for the first backend: every small key's job started, fair turns got them
# started before FIFO did, every job of the per-key limit run started within
# burst + rate * t, the drains and the purge covered every job.
#   cmake -DBENCH=... -DWORK_DIR=... "-DARGS=--config;x.toml" [-DSCALE=0.05] -P run_keys.cmake
foreach(var BENCH WORK_DIR ARGS)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_keys.cmake: -D${var}=... is required")
  endif()
endforeach()
if(NOT DEFINED SCALE)
  set(SCALE 0.05)
endif()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}/out" "${WORK_DIR}/scratch")
execute_process(
  COMMAND "${BENCH}" --quick --workloads keys --keys-scale ${SCALE} ${ARGS}
          --out "${WORK_DIR}/out" --scratch "${WORK_DIR}/scratch"
  WORKING_DIRECTORY "${WORK_DIR}"
  RESULT_VARIABLE code
  OUTPUT_VARIABLE out)
message("${out}")
if(NOT code EQUAL 0)
  message(FATAL_ERROR "conveyor-bench --workloads keys exited with ${code}")
endif()

file(READ "${WORK_DIR}/out/bench-results.json" json)
macro(get var)
  string(JSON ${var} ERROR_VARIABLE err GET "${json}" backends 0 ${ARGN})
  if(err)
    message(FATAL_ERROR "bench-results.json: backends[0] ${ARGN}: ${err}")
  endif()
endmacro()
macro(check condition)
  if(NOT (${ARGN}))
    message(FATAL_ERROR "keys workloads: ${condition} (${ARGN})")
  endif()
endmacro()

string(JSON held GET "${json}" rate_invariant_held)
check("every key within burst + rate * t" held)

# Noisy neighbour: every small job ran, in both orders; fair turns started
# them sooner than FIFO (which waits for key A's backlog).
get(small_keys keys_noisy_neighbour small_keys)
get(per_key keys_noisy_neighbour small_jobs_per_key)
get(fair_n keys_noisy_neighbour small_pickup_fair samples)
get(fifo_n keys_noisy_neighbour small_pickup_fifo samples)
get(fair_p50 keys_noisy_neighbour small_pickup_fair p50_ms)
get(fifo_p50 keys_noisy_neighbour small_pickup_fifo p50_ms)
get(alone keys_noisy_neighbour big_key_alone_jobs_per_sec)
math(EXPR small_jobs "${small_keys} * ${per_key}")
check("every small job measured, fair" fair_n EQUAL small_jobs)
check("every small job measured, fifo" fifo_n EQUAL small_jobs)
check("fair pickup p50 below FIFO's" fair_p50 GREATER 0 AND fair_p50 LESS fifo_p50)
check("key A alone measured" alone GREATER 0)

# Per-key limits: every job of the first run started, none above its bound.
string(JSON runs LENGTH "${json}" backends 0 keys_accuracy)
check("two keys-accuracy runs" runs EQUAL 2)
get(keys keys_accuracy 0 keys)
get(jobs_per_key keys_accuracy 0 jobs_per_key)
get(started keys_accuracy 0 started)
get(rate keys_accuracy 0 jobs_per_sec)
get(within keys_accuracy 0 within_bound)
get(queue_rate keys_accuracy 1 queue_rate)
get(queue_within keys_accuracy 1 within_bound)
math(EXPR jobs "${keys} * ${jobs_per_key}")
check("every keyed job started" started EQUAL jobs)
check("a rate measured" rate GREATER 0)
check("within the per-key bound" within)
check("the second run has a queue limit" queue_rate GREATER 0)
check("within the bounds under a queue limit" queue_within)

# Many keys: both drains measured.
get(keyed keys_many keyed_jobs_per_sec)
get(unkeyed keys_many unkeyed_jobs_per_sec)
check("keyed drain measured" keyed GREATER 0)
check("unkeyed drain measured" unkeyed GREATER 0)

# Idle keys: every job drained and purged, memory read.
get(idle_keys keys_idle keys)
get(purged keys_idle keyed purged_jobs)
get(rss keys_idle keyed rss_bytes_drained)
check("every finished job purged" purged EQUAL idle_keys)
check("RSS read" rss GREATER 0)
string(JSON used ERROR_VARIABLE no_sqlite GET "${json}" backends 0 keys_idle keyed
       sqlite_used_bytes purged)
if(NOT no_sqlite)  # SQLite: the purge freed the jobs' pages
  get(used_drained keys_idle keyed sqlite_used_bytes drained)
  check("the purge freed the jobs' pages" used LESS used_drained)
endif()

file(GLOB left "${WORK_DIR}/scratch/*.db")
if(left)
  message(FATAL_ERROR "scratch databases left behind: ${left}")
endif()
file(REMOVE_RECURSE "${WORK_DIR}")
