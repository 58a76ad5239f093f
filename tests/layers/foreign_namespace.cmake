# A scratch tree where a runtime file defines a name in the compiler's
# namespace: check_layers.py must exit 1 naming the file and the namespace;
# the same file in runtime's own namespaces (an anonymous one within, a
# forward declaration of another module's class) passes.
file(REMOVE_RECURSE ${SCRATCH})
file(WRITE ${SCRATCH}/src/runtime/topology.cc
     "namespace weft::compiler {\nclass CompiledProgram;\n}\n"
     "namespace weft::runtime {\nnamespace {\nint Helper() { return 1; }\n}  // namespace\n"
     "int Devices() { return Helper(); }\n}  // namespace weft::runtime\n")
execute_process(COMMAND ${PYTHON} ${SCRIPT} ${SCRATCH} RESULT_VARIABLE result OUTPUT_VARIABLE out)
if(NOT result STREQUAL "0")
  message(FATAL_ERROR "a file in its module's namespaces was refused:\n${out}")
endif()
file(WRITE ${SCRATCH}/src/runtime/topology.cc
     "namespace weft::compiler {\nint Devices() { return 1; }\n}  // namespace weft::compiler\n")
execute_process(COMMAND ${PYTHON} ${SCRIPT} ${SCRATCH} RESULT_VARIABLE result OUTPUT_VARIABLE out)
if(NOT result STREQUAL "1" OR NOT out MATCHES "src/runtime/topology.cc: namespace weft::compiler is not runtime's")
  message(FATAL_ERROR "the foreign namespace was not refused as expected (exit ${result}):\n${out}")
endif()
message("refused: ${out}")
