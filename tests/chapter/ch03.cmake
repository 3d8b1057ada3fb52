# SPDX-License-Identifier: MIT
#
# Chapter 3's tests. tests/chapter/check_ch03.py does the checking against a
# model of the caching allocator written from alloc.h's documented rules (its
# docstring lists the modes); it needs only Python's standard library, except
# the twin test, which needs a Python with torch (CT_TORCH_PYTHON, Debian's
# /usr/bin/python3) and is skipped (77) where torch cannot be imported.
#   chapter.ch03       --device cpu --quick --metrics: statistics, splitting, summary,
#                      raw vs cached, OOM raised and recovered, the five remedies, warm-up;
#                      and every byte count in the chapter's prose (zh and en) equals the run's
#   chapter.ch03_twin  ch03_pytorch.py prints the same sections; sizes and remedies agree
#   gpu.ch03           the same checks with --device cuda (skipped only where there is
#                      no GPU at all, or the build has no CUDA)
if(CT_TORCH_PYTHON)
  set(CT_CH03_PYTHON ${CT_TORCH_PYTHON})
else()
  find_program(CT_CH03_PYTHON NAMES python3 REQUIRED)
endif()
set(CT_CH03_BIN $<TARGET_FILE:ch03_memory>)
set(CT_CH03_CHECK ${CMAKE_CURRENT_LIST_DIR}/check_ch03.py)
set(CT_CH03_TWIN ${CMAKE_SOURCE_DIR}/chapters/ch03_memory/ch03_pytorch.py)

add_test(NAME chapter.ch03
         COMMAND ${CT_CH03_PYTHON} ${CT_CH03_CHECK} report ${CT_CH03_BIN} ${CMAKE_BINARY_DIR}/ch03.json)
add_test(NAME chapter.ch03_twin
         COMMAND ${CT_CH03_PYTHON} ${CT_CH03_CHECK} twin ${CT_CH03_BIN} ${CT_CH03_PYTHON} ${CT_CH03_TWIN}
                 ${CMAKE_BINARY_DIR})
set_tests_properties(chapter.ch03 chapter.ch03_twin
                     PROPERTIES LABELS chapter SKIP_RETURN_CODE 77 TIMEOUT 300 ENVIRONMENT "${CT_TEST_ENV}")

add_test(NAME gpu.ch03
         COMMAND ${CT_CH03_PYTHON} ${CT_CH03_CHECK} gpu ${CT_CH03_BIN} ${CMAKE_BINARY_DIR}/ch03_gpu.json
                 "${CT_HAVE_CUDA}")
set_tests_properties(gpu.ch03 PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 300
                     ENVIRONMENT "${CT_TEST_ENV}")
