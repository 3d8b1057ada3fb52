# SPDX-License-Identifier: MIT
#
# Chapter 7's tests. tests/chapter/check_ch07.py does the checking (its
# docstring lists the modes and their references); numpy and torch come from
# CT_TORCH_PYTHON, Debian's /usr/bin/python3; the twin tests exit 77 where
# torch cannot be imported. Outputs go under ${CMAKE_BINARY_DIR}/ch07_test/.
#   chapter.ch07             --devices cpu,cpu,cpu --quick: the seed's splits, torch.chunk's
#                            table, DataParallel = one device to rounding, the module. prefix
#   chapter.ch07_badflag     bad flags exit 2; bad or absent devices in --devices exit 1
#   chapter.ch07_twin        ch07_pytorch.py prints the same sections and lines
#   chapter.ch07_twin_agree  C's DataParallel parameters = PyTorch float64 one-device SGD
#   gpu.ch07                 --device cuda --quick: the device_ids[0] error in PyTorch's words
if(CT_TORCH_PYTHON)
  set(CT_CH07_PYTHON ${CT_TORCH_PYTHON})
else()
  find_program(CT_CH07_PYTHON NAMES python3 REQUIRED)
endif()
set(CT_CH07_BIN $<TARGET_FILE:ch07_data_parallel>)
set(CT_CH07_CHECK ${CMAKE_CURRENT_LIST_DIR}/check_ch07.py)
set(CT_CH07_TWIN ${CMAKE_SOURCE_DIR}/chapters/ch07_data_parallel/ch07_pytorch.py)
set(CT_CH07_WORK ${CMAKE_BINARY_DIR}/ch07_test)

add_test(NAME chapter.ch07
         COMMAND ${CT_CH07_PYTHON} ${CT_CH07_CHECK} report ${CT_CH07_BIN} ${CT_CH07_WORK}/report)
add_test(NAME chapter.ch07_badflag
         COMMAND ${CT_CH07_PYTHON} ${CT_CH07_CHECK} badflag ${CT_CH07_BIN} ${CT_CH07_WORK}/badflag)
add_test(NAME chapter.ch07_twin
         COMMAND ${CT_CH07_PYTHON} ${CT_CH07_CHECK} twin ${CT_CH07_BIN} ${CT_CH07_PYTHON} ${CT_CH07_TWIN}
                 ${CT_CH07_WORK}/twin)
add_test(NAME chapter.ch07_twin_agree
         COMMAND ${CT_CH07_PYTHON} ${CT_CH07_CHECK} twin_agree ${CT_CH07_BIN} ${CT_CH07_PYTHON} ${CT_CH07_TWIN}
                 ${CT_CH07_WORK}/twin_agree)
set_tests_properties(chapter.ch07 chapter.ch07_badflag chapter.ch07_twin chapter.ch07_twin_agree
                     PROPERTIES LABELS chapter SKIP_RETURN_CODE 77 TIMEOUT 300 ENVIRONMENT "${CT_TEST_ENV}")

add_test(NAME gpu.ch07
         COMMAND ${CT_CH07_PYTHON} ${CT_CH07_CHECK} gpu ${CT_CH07_BIN} ${CT_CH07_WORK}/gpu "${CT_HAVE_CUDA}")
set_tests_properties(gpu.ch07 PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 300
                     ENVIRONMENT "${CT_TEST_ENV}")
