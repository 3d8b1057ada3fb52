-- SPDX-License-Identifier: MIT
-- book/book.lua: the Pandoc filter of the book (HTML and LaTeX). The rules it
-- implements are in book/FORMAT.md:
--   ::: {.folded summary=... note=...}  HTML: a collapsed <details>;
--                                       LaTeX: the code is left out, the note says where it is
--   [text]{.label}                      LaTeX: small sans-serif
--   ```output                           LaTeX: a Verbatim sized to its widest line (rows never wrap),
--                                       breaking longer lines; generated text cut short
--                                       (a line over 300 columns; "    | " runs past 12 lines)
--   ![...](x.svg)                       LaTeX: x.pdf (gnuplot draws both)
--   "..." in the Chinese edition          “...”, paired within each block (tools/book
--                                       reads zh with -smart: Pandoc's smart quotes
--                                       turn a quote after a CJK character the wrong way)
--   a table                             HTML: inside div.table-wrap, which scrolls sideways

local function is_latex() return FORMAT:match("latex") ~= nil end
local function is_html() return FORMAT:match("html") ~= nil end

local function html_escape(s)
  return (s:gsub("&", "&amp;"):gsub("<", "&lt;"):gsub(">", "&gt;"):gsub('"', "&quot;"))
end

local zh = os.getenv("BOOK_LANG") == "zh"

-- Straight double quotes become “ and ” in turn, counted per block.
local function pair_quotes(block)
  local open = false
  return pandoc.walk_block(block, {
    Str = function(s)
      if not s.text:find('"', 1, true) then return nil end
      local t = s.text:gsub('"', function()
        open = not open
        return open and "“" or "”"
      end)
      return pandoc.Str(t)
    end,
  })
end

local function quotes(el)
  if zh then return pair_quotes(el) end
  return nil
end

Para = quotes
Plain = quotes
Header = quotes

function Div(el)
  if el.classes:includes("folded") then
    if is_html() then
      local out = {pandoc.RawBlock("html", '<details class="folded"><summary>' ..
        html_escape(el.attributes["summary"] or "") .. "</summary>")}
      for _, b in ipairs(el.content) do table.insert(out, b) end
      table.insert(out, pandoc.RawBlock("html", "</details>"))
      return out
    elseif is_latex() then
      return pandoc.Para({pandoc.Emph({pandoc.Str(el.attributes["note"] or "")})})
    end
  end
  if is_latex() and el.classes:includes("output") then
    -- keep a box's label with its text
    return {pandoc.RawBlock("latex", "\\par\\nopagebreak[3]"), el}
  end
  return nil
end

function Span(el)
  if is_latex() and el.classes:includes("label") then
    -- ragged right: a label is one short line, a long `device: ...` may wrap
    local out = {pandoc.RawInline("latex", "{\\raggedright\\small\\sffamily\\color{bookgray}")}
    for _, i in ipairs(el.content) do table.insert(out, i) end
    table.insert(out, pandoc.RawInline("latex", "\\par}"))
    return out
  end
  return nil
end

-- LaTeX: a block's widest line picks its size, so that a table's rows (the
-- profiler's) never wrap: the columns of DejaVu Sans Mono that fit the A4
-- text width with 2.2 cm margins (tools/ctools/book.py), less the output
-- frame, at each size (measured: a character is 0.62 em wide in a Verbatim).
-- Wider blocks wrap at \footnotesize.
local VERBATIM_SIZES = {{92, "\\footnotesize"}, {105, "\\scriptsize"}, {148, "\\tiny"}}
-- An output line wider than this is generated text, not a table row: the PDF
-- keeps its start and says so (the HTML edition keeps it whole).
local TRIM_COLUMNS = 300
local TRIM_NOTE = zh and " ……（PDF 版截断，完整的见 HTML 版）" or " … (cut in the PDF; the HTML edition has it all)"
-- Generated text comes as lines "    | text" (ch14's samples): the PDF keeps the
-- first TRIM_LINES of each run of them.
local TRIM_LINES = 12
local TRIM_LINES_NOTE = zh and "    | ……（PDF 版略去 %d 行，完整的见 HTML 版）" or
                        "    | … (%d more lines in the HTML edition)"

local function is_wide(c)  -- East Asian wide: two columns
  return (c >= 0x1100 and c <= 0x115F) or (c >= 0x2E80 and c <= 0xA4CF) or (c >= 0xAC00 and c <= 0xD7A3) or
         (c >= 0xF900 and c <= 0xFAFF) or (c >= 0xFE30 and c <= 0xFE4F) or (c >= 0xFF00 and c <= 0xFF60) or
         (c >= 0xFFE0 and c <= 0xFFE6)
end

-- line cut to at most limit columns (the whole line when it fits), and its width
local function cut_columns(line, limit)
  local n = 0
  for at, c in utf8.codes(line) do
    local w = is_wide(c) and 2 or 1
    if limit and n + w > limit then return line:sub(1, at - 1), n, true end
    n = n + w
  end
  return line, n, false
end

-- The block's text for the PDF (outputs' long lines trimmed) and its font size.
local function verbatim_layout(text, trim)
  local lines, widest, run, left = {}, 0, 0, 0
  local function close_run()  -- the note for the generated lines left out
    if left > 0 then table.insert(lines, string.format(TRIM_LINES_NOTE, left)) end
    run, left = 0, 0
  end
  for line in (text .. "\n"):gmatch("(.-)\n") do
    local _, w = cut_columns(line)
    local generated = trim and line:match("^%s*| ") ~= nil
    if not generated then close_run() end
    run = generated and run + 1 or 0
    if generated and run > TRIM_LINES then
      left = left + 1
    else
      if trim and w > TRIM_COLUMNS then
        line = cut_columns(line, TRIM_COLUMNS) .. TRIM_NOTE
      elseif w > widest then
        widest = w
      end
      table.insert(lines, line)
    end
  end
  close_run()
  for _, s in ipairs(VERBATIM_SIZES) do
    if widest <= s[1] then return table.concat(lines, "\n"), s[2] end
  end
  return table.concat(lines, "\n"), "\\footnotesize"
end

function CodeBlock(el)
  if not is_latex() then return nil end
  local cls = el.classes[1]
  if cls == nil or cls == "output" or cls == "text" then
    local text, size = verbatim_layout(el.text, cls == "output")
    local opts = "breaklines,breakanywhere,fontsize=" .. size
    if cls == "output" then
      opts = opts .. ",frame=leftline,framerule=1.2pt,rulecolor=\\color{bookgray},xleftmargin=0.6em"
    end
    return pandoc.RawBlock("latex", "\\begin{Verbatim}[" .. opts .. "]\n" .. text .. "\n\\end{Verbatim}")
  end
  return nil
end

function Image(el)
  if is_latex() and el.src:match("%.svg$") then
    el.src = el.src:gsub("%.svg$", ".pdf")
    return el
  end
  return nil
end

-- HTML: a table scrolls sideways inside its own box on a narrow screen,
-- instead of widening the page.
function Table(el)
  if is_html() then
    return pandoc.Div({el}, pandoc.Attr("", {"table-wrap"}))
  end
  return nil
end
