# SPDX-License-Identifier: MIT
#
# libFuzzer targets (the `fuzz` preset: clang, CPU-only, ASan + UBSan), built
# with `cmake --build --preset fuzz --target fuzz_all` and run by tools/fuzz:
#   fuzz_idx           ct_idx_read (plain and gzip IDX files)
#   fuzz_safetensors   ct_load_safetensors
#   fuzz_device        ct_device_parse (accepted text round-trips)
#   fuzz_cli           ct_cli_parse (exit codes 0 only for --help, 1 for outputs, 2 for flags)
#   fuzz_jit           the JIT's expression parser (positioned refusals, canonical round trip)
# Seed corpora: tests/fuzz/corpus/<name without fuzz_>/.
set(CT_FUZZ_DIR ${CMAKE_CURRENT_LIST_DIR})
add_custom_target(fuzz_all)
foreach(t idx safetensors device)
  add_executable(fuzz_${t} ${CT_FUZZ_DIR}/fuzz_${t}.c)
  target_link_libraries(fuzz_${t} PRIVATE ct)
  target_link_options(fuzz_${t} PRIVATE -fsanitize=fuzzer)
  add_dependencies(fuzz_all fuzz_${t})
endforeach()
# fuzz_cli compiles cli.c itself with exit() turned into a jump back to the harness.
add_executable(fuzz_cli ${CT_FUZZ_DIR}/fuzz_cli.c ${PROJECT_SOURCE_DIR}/common/app/cli.c
                        ${PROJECT_SOURCE_DIR}/common/app/progress.c)
set_source_files_properties(${PROJECT_SOURCE_DIR}/common/app/cli.c PROPERTIES
                            COMPILE_DEFINITIONS "exit=cti_fuzz_exit;CT_SOURCE_DIR=\"${PROJECT_SOURCE_DIR}\"")
target_compile_options(fuzz_cli PRIVATE -include ${CT_FUZZ_DIR}/fuzz_exit.h)
target_link_libraries(fuzz_cli PRIVATE ct ct_internal)
target_link_options(fuzz_cli PRIVATE -fsanitize=fuzzer)
add_dependencies(fuzz_all fuzz_cli)
# fuzz_jit reaches the parser's internals (the canonical spelling) through ct_internal.
add_executable(fuzz_jit ${CT_FUZZ_DIR}/fuzz_jit.c)
target_link_libraries(fuzz_jit PRIVATE ct ct_internal)
target_link_options(fuzz_jit PRIVATE -fsanitize=fuzzer)
add_dependencies(fuzz_all fuzz_jit)
