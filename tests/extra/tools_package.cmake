# SPDX-License-Identifier: MIT
# unit.tools_package: the Python tools are one package, tools/ctools/, with thin
# entry scripts in tools/; no function there or in tools/fixtures/ is over 80
# lines; no helper is defined twice in the package; nothing loads a tool by
# file path (tests/extra/check_tools_package.py).
find_program(CT_TOOLS_PACKAGE_PYTHON NAMES python3 REQUIRED)
add_test(NAME unit.tools_package
         COMMAND ${CT_TOOLS_PACKAGE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_tools_package.py ${PROJECT_SOURCE_DIR})
set_tests_properties(unit.tools_package PROPERTIES LABELS unit TIMEOUT 60)
