# CTest wrapper: runs conveyor-conformance against one plugin.
#   -DCONFORMANCE=<conveyor-conformance> -DPLUGIN=<.so> -DOPTIONS=<key=value|key=value...>
# "@env:NAME" in an option is replaced by the environment variable NAME, read
# now (at test time, not at configure time). When NAME is unset or empty the
# test is skipped (CTest SKIP_REGULAR_EXPRESSION) - unless CI=true, where it
# fails: CI must never pass by skipping.
set(args --plugin "${PLUGIN}")
if(NOT "${OPTIONS}" STREQUAL "")
  string(REPLACE "|" ";" options "${OPTIONS}")
  foreach(option IN LISTS options)
    while(option MATCHES "@env:([A-Za-z_][A-Za-z0-9_]*)")
      set(var "${CMAKE_MATCH_1}")
      if("$ENV{${var}}" STREQUAL "")
        if("$ENV{CI}" STREQUAL "true")
          message(FATAL_ERROR "conformance: ${var} is not set, but CI=true: this plugin must be "
                              "tested (start its server and export ${var})")
        endif()
        message("CONVEYOR-CONFORMANCE-SKIPPED: ${var} is not set; export it to test ${PLUGIN}")
        return()
      endif()
      string(REPLACE "@env:${var}" "$ENV{${var}}" option "${option}")
    endwhile()
    list(APPEND args --option "${option}")
  endforeach()
endif()
execute_process(COMMAND "${CONFORMANCE}" ${args} RESULT_VARIABLE code)
if(NOT code EQUAL 0)
  message(FATAL_ERROR "conveyor-conformance exited with ${code} for ${PLUGIN}")
endif()
