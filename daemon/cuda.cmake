# The CUDA engine, added to mlpd_engine when the top level found a CUDA
# toolkit with nvcc: engine_cuda.c (life cycle, pipeline), cuda_setup.c
# (device, weights, buffers, descriptors), cuda_algos.c (cuBLASLt
# candidates), cuda_tune.c (choosing plans), cuda_graph.c (layers and graph
# capture), cuda_plancache.c (the plan cache), cuda_check.c (errors), and
# mlpd's own kernels (cuda_kernels.cu; the small-batch and fused kernels one
# .cu per mode, so they compile in parallel). The C code talks to the
# runtime and cuBLASLt only; the driver API is reached through
# cudaGetDriverEntryPointByVersion, so the binaries start (and fall back to
# the CPU) where no driver is installed.
if(MLPD_HAVE_CUDA)
  target_sources(mlpd_engine PRIVATE
    ${CMAKE_CURRENT_LIST_DIR}/engine_cuda.c
    ${CMAKE_CURRENT_LIST_DIR}/cuda_check.c
    ${CMAKE_CURRENT_LIST_DIR}/cuda_setup.c
    ${CMAKE_CURRENT_LIST_DIR}/cuda_algos.c
    ${CMAKE_CURRENT_LIST_DIR}/cuda_graph.c
    ${CMAKE_CURRENT_LIST_DIR}/cuda_tune.c
    ${CMAKE_CURRENT_LIST_DIR}/cuda_plancache.c
    ${CMAKE_CURRENT_LIST_DIR}/cuda_kernels.cu
    ${CMAKE_CURRENT_LIST_DIR}/cuda_k_bf16.cu
    ${CMAKE_CURRENT_LIST_DIR}/cuda_k_f16.cu
    ${CMAKE_CURRENT_LIST_DIR}/cuda_k_fp8.cu)
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
