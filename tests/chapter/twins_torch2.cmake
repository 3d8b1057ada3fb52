# SPDX-License-Identifier: MIT
#
# The twins on a current PyTorch (issue 24: the bench's reference is PyTorch 2.x):
#   chapter.twins_torch2  every chapters/chNN_*/chNN_pytorch.py --quick --device cpu (and
#                         --compile where a twin has it) under .venv-torch2's Python with
#                         Deprecation-, Future- and UserWarning as errors; skipped (77) where
#                         the venv is absent (tools/bootstrap --group torch2 makes it)
find_program(CT_TWINS2_PYTHON NAMES python3 REQUIRED)
add_test(NAME chapter.twins_torch2
         COMMAND ${CT_TWINS2_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_twins_torch2.py
                 ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/twins_torch2)
set_tests_properties(chapter.twins_torch2 PROPERTIES LABELS chapter SKIP_RETURN_CODE 77 TIMEOUT 2400
                     ENVIRONMENT "${CT_TEST_ENV}")
