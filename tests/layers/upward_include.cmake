# A scratch tree where the HLO IR includes the trainer: check_layers.py must
# exit 1 naming the file, its layer and the higher one; the same tree with a
# downward include passes.
file(REMOVE_RECURSE ${SCRATCH})
file(WRITE ${SCRATCH}/src/hlo/shape.cc "#include \"weft/base/error.h\"\n")
file(WRITE ${SCRATCH}/include/weft/base/error.h "#pragma once\n")
execute_process(COMMAND ${PYTHON} ${SCRIPT} ${SCRATCH} RESULT_VARIABLE result OUTPUT_VARIABLE out)
if(NOT result STREQUAL "0")
  message(FATAL_ERROR "a downward include was refused:\n${out}")
endif()
file(WRITE ${SCRATCH}/src/hlo/shape.cc "#include \"weft/train/trainer.h\"\n")
execute_process(COMMAND ${PYTHON} ${SCRIPT} ${SCRATCH} RESULT_VARIABLE result OUTPUT_VARIABLE out)
if(NOT result STREQUAL "1" OR NOT out MATCHES "src/hlo/shape.cc \\(hlo, layer core IR\\) includes weft/train/trainer.h \\(train, layer model\\)")
  message(FATAL_ERROR "the upward include was not refused as expected (exit ${result}):\n${out}")
endif()
message("refused: ${out}")
