# SPDX-License-Identifier: MIT
#
# Every chapter's --quick run under the stream-ordering sanitizer in error
# mode (CT_STREAM_SANITIZER=2): tests/chapter/check_sanitizer.py runs each
# chapter (all of add_chapter's targets, chNN=PROGRAM) with --quick --device
# cpu and passes only when each exits 0 with no sanitizer report, outside
# the sections where a chapter shows the checker at work on purpose (ch12's
# "race" and "record_stream").
#   chapter.sanitizer_quick
find_program(CT_SANITIZER_PYTHON NAMES python3 REQUIRED)
get_property(ct_san_targets GLOBAL PROPERTY CT_CHAPTERS)
set(ct_san_progs)
foreach(t IN LISTS ct_san_targets)
  string(SUBSTRING ${t} 0 4 nn)
  list(APPEND ct_san_progs "${nn}=$<TARGET_FILE:${t}>")
endforeach()
add_test(NAME chapter.sanitizer_quick
         COMMAND ${CT_SANITIZER_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_sanitizer.py
                 ${CMAKE_BINARY_DIR}/sanitizer_test ${ct_san_progs})
set_tests_properties(chapter.sanitizer_quick PROPERTIES LABELS chapter SKIP_RETURN_CODE 77 TIMEOUT 900
                     ENVIRONMENT "${CT_MPI_TEST_ENV}") # ch08 runs on Open MPI
