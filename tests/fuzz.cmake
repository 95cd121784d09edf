# SPDX-License-Identifier: Apache-2.0
# libFuzzer harnesses (tests/fuzz/*.c), built with MLPD_FUZZ=ON and clang:
#
#   CC=clang-14 cmake -S . -B build-fuzz -G Ninja -DMLPD_FUZZ=ON \
#     -DMLPD_WITH_CUDA=OFF
#   cmake --build build-fuzz --target fuzzers
#   ctest --test-dir build-fuzz -L fuzz
#
# The libraries a harness links (mlpd_base, mlpd_codec, mlpd_proto,
# mlpd_engine, mlpd_httpreq, mlpd_oip, the client objects) get coverage
# instrumentation and ASan/UBSan; the harnesses link libFuzzer's main.
# Each harness is also a ctest test (label "fuzz") that runs a fixed number
# of inputs with a fixed seed over its checked-in corpus, so a run is
# deterministic; tests/fuzz/README.md says how to fuzz for hours.
# Included by tests/CMakeLists.txt; does nothing unless MLPD_FUZZ is on.
option(MLPD_FUZZ "Build the libFuzzer harnesses (clang only)" OFF)
if(NOT MLPD_FUZZ)
  return()
endif()
if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "MLPD_FUZZ needs clang (libFuzzer): configure with "
    "CC=clang-14 in a build directory of its own")
endif()

set(MLPD_FUZZ_SAN address,undefined)
set(MLPD_FUZZ_CFLAGS -fsanitize=fuzzer-no-link,${MLPD_FUZZ_SAN}
    -fno-sanitize-recover=all -fno-omit-frame-pointer -g)
foreach(lib mlpd_base mlpd_codec mlpd_proto mlpd_engine mlpd_httpreq
            mlpd_oip mlpd_client_obj mlpd_core mlpd_procmetrics)
  target_compile_options(${lib} PRIVATE ${MLPD_FUZZ_CFLAGS})
endforeach()

set(MLPD_FUZZ_DIR ${CMAKE_CURRENT_SOURCE_DIR}/fuzz)
add_custom_target(fuzzers)

# mlpd_fuzz(name RUNS n MAX_LEN m LIBS ... [ARGS ...]): tests/fuzz/<name>.c
# against LIBS, and the ctest run: n inputs, seed 1, over
# tests/fuzz/corpus/<name>. New inputs go to a scratch directory in the
# build tree (emptied first, so every run starts from the same corpus),
# never into the source tree. What else makes a run repeat exactly: no
# corpus reloading (-reload=0, which is timed), and no address layout
# randomisation (setarch -R, where the kernel allows it), since pointer
# values reach libFuzzer's comparison-guided mutations.
function(mlpd_fuzz name)
  cmake_parse_arguments(F "" "RUNS;MAX_LEN" "LIBS;ARGS" ${ARGN})
  add_executable(${name} ${MLPD_FUZZ_DIR}/${name}.c)
  target_include_directories(${name} PRIVATE ${MLPD_FUZZ_DIR})
  target_compile_options(${name} PRIVATE ${MLPD_FUZZ_CFLAGS})
  target_link_libraries(${name} PRIVATE ${F_LIBS})
  target_link_options(${name} PRIVATE -fsanitize=fuzzer,${MLPD_FUZZ_SAN})
  add_dependencies(fuzzers ${name})
  set(scratch ${CMAKE_CURRENT_BINARY_DIR}/fuzz-scratch/${name})
  add_test(NAME ${name}
    COMMAND sh -c "rm -rf \"$1\" && mkdir -p \"$1\" && shift &&
                   if setarch \"$(uname -m)\" -R true 2>/dev/null; then
                     exec setarch \"$(uname -m)\" -R \"$@\"; fi; exec \"$@\""
            fuzz-run ${scratch} $<TARGET_FILE:${name}>
            -runs=${F_RUNS} -seed=1 -max_len=${F_MAX_LEN} -reload=0
            -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 ${F_ARGS}
            ${scratch} ${MLPD_FUZZ_DIR}/corpus/${name})
  set_tests_properties(${name} PROPERTIES LABELS fuzz TIMEOUT 120
    ENVIRONMENT "ASAN_OPTIONS=detect_leaks=1:abort_on_error=0;UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
endfunction()

# Runs chosen for about 5 s each on the project's 2-core machine (ctest
# -j2), so that the seven stay well under a minute.
mlpd_fuzz(fuzz_frame RUNS 500000 MAX_LEN 64 LIBS mlpd_base)
mlpd_fuzz(fuzz_rpc RUNS 150000 MAX_LEN 4096 LIBS mlpd_codec)
mlpd_fuzz(fuzz_safetensors RUNS 150000 MAX_LEN 4096 LIBS mlpd_engine)
mlpd_fuzz(fuzz_http RUNS 60000 MAX_LEN 4096 LIBS mlpd_httpreq)
# The client's call timeouts put clock readings into comparisons; without
# -use_cmp=0 they steer the mutations differently on every run.
mlpd_fuzz(fuzz_client RUNS 8000 MAX_LEN 80000 LIBS mlpd_client_static
  ARGS -use_cmp=0)
mlpd_fuzz(fuzz_rows RUNS 100000 MAX_LEN 4096 LIBS mlpd_base)
mlpd_fuzz(fuzz_oip RUNS 60000 MAX_LEN 4096 LIBS mlpd_oip)
# The OIP request path as an I/O thread runs it: HTTP in body mode, then
# route and infer parse on what the parser kept.
mlpd_fuzz(fuzz_oip_http RUNS 150000 MAX_LEN 4096 LIBS mlpd_httpreq mlpd_oip
  ARGS -dict=${MLPD_FUZZ_DIR}/http.dict)
# The server's read path (server.c): framing, turns, hold and defer, and
# the arena blocks large frames are received into, over a real socket.
mlpd_fuzz(fuzz_server RUNS 1500 MAX_LEN 4096 LIBS mlpd_core)
