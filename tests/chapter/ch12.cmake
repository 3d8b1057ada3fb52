# SPDX-License-Identifier: MIT
#
# Chapter 12's tests. tests/chapter/check_ch12.py does the checking (its
# docstring lists the modes and their references); the twin tests use
# CT_TORCH_PYTHON (Debian's /usr/bin/python3) and exit 77 where torch cannot
# be imported. Outputs go under ${CMAKE_BINARY_DIR}/ch12_test/.
#   chapter.ch12             --device cpu --quick: ordering, elapsed_time's errors, the pipeline
#                            against float64 and its event timeline, the race caught and silenced,
#                            record_stream, the sync points in both modes
#   chapter.ch12_race        the whole chapter under CT_STREAM_SANITIZER=2: no race of its own
#   chapter.ch12_badflag     bad flags exit 2
#   chapter.ch12_twin        ch12_pytorch.py prints the same sections; ordering and checksum agree
#   chapter.ch12_twin_agree  C's chunk sums = the twin's float64 reference
#   gpu.ch12                 --device cuda --quick: the same claims on a GPU
if(CT_TORCH_PYTHON)
  set(CT_CH12_PYTHON ${CT_TORCH_PYTHON})
else()
  find_program(CT_CH12_PYTHON NAMES python3 REQUIRED)
endif()
set(CT_CH12_BIN $<TARGET_FILE:ch12_streams_events>)
set(CT_CH12_CHECK ${CMAKE_CURRENT_LIST_DIR}/check_ch12.py)
set(CT_CH12_TWIN ${CMAKE_SOURCE_DIR}/chapters/ch12_streams_events/ch12_pytorch.py)
set(CT_CH12_WORK ${CMAKE_BINARY_DIR}/ch12_test)

add_test(NAME chapter.ch12 COMMAND ${CT_CH12_PYTHON} ${CT_CH12_CHECK} report ${CT_CH12_BIN} ${CT_CH12_WORK}/report)
add_test(NAME chapter.ch12_race COMMAND ${CT_CH12_PYTHON} ${CT_CH12_CHECK} race ${CT_CH12_BIN} ${CT_CH12_WORK}/race)
add_test(NAME chapter.ch12_badflag
         COMMAND ${CT_CH12_PYTHON} ${CT_CH12_CHECK} badflag ${CT_CH12_BIN} ${CT_CH12_WORK}/badflag)
add_test(NAME chapter.ch12_twin
         COMMAND ${CT_CH12_PYTHON} ${CT_CH12_CHECK} twin ${CT_CH12_BIN} ${CT_CH12_PYTHON} ${CT_CH12_TWIN}
                 ${CT_CH12_WORK}/twin)
add_test(NAME chapter.ch12_twin_agree
         COMMAND ${CT_CH12_PYTHON} ${CT_CH12_CHECK} twin_agree ${CT_CH12_BIN} ${CT_CH12_PYTHON} ${CT_CH12_TWIN}
                 ${CT_CH12_WORK}/twin_agree)
set_tests_properties(chapter.ch12 chapter.ch12_race chapter.ch12_badflag chapter.ch12_twin chapter.ch12_twin_agree
                     PROPERTIES LABELS chapter SKIP_RETURN_CODE 77 TIMEOUT 300 ENVIRONMENT "${CT_TEST_ENV}")

add_test(NAME gpu.ch12
         COMMAND ${CT_CH12_PYTHON} ${CT_CH12_CHECK} gpu ${CT_CH12_BIN} ${CT_CH12_WORK}/gpu "${CT_HAVE_CUDA}")
set_tests_properties(gpu.ch12 PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 300 ENVIRONMENT "${CT_TEST_ENV}")
