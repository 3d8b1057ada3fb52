# SPDX-License-Identifier: MIT
#
# Chapter 2's tests. tests/chapter/check_ch02.py does the checking (its
# docstring lists the modes and what each claim is checked against). It uses
# numpy when the interpreter has it (CT_TORCH_PYTHON, Debian's /usr/bin/python3,
# does), else the struct module; the twin test needs torch and numpy and is
# skipped (77) where they cannot be imported.
#   chapter.ch02          --device cpu --quick --metrics: round trip, errors caught,
#                         the bandwidth table, overlap and hazard on the CPU
#   chapter.ch02_badflag  bad flags and values exit 2, --help exits 0
#   chapter.ch02_twin     ch02_pytorch.py prints the same sections, same metric keys
#   gpu.ch02              --device cuda on a GPU machine: the ct_add device error word
#                         for word, the four transfer columns, overlap, the hazard
#                         (skipped only where there is no GPU, or the build has no CUDA)
if(CT_TORCH_PYTHON)
  set(CT_CH02_PYTHON ${CT_TORCH_PYTHON})
else()
  find_program(CT_CH02_PYTHON NAMES python3 REQUIRED)
endif()
set(CT_CH02_BIN $<TARGET_FILE:ch02_tensor_moves>)
set(CT_CH02_CHECK ${CMAKE_CURRENT_LIST_DIR}/check_ch02.py)
set(CT_CH02_TWIN ${CMAKE_SOURCE_DIR}/chapters/ch02_tensor_moves/ch02_pytorch.py)

add_test(NAME chapter.ch02
         COMMAND ${CT_CH02_PYTHON} ${CT_CH02_CHECK} report ${CT_CH02_BIN} ${CMAKE_BINARY_DIR}/ch02.json)
add_test(NAME chapter.ch02_badflag
         COMMAND ${CT_CH02_PYTHON} ${CT_CH02_CHECK} badflag ${CT_CH02_BIN})
add_test(NAME chapter.ch02_twin
         COMMAND ${CT_CH02_PYTHON} ${CT_CH02_CHECK} twin ${CT_CH02_BIN} ${CT_CH02_PYTHON} ${CT_CH02_TWIN}
                 ${CMAKE_BINARY_DIR})
set_tests_properties(chapter.ch02 chapter.ch02_badflag chapter.ch02_twin
                     PROPERTIES LABELS chapter SKIP_RETURN_CODE 77 TIMEOUT 300 ENVIRONMENT "${CT_TEST_ENV}")

add_test(NAME gpu.ch02
         COMMAND ${CT_CH02_PYTHON} ${CT_CH02_CHECK} gpu ${CT_CH02_BIN} ${CMAKE_BINARY_DIR}/ch02_gpu.json
                 "${CT_HAVE_CUDA}")
set_tests_properties(gpu.ch02 PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 300
                     ENVIRONMENT "${CT_TEST_ENV}")
