# SPDX-License-Identifier: MIT
# Transformer-layer fixtures, live: tools/fixtures/transformer.py runs torch
# again into a temporary folder and compares with the committed
# tests/fixtures/transformer/*.safetensors numerically (exit 77, skipped,
# without torch). test_transformer_torch replays the committed files in C
# (unit.transformer_torch, gpu.transformer_torch); test_transformer_gradcheck
# is CPU-only, so its gpu.transformer_gradcheck variant exits 77.
if(CT_TORCH_PYTHON)
  add_test(NAME unit.transformer_fixtures_live
           COMMAND ${CT_TORCH_PYTHON} ${PROJECT_SOURCE_DIR}/tools/fixtures/transformer.py
                   --check ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/transformer)
  set_tests_properties(unit.transformer_fixtures_live PROPERTIES LABELS unit SKIP_RETURN_CODE 77 TIMEOUT 300)
endif()
# The GPT block under bfloat16 autocast (tests/fixtures/gpt_amp, replayed by
# test_gpt_amp): tools/fixtures/gpt_amp.py regenerates it and compares.
if(CT_TORCH_PYTHON)
  add_test(NAME unit.gpt_amp_fixtures_live
           COMMAND ${CT_TORCH_PYTHON} ${PROJECT_SOURCE_DIR}/tools/fixtures/gpt_amp.py
                   --check ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/gpt_amp)
  set_tests_properties(unit.gpt_amp_fixtures_live PROPERTIES LABELS unit SKIP_RETURN_CODE 77 TIMEOUT 300)
endif()
