# cmake -DWEFT=<weft> -DMPIRUN=<;-list ending in the -np flag> -DCONFIG=<toml>
#       -DOUT=<scratch dir> -P crash_during_save.cmake
# Trains CONFIG for 12 steps (a checkpoint every 5) uninterrupted; then, on 4
# threads and on 4 MPI ranks, kills the run (SIGKILL, WEFT_CRASH_AT) in the
# middle of its second save: on threads device 0 after it wrote the index,
# on MPI rank 2 after it wrote its shards. The next run in the same
# directory must continue from the step-5 checkpoint and give every step's
# loss and gradient norm of the uninterrupted run, bit for bit.
function(summary file out)
  file(STRINGS ${file} lines)
  set(result)
  foreach(line ${lines})
    string(REGEX MATCH "\"grad_norm\":[^,]+" g "${line}")
    string(REGEX MATCH "\"loss\":[^,]+" l "${line}")
    list(APPEND result "${l} ${g}")
  endforeach()
  set(${out} "${result}" PARENT_SCOPE)
endfunction()

set(args train ${CONFIG} --steps 12 --no-progress)
file(REMOVE_RECURSE ${OUT})
execute_process(COMMAND ${WEFT} ${args} --out ${OUT}/whole RESULT_VARIABLE result
                OUTPUT_QUIET TIMEOUT 120)
if(NOT result STREQUAL "0")
  message(FATAL_ERROR "the uninterrupted run failed (exit ${result})")
endif()
summary(${OUT}/whole/metrics.jsonl expected)

foreach(backend threads mpi)
  set(out ${OUT}/${backend})
  if(backend STREQUAL "threads")
    set(command ${WEFT} ${args} --out ${out})
    set(crash "state.json:0:2")
  else()
    set(command ${MPIRUN} 4 -x WEFT_CRASH_AT ${WEFT} ${args} --out ${out} --backend mpi)
    set(crash "shards:2:2")
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} -E env WEFT_CRASH_AT=${crash} ${command}
                  RESULT_VARIABLE result OUTPUT_VARIABLE stdout ERROR_VARIABLE stderr TIMEOUT 120)
  if(result STREQUAL "0")
    message(FATAL_ERROR "${backend}: the run was not killed at ${crash}:\n${stdout}${stderr}")
  endif()
  message("--- ${backend}: killed at ${crash} (exit ${result})")
  string(REPLACE "-x;WEFT_CRASH_AT;" "" command "${command}")
  execute_process(COMMAND ${command} RESULT_VARIABLE result OUTPUT_VARIABLE stdout
                  ERROR_VARIABLE stderr TIMEOUT 120)
  message("${stdout}${stderr}")
  if(NOT result STREQUAL "0")
    message(FATAL_ERROR "${backend}: the run after the crash failed (exit ${result})")
  endif()
  if(NOT stdout MATCHES "holds a checkpoint at step 5: continuing")
    message(FATAL_ERROR "${backend}: the run did not continue from the step-5 checkpoint")
  endif()
  summary(${out}/metrics.jsonl got)
  if(NOT got STREQUAL expected)
    message(FATAL_ERROR "${backend}: losses differ:\nexpected ${expected}\ngot      ${got}")
  endif()
  message("${backend}: all 12 steps equal the uninterrupted run")
endforeach()
