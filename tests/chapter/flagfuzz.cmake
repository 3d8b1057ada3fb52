# SPDX-License-Identifier: MIT
#
# The flag fuzzer (tools/flagfuzz) on the AddressSanitizer+UBSan build only:
# every chapter's flags with extreme values, each run in a fresh folder with
# planted output files, for a bounded time (CT_FLAGFUZZ_SECONDS, 180 s by
# default, shared by the chapters). A crash, a sanitizer report, a hang, an
# exit code other than 0/1/2/130 or a damaged planted file fails it; the
# failure prints the command that replays it. The seed is $CT_FLAGFUZZ_SEED,
# else the day's number (printed first).
#   fuzz_flags.chapters   (label fuzz_flags)
if(CT_SANITIZE)
  find_program(CT_FLAGFUZZ_PYTHON NAMES python3 REQUIRED)
  set(CT_FLAGFUZZ_SECONDS 180 CACHE STRING "time budget of the flag fuzzer (seconds)")
  add_test(NAME fuzz_flags.chapters
           COMMAND ${CT_FLAGFUZZ_PYTHON} ${CMAKE_SOURCE_DIR}/tools/flagfuzz --build ${CMAKE_BINARY_DIR}
                   --seconds ${CT_FLAGFUZZ_SECONDS} --timeout 30)
  set_tests_properties(fuzz_flags.chapters PROPERTIES LABELS fuzz_flags TIMEOUT 600
                       ENVIRONMENT "${CT_MPI_TEST_ENV}")
endif()
