# SPDX-License-Identifier: MIT
#
# Chapter 10's tests. tests/chapter/check_ch10.py does the checking (its
# docstring lists the modes and their references); numpy and torch come from
# CT_TORCH_PYTHON, Debian's /usr/bin/python3; the twin tests exit 77 where
# torch cannot be imported. Outputs go under ${CMAKE_BINARY_DIR}/ch10_test/.
#   chapter.ch10             --device cpu --quick: replay = eager bit for bit, capture runs
#                            nothing, the seed's bug and its fix, every forbidden operation
#                            caught in its words, the private pool comes and goes
#   chapter.ch10_badflag     bad flags exit 2; an unwritable --save exits 1 before any work
#   chapter.ch10_twin        ch10_pytorch.py prints the same sections and model line
#   chapter.ch10_twin_agree  C's replayed parameters = PyTorch float64 eager training
#   gpu.ch10                 --device cuda --quick: the same claims on real stream capture
if(CT_TORCH_PYTHON)
  set(CT_CH10_PYTHON ${CT_TORCH_PYTHON})
else()
  find_program(CT_CH10_PYTHON NAMES python3 REQUIRED)
endif()
set(CT_CH10_BIN $<TARGET_FILE:ch10_cuda_graphs>)
set(CT_CH10_CHECK ${CMAKE_CURRENT_LIST_DIR}/check_ch10.py)
set(CT_CH10_TWIN ${CMAKE_SOURCE_DIR}/chapters/ch10_cuda_graphs/ch10_pytorch.py)
set(CT_CH10_WORK ${CMAKE_BINARY_DIR}/ch10_test)

add_test(NAME chapter.ch10
         COMMAND ${CT_CH10_PYTHON} ${CT_CH10_CHECK} report ${CT_CH10_BIN} ${CT_CH10_WORK}/report)
add_test(NAME chapter.ch10_badflag
         COMMAND ${CT_CH10_PYTHON} ${CT_CH10_CHECK} badflag ${CT_CH10_BIN} ${CT_CH10_WORK}/badflag)
add_test(NAME chapter.ch10_twin
         COMMAND ${CT_CH10_PYTHON} ${CT_CH10_CHECK} twin ${CT_CH10_BIN} ${CT_CH10_PYTHON} ${CT_CH10_TWIN}
                 ${CT_CH10_WORK}/twin)
add_test(NAME chapter.ch10_twin_agree
         COMMAND ${CT_CH10_PYTHON} ${CT_CH10_CHECK} twin_agree ${CT_CH10_BIN} ${CT_CH10_PYTHON} ${CT_CH10_TWIN}
                 ${CT_CH10_WORK}/twin_agree)
set_tests_properties(chapter.ch10 chapter.ch10_badflag chapter.ch10_twin chapter.ch10_twin_agree
                     PROPERTIES LABELS chapter SKIP_RETURN_CODE 77 TIMEOUT 300 ENVIRONMENT "${CT_TEST_ENV}")

add_test(NAME gpu.ch10
         COMMAND ${CT_CH10_PYTHON} ${CT_CH10_CHECK} gpu ${CT_CH10_BIN} ${CT_CH10_WORK}/gpu "${CT_HAVE_CUDA}")
set_tests_properties(gpu.ch10 PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 300
                     ENVIRONMENT "${CT_TEST_ENV}")
