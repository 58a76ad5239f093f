# cmake -DBUILD=<build dir> -DSOURCE=<source dir> -DPREFIX=<scratch> -DPYTHON=<python>
#       -P install_check.cmake
file(REMOVE_RECURSE ${PREFIX})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD} --prefix ${PREFIX}
                RESULT_VARIABLE result OUTPUT_QUIET)
if(NOT result STREQUAL "0")
  message(FATAL_ERROR "cmake --install failed (exit ${result})")
endif()
foreach(file bin/weft share/weft/configs/chips.toml share/weft/configs/tiny.toml)
  if(NOT EXISTS ${PREFIX}/${file})
    message(FATAL_ERROR "the installation has no ${file}")
  endif()
endforeach()
# micro.toml has no chips.toml beside it: the chip table comes from the
# installation, with the working directory outside every tree.
file(MAKE_DIRECTORY ${PREFIX}/elsewhere)
execute_process(COMMAND ${PREFIX}/bin/weft plan ${SOURCE}/tests/train/data/micro.toml --chip v6e
                WORKING_DIRECTORY ${PREFIX}/elsewhere RESULT_VARIABLE result
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT result STREQUAL "0" OR NOT out MATCHES "fits")
  message(FATAL_ERROR "the installed weft plan failed (exit ${result}):\n${out}${err}")
endif()
if(PYTHON)
  file(GLOB module ${PREFIX}/lib/python3/dist-packages/weft*.so)
  if(NOT module)
    message(FATAL_ERROR "the installation has no Python module")
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} -E env PYTHONPATH=${PREFIX}/lib/python3/dist-packages
                          ${PYTHON} -c "import weft"
                  WORKING_DIRECTORY ${PREFIX}/elsewhere RESULT_VARIABLE result)
  if(NOT result STREQUAL "0")
    message(FATAL_ERROR "the installed Python module does not import")
  endif()
endif()
message("installed into ${PREFIX}: weft plan found its chips, the Python module imports")
