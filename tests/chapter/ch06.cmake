# SPDX-License-Identifier: MIT
#
# Chapter 6's tests. tests/chapter/check_ch06.py does the checking (its
# docstring lists the modes); numpy and torch (for the twin tests) come from
# CT_TORCH_PYTHON, Debian's /usr/bin/python3; the twin tests exit 77 where
# torch cannot be imported. Outputs go under ${CMAKE_BINARY_DIR}/ch06_test/.
#   chapter.ch06             --device cpu --quick, CNN (BatchNorm) and MLP: sections, accuracy
#                            above chance, confusion rows against the label file, the PNG decoded
#                            and compared with the image file, --save then --load
#   chapter.ch06_badflag     bad flags exit 2, a missing dataset exits 1
#   chapter.ch06_twin        ch06_pytorch.py --quick: same sections, print(model), sizes
#   chapter.ch06_twin_agree  same initial weights (--save-init / --load-init), no shuffle, no
#                            dropout: the first 20 step losses agree within 1e-4 relative
#   chapter.ch06_ckpt_torch  a checkpoint saved by ch06 loads into the twin's torch model:
#                            the logits of 8 test images agree within 1e-4
#   chapter.ch06_resume      Ctrl-C (a real SIGINT at a chosen step) with --save, then --resume:
#                            parameters bit-identical to an uninterrupted run; a second Ctrl-C
#                            leaves the old file; mismatched flags and weights-only files refused;
#                            SIGTERM does what Ctrl-C does, exit 143
#   gpu.ch06                 --device cuda --quick; the GPU checkpoint evaluated on the CPU
if(CT_TORCH_PYTHON)
  set(CT_CH06_PYTHON ${CT_TORCH_PYTHON})
else()
  find_program(CT_CH06_PYTHON NAMES python3 REQUIRED)
endif()
set(CT_CH06_BIN $<TARGET_FILE:ch06_image_classification>)
set(CT_CH06_CHECK ${CMAKE_CURRENT_LIST_DIR}/check_ch06.py)
set(CT_CH06_TWIN ${CMAKE_SOURCE_DIR}/chapters/ch06_image_classification/ch06_pytorch.py)
set(CT_CH06_WORK ${CMAKE_BINARY_DIR}/ch06_test)

add_test(NAME chapter.ch06
         COMMAND ${CT_CH06_PYTHON} ${CT_CH06_CHECK} report ${CT_CH06_BIN} ${CT_CH06_WORK}/report)
add_test(NAME chapter.ch06_badflag
         COMMAND ${CT_CH06_PYTHON} ${CT_CH06_CHECK} badflag ${CT_CH06_BIN} ${CT_CH06_WORK}/badflag)
add_test(NAME chapter.ch06_twin
         COMMAND ${CT_CH06_PYTHON} ${CT_CH06_CHECK} twin ${CT_CH06_BIN} ${CT_CH06_PYTHON} ${CT_CH06_TWIN}
                 ${CT_CH06_WORK}/twin)
add_test(NAME chapter.ch06_twin_agree
         COMMAND ${CT_CH06_PYTHON} ${CT_CH06_CHECK} twin_agree ${CT_CH06_BIN} ${CT_CH06_PYTHON} ${CT_CH06_TWIN}
                 ${CT_CH06_WORK}/twin_agree)
add_test(NAME chapter.ch06_ckpt_torch
         COMMAND ${CT_CH06_PYTHON} ${CT_CH06_CHECK} ckpt_torch ${CT_CH06_BIN} ${CT_CH06_PYTHON} ${CT_CH06_TWIN}
                 ${CT_CH06_WORK}/ckpt_torch)
add_test(NAME chapter.ch06_resume
         COMMAND ${CT_CH06_PYTHON} ${CT_CH06_CHECK} resume ${CT_CH06_BIN} ${CT_CH06_WORK}/resume)
set_tests_properties(chapter.ch06 chapter.ch06_badflag chapter.ch06_twin chapter.ch06_twin_agree
                     chapter.ch06_ckpt_torch chapter.ch06_resume
                     PROPERTIES LABELS chapter SKIP_RETURN_CODE 77 TIMEOUT 300 ENVIRONMENT "${CT_TEST_ENV}")

add_test(NAME gpu.ch06
         COMMAND ${CT_CH06_PYTHON} ${CT_CH06_CHECK} gpu ${CT_CH06_BIN} ${CT_CH06_WORK}/gpu "${CT_HAVE_CUDA}")
set_tests_properties(gpu.ch06 PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 300
                     ENVIRONMENT "${CT_TEST_ENV}")
