# The CUDA engine (engine_cuda.c: open/run/close; cuda_graph.c: layers and
# graph capture; cuda_tune.c: choosing plans; cuda_plancache.c: the plan
# cache) and mlpd's own kernels (cuda_kernels.cu), added to mlpd_engine when
# the top level found a CUDA toolkit with nvcc. The C code talks to the
# runtime and cuBLASLt only; the driver API is reached through
# cudaGetDriverEntryPointByVersion, so the binaries start (and fall back to
# the CPU) where no driver is installed.
if(MLPD_HAVE_CUDA)
  target_sources(mlpd_engine PRIVATE
    ${CMAKE_CURRENT_LIST_DIR}/engine_cuda.c
    ${CMAKE_CURRENT_LIST_DIR}/cuda_graph.c
    ${CMAKE_CURRENT_LIST_DIR}/cuda_tune.c
    ${CMAKE_CURRENT_LIST_DIR}/cuda_plancache.c
    ${CMAKE_CURRENT_LIST_DIR}/cuda_kernels.cu)
  target_compile_definitions(mlpd_engine PUBLIC MLPD_HAVE_CUDA)
  # One shared cudart for the library and every executable that links it:
  # mixing the static and the shared runtime gives two CUDA states.
  # The cache variable reaches the executables in other directories that
  # link mlpd_engine; without it CMake adds nvcc's default -lcudart_static.
  set(CMAKE_CUDA_RUNTIME_LIBRARY Shared CACHE STRING
      "cudart for targets with CUDA code: Shared, as mlpd_engine links it")
  set_target_properties(mlpd_engine PROPERTIES CUDA_RUNTIME_LIBRARY Shared)
  target_link_libraries(mlpd_engine PUBLIC CUDA::cudart CUDA::cublasLt)
  target_compile_options(mlpd_engine PRIVATE
    "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>")
  if(MLPD_WERROR)
    target_compile_options(mlpd_engine PRIVATE
      "$<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>")
  endif()
endif()
