# SPDX-License-Identifier: MIT
#
# Checkpoints round-trip through PyTorch (issue 4: "the checkpoints round-trip
# through PyTorch"): st_roundtrip (C) writes safetensors files of every dtype
# and a model's state_dict; check_st_torch.py loads them into torch with
# tools/fixtures/st.py (and safetensors.torch.load_file where installed),
# writes a torch model back, and st_roundtrip loads it with ct_module_load and
# must reproduce torch's output. Skipped (77) when /usr/bin/python3 lacks torch.
add_executable(st_roundtrip ${CMAKE_CURRENT_LIST_DIR}/st_roundtrip.c)
target_link_libraries(st_roundtrip PRIVATE ct_app)
target_compile_options(st_roundtrip PRIVATE ${CT_WARNINGS})
if(CT_TORCH_PYTHON)
  add_test(NAME unit.checkpoint_torch
           COMMAND ${CT_TORCH_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_st_torch.py
                   --helper $<TARGET_FILE:st_roundtrip> --device cpu)
  set_tests_properties(unit.checkpoint_torch PROPERTIES LABELS unit SKIP_RETURN_CODE 77 TIMEOUT 300)
  add_test(NAME gpu.checkpoint_torch
           COMMAND ${CT_TORCH_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_st_torch.py
                   --helper $<TARGET_FILE:st_roundtrip> --device cuda)
  set_tests_properties(gpu.checkpoint_torch PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 300)
endif()
