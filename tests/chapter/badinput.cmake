# SPDX-License-Identifier: MIT
#
# The bad-input catalogue (tests/BADINPUT.md), on the real chapter programs:
# tests/chapter/check_badinput.py makes the bad folders and files under
# ${CMAKE_BINARY_DIR}/badinput_test/ and runs every chapter that applies (all
# of add_chapter's targets are passed, chNN=PROGRAM, so a new chapter is
# checked by the families that go through every chapter). One test a family:
#   chapter.badinput_data        ch06 --data: broken Fashion-MNIST folders
#   chapter.badinput_checkpoint  ch06 --load: damaged and foreign checkpoints
#   chapter.badinput_device      --device strings malformed (2) or absent (1), every chapter
#   chapter.badinput_sizes       zero/negative sizes, a batch larger than the data, out of memory
#   chapter.badinput_numerics    a diverging loss stops ch05/ch06 naming the step; NaN in the data
#   chapter.badinput_divergence  the same in ch07, ch08, ch09, ch10 and ch14: exit 1, nothing saved
#   chapter.badinput_limits      thread variables, integer flags past int, sizes past memory
#   chapter.badinput_files       bad flags and values; outputs into missing, read-only, full or
#                                wrong-kind destinations, every chapter; links, FIFOs, devices
#   chapter.badinput_outputs     two flags on one file, planted temporaries, long paths, FIFOs/devices/
#                                folders as inputs, one prefix per message (issue 23)
#   gpu.badinput                 on a GPU: cuda:N past the count, NCCL with more ranks than GPUs
find_program(CT_BADINPUT_PYTHON NAMES python3 REQUIRED)
get_property(ct_badinput_targets GLOBAL PROPERTY CT_CHAPTERS)
set(ct_badinput_progs)
foreach(t IN LISTS ct_badinput_targets)
  string(SUBSTRING ${t} 0 4 nn)
  list(APPEND ct_badinput_progs "${nn}=$<TARGET_FILE:${t}>")
endforeach()
set(CT_BADINPUT_CHECK ${CMAKE_CURRENT_LIST_DIR}/check_badinput.py)
set(CT_BADINPUT_WORK ${CMAKE_BINARY_DIR}/badinput_test)

foreach(mode data checkpoint device sizes numerics divergence limits files outputs)
  add_test(NAME chapter.badinput_${mode}
           COMMAND ${CT_BADINPUT_PYTHON} ${CT_BADINPUT_CHECK} ${mode} ${CT_BADINPUT_WORK} ${ct_badinput_progs})
  set_tests_properties(chapter.badinput_${mode} PROPERTIES LABELS chapter SKIP_RETURN_CODE 77 TIMEOUT 300
                       ENVIRONMENT "${CT_MPI_TEST_ENV}") # ch08 runs on Open MPI (tests/CMakeLists.txt)
endforeach()
add_test(NAME gpu.badinput
         COMMAND ${CT_BADINPUT_PYTHON} ${CT_BADINPUT_CHECK} gpu ${CT_BADINPUT_WORK} "${CT_HAVE_CUDA}" ${ct_badinput_progs})
set_tests_properties(gpu.badinput PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 300 ENVIRONMENT "${CT_MPI_TEST_ENV}")
