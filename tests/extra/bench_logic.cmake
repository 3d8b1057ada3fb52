# SPDX-License-Identifier: MIT
# tools/bench's bookkeeping where nothing runs (unit.bench_logic, seconds): the
# median, min, max and spread of a figure's runs, the unstable marking, the
# PyTorch version per column, the torch.compile rows (n/a with torch 1.13),
# on stand-in metrics. No timing is asserted.
find_program(CT_BENCH_LOGIC_PYTHON NAMES python3 REQUIRED)
add_test(NAME unit.bench_logic
         COMMAND ${CT_BENCH_LOGIC_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/test_bench_logic.py ${PROJECT_SOURCE_DIR})
set_tests_properties(unit.bench_logic PROPERTIES LABELS unit TIMEOUT 120)
