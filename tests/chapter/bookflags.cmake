# SPDX-License-Identifier: MIT
#
# The flags the book passes and the flags --help explains (tests/chapter/check_bookflags.py):
#   chapter.book_flags  every chapter with a '/*md bookrun FLAGS*/' line: the C program and its
#                       twin with those flags (read by tools/book's discover_chapters), --quick
#                       and --quick's own sizes, each in a fresh folder under book_flags_test/;
#                       fails when either exits non-zero or writes no --metrics (or --profile) file
#   book.help           every chapter's and twin's --help lists each declared flag and each
#                       bookrun flag, with a default for every flag that takes a value
set(ct_bookflags_progs)
get_property(ct_bookflags_targets GLOBAL PROPERTY CT_CHAPTERS)
foreach(t IN LISTS ct_bookflags_targets)
  string(SUBSTRING ${t} 0 4 nn)
  list(APPEND ct_bookflags_progs "${nn}=$<TARGET_FILE:${t}>")
endforeach()
if(CT_TORCH_PYTHON)
  set(ct_bookflags_python ${CT_TORCH_PYTHON})
else()
  find_program(ct_bookflags_python NAMES python3 REQUIRED)
endif()
set(CT_BOOKFLAGS_CHECK ${CMAKE_CURRENT_LIST_DIR}/check_bookflags.py)
add_test(NAME chapter.book_flags
         COMMAND ${ct_bookflags_python} ${CT_BOOKFLAGS_CHECK} flags ${PROJECT_SOURCE_DIR}
                 ${CMAKE_BINARY_DIR}/book_flags_test ${ct_bookflags_python} ${ct_bookflags_progs})
set_tests_properties(chapter.book_flags PROPERTIES LABELS chapter SKIP_RETURN_CODE 77 TIMEOUT 300
                     ENVIRONMENT "${CT_MPI_TEST_ENV}") # ch08 relaunches itself under tools/launch (Open MPI)
add_test(NAME book.help
         COMMAND ${ct_bookflags_python} ${CT_BOOKFLAGS_CHECK} help ${PROJECT_SOURCE_DIR}
                 ${CMAKE_BINARY_DIR}/book_help_test ${ct_bookflags_python} ${ct_bookflags_progs})
set_tests_properties(book.help PROPERTIES LABELS book SKIP_RETURN_CODE 77 TIMEOUT 120 ENVIRONMENT "${CT_TEST_ENV}")
# gpu.chNN_twin_cuda (label gpu: tools/gpu-check's test stage runs them on a lent GPU): each twin's
# GPU path, --device cuda with the book's flags and --quick; exit 77 where there is no GPU.
file(GLOB ct_bookflags_twins ${PROJECT_SOURCE_DIR}/chapters/ch*_*/ch*_pytorch.py)
foreach(twin IN LISTS ct_bookflags_twins)
  get_filename_component(nn ${twin} NAME)
  string(SUBSTRING ${nn} 0 4 nn)
  add_test(NAME gpu.${nn}_twin_cuda
           COMMAND ${ct_bookflags_python} ${CT_BOOKFLAGS_CHECK} twin-cuda ${PROJECT_SOURCE_DIR}
                   ${CMAKE_BINARY_DIR}/twin_cuda_test/${nn} ${ct_bookflags_python} ${nn})
  set_tests_properties(gpu.${nn}_twin_cuda PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 300
                       ENVIRONMENT "${CT_MPI_TEST_ENV}")
endforeach()
