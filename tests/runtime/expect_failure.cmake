# cmake -DCOMMAND=<;-list> -DEXPECT=<;-list> -DLIMIT=<seconds> [-DEXIT=<code>]
#       -P expect_failure.cmake
# Passes when COMMAND exits non-zero (with EXIT, exactly that code) within
# LIMIT seconds and its output contains every string of EXPECT.
string(TIMESTAMP start "%s")
execute_process(COMMAND ${COMMAND} RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err
                TIMEOUT ${LIMIT})
string(TIMESTAMP stop "%s")
math(EXPR elapsed "${stop} - ${start}")
message("exit: ${result} after ${elapsed} s\n--- stdout\n${out}--- stderr\n${err}")
if(result STREQUAL "0")
  message(FATAL_ERROR "expected a failure, but the command succeeded")
endif()
if(NOT result MATCHES "^[0-9]+$" OR elapsed GREATER_EQUAL LIMIT)
  message(FATAL_ERROR "the command did not exit within ${LIMIT} s: ${result}")
endif()
if(DEFINED EXIT AND NOT result EQUAL EXIT)
  message(FATAL_ERROR "expected exit code ${EXIT}, got ${result}")
endif()
foreach(text IN LISTS EXPECT)
  string(FIND "${out}${err}" "${text}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the output does not contain '${text}'")
  endif()
endforeach()
