# SPDX-License-Identifier: MIT
#
# Tests of tools/lab (label book); tests/lab/check_lab.py does the checking
# (its docstring lists the modes). Standard-library Python only.
#   lab.tool       tools/lab on a small synthetic project: stubs, LAB.md, scores
#                  per exercise, `| test:` and `| stub:`, a copy that does not
#                  compile, exit codes (seconds)
#   lab.regions    every chapter has a lab region, every region is well formed,
#                  and every chapter's stubbed C file compiles wherever its
#                  reference does (and, in a CUDA build, its stubbed .cu files
#                  pass nvcc's front end) (tools/lab lint; seconds)
#   lab.stubs      tools/lab make chNN + tools/lab check with the stubs left in:
#                  the copy builds, every graded exercise fails, score 0
#   lab.reference  the same copy with the chapter's reference files pasted back:
#                  full marks (runs after lab.stubs and reuses its build)
#   lab.wrong      tools/lab wrong --rotate 3 --sim no: each region's wrong solutions
#                  (chapters/chNN_name/lab_wrong/) pasted into the same copy one at a
#                  time, and the region's tests must fail each; 3 of the 14 chapters a
#                  day, in rotation (CT_LAB_WRONG_DAY=N repeats day N's choice;
#                  `tools/lab wrong --dir DIR` checks them all, the CUDA ones on the
#                  emulator). Runs after lab.reference and reuses its build: about a
#                  minute (53 s measured on 2 busy cores for ch03-ch05), up to 2 min.
# lab.stubs builds a whole student copy (the runtime included) with the cpu
# preset: a minute or two on 2 cores. The chapter is CT_LAB_CHAPTER (default
# 01); -DCT_LAB_CHAPTER=04 tests another. lab.regions covers every chapter.
set(CT_LAB_CHAPTER "01" CACHE STRING "chapter (NN) whose student copy lab.stubs and lab.reference build")
if(CT_TORCH_PYTHON)  # Debian's /usr/bin/python3 (tests/CMakeLists.txt); any python3 >= 3.9 will do
  set(CT_LAB_PYTHON ${CT_TORCH_PYTHON})
else()
  find_program(CT_LAB_PYTHON NAMES python3 REQUIRED)
endif()
set(CT_LAB_CHECK ${CMAKE_CURRENT_LIST_DIR}/check_lab.py)
set(CT_LAB_WORK ${CMAKE_BINARY_DIR}/lab)
string(REGEX REPLACE "^ch" "" CT_LAB_NN "${CT_LAB_CHAPTER}")  # 01, ch01 and 1 all mean ch01
if(CT_LAB_NN MATCHES "^[0-9]$")
  set(CT_LAB_NN 0${CT_LAB_NN})
endif()
set(CT_LAB_CH ch${CT_LAB_NN})

add_test(NAME lab.tool COMMAND ${CT_LAB_PYTHON} ${CT_LAB_CHECK} tool ${PROJECT_SOURCE_DIR} ${CT_LAB_WORK}/tool)

# The compiler flags a chapter's C file needs besides its own: the runtime's
# headers, cblas.h, OpenMP, and CUDA's headers for the CT_HAVE_CUDA variant.
separate_arguments(CT_LAB_OMP_FLAGS UNIX_COMMAND "${OpenMP_C_FLAGS}")
set(CT_LAB_CFLAGS -I${PROJECT_SOURCE_DIR}/common/include -I${CT_CBLAS_INCLUDE} ${CT_LAB_OMP_FLAGS})
foreach(d IN LISTS CUDAToolkit_INCLUDE_DIRS)
  list(APPEND CT_LAB_CFLAGS -I${d})
endforeach()
set(CT_LAB_NVCC)
if(CT_HAVE_CUDA)
  set(CT_LAB_NVCC --nvcc ${CMAKE_CUDA_COMPILER})
endif()
add_test(NAME lab.regions
         COMMAND ${CT_LAB_PYTHON} ${PROJECT_SOURCE_DIR}/tools/lab lint --cc ${CMAKE_C_COMPILER} ${CT_LAB_NVCC}
                 -- ${CT_LAB_CFLAGS})

add_test(NAME lab.stubs
         COMMAND ${CT_LAB_PYTHON} ${CT_LAB_CHECK} stubs ${PROJECT_SOURCE_DIR} ${CT_LAB_CH} ${CT_LAB_WORK}/${CT_LAB_CH})
add_test(NAME lab.reference
         COMMAND ${CT_LAB_PYTHON} ${CT_LAB_CHECK} reference ${PROJECT_SOURCE_DIR} ${CT_LAB_CH} ${CT_LAB_WORK}/${CT_LAB_CH})

set_tests_properties(lab.tool lab.regions PROPERTIES LABELS book SKIP_RETURN_CODE 77 TIMEOUT 300)
# Both use the same student copy: never at once, stubs first when both run.
set_tests_properties(lab.stubs lab.reference PROPERTIES LABELS book SKIP_RETURN_CODE 77 TIMEOUT 1800
                     RESOURCE_LOCK ct_lab_copy)
set_tests_properties(lab.reference PROPERTIES DEPENDS lab.stubs)
add_test(NAME lab.wrong
         COMMAND ${CT_LAB_PYTHON} ${PROJECT_SOURCE_DIR}/tools/lab wrong --rotate 3 --sim no
                 --dir ${CT_LAB_WORK}/${CT_LAB_CH} --json ${CT_LAB_WORK}/wrong.json)
set_tests_properties(lab.wrong PROPERTIES LABELS book TIMEOUT 1200 RESOURCE_LOCK ct_lab_copy
                     DEPENDS lab.reference)

# lab.sim (the sim build only, label sim): tools/lab check --sim only grades ch04's
# CUDA exercise on the SIMT emulator: a solution missing its second
# __syncthreads() fails, the reference passes (tests/lab/check_lab_sim.py). It builds
# a student copy's sim tree (a CPU-only runtime under ASan): minutes on 2 cores.
if(CT_SIM)
  add_test(NAME lab.sim COMMAND ${CT_LAB_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_lab_sim.py ${PROJECT_SOURCE_DIR}
                                ${CT_LAB_WORK}/sim)
  set_tests_properties(lab.sim PROPERTIES LABELS sim TIMEOUT 3000)
endif()
