# sy_add_plugin(NAME SOURCES ... [LIBS ...]): a plugin .so in build/plugins, installed to lib/switchyard/plugins.
function(sy_add_plugin name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  add_library(${name} MODULE ${ARG_SOURCES})
  set_target_properties(${name} PROPERTIES PREFIX "" OUTPUT_NAME ${name}
    LIBRARY_OUTPUT_DIRECTORY ${SY_OUTPUT_PLUGINS})
  target_link_libraries(${name} PRIVATE switchyard_abi ${ARG_LIBS})
  target_link_options(${name} PRIVATE -Wl,--no-undefined)
  install(TARGETS ${name} LIBRARY DESTINATION ${SY_INSTALL_PLUGINDIR})
endfunction()

# sy_add_cmocka_test(NAME SOURCES ... [LIBS ...] [LABELS ...]): one cmocka executable registered with CTest.
function(sy_add_cmocka_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_link_libraries(${name} PRIVATE PkgConfig::CMOCKA ${ARG_LIBS})
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES
    ENVIRONMENT "SY_SOURCE_DIR=${CMAKE_SOURCE_DIR};SY_BUILD_DIR=${CMAKE_BINARY_DIR}")
  if(ARG_LABELS)
    set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}")
  endif()
endfunction()
