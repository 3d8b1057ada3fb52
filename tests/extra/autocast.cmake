# SPDX-License-Identifier: MIT
# PyTorch 2.x's autocast lists, live: tools/fixtures/autocast_lists.py asks
# .venv-torch2's torch again (CT_TORCH2_VENV names another venv) and compares
# with the committed tests/fixtures/autocast/lists.txt, which
# test_autocast_lists replays in C. Skipped (77) without a torch 2.x; about
# 7 s on one core.
if(DEFINED ENV{CT_TORCH2_VENV})
  set(ct_torch2_venv "$ENV{CT_TORCH2_VENV}")
else()
  set(ct_torch2_venv "${PROJECT_SOURCE_DIR}/.venv-torch2")
endif()
add_test(NAME unit.autocast_lists_fixtures_live
         COMMAND sh -c "p=\"$1/bin/python\"; [ -x \"$p\" ] || { echo \"skipped: no venv at $1\"; exit 77; }; exec \"$p\" \"$2\" --check \"$3\""
                 sh ${ct_torch2_venv} ${PROJECT_SOURCE_DIR}/tools/fixtures/autocast_lists.py
                 ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/autocast)
set_tests_properties(unit.autocast_lists_fixtures_live PROPERTIES LABELS unit SKIP_RETURN_CODE 77 TIMEOUT 300)
