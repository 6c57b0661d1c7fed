# The CUDA build of the extension (ORTMODULE_CUDA=ON; setup.py turns it on when torch is a
# CUDA build and nvcc exists): the kernels in csrc/backends/cuda/*.cu and csrc/kernels/cuda/*.cu
# and the torch-side CUDA
# backend (csrc/runtime/cuda_backend.cpp) are compiled into _C, which then links cuBLAS and
# torch's CUDA libraries. Every other target stays CPU-only: the op table's references to
# CUDA kernels are weak (csrc/ops/cuda_ops.h) and resolve to null without these objects.

# sm_80 (A100) and sm_90 (H100/H200), real code for both; override with
# -DCMAKE_CUDA_ARCHITECTURES=... or the CUDAARCHS environment variable (CUDAARCHS=90 python
# setup.py ... builds for one GPU only: each architecture adds a full device compile).
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT DEFINED ENV{CUDAARCHS})
  set(CMAKE_CUDA_ARCHITECTURES 80 90)
endif()
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
# One CUDA runtime in the process: the shared one torch loads.
set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)

# cuBLAS ships with the CUDA build of torch (its nvidia-* wheels) or with the toolkit.
execute_process(
  COMMAND ${Python3_EXECUTABLE} -c
          "import glob, os; import torch; sp = os.path.dirname(os.path.dirname(torch.__file__)); print(';'.join(sorted(glob.glob(os.path.join(sp, 'nvidia', '*')))))"
  OUTPUT_VARIABLE TORCH_NVIDIA_DIRS OUTPUT_STRIP_TRAILING_WHITESPACE)
set(NVIDIA_INCLUDE_HINTS ${CUDAToolkit_INCLUDE_DIRS})
set(NVIDIA_LIBRARY_HINTS ${CUDAToolkit_LIBRARY_DIR})
foreach(dir ${TORCH_NVIDIA_DIRS})
  list(APPEND NVIDIA_INCLUDE_HINTS ${dir}/include)
  list(APPEND NVIDIA_LIBRARY_HINTS ${dir}/lib)
endforeach()
find_path(CUBLAS_INCLUDE_DIR cublas_v2.h HINTS ${NVIDIA_INCLUDE_HINTS} REQUIRED)
find_library(CUBLAS_LIBRARY NAMES cublas libcublas.so.13 libcublas.so.12
             HINTS ${NVIDIA_LIBRARY_HINTS} REQUIRED)
find_library(CUBLASLT_LIBRARY NAMES cublasLt libcublasLt.so.13 libcublasLt.so.12
             HINTS ${NVIDIA_LIBRARY_HINTS} REQUIRED)
message(STATUS "ortmodule CUDA kernels for sm ${CMAKE_CUDA_ARCHITECTURES}; cuBLAS ${CUBLAS_LIBRARY}")

# The op entries (csrc/backends/cuda: cuda_<op>(OpContext&), above ops/) and the kernels below
# ops/ that need no op context (csrc/kernels/cuda: the fused optimizers).
file(GLOB CUDA_KERNEL_SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/csrc/backends/cuda/*.cu
     ${CMAKE_CURRENT_SOURCE_DIR}/csrc/kernels/cuda/*.cu)
add_library(ortmodule_cuda_kernels OBJECT ${CUDA_KERNEL_SOURCES})
target_include_directories(ortmodule_cuda_kernels PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/csrc)
target_include_directories(ortmodule_cuda_kernels SYSTEM PRIVATE ${CUBLAS_INCLUDE_DIR})
# Warnings in device and host code alike; errors where ORTMODULE_WERROR is on.
if(ORTMODULE_WERROR)
  target_compile_options(ortmodule_cuda_kernels PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:--Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Werror,-Wno-unused-parameter>)
else()
  target_compile_options(ortmodule_cuda_kernels PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter>)
endif()

# An object library: its objects are linked into _C directly, so their definitions take the
# place of the engine's weak references.
target_sources(_C PRIVATE $<TARGET_OBJECTS:ortmodule_cuda_kernels>
               ${CMAKE_CURRENT_SOURCE_DIR}/csrc/runtime/cuda_backend.cpp)
# _C itself compiles no CUDA source; it only links the kernels.
set_target_properties(_C PROPERTIES CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}" CUDA_STANDARD 17
                                    CUDA_EXTENSIONS OFF)
target_include_directories(_C SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS} ${CUBLAS_INCLUDE_DIR})
target_link_libraries(_C PRIVATE ${TORCH_DIR}/lib/libtorch_cuda.so ${TORCH_DIR}/lib/libc10_cuda.so
                      CUDA::cudart ${CUBLAS_LIBRARY} ${CUBLASLT_LIBRARY})
