# SPDX-License-Identifier: MIT
#
# Chapter 8's tests (tests/chapter/check_ch08.py; its docstring lists the modes).
# ./ch08 starts itself under tools/launch with 2 ranks (Open MPI), so these need
# a build with MPI. The runtime's multi-rank tests (collectives, DDP = one process
# with the global batch, no_sync, faults) are in tests/dist (label dist).
#   chapter.ch08          --quick on 2 ranks: collectives, sampler = torch's, busbw, training,
#                         checkpoint equal on every rank, only rank 0 prints
#   chapter.ch08_badflag  bad flags exit 2; nccl without a GPU and unknown backends fail clearly
#   chapter.ch08_kill     rank 1 SIGKILLed in training: the job ends non-zero within 60 s and the
#                         checkpoint of an earlier complete run is untouched
#   chapter.ch08_twin     ch08_pytorch.py (gloo): same sections, collectives and sampler lines
if(CT_HAVE_MPI)
  if(CT_TORCH_PYTHON)
    set(CT_CH08_PYTHON ${CT_TORCH_PYTHON})
  else()
    find_program(CT_CH08_PYTHON NAMES python3 REQUIRED)
  endif()
  set(CT_CH08_BIN $<TARGET_FILE:ch08_ddp>)
  set(CT_CH08_CHECK ${CMAKE_CURRENT_LIST_DIR}/check_ch08.py)
  set(CT_CH08_TWIN ${CMAKE_SOURCE_DIR}/chapters/ch08_ddp/ch08_pytorch.py)
  set(CT_CH08_WORK ${CMAKE_BINARY_DIR}/ch08_test)
  add_test(NAME chapter.ch08 COMMAND ${CT_CH08_PYTHON} ${CT_CH08_CHECK} report ${CT_CH08_BIN} ${CT_CH08_WORK}/report)
  add_test(NAME chapter.ch08_badflag
           COMMAND ${CT_CH08_PYTHON} ${CT_CH08_CHECK} badflag ${CT_CH08_BIN} ${CT_CH08_WORK}/badflag)
  add_test(NAME chapter.ch08_twin
           COMMAND ${CT_CH08_PYTHON} ${CT_CH08_CHECK} twin ${CT_CH08_BIN} ${CT_CH08_PYTHON} ${CT_CH08_TWIN}
                   ${CT_CH08_WORK}/twin)
  add_test(NAME chapter.ch08_kill COMMAND ${CT_CH08_PYTHON} ${CT_CH08_CHECK} kill ${CT_CH08_BIN} ${CT_CH08_WORK}/kill)
  set_tests_properties(chapter.ch08 chapter.ch08_badflag chapter.ch08_twin chapter.ch08_kill PROPERTIES
                       LABELS chapter SKIP_RETURN_CODE 77 TIMEOUT 300 WORKING_DIRECTORY ${CMAKE_BINARY_DIR}
                       ENVIRONMENT "${CT_MPI_TEST_ENV}")
endif()
