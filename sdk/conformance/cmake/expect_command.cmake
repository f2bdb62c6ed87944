# CTest helper: runs conveyor-conformance with ARGS ('|'-separated) and checks
# its exit code (EXPECT_CODE) and that its output (stdout and stderr, newlines
# as spaces) matches every regular expression in EXPECT_OUTPUT ('&&'-separated).
string(REPLACE "|" ";" args "${ARGS}")
execute_process(COMMAND "${CONFORMANCE}" ${args}
  RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT code STREQUAL "${EXPECT_CODE}")
  message(FATAL_ERROR "expected exit code ${EXPECT_CODE}, got ${code}")
endif()
string(REPLACE "\n" " " flat "${out}${err}")
string(REPLACE "&&" ";" patterns "${EXPECT_OUTPUT}")
foreach(pattern IN LISTS patterns)
  if(NOT flat MATCHES "${pattern}")
    message(FATAL_ERROR "the output does not match: ${pattern}")
  endif()
endforeach()
