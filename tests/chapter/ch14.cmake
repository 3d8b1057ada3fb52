# SPDX-License-Identifier: MIT
#
# Chapter 14's tests (tests/chapter/check_ch14.py; its docstring lists the modes
# and the references). The corpora are Debian's fortunes and fortunes-zh
# (tools/bootstrap's test group); a test exits 77 where they are missing.
#   chapter.ch14           --quick on en, zh and a FILE: corpus and vocabulary as read here, nanoGPT's
#                          keys and parameter count, first loss ln(V), the loss falling, the sample,
#                          --save then --generate repeating the run's sample
#   chapter.ch14_badflag   bad corpus, preset, sizes, --generate files, prompt: clear error, exit 1/2
#   chapter.ch14_resume    Ctrl-C with --save, --resume: later losses and final tensors bit-identical
#   chapter.ch14_graphs    --graphs (CPU recorder): losses bit-identical to eager
#   chapter.ch14_amp       --amp bf16/fp16: float32's losses within the dtype's rounding; fp16 resumes exactly
#   chapter.ch14_twin      ch14_pytorch.py --quick: the C program's corpus, vocabulary, parameter count
#   chapter.ch14_twin_agree  from ./ch14 --save-init: 20 losses within 1e-4 relative (float32); C's
#                          checkpoint samples the same text in both (greedy and C's Philox draws);
#                          one changed weight makes each check fail
#   chapter.ch14_ddp       tools/launch 2 ranks x batch 8 = 1 process x batch 16 (MPI builds)
#   gpu.ch14               --device cuda --quick; its first losses against the CPU's
if(CT_TORCH_PYTHON)
  set(CT_CH14_PYTHON ${CT_TORCH_PYTHON})
else()
  find_program(CT_CH14_PYTHON NAMES python3 REQUIRED)
endif()
set(CT_CH14_BIN $<TARGET_FILE:ch14_gpt>)
set(CT_CH14_CHECK ${CMAKE_CURRENT_LIST_DIR}/check_ch14.py)
set(CT_CH14_WORK ${CMAKE_BINARY_DIR}/ch14_test)

foreach(mode report badflag resume graphs amp)
  if(mode STREQUAL "report")
    set(name chapter.ch14)
  else()
    set(name chapter.ch14_${mode})
  endif()
  add_test(NAME ${name} COMMAND ${CT_CH14_PYTHON} ${CT_CH14_CHECK} ${mode} ${CT_CH14_BIN} ${CT_CH14_WORK}/${mode})
  set_tests_properties(${name} PROPERTIES LABELS chapter SKIP_RETURN_CODE 77 TIMEOUT 300 ENVIRONMENT "${CT_TEST_ENV}")
endforeach()
set(CT_CH14_TWIN ${CMAKE_SOURCE_DIR}/chapters/ch14_gpt/ch14_pytorch.py)
foreach(mode twin twin_agree)
  add_test(NAME chapter.ch14_${mode} COMMAND ${CT_CH14_PYTHON} ${CT_CH14_CHECK} ${mode} ${CT_CH14_BIN} ${CT_CH14_PYTHON}
                                             ${CT_CH14_TWIN} ${CT_CH14_WORK}/${mode})
  set_tests_properties(chapter.ch14_${mode} PROPERTIES LABELS chapter SKIP_RETURN_CODE 77 TIMEOUT 300
                       ENVIRONMENT "${CT_TEST_ENV}")
endforeach()
if(CT_HAVE_MPI)
  add_test(NAME chapter.ch14_ddp COMMAND ${CT_CH14_PYTHON} ${CT_CH14_CHECK} ddp ${CT_CH14_BIN}
                                         ${PROJECT_SOURCE_DIR}/tools/launch ${CT_CH14_WORK}/ddp)
  set_tests_properties(chapter.ch14_ddp PROPERTIES LABELS chapter SKIP_RETURN_CODE 77 TIMEOUT 300
                       ENVIRONMENT "${CT_MPI_TEST_ENV}")
endif()
add_test(NAME gpu.ch14 COMMAND ${CT_CH14_PYTHON} ${CT_CH14_CHECK} gpu ${CT_CH14_BIN} ${CT_CH14_WORK}/gpu "${CT_HAVE_CUDA}")
set_tests_properties(gpu.ch14 PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 300 ENVIRONMENT "${CT_TEST_ENV}")
