# cmake -DWEFT=<weft> -DMPIRUN=<;-list ending in the -np flag> -DNP=<ranks>
#       -DFILE=<module.hlo> -P compare_run_backends.cmake
# Runs `weft run FILE --check` on NP threads and on NP MPI ranks: both must
# pass the check and print the same output digest (the same bits).
set(digests)
foreach(backend threads mpi)
  if(backend STREQUAL "threads")
    set(command ${WEFT} run ${FILE} --check --seed 7 --num-devices ${NP})
  else()
    set(command ${MPIRUN} ${NP} ${WEFT} run ${FILE} --check --seed 7)
  endif()
  execute_process(COMMAND ${command} RESULT_VARIABLE result OUTPUT_VARIABLE out
                  ERROR_VARIABLE err TIMEOUT 100)
  message("--- ${backend}: exit ${result}\n${out}${err}")
  if(NOT result STREQUAL "0")
    message(FATAL_ERROR "weft run on ${backend} failed (exit ${result})")
  endif()
  if(NOT out MATCHES "output digest: ([0-9a-f]+)")
    message(FATAL_ERROR "weft run on ${backend} printed no output digest")
  endif()
  list(APPEND digests ${CMAKE_MATCH_1})
endforeach()
list(GET digests 0 threads)
list(GET digests 1 mpi)
if(NOT threads STREQUAL mpi)
  message(FATAL_ERROR "the outputs differ: threads ${threads}, mpi ${mpi}")
endif()
message("same bits on both backends: ${threads}")
