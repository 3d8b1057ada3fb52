# SPDX-License-Identifier: MIT
# tools/gpu-check's logic where there is no GPU (unit.gpu_check, seconds): the
# compute-sanitizer probe against stand-in tools, the bench verdict on sample
# bench.json files, the tab-separated fields with empty ones, and --merge of
# three sample calls into one report.
find_program(CT_GPU_CHECK_PYTHON NAMES python3 REQUIRED)
add_test(NAME unit.gpu_check
         COMMAND ${CT_GPU_CHECK_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/test_gpu_check.py ${PROJECT_SOURCE_DIR})
set_tests_properties(unit.gpu_check PROPERTIES LABELS unit TIMEOUT 120)
