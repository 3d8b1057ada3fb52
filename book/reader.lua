-- SPDX-License-Identifier: MIT
-- book/reader.lua: the reader's links, a Pandoc filter run after book.lua
-- (HTML and LaTeX). Invariant: every link it writes points at a page and an
-- anchor that the build makes; a reference it cannot resolve stays text.
--
--   "chapter 3", "Chapter 3's", "第 3 章", "第3章" in prose (paragraphs, list
--   items, table cells; never headings, code or the text of a link)
--                          become links to that chapter, when the book has it
--   [text](chapter:chNN) or (chapter:chNN#anchor)
--                          HTML: chNN_name.html[#anchor]; LaTeX: #chNN / #anchor
--   [text](repo:PATH)      a file of the repository: HTML: BOOK_REPO_BASE .. PATH
--                          (a URL, or the relative path from the page to the
--                          checkout); LaTeX: BOOK_REPO_URL .. PATH, or the path
--                          as code when no URL is configured
--   [text](glossary:ID)    HTML: glossary.html#glossary-ID; LaTeX: #glossary-ID
--   ::: {.chapter-card}    LaTeX: a framed box (bookcard, book/pdf-header.tex), ragged right
--
-- tools/book sets BOOK_CHAPTERS ("1=ch01_device_query.html;3=ch03_memory.html"),
-- BOOK_REPO_BASE and BOOK_REPO_URL in the environment.

local function is_latex() return FORMAT:match("latex") ~= nil end

local pages = {}
for n, file in (os.getenv("BOOK_CHAPTERS") or ""):gmatch("(%d+)=([^;]+)") do
  pages[tonumber(n)] = file
end
local repo_base = os.getenv("BOOK_REPO_BASE") or ""
local repo_url = os.getenv("BOOK_REPO_URL") or ""

local function chapter_id(n)
  return string.format("ch%02d", n)
end

local function chapter_link(content, n)
  return pandoc.Link(content, "chapter:" .. chapter_id(n))
end

-- One inline list (a paragraph's top level, or inside emphasis and spans):
-- the patterns above become chapter: links. Links and code are left alone.
local function xref_inlines(list)
  local out = pandoc.List()
  local inls = {}
  for k, v in ipairs(list) do inls[k] = v end
  -- the text after a match goes back into the input (it may hold the next reference)
  local function resume(at, rest)
    if rest ~= "" then
      inls[at] = pandoc.Str(rest)
      return at
    end
    return at + 1
  end
  local i = 1
  while inls[i] ~= nil do
    local a, b, c, d, e = inls[i], inls[i + 1], inls[i + 2], inls[i + 3], inls[i + 4]
    local done = false
    if a.t == "Str" and b and b.t == "Space" and c and c.t == "Str" then
      -- English: "... chapter" SPACE "3's"
      local pre, word = a.text:match("^(.-)([Cc]hapter)$")
      local num, rest = c.text:match("^(%d+)(.*)$")
      if word and num and pages[tonumber(num)] and not rest:match("^%.?%d") then
        if pre ~= "" then out:insert(pandoc.Str(pre)) end
        out:insert(chapter_link({pandoc.Str(word), pandoc.Space(), pandoc.Str(num)}, tonumber(num)))
        i = resume(i + 2, rest)
        done = true
      end
      -- Chinese: "...第" SPACE "3" SPACE "章..."
      if not done and d and d.t == "Space" and e and e.t == "Str" then
        local zpre = a.text:match("^(.-)第$")
        local znum = c.text:match("^(%d+)$")
        local zrest = e.text:match("^章(.*)$")
        if zpre and znum and zrest and pages[tonumber(znum)] then
          if zpre ~= "" then out:insert(pandoc.Str(zpre)) end
          out:insert(chapter_link({pandoc.Str("第"), pandoc.Space(), pandoc.Str(znum), pandoc.Space(),
                                   pandoc.Str("章")}, tonumber(znum)))
          i = resume(i + 4, zrest)
          done = true
        end
      end
    end
    if not done and a.t == "Str" then
      -- Chinese without spaces: "见第3章的"
      local zpre, znum, zrest = a.text:match("^(.-)第(%d+)章(.*)$")
      if znum and pages[tonumber(znum)] then
        if zpre ~= "" then out:insert(pandoc.Str(zpre)) end
        out:insert(chapter_link({pandoc.Str("第" .. znum .. "章")}, tonumber(znum)))
        i = resume(i, zrest)
        done = true
      end
    end
    if not done then
      if a.t == "Emph" or a.t == "Strong" or a.t == "Span" then
        a.content = xref_inlines(a.content)
      end
      out:insert(a)
      i = i + 1
    end
  end
  return out
end

local function xref_block(el)
  el.content = xref_inlines(el.content)
  return el
end

-- chapter:, repo:, glossary: targets, per output format.
local function resolve(el)
  local t = el.target
  local cid, anchor = t:match("^chapter:(ch%d+)#?(.*)$")
  if cid then
    local file = pages[tonumber(cid:sub(3))]
    if not file then return el.content end   -- not in this build: plain text
    if is_latex() then
      el.target = "#" .. (anchor ~= "" and anchor or cid)
    else
      el.target = file .. (anchor ~= "" and ("#" .. anchor) or "")
    end
    return el
  end
  local path = t:match("^repo:(.+)$")
  if path then
    if is_latex() then
      if repo_url == "" then return pandoc.Code(path) end
      el.target = repo_url .. path
    else
      el.target = repo_base .. path
    end
    return el
  end
  local gid = t:match("^glossary:(.+)$")
  if gid then
    el.target = (is_latex() and "" or "glossary.html") .. "#glossary-" .. gid
    return el
  end
  return nil
end

local function card(el)
  if is_latex() and el.classes:includes("chapter-card") then
    local out = {pandoc.RawBlock("latex", "\\begin{bookcard}\\small\\raggedright")}
    for _, b in ipairs(el.content) do table.insert(out, b) end
    table.insert(out, pandoc.RawBlock("latex", "\\end{bookcard}"))
    return out
  end
  return nil
end

return {
  {Para = xref_block, Plain = xref_block},
  {Link = resolve, Div = card},
}
