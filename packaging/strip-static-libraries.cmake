# Run by CPack (CPACK_PRE_BUILD_SCRIPTS, cmake/Packaging.cmake) once the
# package's files are staged: strips the debug information from the static
# libraries, keeping their symbols (strip --strip-debug, as dh_strip does).
if(NOT CPACK_CONVEYOR_STRIP)
  message(FATAL_ERROR "strip-static-libraries.cmake: no strip program (CMAKE_STRIP is empty)")
endif()
file(GLOB_RECURSE archives "${CPACK_TEMPORARY_INSTALL_DIRECTORY}/*.a")
foreach(archive ${archives})
  execute_process(COMMAND ${CPACK_CONVEYOR_STRIP} --strip-debug ${archive} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "strip --strip-debug ${archive} failed (${rc})")
  endif()
endforeach()
