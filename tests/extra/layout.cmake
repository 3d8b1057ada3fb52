# SPDX-License-Identifier: MIT
# unit.layout: the runtime's layout rules on the built libraries (exported
# symbols are public ct_ names or internal cti_ ones), chapters include only
# common/include/, and only common/app/ may exit (tests/extra/check_layout.py).
find_program(CT_LAYOUT_PYTHON NAMES python3 REQUIRED)
add_test(NAME unit.layout
         COMMAND ${CT_LAYOUT_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_layout.py
                 ${PROJECT_SOURCE_DIR} $<TARGET_FILE:ct> $<TARGET_FILE:ct_app> ${CMAKE_NM})
set_tests_properties(unit.layout PROPERTIES LABELS unit TIMEOUT 60)
