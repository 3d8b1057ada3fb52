# SPDX-License-Identifier: MIT
#
# The book's tests (label book), included from tests/CMakeLists.txt.
#   book.sources   the chapters' sources: every prose block in both languages,
#                  exercises, well-formed directives (no pandoc needed)
#   book.weave     tools/weave on small chapters: verbatim code, outputs,
#                  recorded transcripts, twins, figures; FILE:LINE errors
#   book.build     tools/book --quick --no-bootstrap --no-build into
#                  ${CMAKE_BINARY_DIR}/book-test with this build's chapters
#   book.html      both editions, every chapter in both, no broken internal link,
#                  no Pandoc fence text (:::) in any page, every chapter's .cu file
#                  shown in its chapter, every function an exercise names (public API aside) shown in its code, figure numbers unique per chapter,
#                  recordings.json and the CPU-only notes agree with book/recorded/
#   book.pdf       the PDFs hold Chinese and English text and every chapter title,
#                  no Pandoc fence text (:::), figure text of at least 8 pt
#   book.chromium  headless Chromium opens every chapter page of both editions
#                  with no console message; screenshots in book-test/screenshots/
# A test whose tool is missing (pandoc, xelatex, gnuplot, pdftotext,
# chromium) exits 77 and is reported skipped; tools/bootstrap installs them.
find_program(CT_BOOK_PYTHON NAMES python3 REQUIRED)
set(CT_BOOK_DIR ${CMAKE_CURRENT_LIST_DIR})
set(CT_BOOK_OUT ${CMAKE_BINARY_DIR}/book-test)

add_test(NAME book.sources COMMAND ${CT_BOOK_PYTHON} ${CT_BOOK_DIR}/check_sources.py ${PROJECT_SOURCE_DIR})
# book.figures: every chapters/*/fig/*.dot renders in both languages (Graphviz dot) within the PDF's
# text width and at >= 8 pt, every figure is referenced ({{fig NAME}}) in both editions' prose, and a
# failed drawing or a missing dot stops weave with a clear message (tests/book/check_figures.py)
add_test(NAME book.figures COMMAND ${CT_BOOK_PYTHON} ${CT_BOOK_DIR}/check_figures.py ${PROJECT_SOURCE_DIR})
add_test(NAME book.weave COMMAND ${CT_BOOK_PYTHON} ${CT_BOOK_DIR}/test_weave.py ${PROJECT_SOURCE_DIR})
# book.claims: {{claim}}/{{if}} in prose checked against a metrics JSON (a contradicted claim fails
# --strict at FILE:LINE), no speed word beside a measured number outside them in any chapter
# (book/claims-allow.json: the exceptions, each with its reason), tools/record's load, repeat and
# spread rules on stand-in runs (tests/book/check_claims.py; a few seconds, no chapter run)
add_test(NAME book.claims COMMAND ${CT_BOOK_PYTHON} ${CT_BOOK_DIR}/check_claims.py ${PROJECT_SOURCE_DIR})
add_test(NAME book.build
         COMMAND ${CT_BOOK_PYTHON} ${CT_BOOK_DIR}/check_book.py build ${PROJECT_SOURCE_DIR} ${CT_BOOK_OUT}
                 ${CMAKE_BINARY_DIR})
foreach(check html pdf chromium)
  add_test(NAME book.${check}
           COMMAND ${CT_BOOK_PYTHON} ${CT_BOOK_DIR}/check_book.py ${check} ${PROJECT_SOURCE_DIR} ${CT_BOOK_OUT})
  set_tests_properties(book.${check} PROPERTIES FIXTURES_REQUIRED ct_book TIMEOUT 600)
endforeach()
set_tests_properties(book.build PROPERTIES FIXTURES_SETUP ct_book TIMEOUT 1500)
set_tests_properties(book.sources book.weave book.claims book.figures PROPERTIES TIMEOUT 120)
set_tests_properties(book.sources book.weave book.claims book.figures book.build book.html book.pdf book.chromium
                     PROPERTIES LABELS book SKIP_RETURN_CODE 77)

