# SPDX-License-Identifier: MIT
#
# Chapter 13's tests. tests/chapter/check_ch13.py does the checking (its
# docstring lists the modes and their references); each mode points
# CT_JIT_CACHE at its own fresh directory under ${CMAKE_BINARY_DIR}/ch13_test/.
#   chapter.ch13             --device cpu --quick: traffic worked out by hand, the cache's four steps,
#                            carets under their columns, agreement, GB/s = bytes / time
#   chapter.ch13_restart     two processes, one cache: the second loads the first one's kernel
#   chapter.ch13_nocc        no C compiler: a clear message, exit 0, the unfused chain measured
#   chapter.ch13_badcache    a 0777 cache directory is refused, named, with the fix
#   chapter.ch13_badflag     bad flags exit 2; a bad --expr exits 1 with its caret
#   chapter.ch13_twin        the twin's own byte count (TorchDispatchMode) equals ct_jit_traffic_of's
#   chapter.ch13_twin_agree  torch in float64 on the saved inputs = C's fused outputs
#   gpu.ch13                 --device cuda --quick: NVRTC, the CUDA source, the cache, agreement
if(CT_TORCH_PYTHON)
  set(CT_CH13_PYTHON ${CT_TORCH_PYTHON})
else()
  find_program(CT_CH13_PYTHON NAMES python3 REQUIRED)
endif()
set(CT_CH13_BIN $<TARGET_FILE:ch13_jit>)
set(CT_CH13_CHECK ${CMAKE_CURRENT_LIST_DIR}/check_ch13.py)
set(CT_CH13_TWIN ${CMAKE_SOURCE_DIR}/chapters/ch13_jit/ch13_pytorch.py)
set(CT_CH13_WORK ${CMAKE_BINARY_DIR}/ch13_test)

foreach(mode report restart nocc badcache badflag)
  set(name chapter.ch13_${mode})
  if(mode STREQUAL "report")
    set(name chapter.ch13)
  endif()
  add_test(NAME ${name} COMMAND ${CT_CH13_PYTHON} ${CT_CH13_CHECK} ${mode} ${CT_CH13_BIN} ${CT_CH13_WORK}/${mode})
  set_tests_properties(${name} PROPERTIES LABELS chapter SKIP_RETURN_CODE 77 TIMEOUT 300 ENVIRONMENT "${CT_TEST_ENV}")
endforeach()
foreach(mode twin twin_agree)
  add_test(NAME chapter.ch13_${mode}
           COMMAND ${CT_CH13_PYTHON} ${CT_CH13_CHECK} ${mode} ${CT_CH13_BIN} ${CT_CH13_PYTHON} ${CT_CH13_TWIN}
                   ${CT_CH13_WORK}/${mode})
  set_tests_properties(chapter.ch13_${mode} PROPERTIES LABELS chapter SKIP_RETURN_CODE 77 TIMEOUT 300
                       ENVIRONMENT "${CT_TEST_ENV}")
endforeach()

add_test(NAME gpu.ch13
         COMMAND ${CT_CH13_PYTHON} ${CT_CH13_CHECK} gpu ${CT_CH13_BIN} ${CT_CH13_WORK}/gpu "${CT_HAVE_CUDA}")
set_tests_properties(gpu.ch13 PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 300 ENVIRONMENT "${CT_TEST_ENV}")
