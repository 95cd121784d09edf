# SPDX-License-Identifier: Apache-2.0
# Engine plugins (daemon/plugin.h): test_plugin runs once per case, each in
# a program that, like the daemon, does not link the CUDA engine and
# exports mlpd.dynlist to plugins.
#   absent    MLPD_PLUGIN_DIR without a plugin
#   nodriver  the fake plugin, no libcuda.so.1 (skipped where a driver is)
#   fake      the fake plugin (plugin_fake.c) and a stand-in libcuda.so.1
#   stale     a fake plugin stamped for another mlpd version
#   real      the real mlpd-cuda.so, when the CUDA engine is built
mlpd_test(test_plugin ENGINE_ONLY TIMEOUT 120)
mlpd_export_to_plugins(test_plugin)

set(_pd ${CMAKE_CURRENT_BINARY_DIR}/plugins)
add_library(plugin_fake_obj OBJECT plugin_fake.c)
set_target_properties(plugin_fake_obj PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_link_libraries(plugin_fake_obj PRIVATE mlpd_engine)
mlpd_add_engine_plugin(plugin_fake KIND cuda OBJECTS plugin_fake_obj
  OUTPUT_DIRECTORY ${_pd}/fake LIBS ${MATH_LIBRARY})

# The same engine stamped for another version: linked by hand, without the
# build's stamp.
add_library(plugin_stale_obj OBJECT plugin_fake.c)
set_target_properties(plugin_stale_obj PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_compile_definitions(plugin_stale_obj PRIVATE FAKE_STALE_ABI)
target_link_libraries(plugin_stale_obj PRIVATE mlpd_engine)
add_library(plugin_stale MODULE $<TARGET_OBJECTS:plugin_stale_obj>)
target_link_libraries(plugin_stale PRIVATE ${MATH_LIBRARY})
set_target_properties(plugin_stale PROPERTIES PREFIX "" OUTPUT_NAME mlpd-cuda
  LIBRARY_OUTPUT_DIRECTORY ${_pd}/stale)

add_library(plugin_fake_driver SHARED plugin_fake_driver.c)
set_target_properties(plugin_fake_driver PROPERTIES OUTPUT_NAME cuda
  SOVERSION 1 LIBRARY_OUTPUT_DIRECTORY ${_pd}/driver)
add_dependencies(test_plugin plugin_fake plugin_stale plugin_fake_driver)

file(MAKE_DIRECTORY ${_pd}/none)
set(_cases
  "absent|MLPD_PLUGIN_DIR=${_pd}/none"
  "nodriver|MLPD_PLUGIN_DIR=${_pd}/fake"
  "fake|MLPD_PLUGIN_DIR=${_pd}/fake|LD_LIBRARY_PATH=${_pd}/driver"
  "stale|MLPD_PLUGIN_DIR=${_pd}/stale|LD_LIBRARY_PATH=${_pd}/driver")
if(TARGET mlpd_cuda)
  list(APPEND _cases "real|MLPD_PLUGIN_DIR=${MLPD_PLUGIN_BUILD_DIR}")
  add_dependencies(test_plugin mlpd_cuda)
endif()
# One "case|VAR=value|..." per entry. mlpd_test registered the executable
# as "test_plugin" with no case: that is the absent case.
foreach(c ${_cases})
  string(REPLACE "|" ";" c "${c}")
  list(GET c 0 name)
  list(SUBLIST c 1 -1 env)
  if(name STREQUAL "absent")
    set(t test_plugin)
  else()
    set(t test_plugin_${name})
    add_test(NAME ${t} COMMAND test_plugin ${name})
  endif()
  set_tests_properties(${t} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 120
    ENVIRONMENT "${MLPD_TEST_ENV};${env}")
endforeach()

# test_devices (daemon.cmake) runs the daemon on this fake plugin to make
# devices fail (MLPD_FAKE_CUDA_FAIL): the shipped daemon has no such hook.
target_compile_definitions(test_devices PRIVATE
  MLPD_FAKE_PLUGIN_DIR="${_pd}/fake" MLPD_FAKE_DRIVER_DIR="${_pd}/driver")
add_dependencies(test_devices plugin_fake plugin_fake_driver)
# And test_models, for a reload whose staging cannot be made
# (MLPD_FAKE_CUDA_HOST_ALLOC_FAIL).
target_compile_definitions(test_models PRIVATE
  MLPD_FAKE_PLUGIN_DIR="${_pd}/fake" MLPD_FAKE_DRIVER_DIR="${_pd}/driver")
add_dependencies(test_models plugin_fake plugin_fake_driver)

# Zero-copy shared memory (test_zcopy.c): the daemon's direct path on the
# fake plugin, which takes direct segments and checks them against its
# registrations; on the real plugin too when it is built (skipped without
# a GPU).
mlpd_test(test_zcopy LIBS mlpd_clientutil mlpd_daemonutil TIMEOUT 300)
target_compile_definitions(test_zcopy PRIVATE
  MLPD_FAKE_PLUGIN_DIR="${_pd}/fake" MLPD_FAKE_DRIVER_DIR="${_pd}/driver"
  MLPD_REAL_PLUGIN_DIR="${MLPD_PLUGIN_BUILD_DIR}")
add_dependencies(test_zcopy mlpd plugin_fake plugin_fake_driver)
if(TARGET mlpd_cuda)
  add_test(NAME test_zcopy_gpu COMMAND test_zcopy real)
  set_tests_properties(test_zcopy_gpu PROPERTIES SKIP_RETURN_CODE 77
    TIMEOUT 300 ENVIRONMENT "${MLPD_TEST_ENV}")
  add_dependencies(test_zcopy mlpd_cuda)
endif()
