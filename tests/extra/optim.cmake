# SPDX-License-Identifier: MIT
# Optimizer fixtures, live: tools/fixtures/optim.py runs torch.optim again
# into a temporary folder and compares with the committed
# tests/fixtures/optim/*.safetensors numerically (exit 77, skipped, without
# torch). test_optim_torch replays the committed files in C (unit.optim_torch).
if(CT_TORCH_PYTHON)
  add_test(NAME unit.optim_fixtures_live
           COMMAND ${CT_TORCH_PYTHON} ${PROJECT_SOURCE_DIR}/tools/fixtures/optim.py
                   --check ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/optim)
  set_tests_properties(unit.optim_fixtures_live PROPERTIES LABELS unit SKIP_RETURN_CODE 77 TIMEOUT 300)
endif()
