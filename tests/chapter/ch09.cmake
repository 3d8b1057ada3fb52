# SPDX-License-Identifier: MIT
#
# Chapter 9's tests. tests/chapter/check_ch09.py does the checking (its
# docstring lists the modes and their references); numpy and torch come from
# CT_TORCH_PYTHON, Debian's /usr/bin/python3; the twin test exits 77 where
# torch cannot be imported. Outputs go under ${CMAKE_BINARY_DIR}/ch09_test/.
#   chapter.ch09          --device cpu --quick: formats against IEEE/bfloat16's numbers (numpy),
#                         the dtype error, autocast's dtypes, underflow rescued by the scaler, the
#                         scale sequence (and the lab's rule) against PyTorch's update rule, unscale_
#                         before clipping, model.half()'s lost updates, the speed rows, the resumed
#                         scaler (the checkpoint's metadata read with st.py), bad batches skipped
#   chapter.ch09_badflag  bad flags exit 2; an --out-dir that cannot be written exits 1 naming it
#   chapter.ch09_twin     ch09_pytorch.py prints the same sections, formats, autocast table, and
#                         the same scale sequence and skipped steps as C
#   gpu.ch09              --device cuda --quick: the same claims with float16 and cuBLAS
if(CT_TORCH_PYTHON)
  set(CT_CH09_PYTHON ${CT_TORCH_PYTHON})
else()
  find_program(CT_CH09_PYTHON NAMES python3 REQUIRED)
endif()
set(CT_CH09_BIN $<TARGET_FILE:ch09_amp>)
set(CT_CH09_CHECK ${CMAKE_CURRENT_LIST_DIR}/check_ch09.py)
set(CT_CH09_TWIN ${CMAKE_SOURCE_DIR}/chapters/ch09_amp/ch09_pytorch.py)
set(CT_CH09_WORK ${CMAKE_BINARY_DIR}/ch09_test)

add_test(NAME chapter.ch09
         COMMAND ${CT_CH09_PYTHON} ${CT_CH09_CHECK} report ${CT_CH09_BIN} ${CT_CH09_WORK}/report)
add_test(NAME chapter.ch09_badflag
         COMMAND ${CT_CH09_PYTHON} ${CT_CH09_CHECK} badflag ${CT_CH09_BIN} ${CT_CH09_WORK}/badflag)
add_test(NAME chapter.ch09_twin
         COMMAND ${CT_CH09_PYTHON} ${CT_CH09_CHECK} twin ${CT_CH09_BIN} ${CT_CH09_PYTHON} ${CT_CH09_TWIN}
                 ${CT_CH09_WORK}/twin)
set_tests_properties(chapter.ch09 chapter.ch09_badflag chapter.ch09_twin
                     PROPERTIES LABELS chapter SKIP_RETURN_CODE 77 TIMEOUT 300 ENVIRONMENT "${CT_TEST_ENV}")

add_test(NAME gpu.ch09
         COMMAND ${CT_CH09_PYTHON} ${CT_CH09_CHECK} gpu ${CT_CH09_BIN} ${CT_CH09_WORK}/gpu "${CT_HAVE_CUDA}")
set_tests_properties(gpu.ch09 PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 300
                     ENVIRONMENT "${CT_TEST_ENV}")