# The reader's tools (tests/book/check_reader.py):
#   book.meta      book/chapters.json complete for every chapter, in zh and en (no build needed)
#   book.reader    landing page (every chapter, summaries, GPU badges = recordings.json, both
#                  editions and PDFs), header boxes, terms, page contents, glossary, search
#                  index; every "chapter N"/"第 N 章" in prose is a link to that chapter
#   book.fonts     the zh PDF embeds Noto CJK and draws its Chinese with the SC face (pdffonts,
#                  and the glyphs against the font's own cmaps)
#   book.search    each edition's own search page in headless Chromium finds each chapter
#   book.overflow  no page is wider than a 390 px viewport (Chromium), no copy button over its code; chapter pages set prose at
#                  16 px, code at ~14 px, formulas as MathML (no raw TeX); screenshots of a
#                  chapter in both languages at 1280 and 390 px in book-test/screenshots/
add_test(NAME book.meta COMMAND ${CT_BOOK_PYTHON} ${CT_BOOK_DIR}/check_reader.py meta ${PROJECT_SOURCE_DIR})
set_tests_properties(book.meta PROPERTIES LABELS book TIMEOUT 60)
foreach(check reader fonts search overflow)
  add_test(NAME book.${check}
           COMMAND ${CT_BOOK_PYTHON} ${CT_BOOK_DIR}/check_reader.py ${check} ${PROJECT_SOURCE_DIR} ${CT_BOOK_OUT})
  set_tests_properties(book.${check} PROPERTIES FIXTURES_REQUIRED ct_book TIMEOUT 600 LABELS book
                       SKIP_RETURN_CODE 77)
endforeach()

# The performance appendix (tests/book/check_appendix.py; tools/ctools/book_appendix.py builds it):
#   book.appendix_text    every row id of tools/bench (CPU and GPU rows) has its title and paragraph
#                         in book/performance.json in both languages, none stale; a row without one
#                         is named with the fix; pages made from fixture recordings list the GPU
#                         rows not yet measured; the C-against-C rows point the same way as the
#                         chapters' own recordings (no build needed)
#   book.appendix         performance.html in both editions: its tables' numbers equal the latest
#                         recording's of each device, row by row; the figure exists and is shown;
#                         every GPU row "not yet measured on a GPU" without a GPU recording; linked
#                         from the landing page, the contents, the navigation bar and the last chapter
#   book.appendix_pdf     both PDFs hold the appendix, its ratios and its unmeasured rows
#   book.appendix_search  each edition's search page finds the appendix (Chromium)
# book.html, book.pdf and book.overflow check this page as every other (links, ':::', figure text,
# 390 px).
add_test(NAME book.appendix_text COMMAND ${CT_BOOK_PYTHON} ${CT_BOOK_DIR}/check_appendix.py text ${PROJECT_SOURCE_DIR})
set_tests_properties(book.appendix_text PROPERTIES LABELS book TIMEOUT 120)
foreach(check html pdf search)
  if(check STREQUAL "html")
    set(_name book.appendix)
  else()
    set(_name book.appendix_${check})
  endif()
  add_test(NAME ${_name}
           COMMAND ${CT_BOOK_PYTHON} ${CT_BOOK_DIR}/check_appendix.py ${check} ${PROJECT_SOURCE_DIR} ${CT_BOOK_OUT})
  set_tests_properties(${_name} PROPERTIES FIXTURES_REQUIRED ct_book TIMEOUT 600 LABELS book SKIP_RETURN_CODE 77)
endforeach()

# The zh edition's one vocabulary (tests/book/check_termbase.py, tools/termbase.py,
# book/termbase.json): no avoided synonym in zh prose (file:line and the book's term),
# shown to fail on a synonym planted in a copy of a chapter (no build needed).
add_test(NAME book.termbase COMMAND ${CT_BOOK_PYTHON} ${CT_BOOK_DIR}/check_termbase.py ${PROJECT_SOURCE_DIR})
set_tests_properties(book.termbase PROPERTIES LABELS book TIMEOUT 120)
