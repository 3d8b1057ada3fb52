# SPDX-License-Identifier: MIT
#
# Every chapter's plain default, as a reader runs it (`./chNN`, no flags):
# tests/chapter/check_default.py runs it on a pseudo terminal in a fresh
# folder under ${CMAKE_BINARY_DIR}/default_test/, without the harness's
# environment. A run that ends within about a minute must exit 0; a longer
# one must show its progress and, on Ctrl-C after a minute, stop with
# "interrupted: stopping after this step" and exit 130. One test a chapter:
#   chapter.chNN_default   (labels chapter, default; not run under ASan)
find_program(CT_DEFAULT_PYTHON NAMES python3 REQUIRED)
get_property(ct_default_targets GLOBAL PROPERTY CT_CHAPTERS)
foreach(t IN LISTS ct_default_targets)
  string(SUBSTRING ${t} 0 4 nn)
  add_test(NAME chapter.${nn}_default
           COMMAND ${CT_DEFAULT_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_default.py
                   $<TARGET_FILE:${t}> ${CMAKE_BINARY_DIR}/default_test/${nn})
  # 75 s of running, up to 120 s to stop after Ctrl-C, and the start.
  set_tests_properties(chapter.${nn}_default PROPERTIES LABELS "chapter;default" SKIP_RETURN_CODE 77
                       TIMEOUT 280)
endforeach()
