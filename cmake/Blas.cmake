# BLAS: Debian's OpenBLAS, OpenMP flavour, so that BLAS and claw's own kernels
# share one OpenMP thread team (the pthread flavour keeps a second set of
# spinning threads that fight the kernels for the same cores).
#
# The variant is chosen by full path plus RUNPATH: the plain SONAME
# libopenblas.so.0 would resolve through Debian's alternatives to whatever
# flavour the machine prefers.
set(CLAW_OPENBLAS_VARIANT "openmp" CACHE STRING "Debian OpenBLAS flavour: openmp or pthread")
set(_blas_dir "/usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-${CLAW_OPENBLAS_VARIANT}")
find_library(CLAW_OPENBLAS_LIB NAMES openblas libopenblas.so.0 PATHS "${_blas_dir}" NO_DEFAULT_PATH)
find_path(CLAW_OPENBLAS_INCLUDE cblas.h
  PATHS "/usr/include/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-${CLAW_OPENBLAS_VARIANT}" NO_DEFAULT_PATH)
if(NOT CLAW_OPENBLAS_LIB OR NOT CLAW_OPENBLAS_INCLUDE)
  message(FATAL_ERROR "OpenBLAS (${CLAW_OPENBLAS_VARIANT}) not found under ${_blas_dir}: "
                      "run scripts/setup (installs libopenblas-${CLAW_OPENBLAS_VARIANT}-dev)")
endif()
add_library(claw_blas INTERFACE)
target_include_directories(claw_blas SYSTEM INTERFACE "${CLAW_OPENBLAS_INCLUDE}")
target_link_libraries(claw_blas INTERFACE "${CLAW_OPENBLAS_LIB}" "-Wl,-rpath,${_blas_dir}")
message(STATUS "claw BLAS: ${CLAW_OPENBLAS_LIB}")

# BF16 GEMMs: oneDNN's matmul (Debian's libdnnl, OpenMP runtime, so it shares
# the one thread team too). Linked by library path: its CMake package wants
# OpenCL's development files for a GPU runtime claw does not use.
find_library(CLAW_DNNL_LIB NAMES dnnl)
find_path(CLAW_DNNL_INCLUDE oneapi/dnnl/dnnl.hpp)
if(NOT CLAW_DNNL_LIB OR NOT CLAW_DNNL_INCLUDE)
  message(FATAL_ERROR "oneDNN not found: run scripts/setup (installs libdnnl-dev)")
endif()
add_library(claw_dnnl INTERFACE)
target_include_directories(claw_dnnl SYSTEM INTERFACE "${CLAW_DNNL_INCLUDE}")
target_link_libraries(claw_dnnl INTERFACE "${CLAW_DNNL_LIB}")
message(STATUS "claw oneDNN: ${CLAW_DNNL_LIB}")
