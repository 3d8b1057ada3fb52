# SPDX-License-Identifier: MIT
# nn fixtures, live: tools/fixtures/nn.py runs torch.nn again into a
# temporary folder and compares with the committed
# tests/fixtures/nn/*.safetensors numerically (exit 77, skipped, without
# torch). test_nn_torch replays the committed files in C (unit.nn_torch);
# test_nn_gradcheck is CPU-only, so its gpu.nn_gradcheck variant exits 77.
if(CT_TORCH_PYTHON)
  add_test(NAME unit.nn_fixtures_live
           COMMAND ${CT_TORCH_PYTHON} ${PROJECT_SOURCE_DIR}/tools/fixtures/nn.py
                   --check ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/nn)
  set_tests_properties(unit.nn_fixtures_live PROPERTIES LABELS unit SKIP_RETURN_CODE 77 TIMEOUT 300)
endif()
