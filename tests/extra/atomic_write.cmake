# SPDX-License-Identifier: MIT
# unit.atomic_write: the Python programs' one writer (tools/fixtures/atomic.py,
# used by chapters/twin.py, ch06's twin and tools/fixtures/st.py): planted
# links at temporary names, a failed write, modes (tests/extra/test_atomic_write.py).
find_program(CT_ATOMIC_PYTHON NAMES python3 REQUIRED)
add_test(NAME unit.atomic_write
         COMMAND ${CT_ATOMIC_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/test_atomic_write.py ${PROJECT_SOURCE_DIR})
set_tests_properties(unit.atomic_write PROPERTIES LABELS unit TIMEOUT 60)
