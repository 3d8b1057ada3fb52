# SPDX-License-Identifier: MIT
# unit.layout: the runtime's layout rules on the built libraries (exported
# symbols are public ct_ names or internal cti_ ones), chapters include only
# common/include/, and only common/app/ may exit (tests/extra/check_layout.py).
find_program(CT_LAYOUT_PYTHON NAMES python3 REQUIRED)
add_test(NAME unit.layout
         COMMAND ${CT_LAYOUT_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_layout.py
                 ${PROJECT_SOURCE_DIR} $<TARGET_FILE:ct> $<TARGET_FILE:ct_app> ${CMAKE_NM})
set_tests_properties(unit.layout PROPERTIES LABELS unit TIMEOUT 60)

# unit.layout_includes: each folder includes only the private headers its
# set(CT_SEES_<folder> ...) line allows, and core none of graph/, prof/ or
# sanitizer/ (tests/extra/check_includes.py); unit.layout_includes_planted
# shows that the check fails on a planted include.
add_test(NAME unit.layout_includes
         COMMAND ${CT_LAYOUT_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_includes.py ${PROJECT_SOURCE_DIR} --graph)
add_test(NAME unit.layout_includes_planted
         COMMAND ${CT_LAYOUT_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_includes.py ${PROJECT_SOURCE_DIR} --selftest)
set_tests_properties(unit.layout_includes unit.layout_includes_planted PROPERTIES LABELS unit TIMEOUT 60)
