# SPDX-License-Identifier: MIT
#
# Valgrind memcheck over every chapter's --quick CPU run (label valgrind):
# no invalid access, no use of uninitialised memory, no definite leak
# (tests/valgrind/check_valgrind.py; suppressions with their reasons in
# tests/valgrind/ct.supp). ch08 runs its 2 ranks under tools/launch, each
# under its own memcheck. Slow by nature (ch03 and ch06 take minutes), so
# each has a long timeout; they exit 77 where valgrind is not installed.
#
# Memcheck runs a program about 50 times slower, so the chapters whose
# --quick run trains for many steps get a shorter one here: every code path of
# the --quick run (setup, training steps, evaluation, saving) still runs, only
# fewer times. CT_VG_ARGS_chNN holds those extra flags.
set(CT_VG_ARGS_ch06 --max-steps 4 --train-size 512 --test-size 250)
set(CT_VG_ARGS_ch07 --steps 4)
set(CT_VG_ARGS_ch08 --train-size 512)
find_program(CT_VG_PYTHON NAMES python3 REQUIRED)
set(CT_VG_DIR ${CMAKE_CURRENT_LIST_DIR}/../valgrind)
get_property(ct_chapters GLOBAL PROPERTY CT_CHAPTERS)
foreach(target IN LISTS ct_chapters)
  string(SUBSTRING ${target} 0 4 id)
  if(id STREQUAL "ch08")
    if(NOT CT_HAVE_MPI)
      continue()
    endif()
    set(launch --launch ${PROJECT_SOURCE_DIR}/tools/launch 2)
  else()
    set(launch)
  endif()
  add_test(NAME valgrind.${id}
           COMMAND ${CT_VG_PYTHON} ${CT_VG_DIR}/check_valgrind.py ${CT_VG_DIR} ${launch} $<TARGET_FILE:${target}>
                   --device cpu --quick ${CT_VG_ARGS_${id}})
  set_tests_properties(valgrind.${id} PROPERTIES LABELS valgrind SKIP_RETURN_CODE 77 TIMEOUT 1500
                       WORKING_DIRECTORY ${CMAKE_BINARY_DIR}/valgrind-run ENVIRONMENT "OMP_WAIT_POLICY=PASSIVE")
endforeach()
file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/valgrind-run)
