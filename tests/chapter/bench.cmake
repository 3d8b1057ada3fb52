# SPDX-License-Identifier: MIT
#
# tools/bench's smoke test. Speed targets are measured by tools/bench as ratios
# against PyTorch in the same run, never asserted in tests: this test only
# checks that the bench runs end to end on the CPU (ch05, --quick) and writes
# its Markdown report and its JSON with a numeric ratio, whatever the ratio is.
#   chapter.bench_smoke   tools/bench --quick --only ch05 --device cpu: the report
#                         and the JSON exist and the ch05 row has a number
#                         (skipped, 77, where the twins' Python has no torch)
if(CT_TORCH_PYTHON)
  set(CT_BENCH_PYTHON ${CT_TORCH_PYTHON})
else()
  find_program(CT_BENCH_PYTHON NAMES python3 REQUIRED)
endif()
add_test(NAME chapter.bench_smoke
         COMMAND ${CT_BENCH_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_bench.py
                 ${PROJECT_SOURCE_DIR}/tools/bench ${CMAKE_BINARY_DIR} ${CT_BENCH_PYTHON})
set_tests_properties(chapter.bench_smoke PROPERTIES LABELS chapter SKIP_RETURN_CODE 77 TIMEOUT 300
                     ENVIRONMENT "${CT_TEST_ENV}")
