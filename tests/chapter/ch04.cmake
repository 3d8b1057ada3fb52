# SPDX-License-Identifier: MIT
#
# Chapter 4's tests. tests/chapter/check_ch04.py does the checking (its
# docstring lists the modes); numpy (for the independent re-check) and torch
# (for the twin) come from CT_TORCH_PYTHON, Debian's /usr/bin/python3.
#   chapter.ch04          --device cpu --quick: every CPU version checked OK against
#                         float64, metrics sane, the smallest product re-checked with numpy
#   chapter.ch04_corrupt  --corrupt cpu_blocked: the check fails and the chapter exits 1
#   chapter.ch04_twin     ch04_pytorch.py on the CPU: same sections, sizes and keys
#   gpu.ch04              --device cuda, full sizes: every GPU rung (the register-tiled
#                         kernel too) checked OK; skipped only where there is no GPU
#   gpu.ch04_twin         ct_mm against torch.mm on the GPU, dtype by dtype (printed)
#   sim.ch04              the sim-runtime build only (tools/sim): --device cuda --quick on the
#                         emulated device, every GPU rung checked OK at the emulator's sizes,
#                         no speed reported (label sim; sim_all builds ch04 there)
if(CT_TORCH_PYTHON)
  set(CT_CH04_PYTHON ${CT_TORCH_PYTHON})
else()
  find_program(CT_CH04_PYTHON NAMES python3 REQUIRED)
endif()
set(CT_CH04_BIN $<TARGET_FILE:ch04_matmul>)
set(CT_CH04_CHECK ${CMAKE_CURRENT_LIST_DIR}/check_ch04.py)
set(CT_CH04_TWIN ${CMAKE_SOURCE_DIR}/chapters/ch04_matmul/ch04_pytorch.py)

add_test(NAME chapter.ch04
         COMMAND ${CT_CH04_PYTHON} ${CT_CH04_CHECK} report ${CT_CH04_BIN} ${CMAKE_BINARY_DIR}/ch04.json
                 ${CMAKE_BINARY_DIR}/ch04_dump)
add_test(NAME chapter.ch04_corrupt
         COMMAND ${CT_CH04_PYTHON} ${CT_CH04_CHECK} corrupt ${CT_CH04_BIN} ${CMAKE_BINARY_DIR}/ch04_corrupt.json)
add_test(NAME chapter.ch04_twin
         COMMAND ${CT_CH04_PYTHON} ${CT_CH04_CHECK} twin ${CT_CH04_BIN} ${CT_CH04_PYTHON} ${CT_CH04_TWIN}
                 ${CMAKE_BINARY_DIR})
set_tests_properties(chapter.ch04 chapter.ch04_corrupt chapter.ch04_twin
                     PROPERTIES LABELS chapter SKIP_RETURN_CODE 77 TIMEOUT 300 ENVIRONMENT "${CT_TEST_ENV}")

add_test(NAME gpu.ch04
         COMMAND ${CT_CH04_PYTHON} ${CT_CH04_CHECK} gpu ${CT_CH04_BIN} ${CMAKE_BINARY_DIR}/ch04_gpu.json
                 "${CT_HAVE_CUDA}")
add_test(NAME gpu.ch04_twin
         COMMAND ${CT_CH04_PYTHON} ${CT_CH04_CHECK} gpu_twin ${CT_CH04_BIN} ${CT_CH04_PYTHON} ${CT_CH04_TWIN}
                 ${CMAKE_BINARY_DIR} "${CT_HAVE_CUDA}")
set_tests_properties(gpu.ch04 gpu.ch04_twin PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 300
                     ENVIRONMENT "${CT_TEST_ENV}")

if(CT_SIM_CUDA) # the emulated device (tools/sim/README.md, stage 2)
  add_test(NAME sim.ch04 COMMAND ${CT_CH04_PYTHON} ${CT_CH04_CHECK} emulated ${CT_CH04_BIN} ${CMAKE_BINARY_DIR}/ch04_sim.json)
  set_tests_properties(sim.ch04 PROPERTIES LABELS sim TIMEOUT 1500 ENVIRONMENT
                       "${CT_TEST_ENV};CT_SIM_LAUNCH_LOG=${CMAKE_BINARY_DIR}/sim_launches_gpu.log")
  # sim_all (tools/sim, defined after this file) builds ch04 too
  cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL add_dependencies sim_all ch04_matmul)
endif()
