-- SPDX-License-Identifier: MIT
-- book/book.lua: the Pandoc filter of the book (HTML and LaTeX). The rules it
-- implements are in book/FORMAT.md:
--   ::: {.folded summary=... note=...}  HTML: a collapsed <details>;
--                                       LaTeX: the code is left out, the note says where it is
--   [text]{.label}                      LaTeX: small sans-serif
--   ```output                           LaTeX: a Verbatim that breaks long lines
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

function CodeBlock(el)
  if not is_latex() then return nil end
  local cls = el.classes[1]
  if cls == nil or cls == "output" or cls == "text" then
    local opts = "breaklines,breakanywhere,fontsize=\\footnotesize"
    if cls == "output" then
      opts = opts .. ",frame=leftline,framerule=1.2pt,rulecolor=\\color{bookgray},xleftmargin=0.6em"
    end
    return pandoc.RawBlock("latex", "\\begin{Verbatim}[" .. opts .. "]\n" .. el.text .. "\n\\end{Verbatim}")
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
