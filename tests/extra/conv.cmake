# SPDX-License-Identifier: MIT
# Conv2d / MaxPool2d / BatchNorm2d fixtures, live: tools/fixtures/conv.py
# runs torch.nn again into a temporary folder and compares with the committed
# tests/fixtures/conv/*.safetensors numerically (exit 77, skipped, without
# torch). test_conv_torch replays the committed files in C (unit.conv_torch,
# gpu.conv_torch); test_conv_gradcheck is CPU-only, so its gpu.conv_gradcheck
# variant exits 77.
if(CT_TORCH_PYTHON)
  add_test(NAME unit.conv_fixtures_live
           COMMAND ${CT_TORCH_PYTHON} ${PROJECT_SOURCE_DIR}/tools/fixtures/conv.py
                   --check ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/conv)
  set_tests_properties(unit.conv_fixtures_live PROPERTIES LABELS unit SKIP_RETURN_CODE 77 TIMEOUT 300)
endif()
