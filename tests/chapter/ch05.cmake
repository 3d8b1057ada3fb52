# SPDX-License-Identifier: MIT
#
# Chapter 5's tests. tests/chapter/check_ch05.py does the checking (its
# docstring lists the modes); numpy and torch come from CT_TORCH_PYTHON,
# Debian's /usr/bin/python3, and the safetensors files are read with
# tools/fixtures/st.py.
#   chapter.ch05              --device cpu --quick: the data, the closed form (numpy lstsq),
#                             the gradient check, every step loss and the learned parameters
#                             (SGD re-run in numpy float64), the truth, the saved state_dict
#   chapter.ch05_badflag      bad flags and values exit 2; a bad --load-init file exits 1
#   chapter.ch05_twin         ch05_pytorch.py on the CPU: same sections and metric keys, converges
#   chapter.ch05_twin_agree   C and PyTorch from the same init file (both ways): the first 20
#                             step losses agree within 1e-4 relative; steps/s of both printed
#   gpu.ch05                  the chapter.ch05 checks with --device cuda (skipped only where
#                             there is no GPU, or the build has no CUDA)
#   gpu.ch05_twin_agree       twin_agree on the GPU, with both programs' steps/s
if(CT_TORCH_PYTHON)
  set(CT_CH05_PYTHON ${CT_TORCH_PYTHON})
else()
  find_program(CT_CH05_PYTHON NAMES python3 REQUIRED)
endif()
set(CT_CH05_BIN $<TARGET_FILE:ch05_linear_regression>)
set(CT_CH05_CHECK ${CMAKE_CURRENT_LIST_DIR}/check_ch05.py)
set(CT_CH05_TWIN ${CMAKE_SOURCE_DIR}/chapters/ch05_linear_regression/ch05_pytorch.py)

add_test(NAME chapter.ch05
         COMMAND ${CT_CH05_PYTHON} ${CT_CH05_CHECK} report ${CT_CH05_BIN} ${CMAKE_BINARY_DIR})
add_test(NAME chapter.ch05_badflag
         COMMAND ${CT_CH05_PYTHON} ${CT_CH05_CHECK} badflag ${CT_CH05_BIN} ${CMAKE_BINARY_DIR})
add_test(NAME chapter.ch05_twin
         COMMAND ${CT_CH05_PYTHON} ${CT_CH05_CHECK} twin ${CT_CH05_BIN} ${CT_CH05_PYTHON} ${CT_CH05_TWIN}
                 ${CMAKE_BINARY_DIR})
add_test(NAME chapter.ch05_twin_agree
         COMMAND ${CT_CH05_PYTHON} ${CT_CH05_CHECK} twin_agree ${CT_CH05_BIN} ${CT_CH05_PYTHON} ${CT_CH05_TWIN}
                 ${CMAKE_BINARY_DIR} cpu)
set_tests_properties(chapter.ch05 chapter.ch05_badflag chapter.ch05_twin chapter.ch05_twin_agree
                     PROPERTIES LABELS chapter SKIP_RETURN_CODE 77 TIMEOUT 300 ENVIRONMENT "${CT_TEST_ENV}")

add_test(NAME gpu.ch05
         COMMAND ${CT_CH05_PYTHON} ${CT_CH05_CHECK} gpu ${CT_CH05_BIN} ${CMAKE_BINARY_DIR} "${CT_HAVE_CUDA}")
add_test(NAME gpu.ch05_twin_agree
         COMMAND ${CT_CH05_PYTHON} ${CT_CH05_CHECK} twin_agree ${CT_CH05_BIN} ${CT_CH05_PYTHON} ${CT_CH05_TWIN}
                 ${CMAKE_BINARY_DIR} cuda "${CT_HAVE_CUDA}")
set_tests_properties(gpu.ch05 gpu.ch05_twin_agree PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 300
                     ENVIRONMENT "${CT_TEST_ENV}")
