# SPDX-License-Identifier: MIT
#
# Many processes (common/dist): tests/dist/. Multi-rank tests run under
# tools/launch (Open MPI); they are added only where the build has MPI.
#   unit.dist_sampler   DistributedSampler's shards = PyTorch's, 1,000+ cases (77 without torch)
#   dist.collectives_2  test_dist on 2 ranks: all_reduce/broadcast/all_gather/reduce_scatter/
#                       barrier/async, DDP = one process with the global batch (overlap on and
#                       off), no_sync accumulation = the large batch, a GPT block (tied lm_head)
#                       through ct_ddp_allreduce_grads = the float64 mean of every rank's grads
#   dist.collectives_3  the same on 3 ranks
#   dist.netns          two network namespaces as two hosts, over TCP (77 where not possible)
#   dist.fault          a rank that exits, is killed or fails ends the job non-zero within
#                       60 s; without the launcher, a clear error
#   dist.agree          ct_dist_agree: rank 1 (or 1 and 2) fails its setup; every rank prints the
#                       program's words ("rank 1 failed: ..." or its own), all exit 1 together,
#                       no MPI abort or kill noise; a 3000-byte message ends in "..."; ch14 on
#                       2 ranks, rank 1 with a missing or another --corpus: both stop in ch14's words
#   dist.launch_signal  SIGTERM/SIGINT to tools/launch ends every rank; none outlives it
set(CT_DIST_DIR ${CMAKE_CURRENT_LIST_DIR}/../dist)
add_executable(sampler_dump ${CT_DIST_DIR}/sampler_dump.c)
target_link_libraries(sampler_dump PRIVATE ct)
target_compile_options(sampler_dump PRIVATE ${CT_WARNINGS})
if(CT_TORCH_PYTHON)
  add_test(NAME unit.dist_sampler COMMAND ${CT_TORCH_PYTHON} ${CT_DIST_DIR}/check_sampler.py $<TARGET_FILE:sampler_dump>)
  set_tests_properties(unit.dist_sampler PROPERTIES LABELS unit SKIP_RETURN_CODE 77 TIMEOUT 300)
endif()
if(CT_HAVE_MPI)
  foreach(t test_dist dist_fault dist_agree)
    add_executable(${t} ${CT_DIST_DIR}/${t}.c)
    target_link_libraries(${t} PRIVATE ct)
    target_compile_options(${t} PRIVATE ${CT_WARNINGS})
  endforeach()
  target_link_libraries(test_dist PRIVATE testutil) # tests/tu_gpt.h's GPT block
  foreach(n 2 3)
    add_test(NAME dist.collectives_${n}
             COMMAND ${PROJECT_SOURCE_DIR}/tools/launch --nproc-per-node ${n} $<TARGET_FILE:test_dist> mpi)
    set_tests_properties(dist.collectives_${n} PROPERTIES LABELS dist TIMEOUT 120 ENVIRONMENT "${CT_MPI_TEST_ENV};OMP_NUM_THREADS=1")
  endforeach()
  find_program(CT_DIST_PYTHON NAMES python3 REQUIRED)
  add_test(NAME dist.fault
           COMMAND ${CT_DIST_PYTHON} ${CT_DIST_DIR}/check_fault.py ${PROJECT_SOURCE_DIR}/tools/launch
                   $<TARGET_FILE:dist_fault> $<TARGET_FILE:test_dist>)
  set_tests_properties(dist.fault PROPERTIES LABELS dist TIMEOUT 300 ENVIRONMENT "${CT_MPI_TEST_ENV};OMP_NUM_THREADS=1")
  add_test(NAME dist.agree
           COMMAND ${CT_DIST_PYTHON} ${CT_DIST_DIR}/check_agree.py ${PROJECT_SOURCE_DIR}/tools/launch
                   $<TARGET_FILE:dist_agree> $<TARGET_FILE:ch14_gpt>)
  set_tests_properties(dist.agree PROPERTIES LABELS dist TIMEOUT 300 ENVIRONMENT "${CT_MPI_TEST_ENV};OMP_NUM_THREADS=1")
  add_test(NAME dist.launch_signal
           COMMAND ${CT_DIST_PYTHON} ${CT_DIST_DIR}/check_launch_signal.py ${PROJECT_SOURCE_DIR}/tools/launch)
  set_tests_properties(dist.launch_signal PROPERTIES LABELS dist TIMEOUT 200 ENVIRONMENT "${CT_MPI_TEST_ENV}")
endif()
if(CT_HAVE_MPI)
  # dist.netns: two network namespaces joined by a veth pair play two machines;
  # tools/launch --hosts runs a rank in each over Open MPI's TCP transport (77
  # where namespaces cannot be made: not root, no ip netns).
  add_test(NAME dist.netns
           COMMAND ${CT_DIST_PYTHON} ${CT_DIST_DIR}/check_netns.py ${PROJECT_SOURCE_DIR}/tools/launch
                   ${CT_DIST_DIR}/netns_rsh $<TARGET_FILE:test_dist>)
  set_tests_properties(dist.netns PROPERTIES LABELS dist SKIP_RETURN_CODE 77 TIMEOUT 300 ENVIRONMENT "${CT_MPI_TEST_ENV}")
endif()
