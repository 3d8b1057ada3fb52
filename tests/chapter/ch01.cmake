# SPDX-License-Identifier: MIT
#
# Chapter 1's tests. tests/chapter/check_ch01.py does the checking (its
# docstring lists the modes); it needs only Python's standard library, except
# the twin test, which needs a Python with torch (CT_TORCH_PYTHON, Debian's
# /usr/bin/python3) and is skipped (77) where torch cannot be imported.
#   chapter.ch01                   --device cpu --quick --metrics: report + JSON
#   chapter.ch01_badflag           bad flags and values exit 2, --help exits 0
#   chapter.ch01_cuda_unavailable  --device cuda without a GPU exits 1 (skipped where CUDA works)
#   chapter.ch01_twin              ch01_pytorch.py prints the same sections and counts
#   gpu.ch01                       --device cuda on a GPU machine (skipped only where
#                                  there is no GPU at all, or the build has no CUDA)
if(CT_TORCH_PYTHON)
  set(CT_CH01_PYTHON ${CT_TORCH_PYTHON})
else()
  find_program(CT_CH01_PYTHON NAMES python3 REQUIRED)
endif()
set(CT_CH01_BIN $<TARGET_FILE:ch01_device_query>)
set(CT_CH01_CHECK ${CMAKE_CURRENT_LIST_DIR}/check_ch01.py)
set(CT_CH01_TWIN ${CMAKE_SOURCE_DIR}/chapters/ch01_device_query/ch01_pytorch.py)

add_test(NAME chapter.ch01
         COMMAND ${CT_CH01_PYTHON} ${CT_CH01_CHECK} report ${CT_CH01_BIN} ${CMAKE_BINARY_DIR}/ch01.json)
add_test(NAME chapter.ch01_badflag
         COMMAND ${CT_CH01_PYTHON} ${CT_CH01_CHECK} badflag ${CT_CH01_BIN})
add_test(NAME chapter.ch01_cuda_unavailable
         COMMAND ${CT_CH01_PYTHON} ${CT_CH01_CHECK} cuda_unavailable ${CT_CH01_BIN})
add_test(NAME chapter.ch01_twin
         COMMAND ${CT_CH01_PYTHON} ${CT_CH01_CHECK} twin ${CT_CH01_BIN} ${CT_CH01_PYTHON} ${CT_CH01_TWIN}
                 ${CMAKE_BINARY_DIR})
set_tests_properties(chapter.ch01 chapter.ch01_badflag chapter.ch01_cuda_unavailable chapter.ch01_twin
                     PROPERTIES LABELS chapter SKIP_RETURN_CODE 77 TIMEOUT 300 ENVIRONMENT "${CT_TEST_ENV}")

add_test(NAME gpu.ch01
         COMMAND ${CT_CH01_PYTHON} ${CT_CH01_CHECK} gpu ${CT_CH01_BIN} ${CMAKE_BINARY_DIR}/ch01_gpu.json
                 "${CT_HAVE_CUDA}")
set_tests_properties(gpu.ch01 PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 300
                     ENVIRONMENT "${CT_TEST_ENV}")
