# SPDX-License-Identifier: MIT
# tools/gpu-check's logic where there is no GPU (label unit):
#   unit.gpu_check       (seconds) the plan's arithmetic and the checker refusing
#                        plans that do not fit, stages cut at their deadlines
#                        (made-up stages), the record and sanitizer stages with
#                        stand-in chapters, CT_COMMIT, the compute-sanitizer probe
#                        against stand-in tools, the bench verdict, and --merge
#                        of sample calls into one report and book/recorded files
#   unit.gpu_check_plan  `tools/gpu-check --plan`: the calls fit the 15-minute
#                        lease and the carry the 64 MiB (exit 1 otherwise)
#   unit.gpu_check_dry   `tools/gpu-check --no-gpu-ok`: the plan walked on this
#                        machine, every stage by its dry-run behaviour (the sm90
#                        preset configured into gpu-check-dry/, the gpu tests
#                        listed, the runs named, tools/bench --list-rows)
find_program(CT_GPU_CHECK_PYTHON NAMES python3 REQUIRED)
add_test(NAME unit.gpu_check
         COMMAND ${CT_GPU_CHECK_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/test_gpu_check.py ${PROJECT_SOURCE_DIR})
set_tests_properties(unit.gpu_check PROPERTIES LABELS unit TIMEOUT 120)
add_test(NAME unit.gpu_check_plan
         COMMAND ${CT_GPU_CHECK_PYTHON} ${PROJECT_SOURCE_DIR}/tools/gpu-check --plan)
set_tests_properties(unit.gpu_check_plan PROPERTIES LABELS unit TIMEOUT 120)
add_test(NAME unit.gpu_check_dry
         COMMAND ${CT_GPU_CHECK_PYTHON} ${PROJECT_SOURCE_DIR}/tools/gpu-check --no-gpu-ok
                 --build-dir ${CMAKE_BINARY_DIR}/gpu-check-dry)
set_tests_properties(unit.gpu_check_dry PROPERTIES LABELS unit TIMEOUT 300 RUN_SERIAL TRUE)
