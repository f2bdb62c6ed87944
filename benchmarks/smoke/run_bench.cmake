# Runs `conveyor-bench --quick ARGS...` in a fresh directory and checks what it
# produced: exit code 0 (non-zero when any workload failed, 3 when a
# rate-limited queue exceeded burst + rate * t), both files, and the figures
# of every workload named in EXPECT for the first backend.
#   cmake -DBENCH=... -DWORK_DIR=... "-DARGS=--config;x.toml" "-DEXPECT=drain;..." -P run_bench.cmake
foreach(var BENCH WORK_DIR ARGS EXPECT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_bench.cmake: -D${var}=... is required")
  endif()
endforeach()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}/out" "${WORK_DIR}/scratch")
execute_process(
  COMMAND "${BENCH}" --quick ${ARGS} --out "${WORK_DIR}/out" --scratch "${WORK_DIR}/scratch"
  WORKING_DIRECTORY "${WORK_DIR}"
  RESULT_VARIABLE code
  OUTPUT_VARIABLE out)
message("${out}")
if(NOT code EQUAL 0)
  message(FATAL_ERROR "conveyor-bench --quick ${ARGS} exited with ${code}")
endif()

foreach(f bench-results.json bench-results.svg)
  if(NOT EXISTS "${WORK_DIR}/out/${f}")
    message(FATAL_ERROR "conveyor-bench did not write ${f}")
  endif()
endforeach()
file(READ "${WORK_DIR}/out/bench-results.json" json)
string(JSON held GET "${json}" rate_invariant_held)
if(NOT held)
  message(FATAL_ERROR "rate_invariant_held is ${held} in bench-results.json")
endif()
# Every workload asked for produced its figures.
foreach(key ${EXPECT})
  string(JSON type ERROR_VARIABLE err TYPE "${json}" backends 0 ${key})
  if(err)
    message(FATAL_ERROR "bench-results.json has no backends[0].${key}: ${err}")
  endif()
endforeach()
string(JSON jobs_per_sec GET "${json}" backends 0 drain median_jobs_per_sec)
if(NOT jobs_per_sec GREATER 0)
  message(FATAL_ERROR "drain measured ${jobs_per_sec} jobs/s")
endif()
# The chart is SVG with the drain bar in it.
file(READ "${WORK_DIR}/out/bench-results.svg" svg)
string(FIND "${svg}" "<svg xmlns=\"http://www.w3.org/2000/svg\"" at)
string(FIND "${svg}" "engine drain" drain_at)
if(at LESS 0 OR drain_at LESS 0)
  message(FATAL_ERROR "bench-results.svg is not the expected chart")
endif()
# The scratch databases were cleaned up after each workload.
file(GLOB left "${WORK_DIR}/scratch/*.db")
if(left)
  message(FATAL_ERROR "scratch databases left behind: ${left}")
endif()
file(REMOVE_RECURSE "${WORK_DIR}")
