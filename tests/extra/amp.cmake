# SPDX-License-Identifier: MIT
# GradScaler fixtures, live: tools/fixtures/amp.py runs PyTorch's GradScaler
# again into a temporary folder and compares with the committed
# tests/fixtures/amp/*.safetensors (exit 77, skipped, without torch).
# test_amp replays the committed files in C (unit.amp).
if(CT_TORCH_PYTHON)
  add_test(NAME unit.amp_fixtures_live
           COMMAND ${CT_TORCH_PYTHON} ${PROJECT_SOURCE_DIR}/tools/fixtures/amp.py
                   --check ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/amp)
  set_tests_properties(unit.amp_fixtures_live PROPERTIES LABELS unit SKIP_RETURN_CODE 77 TIMEOUT 300)
endif()
