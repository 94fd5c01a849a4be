# Runs one libFuzzer binary for a bounded time (the CTest test of a fuzz target, label `fuzz`).
# cmake -DFUZZER=bin -DSEED=dir -DWORK=dir -DARTIFACTS=dir -DSECONDS=n -DMAX_LEN=n [-DDICT=file] -P run_fuzzer.cmake
foreach(var FUZZER SEED WORK ARTIFACTS SECONDS MAX_LEN)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_fuzzer.cmake: ${var} is not set")
  endif()
endforeach()

if(NOT EXISTS ${FUZZER})
  get_filename_component(target ${FUZZER} NAME)
  message(FATAL_ERROR "${FUZZER} is not built: cmake --build <build dir> --target ${target}")
endif()

# The fuzzer writes the inputs it finds into the first corpus folder: a working copy in the build tree, never
# the committed seeds. It keeps growing across runs, which is what a corpus is for.
file(MAKE_DIRECTORY ${WORK} ${ARTIFACTS})
file(GLOB seeds ${SEED}/*)
if(seeds)
  file(COPY ${seeds} DESTINATION ${WORK})
endif()

set(args ${WORK} -max_total_time=${SECONDS} -max_len=${MAX_LEN} -timeout=10 -rss_limit_mb=2048
  -artifact_prefix=${ARTIFACTS}/ -print_final_stats=1)
if(DEFINED DICT)
  list(APPEND args -dict=${DICT})
endif()
message(STATUS "${FUZZER} ${args}")
execute_process(COMMAND ${FUZZER} ${args} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${FUZZER} failed (${rc}); the failing input is in ${ARTIFACTS}/ "
    "(replay it with: ${FUZZER} ${ARTIFACTS}/<file>)")
endif()
