# SPDX-License-Identifier: MIT
#
# Chapter 11's tests. tests/chapter/check_ch11.py does the checking (its
# docstring lists the modes and their references); trace_format.py beside it
# is the independent reader of the Trace Event Format. The twin test exits 77
# where torch cannot be imported. Outputs go under ${CMAKE_BINARY_DIR}/ch11_test/.
#   chapter.ch11          --device cpu --quick: the trace read by the reader, the table
#                         against the trace, memory events against the allocator, the figure
#   chapter.ch11_badflag  bad flags exit 2; an unwritable --trace exits 1 before any work
#   chapter.ch11_twin     torch.profiler's twin: same sections, its own trace passes the reader
#   gpu.ch11              --device cuda --quick: kernels with device time, the CUDA columns
if(CT_TORCH_PYTHON)
  set(CT_CH11_PYTHON ${CT_TORCH_PYTHON})
else()
  find_program(CT_CH11_PYTHON NAMES python3 REQUIRED)
endif()
set(CT_CH11_BIN $<TARGET_FILE:ch11_profiling>)
set(CT_CH11_CHECK ${CMAKE_CURRENT_LIST_DIR}/check_ch11.py)
set(CT_CH11_TWIN ${CMAKE_SOURCE_DIR}/chapters/ch11_profiling/ch11_pytorch.py)
set(CT_CH11_WORK ${CMAKE_BINARY_DIR}/ch11_test)

add_test(NAME chapter.ch11
         COMMAND ${CT_CH11_PYTHON} ${CT_CH11_CHECK} report ${CT_CH11_BIN} ${CT_CH11_WORK}/report)
add_test(NAME chapter.ch11_badflag
         COMMAND ${CT_CH11_PYTHON} ${CT_CH11_CHECK} badflag ${CT_CH11_BIN} ${CT_CH11_WORK}/badflag)
add_test(NAME chapter.ch11_twin
         COMMAND ${CT_CH11_PYTHON} ${CT_CH11_CHECK} twin ${CT_CH11_BIN} ${CT_CH11_PYTHON} ${CT_CH11_TWIN}
                 ${CT_CH11_WORK}/twin)
set_tests_properties(chapter.ch11 chapter.ch11_badflag chapter.ch11_twin
                     PROPERTIES LABELS chapter SKIP_RETURN_CODE 77 TIMEOUT 300 ENVIRONMENT "${CT_TEST_ENV}")

add_test(NAME gpu.ch11
         COMMAND ${CT_CH11_PYTHON} ${CT_CH11_CHECK} gpu ${CT_CH11_BIN} ${CT_CH11_WORK}/gpu "${CT_HAVE_CUDA}")
set_tests_properties(gpu.ch11 PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 300
                     ENVIRONMENT "${CT_TEST_ENV}")
